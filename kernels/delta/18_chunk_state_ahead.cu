// 18 — chunked KDA for bf16 inputs: 17's recurrence with each chunk's first product taken a chunk
// early, so that what stays on the chain between two chunks is two k steps instead of eight.
//
// What changed from 17, and why. 17's chunk is one dependent chain of products: P1 reads the state
// S_n that P4 of chunk n - 1 has just written (as S^T, through shared memory), X_n needs P1, P2 needs
// X_n, V'_n needs P2, and P4 needs V'_n; notebook 13's clock stamps put P1 (its K = 128 contraction)
// and the store of S^T before it among the longest stretches of that chain. But P1 does not need S_n:
//   S_n = (D S)_{n-1} + Kd_{n-1}^T V'_{n-1}         (D = diag 2^G_L of chunk n - 1, applied by WG_C)
//   P1_n = [Kg; Qg]_n S_n = [Kg; Qg]_n (D S)_{n-1} + W_n V'_{n-1},   W_n = [Kg; Qg]_n Kd_{n-1}^T  (2C x C)
// Both products on the right (PQ: the K = 128 contractions) need only what chunk n - 1 starts with,
// (D S)_{n-1} and Kd_{n-1}, so WG_C issues them during chunk n - 1, behind that chunk's P2; what is left
// between V'_{n-1} and X_n is W_n V'_{n-1}: 2C x C times C x BV, two k steps (three bf16 terms, W split
// from its fp32 accumulators into hi / lo A fragments in registers). P4 of chunk n - 1 moves behind it
// and completes while X_n is formed. Per chunk WG_C runs
//   P1b_n (W_n V'_{n-1}), P4_{n-1} | X_n; S_n decayed to (D S)_n and stored as S^T | P2_n, then PQ_{n+1}
//   (P1a_{n+1} = [Kg; Qg]_{n+1} (D S)_n, W_{n+1} = [Kg; Qg]_{n+1} Kd_n^T, both one bf16 term) | o_n, V'_n
// (the products after "|" meant to overlap the element-wise work before the next "|"). W reads Kd^T's
// tile as an MN-major B (channels as k, tokens as N), so WG_E's operands are 17's, unchanged; each of its
// two buffers gets two hand-overs (KdaWgBars: FULL / EMPTY for Kbg / Qg, built a chunk early; FULL_KD /
// EMPTY_KD for Kd^T and 2^G_L, read until P4 completes early in the next chunk).
// ptxas serializes every wgmma of the loop when one of them is issued under a branch or accumulates
// into registers that two sites define (C7511, C7515: attnlab.static's StaticReport.wgmma_serialized,
// checked for every build): chunk 0's P1b and P4 run too, on a zero V'^T, and P1a and W cross from one
// chunk to the next as copies.
// What the probes found (scripts/probe_delta_recurrence.py, not recorded; notebook 13 records the
// times): the three-term form of this schedule (fp32 inputs) needed more than 255 registers (spills)
// and ran about half as fast as 15, and this one-term form is slower than 17; its clock stamps put the
// largest share of the chunk in the stage that issues PQ behind P2 and in the element-wise warpgroup's
// wait before its arithmetic. Issuing a wgmma is not free of its execution: the products this schedule moves off the
// chain are still issued by the chain's warpgroup, one after another on its tensor cores, and the
// operands they need a chunk earlier make WG_C wait for WG_E's hand-over sooner. So 18 stays a bf16-only
// step with a recorded time beside 17's; overlapping the chain with other products needs them issued
// from another warpgroup.
//
// Launch: 17's (grid (V / BV, H, B), 256 threads, tensor maps of g, k, q, v and 07's output, 17's shared
// memory). Requires sm_90a.
#include "14_chunk_state_multicast.cu"

template <int K, int V, int C, int BV, bool BF = true>
__global__ void __launch_bounds__(256, 1)
kda_chunk_state_ahead(KDA_TMA_STATE_PARAMS) {
    static_assert(BF, "18 takes 17's one-term products: bf16 inputs only");
    KDA_TMA_MAPS;
    kda_mc_body<K, V, C, BV, BF, 1, 2, true, 2, true, true, true>(q, k, v, g, beta, TA, h0, o, ht, T, H, scale, maps);
}
