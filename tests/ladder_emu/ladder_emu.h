// A CPU execution model of just enough CUDA to run kernels/attention/0[1-5]_*.cu for logic checks
// (tests/test_ladder_emu.py). Every thread of a block is an OS thread; __syncthreads() is a
// std::barrier over the block; __shfl_xor_sync is a two-phase exchange over a per-warp barrier.
// Blocks run one after another, so the dynamic shared memory (`extern __shared__ float smem[]`)
// is one global array, poisoned with NaN before each block so a read-before-write shows up.
// __CUDA_ARCH__ is undefined here, so 05 runs its pre-sm_80 path (plain float4 copies, same
// ping-pong schedule and barriers); the cp.async path itself needs a GPU.
// What it checks: indexing, partial tiles, rows past n, barrier placement (a missing barrier
// shows up as a wrong or flaky result, less reliably than on a GPU), and that 02-05 do the
// naive kernel's arithmetic in the same order (outputs bit-identical to 01 on the same host).
#pragma once

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
using std::min;

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__
#define __restrict__
#define __align__(n) __attribute__((aligned(n)))

inline thread_local dim3 threadIdx, blockIdx;

// `extern __shared__ __align__(16) float smem[];` in a kernel refers to this array.
constexpr size_t EMU_SMEM_FLOATS = 1 << 18;   // 1 MiB: more than any tile the tests use
alignas(16) float smem[EMU_SMEM_FLOATS];

struct EmuWarp {
    std::barrier<> bar{32};
    float buf[32];
};
struct EmuBlock {
    std::unique_ptr<std::barrier<>> bar;
    std::vector<std::unique_ptr<EmuWarp>> warps;
};
inline EmuBlock* g_block = nullptr;

inline void __syncthreads() { g_block->bar->arrive_and_wait(); }

inline float __shfl_xor_sync(unsigned, float x, int offset) {
    const unsigned lane = threadIdx.x % 32;
    EmuWarp& w = *g_block->warps[threadIdx.x / 32];
    w.buf[lane] = x;
    w.bar.arrive_and_wait();          // everyone has published
    const float r = w.buf[lane ^ offset];
    w.bar.arrive_and_wait();          // everyone has read before the next shuffle overwrites
    return r;
}
inline float __int_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }

// Run grid blocks in turn, each with `threads` OS threads executing `kernel`.
inline void emu_launch(unsigned grid, unsigned threads, size_t smem_bytes, const std::function<void()>& kernel) {
    if (threads % 32 != 0 || smem_bytes > sizeof(smem)) {
        std::fprintf(stderr, "bad launch: %u threads, %zu bytes of shared memory\n", threads, smem_bytes);
        std::abort();
    }
    for (unsigned b = 0; b < grid; ++b) {
        EmuBlock blk;
        blk.bar = std::make_unique<std::barrier<>>(threads);
        for (unsigned w = 0; w < threads / 32; ++w) blk.warps.push_back(std::make_unique<EmuWarp>());
        std::fill(smem, smem + smem_bytes / sizeof(float), std::numeric_limits<float>::quiet_NaN());
        g_block = &blk;
        std::vector<std::thread> pool;
        pool.reserve(threads);
        for (unsigned t = 0; t < threads; ++t) {
            pool.emplace_back([&, t, b] {
                threadIdx = dim3{t, 0, 0};
                blockIdx = dim3{b, 0, 0};
                kernel();
            });
        }
        for (auto& th : pool) th.join();
        g_block = nullptr;
    }
}
