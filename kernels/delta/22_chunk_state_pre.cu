// 22 — chunked KDA: 19's chain (17's one-term products on bf16 inputs, 15's three-term ones on fp32) with the
// element-wise operands made by the token-parallel kernel (21) and landed by one bulk copy a chunk; no
// element-wise warpgroup.
//
// What changed from 19 and 20, and why. In 13-20 the recurrence's element-wise warpgroup (WG_E) made each
// chunk's Kg, Qg, Kd^T and 2^G_L from the chunk's g, k, q beside the chain warpgroup (WG_C), once per value
// block. Notebook 13's probes found that work, not the chain's own instructions, between the chain alone
// (KDA_PROBE=5) and the recurrence, and found that spreading it over more threads (20) does not remove it.
// Here 21 makes the operands once per chunk and head, in the byte image of this kernel's operand buffer
// (ops_image.cuh). The block is WG_C and one producer warp (160 threads): for chunk n the warp waits for
// WG_C to be done with chunk n - 2 (EMPTY, after P4), then lane 0 issues one bulk copy of the chunk's
// 24.5 KB image (K = 128) into buffer n & 1, completing on the buffer's mbarrier, and the tensor copies of
// its T / A2 words and v into slot n & 1 (which WG_C's thread 0 issued in 19, a chunk ahead, on the
// chain's path); WG_C waits on the buffer's mbarrier where it waited for WG_E's hand-over (FULL). Beside 21
// (21_chunk_prep_ops.cu says how they share the GPU) the warp first waits for the chunk's ready flag. WG_C's chain is 19's (17's products, P1's A the
// [Kg; Qg]^T tile in the buffer, P4's A Kd^T), but for P4's A address on bf16 inputs: the image keeps only
// Kd^T's hi words, so at K = 128 its second m64 tile sits in the half of each 128-byte row that held 19's lo
// words (KdaWgLayout's FOLD). On fp32 inputs the image is 19's fp32 operand buffer, hi and lo, byte for byte.
// No staging tile and no WG_E arithmetic: on bf16 inputs 96 KB of shared memory at BV = 32, 82 KB at 16, so two
// blocks fit an SM (its __launch_bounds__); on fp32 inputs 148 KB at BV = 32 (one block beside one of 21).
// The products are 19's; Kg, Qg and Kd are 13's arithmetic (running sums, 21), so on bf16 inputs the results
// are held, like 17's and 20's, to the float64 model of those roundings, and on fp32 inputs to 19's values
// up to the rounding of those exponentials (tests/test_emu_delta_tc.py).
// What the probes found (scripts/probe_delta_pre.py, not recorded; notebook 13 records 22 beside 17's chain
// alone): with WG_E gone, 22 runs faster than 17's chain alone (the KDA_PROBE=5 floor, whose WG_E still
// staged its inputs and handed buffers over); at BV = 16 (256 blocks, two per SM) it runs a little slower
// than at 32 (128 blocks, one per SM), so two chains on one SM do not hide each other's latency, and the
// launcher keeps the default width.
//
// Launch: grid (V / BV, H, B), 160 threads, shared memory kernels.pre_smem_words; the tensor maps of v
// and 07's output as 19 takes them (the maps of g, k, q are not read), 21's images, its ready flags and the
// call's epoch (0: 21 has finished, no flags). Requires sm_90a.
#include "14_chunk_state_multicast.cu"

#ifndef KDA_PRE_MINB   // probe builds only (scripts/probe_delta_timeline.py: 4 is a 96-register form)
#define KDA_PRE_MINB 2
#endif

template <int K, int V, int C, int BV, bool BF = true>
__global__ void __launch_bounds__(160, KDA_PRE_MINB)
kda_chunk_state_pre(const typename KdaIn<BF>::T* __restrict__ q, const typename KdaIn<BF>::T* __restrict__ k,
                    const typename KdaIn<BF>::T* __restrict__ v, const typename KdaIn<BF>::T* __restrict__ g,
                    const typename KdaIn<BF>::T* __restrict__ beta, const unsigned* __restrict__ TA,
                    const unsigned char* __restrict__ OPS,   // [B, H, NC, kda_ops_image_bytes(K, !BF)] from 21
                    const int* __restrict__ ready, int epoch,   // 21's ready flags [B, H, NC], the call's epoch (0: none)
                    const float* __restrict__ h0, typename KdaIn<BF>::T* __restrict__ o, float* __restrict__ ht,
                    int T, int H, float scale, const __grid_constant__ TmaMap tv, const __grid_constant__ TmaMap tta) {
    const TmaMap* maps[5] = {nullptr, nullptr, nullptr, &tv, &tta};
    kda_mc_body<K, V, C, BV, BF, 1, 2, true, 2, true, BF, false, true, 32, true>(q, k, v, g, beta, TA, h0, o, ht, T, H,
                                                                                 scale, maps, OPS, ready, epoch);
}
