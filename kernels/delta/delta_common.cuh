// Helpers shared by the delta-attention kernels (kernels/delta/*.cu).
//
// Layouts (all float32, C-contiguous), as in flash-linear-attention:
//   q, k, g : [B, T, H, K]      v, o : [B, T, H, V]      beta : [B, T, H]
//   state   : [B, H, K, V]
// Chunked-form workspaces are per (b, h) contiguous in time, padded to Tp = NT * C rows:
//   Qg, Kd, Kbg/W : [B, H, Tp, K]   U : [B, H, Tp, V]   Akk, Aqk : [B, H, NT, C, C]   gL : [B, H, NT, K]
//
// Like common.cuh this compiles under NVRTC and nvcc alike: no system headers.
#pragma once

#include "common.cuh"

// log2(e): gates are turned into base-2 exponents once, so every decay is one exp2f (MUFU.EX2).
#define KDA_LOG2E 1.4426950408889634f

// Element (b, t, h, c) of a [B, T, H, D] tensor. 64-bit: B*T*H*D passes 2^31 at T = 64k, H = 32.
static __device__ __forceinline__ long long kda_bthd(int b, long long t, int h, int c, long long T,
                                                     int H, int D) {
    return (((long long)b * T + t) * H + h) * (long long)D + c;
}

// Sum over the G lanes of an aligned group (G a power of two <= 32) with xor-shuffles; every lane
// of the group ends with the same, identically-ordered sum.
template <int G>
static __device__ __forceinline__ float kda_group_allreduce_sum(float x) {
    static_assert(G >= 1 && G <= 32 && (G & (G - 1)) == 0, "group size must be a power of two");
#pragma unroll
    for (int offset = G / 2; offset > 0; offset >>= 1) {
        x += __shfl_xor_sync(ATTNLAB_FULL_MASK, x, offset);
    }
    return x;
}

// Dynamic shared memory actually granted to this launch (PTX special register), so a kernel can
// refuse to run when the launcher's byte count disagrees with the kernel's layout.
// (tests/delta_emu/ runs these kernels on the CPU for logic checks; it defines KDA_HOST_EMULATION
// and supplies its own versions of the two hooks below.)
#ifndef KDA_HOST_EMULATION
static __device__ __forceinline__ unsigned kda_dynamic_smem_size() {
    unsigned r;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
    return r;
}
// The block's dynamic shared memory as a float array, 16-byte aligned for float4 access.
#define KDA_DYNAMIC_SHARED(name) extern __shared__ __align__(16) float name[]
#endif

static __device__ __forceinline__ float4 kda_ld4(const float* p) {
    return *reinterpret_cast<const float4*>(p);
}
static __device__ __forceinline__ void kda_st4(float* p, float4 x) {
    *reinterpret_cast<float4*>(p) = x;
}

// A read-only load from global memory that allocates no L1 line (the line goes from L2 to the register): for
// data read once, where an allocation would only evict others (14_chunk_state_multicast.cu, KDA_E_LDG=2).
#ifndef KDA_HOST_EMULATION
static __device__ __forceinline__ float kda_ldg_na(const float* p) {
    float r;
    asm volatile("ld.global.nc.L1::no_allocate.f32 %0, [%1];" : "=f"(r) : "l"(p));
    return r;
}
#else   // the CPU model has no L1: a load
static inline float kda_ldg_na(const float* p) { return *p; }
#endif

// Probe builds of the warp-specialised recurrences only (scripts/probe_delta_recurrence.py): in 10
// and 12, KDA_PROBE=1 idles the consumers (they only hand the buffers back), KDA_PROBE=2 idles the
// producers' arithmetic (copies and barriers stay), so the time of each side alone can be
// measured. A probe build's results are meaningless.
// KDA_PROBE=3 (10, 12, 13) computes normally and records, in lane 0 of every warp of block
// (0, 0, 0), the SM clock at each phase boundary of the first KDA_NSTAMP chunks (into ht, which it does not write).
#ifndef KDA_PROBE
#define KDA_PROBE 0
#endif
#ifndef KDA_NSTAMP
#define KDA_NSTAMP 48   // attnlab.delta.fast.STAMP_CHUNKS passes its own
#endif
#if KDA_PROBE == 3
#define KDA_STAMP(j)                                                                                \
    do {                                                                                            \
        if (lane == 0 && n < KDA_NSTAMP && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && ht) { \
            long long now_;                                                                         \
            asm volatile("mov.u64 %0, %%clock64;" : "=l"(now_));                                   \
            ht[(warp * KDA_NSTAMP + n) * 8 + (j)] = (float)(now_ - stamp0_);                        \
        }                                                                                           \
    } while (0)
#else
#define KDA_STAMP(j) do { } while (0)
#endif
