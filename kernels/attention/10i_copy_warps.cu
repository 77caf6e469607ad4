// 10i — flash attention on tensor cores: 10h's kernel (10g's row-block body, Stream-K or plain
// grid) with the K/V and Q tile copies issued by CW of the block's warps instead of all of them.
//
//   O[b,h,i,:] = sum_j softmax_j(scale * Q[b,h,i,:] . K[b,h,j,:]) * V[b,h,j,:]   (j <= i if CAUSAL)
//
// What changed from 10h_stream_k (same body, attn10g::row_block, same schedules, same outputs):
//  1. Why. Which threads issue the cp.async copies turned out to matter more than how many bytes
//     each moves. In an H200 probe (scripts/probe_flash.py-style A/B, interleaved in one run,
//     D = 128, B = 2, H = 8, bf16): 10g's 4-warp blocks with every thread copying, and 10h's
//     6-warp blocks with 4, 2 or all 6 of the warps copying, all timed differently by several %;
//     10g with only 2 of its 4 warps copying was faster than 10g at both N = 4096 and N = 16384,
//     and than 10h at N = 4096 (about equal at 16384), while spreading 10h's copies over all 6
//     warps made it slower (notebook 10's tile scan and ladder time this kernel against 10g and
//     10h in the same run). A warp that copies issues its LDGSTS into the same MIO queue its ldmatrix
//     reads go through, at the top of every key tile, just before the S = Q K^T burst of
//     ldmatrix + HMMA; warps that do not copy go straight to their MMAs, so the block's warps
//     reach the tensor pipe staggered rather than all at once (a reading, not a measurement of
//     its own: notebook 10's Nsight Compute table compares the stall reasons).
//  2. CW (template parameter): the first CW warps copy, 32 * CW threads, RPP = 32*CW / (D/8) rows
//     a pass. 2 warps at D = 128 move 4 rows a pass: rows r and r + 4 have swizzle keys that
//     differ in one bit, so odd passes add a second per-thread offset (attn10g::TileCopy, TWO),
//     still fixed for the whole kernel; every pass and tile is an immediate or warp-uniform
//     offset from the same two values. CW = 0 is 10g's rule (every thread when whole rows fit
//     a pass of 8), so 10i with CW = 0 is 10h.
//  3. The rest is 10h: non-causal launches take the Stream-K grid unless a plain grid's rounds
//     are at least FILL % full, then this file's attn_copy_warps_plain (10g's body with CW) on
//     10g's grid; causal launches keep 10g's grid inside attn_copy_warps.
//
// Template: 10h's, plus CW in {0, 1, 2, 3, 4, 6} with 32*CW <= 32*WARPS threads, 32*CW a multiple of
// D/8, and (CW > 0) RPP = 32*CW / (D/8) a multiple of 4 dividing BM and BN.
// Launch, workspace, layout, shared memory: 10h's (attn_copy_warps_smem_bytes = 10h's).
#include "10h_stream_k.cu"

template <int D, int BM, int BN, int WARPS, bool BF16, bool CAUSAL, int STAGES, int MINB, int QREG, int CW>
__global__ void __launch_bounds__(WARPS * 32, MINB > 0 ? MINB : attn10g::min_blocks(D, WARPS * 32))
attn_copy_warps(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
                const unsigned short* __restrict__ v, unsigned short* __restrict__ o, int n, float scale, int bh,
                float* __restrict__ ws, int* __restrict__ counters) {
    static_assert(MINB >= 0 && CW >= 0 && CW <= WARPS, "MINB >= 0 blocks per SM; 0 <= CW <= WARPS copying warps");
    extern __shared__ __align__(16) float smem[];
    attn10h::stream_k_block<D, BM, BN, WARPS, BF16, CAUSAL, STAGES, QREG, CW>(q, k, v, o, n, scale, bh, ws, counters, smem);
}

// The plain grid (FILL): 10g's kernel with CW.
template <int D, int BM, int BN, int WARPS, bool BF16, bool CAUSAL, int STAGES, int MINB, int QREG, int CW>
__global__ void __launch_bounds__(WARPS * 32, MINB > 0 ? MINB : attn10g::min_blocks(D, WARPS * 32))
attn_copy_warps_plain(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
                      const unsigned short* __restrict__ v, unsigned short* __restrict__ o, int n, float scale) {
    static_assert(MINB >= 0 && CW >= 0 && CW <= WARPS, "MINB >= 0 blocks per SM; 0 <= CW <= WARPS copying warps");
    extern __shared__ __align__(16) float smem[];
    attn10g::occupancy_block<D, BM, BN, WARPS, BF16, CAUSAL, STAGES, QREG, CW>(q, k, v, o, n, scale, smem);
}

// Dynamic shared memory in bytes: 10h's.
constexpr __host__ __device__ unsigned long long attn_copy_warps_smem_bytes(int D, int BM, int BN, int STAGES) {
    return attn_stream_k_smem_bytes(D, BM, BN, STAGES);
}
