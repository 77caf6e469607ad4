// 18 — chunked KDA, 15's recurrence (17's with ONE) with each chunk's first product taken a chunk
// early: what stays on the chain between two chunks is two k steps instead of eight.
//
// What changed from 15 and 17, and why. Their chunk is one dependent chain of products: P1 reads the
// state S_n that P4 of chunk n - 1 has just written (as S^T, through shared memory), X_n needs P1,
// P2 needs X_n, V'_n needs P2, and P4 needs V'_n; notebook 13's clock stamps put P1 (its K = 128
// contraction, 24 wgmmas; 17: 8) and S^T's store before it among the longest stretches of that
// chain, and every stretch is waited for by the next. But P1 does not need S_n itself:
//   S_n = (D S)_{n-1} + Kd_{n-1}^T V'_{n-1}         (D = diag 2^G_L of chunk n - 1, applied by WG_C)
//   P1_n = [Kg; Qg]_n S_n = [Kg; Qg]_n (D S)_{n-1} + W_n V'_{n-1},   W_n = [Kg; Qg]_n Kd_{n-1}^T  (2C x C)
// Both products on the right (PQ: the K = 128 contractions) need only what chunk n - 1 starts with,
// (D S)_{n-1} and Kd_{n-1}, so WG_C issues them during chunk n - 1, behind that chunk's P2; what is left
// between V'_{n-1} and X_n is W_n V'_{n-1}: 2C x C times C x BV, two k steps (three bf16 terms each,
// W split from its fp32 accumulators into hi / lo A fragments in registers). P4 of chunk n - 1 moves
// behind it and completes while X_n is formed. Per chunk WG_C now runs
//   P1b_n (W_n V'_{n-1}), P4_{n-1} | X_n; S_n decayed to (D S)_n and stored as S^T | P2_n, then PQ_{n+1}
//   (P1a_{n+1} = [Kg; Qg]_{n+1} (D S)_n and W_{n+1} = [Kg; Qg]_{n+1} Kd_n^T) | o_n, V'_n
// (the products after "|" overlap the element-wise work before the next "|"). W reads Kd^T's tile as
// an MN-major B (channels as k, tokens as N: 64 columns, hi tokens then lo tokens), so WG_E's
// operands are 15's, unchanged; with ONE (bf16 inputs only, as 17) P1a, W and P4 take one bf16 term.
// The price: W's products (a K = 128 contraction more per chunk, off the chain) and one more
// rounding (W to bf16 hi / lo; its error is 3xBF16's, checked against float64 on the CPU model).
// Buffers: WG_C builds chunk n + 1's P1 operands from Kbg / Qg during chunk n and reads chunk n's Kd^T
// until P4 of chunk n completes early in chunk n + 1, so each of the two buffers has two hand-overs
// (KdaWgBars: FULL / EMPTY for Kbg / Qg, FULL_KD / EMPTY_KD for Kd^T and 2^G_L).
//
// Launch: 15's (grid (V / BV, H, B), 256 threads, tensor maps of g, k, q, v and 07's output, 15's
// shared memory). Requires sm_90a.
#include "14_chunk_state_multicast.cu"

template <int K, int V, int C, int BV, bool BF = false, bool ONE = false>   // ONE: P1a, W, P4 as one bf16 term (bf16 inputs)
__global__ void __launch_bounds__(256, 1)
kda_chunk_state_ahead(const typename KdaIn<BF>::T* __restrict__ q, const typename KdaIn<BF>::T* __restrict__ k,
                      const typename KdaIn<BF>::T* __restrict__ v, const typename KdaIn<BF>::T* __restrict__ g,
                      const typename KdaIn<BF>::T* __restrict__ beta, const unsigned* __restrict__ TA,
                      const float* __restrict__ h0, typename KdaIn<BF>::T* __restrict__ o, float* __restrict__ ht,
                      int T, int H, float scale,
                      const __grid_constant__ TmaMap tg, const __grid_constant__ TmaMap tk,
                      const __grid_constant__ TmaMap tq,      // g, k, q as (K, H, T, B), boxes of (K, 1, C, 1)
                      const __grid_constant__ TmaMap tv,      // v as (V, H, T, B), boxes of (BV, 1, C, 1), swizzled
                      const __grid_constant__ TmaMap tta) {   // 07's output as rows of C/2 words, boxes of 4C rows
    static_assert(BF || !ONE, "one-term products are for bf16 inputs only (fp32 inputs: ONE = false)");
    const TmaMap* maps[5] = {&tg, &tk, &tq, &tv, &tta};
    kda_mc_body<K, V, C, BV, BF, 1, 2, true, 2, true, ONE, true>(q, k, v, g, beta, TA, h0, o, ht, T, H, scale, maps);
}
