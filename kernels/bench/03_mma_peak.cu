// Warp-MMA throughput (mma.sync): the tensor-core roof for the flash kernels of notebooks 09 and 10,
// measured rather than read off a datasheet.
//
// Each warp runs MMA_CHAINS independent accumulators through `iters` x MMA_UNROLL mma.sync
// instructions of one kind; with several warps per scheduler and independent chains, the tensor
// pipe, not the MMA latency, sets the pace (as the FMA chains do in 01_fma_peak.cu). The operand
// registers hold ordinary random-looking values (not zeros: a tensor core can run faster on zeros)
// and are never rewritten, so the loop issues nothing but MMAs and its counter.
//
//   KIND 0: mma.m16n8k8  TF32  x TF32 -> fp32   2*16*8*8  = 2048 FLOPs per instruction
//   KIND 1: mma.m16n8k16 bf16  x bf16 -> fp32   2*16*8*16 = 4096 FLOPs per instruction
//   KIND 2: mma.m16n8k16 fp16  x fp16 -> fp32   4096 FLOPs per instruction
//
// FLOPs per launch = flops_per_mma(KIND) * MMA_CHAINS * MMA_UNROLL * iters * (warps in the grid)
// (attnlab.roofline.mma_flops). The accumulators are summed and stored: nothing is dead code.
#include "mma.cuh"

#define MMA_CHAINS 8
#define MMA_UNROLL 8

template <int KIND>
__global__ void mma_peak(float* __restrict__ out, int iters) {
    const unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned a[4], b[2];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = KIND == 0 ? tf32_round(1.0f + 1e-3f * (float)((tid * 7 + i) % 97))
                                                 : (KIND == 1 ? pack_bf16x2(0.5f + 1e-3f * (float)(tid % 61), 0.25f + 1e-3f * i)
                                                              : pack_f16x2(0.5f + 1e-3f * (float)(tid % 61), 0.25f + 1e-3f * i));
#pragma unroll
    for (int i = 0; i < 2; ++i) b[i] = KIND == 0 ? tf32_round(-0.5f + 1e-3f * (float)((tid * 3 + i) % 89))
                                                 : (KIND == 1 ? pack_bf16x2(-0.125f, 1e-3f * (float)(tid % 53))
                                                              : pack_f16x2(-0.125f, 1e-3f * (float)(tid % 53)));
    float d[MMA_CHAINS][4];
#pragma unroll
    for (int c = 0; c < MMA_CHAINS; ++c)
#pragma unroll
        for (int r = 0; r < 4; ++r) d[c][r] = 0.0f;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int u = 0; u < MMA_UNROLL; ++u) {
#pragma unroll
            for (int c = 0; c < MMA_CHAINS; ++c) {
                if (KIND == 0) mma_m16n8k8_tf32(d[c], a, b);
                else if (KIND == 1) mma_m16n8k16_bf16(d[c], a, b);
                else mma_m16n8k16_f16(d[c], a, b);
            }
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < MMA_CHAINS; ++c) s += d[c][0] + d[c][1] + d[c][2] + d[c][3];
    out[tid] = s;
}

// The compile-time loop shape, read back by the host so FLOP counts match what was compiled.
extern "C" __global__ void mma_peak_config(int* __restrict__ out) {
    out[0] = MMA_CHAINS;
    out[1] = MMA_UNROLL;
}
