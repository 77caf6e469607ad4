// Warpgroup-MMA issue rate (wgmma.mma_async m64nNk16, bf16 -> fp32): the tensor roof of the delta
// recurrences of notebook 13 (13-16), whose chain warpgroups issue narrow wgmmas one after another.
//
// Each of the block's NWG warpgroups issues `iters` x WR_UNROLL wgmmas of one shape into CHAINS
// accumulators taken in turn (CHAINS = 1: every wgmma waits on the previous one's accumulator, as the
// recurrences' P1 does; 2 or 4: that many independent chains), with A from shared memory (RS = false, 13's P4)
// or from registers (RS = true, the chains' P1 and P2), B K-major in the 128-byte swizzle (both from
// one 64 x 64 A tile and one N x 64 B tile of ordinary non-zero values, never rewritten). Lane 0 of
// each warpgroup reads the SM clock around its loop: MACs per SM cycle = 64 N 16 x wgmmas x NWG /
// cycles (attnlab.delta.fast.wgmma_rate_table), with one block per SM. Whether a second warpgroup
// raises the rate says whether one warpgroup's issue, not the SM's tensor pipe, bounds a narrow chain.
//
// FORM 1 reads the shared-memory operand MN-major (A for RS = false, as 19-24's P1 reads [Kg; Qg]^T; B for RS =
// true and N = 64, as 16's P1^T reads WG_E's rows), FORM 2 waits for each group of WR_UNROLL wgmmas before the next
// is issued (K-major as FORM 0): a group's time from the first issue to its results, as a chain's product takes it.
//
// Launch: one block per SM, 128 NWG threads, WrLayout<N>::SMEM_BYTES of dynamic shared memory;
// out[block * NWG + wg] = cycles, out[gridDim.x * NWG + ...] = the accumulators' sum (not dead code).
// Requires sm_90a.
#include "hopper.cuh"
#include "mma.cuh"

#ifndef WR_UNROLL
#define WR_UNROLL 8
#endif

template <int N>
struct WrLayout {
    static constexpr int A_BYTES = 64 * 128, B_BYTES = N * 128;   // 64 x 64 and N x 64 bf16, 128-byte rows
    static constexpr int SMEM_BYTES = A_BYTES + B_BYTES + 1024;
};

template <int N, bool RS, int NWG, int CHAINS, int FORM = 0>
__global__ void __launch_bounds__(128 * NWG, 1) wgmma_rate(float* __restrict__ out, int iters) {
    static_assert(CHAINS == 1 || CHAINS == 2 || CHAINS == 4, "one, two or four accumulator chains");
    static_assert(FORM == 0 || FORM == 2 || (FORM == 1 && (RS ? N == 64 : N <= 64)),
                  "FORM 1: MN-major A at N <= 64, or MN-major B at N = 64");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const unsigned raw = smem_u32(smem_raw), base = (raw + 1023u) & ~1023u;
    unsigned char* const sm = smem_raw + (base - raw);
    const int tid = threadIdx.x, wg = tid / 128, t = tid % 128;
    // the tiles: bf16 values 0.5 .. 1.5, distinct per element (the swizzle is irrelevant to the rate)
    for (int i = tid; i < (WrLayout<N>::A_BYTES + WrLayout<N>::B_BYTES) / 4; i += blockDim.x)
        reinterpret_cast<unsigned*>(sm)[i] = pack_bf16x2(0.5f + (float)(i % 97) / 97.f, 1.5f - (float)(i % 89) / 89.f);
    fence_proxy_async();
    __syncthreads();
    unsigned a[4][4];   // RS: the A fragments of the four k steps of the tile
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i) a[s][i] = pack_bf16x2(0.25f + (float)((t + i) % 13) / 13.f, 0.75f - (float)(s + i) / 16.f);
    float d[CHAINS][N / 2];
#pragma unroll
    for (int c = 0; c < CHAINS; ++c)
#pragma unroll
        for (int x = 0; x < N / 2; ++x) d[c][x] = 0.f;
    const unsigned a_tile = base, b_tile = base + WrLayout<N>::A_BYTES;
    long long t0 = 0, t1 = 0;
    if (t == 0) asm volatile("mov.u64 %0, %%clock64;" : "=l"(t0));
    for (int it = 0; it < iters; ++it) {
        wgmma_fence();
#pragma unroll
        for (int u = 0; u < WR_UNROLL; ++u) {
            const int s = u % 4, c = u % CHAINS;
            const unsigned long long db = wgmma_desc_sw128(b_tile + 32 * s, 16, 1024);
            if constexpr (FORM == 1) {   // MN-major: k step s is the tile's rows 16s .. (2048 bytes on), 128-byte swizzle
                if constexpr (RS) wgmma_rs<N, true>(d[c], a[s], wgmma_desc_sw128(b_tile + 2048 * s, 8192, 1024), 1);
                else wgmma_ss_mna<N>(d[c], wgmma_desc_sw128(a_tile + 2048 * s, 8192, 1024), db, 1);
            } else if constexpr (RS) {
                wgmma_rs_kb<N, true>(d[c], a[s], db, 1);
            } else {
                wgmma_ss<N, true>(d[c], wgmma_desc_sw128(a_tile + 32 * s, 16, 1024), db, 1);
            }
        }
        wgmma_commit();
        if constexpr (FORM == 2) wgmma_wait<0>();   // the group's results before the next group
        else wgmma_wait<1>();                       // one group in flight while the next is issued
    }
    wgmma_wait<0>();
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) fence_regs(d[c]);
    if (t == 0) asm volatile("mov.u64 %0, %%clock64;" : "=l"(t1));
    float sum = 0.f;
#pragma unroll
    for (int c = 0; c < CHAINS; ++c)
#pragma unroll
        for (int x = 0; x < N / 2; ++x) sum += d[c][x];
    if (t == 0) out[blockIdx.x * NWG + wg] = (float)(t1 - t0);
    atomicAdd(out + gridDim.x * NWG + blockIdx.x * NWG + wg, sum);
}
