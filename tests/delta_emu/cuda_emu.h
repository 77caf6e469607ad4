// A minimal CUDA execution model on the CPU, for logic checks of kernels/delta/*.cu without a GPU.
//
// Every thread of a block is a fiber (tests/emu_fibers.h, shared with tests/ladder_emu/: cooperative,
// deterministic, one OS thread); __syncthreads() is a barrier over the block and __shfl_xor_sync a
// two-phase exchange over a per-warp barrier. Blocks run one after another,
// so `__shared__` arrays can be plain statics. Floating point is the host's (exp2f is exact-ish,
// not MUFU.EX2; no -ftz), so results match the GPU to rounding, not bit for bit.
// What it checks: indexing, padding, tiling, the order of stages and barriers (a missing
// barrier shows as a wrong or flaky result here too, though less reliably than on a GPU).
#pragma once
#define KDA_HOST_EMULATION 1

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "../emu_fibers.h"

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
inline float2 make_float2(float a, float b) { return float2{a, b}; }

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __trap() (std::fprintf(stderr, "__trap() at %s:%d\n", __FILE__, __LINE__), std::abort())

inline dim3 gridDim, blockDim;
// The running CUDA thread's indices (per fiber; a host placeholder outside a launch).
struct EmuThreadIdx { dim3 tid, bid; };
static EmuThreadIdx emu_host_idx;
static inline EmuThreadIdx& emu_self_idx() {
    void* u = emu_fiber_user();
    return u ? *static_cast<EmuThreadIdx*>(u) : emu_host_idx;
}
#define threadIdx (emu_self_idx().tid)
#define blockIdx (emu_self_idx().bid)

struct EmuWarp {
    EmuBarrier bar{32};
    float buf[32];
    float mma_a[32][4], mma_b[32][2];   // one mma.sync's operand fragments, per lane
};
struct EmuBlock {
    EmuBarrier bar;
    std::vector<std::unique_ptr<EmuWarp>> warps;
    std::vector<float> dyn_smem;
};
inline EmuBlock* g_block = nullptr;

inline void __syncthreads() { g_block->bar.arrive_and_wait(); }

inline float __shfl_xor_sync(unsigned, float x, int offset) {
    const unsigned lane = threadIdx.x % 32;
    EmuWarp& w = *g_block->warps[threadIdx.x / 32];
    w.buf[lane] = x;
    w.bar.arrive_and_wait();
    const float r = w.buf[lane ^ offset];
    w.bar.arrive_and_wait();
    return r;
}
inline float __int_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }

// ---- tensor-core and cp.async stand-ins for kernels/delta/05_chunk_state_tc.cu
inline unsigned emu_bits(float x) { unsigned u; std::memcpy(&u, &x, 4); return u; }
inline unsigned __float_as_uint(float x) { return emu_bits(x); }
inline float __uint_as_float(unsigned u) { return __int_as_float(u); }
// mma.sync.m16n8k8 tf32: every lane posts its fragments, then computes its four outputs from the
// whole warp's. Like the hardware, operand bits below TF32 precision are ignored (truncated), so
// a kernel that forgets to split or round its operands loses accuracy here too.
inline void kda_mma_tf32(float (&d)[4], const float (&a)[4], const float (&b)[2]) {
    const unsigned lane = threadIdx.x % 32;
    EmuWarp& w = *g_block->warps[threadIdx.x / 32];
    for (int i = 0; i < 4; ++i) w.mma_a[lane][i] = __int_as_float(emu_bits(a[i]) & 0xffffe000u);
    for (int i = 0; i < 2; ++i) w.mma_b[lane][i] = __int_as_float(emu_bits(b[i]) & 0xffffe000u);
    w.bar.arrive_and_wait();
    const int g = lane / 4, t = lane % 4;
    for (int r = 0; r < 4; ++r) {
        const int m = g + 8 * (r / 2), n = 2 * t + r % 2;
        float acc = d[r];
        for (int k = 0; k < 8; ++k) {
            const float am = w.mma_a[(m % 8) * 4 + k % 4][m / 8 + 2 * (k / 4)];   // A[m][k]
            const float bn = w.mma_b[n * 4 + k % 4][k / 4];                          // B[k][n]
            acc += am * bn;   // TF32 x TF32 is exact in fp32
        }
        d[r] = acc;
    }
    w.bar.arrive_and_wait();
}
inline void kda_cp_async16(float* smem_dst, const float* gmem_src) { std::memcpy(smem_dst, gmem_src, 16); }
inline void kda_cp_async_commit() {}
inline void kda_cp_async_wait_all() {}

inline unsigned kda_dynamic_smem_size() { return (unsigned)(g_block->dyn_smem.size() * sizeof(float)); }
#define KDA_DYNAMIC_SHARED(name) float* name = g_block->dyn_smem.data()

// Launch: run grid.x * grid.y * grid.z blocks in turn, each with block.x CUDA threads (fibers).
inline void emu_launch(dim3 grid, dim3 block, size_t dyn_smem_bytes, const std::function<void()>& kernel) {
    gridDim = grid;
    blockDim = block;
    const unsigned nth = block.x * block.y * block.z;
    if (nth % 32 != 0) { std::fprintf(stderr, "block of %u threads is not whole warps\n", nth); std::abort(); }
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                EmuBlock blk;
                blk.bar = EmuBarrier(nth);
                for (unsigned w = 0; w < nth / 32; ++w) blk.warps.push_back(std::make_unique<EmuWarp>());
                // Poison dynamic shared memory: reading before writing shows up as NaN.
                blk.dyn_smem.assign(dyn_smem_bytes / sizeof(float), std::nanf(""));
                g_block = &blk;
                std::vector<EmuThreadIdx> ids(nth);
                std::vector<void*> users(nth);
                for (unsigned t = 0; t < nth; ++t) {
                    ids[t] = EmuThreadIdx{dim3(t, 0, 0), dim3(bx, by, bz)};
                    users[t] = &ids[t];
                }
                emu_fibers_run(nth, [&](unsigned) { kernel(); }, users.data());
                g_block = nullptr;
            }
}
