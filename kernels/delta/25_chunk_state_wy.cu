// 25 — chunked KDA: 24's recurrence in the WY form: W = T Kbg is made off the chain, so each chunk's chain is two
// products, P1 and P4, with no P2 between them.
//
// What changed from 24, and why. 24's chain runs three products a chunk, each waiting for the one before:
//   P1: [X; Ob] = [beta v; 0] - [Kbg; Qg] S,   P2: [V'; A2 X] = [T; A2] X,   P4: S = 2^G_L S + Kd^T V'.
// Notebook 13's clock stamps of 24 put X^T's store and barrier and P2 at about a sixth of its chunk. In the WY form
// (lib/attnlab/delta/chunk.py, fla's w and u) V' = U - W S with W = T Kbg and U = T beta v, neither of which depends
// on the state, so T leaves the chain:
//   P1: [V'; Ob] = [-W; Qg] S + [T; 0] (beta v),   P4: S = 2^G_L S + Kd^T V',   o = Ob + Aqk V' (behind P4).
//  * WG_E makes -W in place of Kg in P1's A tile ([Kg; Qg]^T, 19's MN-major layout): its thread holds one channel of
//    Kg = k 2^G over the chunk's 32 tokens, and W's column is T' Kg with T' = T diag(beta), which the warpgroup builds
//    in fp32 from 07's T hi / lo words (landed with the chunk's g, k, q by one more bulk copy) and each token's beta:
//    a triangular 32 x 32 product per thread in FMAs (T' read as broadcast float4s). The hi / lo split of -W is 19's.
//  * WG_C adds U in P1 itself: the same accumulators take [T; 0] (beta v) after [-W; Qg] S, T's rows of the slot's
//    fragments as P2 had them (the other rows zeroed), and a (beta v)^T tile in X^T's place, written a chunk ahead
//    while P4 runs. P1's rows g8 are then V' itself: its hi / lo split goes to the V'^T tile, and one barrier later P4
//    and o's product (the slot's Aqk rows times V'^T) are issued together; o is stored when the latter completes.
//  * 07 hands over Aqk, not A2 = Aqk T (o = Qg S + Aqk V').
//  * Each copy slot (T / Aqk words and v) is refilled a chunk ahead of the chunk that reads it, right after the barrier
//    behind which every thread has read its T words: (beta v)^T of chunk n + 1 is made half-way through chunk n, too
//    soon for a copy issued at chunk n's start (24's place for it).
// The products keep 24's three terms (3xBF16); W is an fp32 FMA sum, so the results are not 24's bit for bit but are
// held to the float64 reference as 24's are (tests/test_emu_delta_tc.py). At K = 64 two WG_E threads share a channel
// (16 tokens each, as in 24): each stores its Kg and reads the channel's 32 back for its rows of W. fp32 inputs only.
// What the runs said (notebook 13's run on an H100, reports/h100-80gb-hbm3/, probe table and clock stamps; no H200 run
// of 25 yet): 25 is correct and slower than 24, at about half its speed (with the slot refill above).
// Its WG_E sets the chunk: its arithmetic phase with -W takes most of the period, and KDA_WY_NO_W (W's product
// skipped) removes most of the difference to 24 but not all of it (the T' buffer and the (beta v)^T tile stay).
// The chain gains nothing either: 25's chain alone (KDA_PROBE=5) is slower than 24's, so P1's added U term and o's
// product behind P4 cost more than the P2 stage and barrier they replace. The WY form pays off only with W (and U)
// made off the recurrence's SMs, by 07 or a kernel like it, and even then KDA_NO_P2's bound on 24 (notebook 13's
// recurrence bounds) is what it can reach.
// Launch: 24's (grid (V / BV, H, B), 256 threads, the tensor maps of g, k, q, v and 07's output), with 07 in its
// Aqk form; shared memory kernels.wy_smem_words (24's, plus the T words in the staging tile, WG_E's two T' buffers
// and, at K = 64, the channels' Kg). Requires sm_90a.
#include "14_chunk_state_multicast.cu"

template <int K, int V, int C, int BV>
__global__ void __launch_bounds__(256, 1)
kda_chunk_state_wy(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                   const float* __restrict__ g, const float* __restrict__ beta, const unsigned* __restrict__ TA,
                   const float* __restrict__ h0, float* __restrict__ o, float* __restrict__ ht, int T, int H, float scale,
                   const __grid_constant__ TmaMap tg, const __grid_constant__ TmaMap tk, const __grid_constant__ TmaMap tq,
                   const __grid_constant__ TmaMap tv, const __grid_constant__ TmaMap tta) {   // fp32 inputs only
    KDA_TMA_MAPS;
    kda_mc_body<K, V, C, BV, false, 1, 2, true, 2, true, false, false, true, 128, false, false, true, true>(
        q, k, v, g, beta, TA, h0, o, ht, T, H, scale, maps);
}
