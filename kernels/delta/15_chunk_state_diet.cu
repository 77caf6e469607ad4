// 15 — chunked KDA, 14's tensor-copy recurrence ("tma2") with the element-wise warpgroup (WG_E) on
// fewer instructions per chunk.
//
// What changed from 14, and why. Notebook 13's recorded probe builds of 14 "tma2" (at 75abcbe) put
// the recurrence at about 1.0 ms at T = 16384, 0.89 with no input copies after chunk 0 and 0.72 with
// WG_E's arithmetic idle; and Nsight Compute's warp-state samples of one launch (a probe, not
// recorded: scripts/ncu_source.py delta:tma2:4096) count ~900 instructions per WG_E warp and chunk
// against ~780 per WG_C warp, WG_E issuing in about a quarter of its samples and WG_C waiting at the
// barrier of WG_E's hand-over in about a quarter of its own. WG_E's instruction stream sets the chunk
// period. Here, per WG_E thread and chunk (one channel, 32 tokens at K = 128):
//  * one exp2 per element instead of two: x_u = 2^(g_u log2 e), whose running products forward and
//    backward are 2^G_u and 2^(G_L - G_u), and 2^G_L is the forward product's last value (32 MUFU,
//    32 FADD and one exp2 fewer; every factor is at most 1, so nothing overflows, and an underflow to
//    0 stands for a value below 2^-126 that the sums of exponents also drop);
//  * no beta: P1's A rows are Kg = K e^G and WG_C applies beta to the rows of X that it computes
//    anyway, X = beta (v - Kg S) (32 SHFL and 32 FMUL fewer in WG_E, none more in WG_C).
// The arithmetic differs from 13's and 14's by rounding only (products of factors in place of
// exponentials of sums): checked against float64 on the CPU model, not bit for bit.
// Everything else is 14's tensor-copy form with WG_C's copies as tensor copies ("tma2"):
// kda_mc_body (14's file) with DIET, the operands in wgmma_recurrence.cuh (kda_wg_operands).
//
// Launch: grid (V / BV, H, B), 256 threads, 14's dynamic shared memory; tensor maps of g, k, q, v and
// 07's output as for 14 "tma2". Requires sm_90a.
#include "14_chunk_state_multicast.cu"

template <int K, int V, int C, int BV, bool BF = false>
__global__ void __launch_bounds__(256, 1)
kda_chunk_state_diet(KDA_TMA_STATE_PARAMS) {
    KDA_TMA_MAPS;
    kda_mc_body<K, V, C, BV, BF, 1, 2, true, 2, true>(q, k, v, g, beta, TA, h0, o, ht, T, H, scale, maps);
}
