// 17 — chunked KDA for bf16 inputs: 15's recurrence with P1 and P4 as one bf16 product each.
//
// What changed from 15, and why. Every step before this one runs the chain's products as three bf16
// products (hi x hi + hi x lo + lo x hi: fp32-class accuracy), for bf16 inputs too. With bf16 inputs
// the error is set by the inputs' own rounding, not by the products: notebook 13's recording at
// 1a23d7f has every bf16-I/O step at the same error, below fla's (which multiplies in bf16), and its
// clock stamps put most of 15's chunk in its wgmmas (P1 24 of them, P4 12, P2 6). Here:
//  * P1 ([Kg S; Qg S]) and P4 (S += Kd^T V') take one term: Kg, Qg, Kd^T and S rounded to bf16
//    once (8 and 4 wgmmas a chunk in place of 24 and 12);
//  * only the hi halves of S^T and Kd^T are stored (half the stmatrix of S^T, no lo tile);
//  * P2 ([V'; A2 X] = [T; A2] X) keeps its three terms: T and A2 carry the chunk's triangular
//    solve, and a float64 model of the rounding (attnlab.delta.chunk_rounding_model; its table in
//    notebook 13 is attnlab.delta.fast.rounding_table)
//    finds a single term there costing more error than P1 and P4 together.
// The model, at the lab's inputs: rounding P1's and P4's operands adds little to the inputs' own
// error; the notebook prints its table and the run's measured errors beside fla's.
// For fp32 inputs this precision is not enough (the issue asks for rel. RMS < 1e-4): the launcher
// runs 17 on bf16 inputs only.
// Probe runs (not recorded; scripts/probe_delta_recurrence.py) tried two more steps and kept neither:
// P2 as one term too moved the recurrence by a few per cent (and the model's error most); two staging
// tiles for q, k, g (chunk n + 2's copies issued once chunk n is read) and three Kd^T buffers (14's
// "tma3" rings) did not move it. Its clock stamps have the chain waiting for the element-wise
// warpgroup's hand-over while that warpgroup, too, waits before its arithmetic; the chain alone
// (KDA_PROBE=5) runs about a quarter faster, so what the element-wise work costs the chain is shared
// issue slots and shared memory, not a buffer or a copy (notebook 13's probe table and stamps).
//
// Launch: 15's (grid (V / BV, H, B), 256 threads, tensor maps of g, k, q, v and 07's output); 15's
// shared memory (the lo tiles stay allocated, unused). Requires sm_90a.
#include "14_chunk_state_multicast.cu"

template <int K, int V, int C, int BV, bool BF = true>
__global__ void __launch_bounds__(256, 1)
kda_chunk_state_single(KDA_TMA_STATE_PARAMS) {
    static_assert(BF, "17 rounds P1 and P4 to one bf16 term: bf16 inputs only (fp32 inputs: 15)");
    KDA_TMA_MAPS;
    kda_mc_body<K, V, C, BV, BF, 1, 2, true, 2, true, true>(q, k, v, g, beta, TA, h0, o, ht, T, H, scale, maps);
}
