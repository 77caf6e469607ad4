// The lab's one CPU execution model of CUDA: enough of it to run every kernel of both families for
// logic checks (kernels/attention/ 01-10; kernels/delta/ 01-11 with the hooks of kda_hooks.h beside
// this file), warp MMAs, ldmatrix, movmatrix, cp.async, named barriers and thread-block clusters
// included; of Hopper's warpgroup MMAs the forms kernels/delta/13-16 use (wgmma with K-major operands
// in the 128- or 64-byte swizzle, MN-major B in the 128-byte swizzle, A from registers or shared
// memory, deferred to the wgmma_wait that retires them), mbarriers, bulk copies and 4-D tensor
// copies (notebook 11's kernels run on the GPU only). Every thread of a block is a fiber (tests/emu_fibers.h: cooperative,
// deterministic, one OS thread); __syncthreads() is a barrier over the block; __shfl_xor_sync is a
// two-phase exchange over a per-warp barrier.
// Blocks run one after another, so the dynamic shared memory (`extern __shared__ float smem[]`)
// is one global array, poisoned with NaN before each block so a read-before-write shows up.
// ATTNLAB_HOST_EMULATION is defined, so kernels/common.cuh and kernels/mma.cuh take their
// device primitives from here: cp.async copies are really deferred to the cp_async_wait<N> that
// covers them (a read before the wait sees the poison), and the warp MMAs and ldmatrix exchange
// fragments across the warp in the PTX ISA's layouts (TF32 operands truncated to 10 mantissa
// bits like the hardware; bf16/fp16 products exact in fp32).
// What it checks: indexing, partial tiles, rows past n, barrier placement (a missing barrier
// shows up as a wrong or flaky result, less reliably than on a GPU), and that 02-05 do the
// naive kernel's arithmetic in the same order (outputs bit-identical to 01 on the same host).
#pragma once
#define ATTNLAB_HOST_EMULATION 1

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <vector>

#include "../emu_fibers.h"

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
struct alignas(8) float2 { float x, y; };
inline float2 make_float2(float a, float b) { return float2{a, b}; }
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
using std::min;

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__
#define __restrict__
#define __launch_bounds__(...)
#define __host__
#define __align__(n) __attribute__((aligned(n)))

inline dim3 gridDim, blockDim;

// `extern __shared__ __align__(16) float smem[];` in a kernel refers to this array.
constexpr size_t EMU_SMEM_FLOATS = 1 << 18;   // 1 MiB: more than any tile the tests use
alignas(16) float smem[EMU_SMEM_FLOATS];

struct EmuWarp {
    EmuBarrier bar{32};
    float buf[32];
    unsigned frag_a[32][4], frag_b[32][2];   // one warp MMA's operand fragments, per lane
    const void* rows[32];                     // ldmatrix row addresses, per lane
};
// A named barrier (bar.sync / bar.arrive id, n): the n-th arrival of a generation releases it.
struct EmuNamedBar {
    int count = 0;
    unsigned gen = 0;
    char hb[EMU_HB_GENS] = {};   // TSan sync objects of the generations (tests/emu_fibers.h)
};
// An mbarrier (kernels/hopper.cuh: mbar_*): arrivals still expected in the current phase, the
// transaction bytes still expected (negative while copies landed before their expect_tx), the phase
// count, and the bulk copies addressed to it that have not landed yet (each lands, writing its
// bytes and completing its transactions, when a thread waits on the barrier, or at once if one
// already waits; each remembers the phase it was issued in).
struct EmuBulk { unsigned dst; std::vector<unsigned char> data; unsigned phase; };
struct EmuMbar {
    unsigned count = 0, pending = 0, phase = 0, waiters = 0;
    long long tx = 0;
    std::vector<EmuBulk> inflight;
    char hb[EMU_HB_GENS] = {};   // TSan sync objects of the phases: arrivals and copies release, waiters acquire
};
struct EmuBlock {
    EmuBarrier bar;
    std::vector<std::unique_ptr<EmuWarp>> warps;
    EmuNamedBar named[16];
    std::map<unsigned, EmuMbar> mbars;   // by shared-space address (byte offset)
    unsigned char* smem_base = nullptr;  // this block's dynamic shared memory
};
struct EmuCopy { void* dst; unsigned char data[16]; };
// Per-group sync objects of a thread's cp.async or wgmma groups (ThreadSanitizer builds; unused else).
struct EmuHbGroups {
    std::unique_ptr<char> open;
    std::vector<std::unique_ptr<char>> committed;
    void* open_obj() {   // the open group's object (made on its first piece of work)
        if (!open) open = std::make_unique<char>(0);
        return open.get();
    }
    void commit() { committed.push_back(std::move(open)); }
    void retire_oldest() {   // the wait that retires the oldest committed group: after the unit's accesses
        if (committed.front()) emu_hb_acquire(committed.front().get());
        committed.erase(committed.begin());
    }
};
struct EmuCluster {
    EmuBarrier bar;
    std::vector<float*> smem;
    std::vector<EmuBlock*> blocks;
};
// One CUDA thread's state: its indices, its block (and cluster), its cp.async groups. The running
// fiber's is emu_self(); outside a launch (harness code) a host placeholder. (Per fiber, not
// process-wide: tests/delta_emu/fake_device.py loads several models into one Python process, and
// GCC gives inline variables unique symbols that the dynamic linker binds across libraries.)
struct EmuBulkStore { void* dst; unsigned src, bytes; };   // a bulk store not yet waited for (bulk_store below)
struct EmuThread {
    dim3 tid, bid;
    std::vector<EmuBulkStore> bulk_stores;
    EmuBlock* block = nullptr;
    std::vector<std::vector<EmuCopy>> groups;   // committed cp.async groups, oldest first
    std::vector<EmuCopy> open;                  // issued, not yet committed
    EmuCluster* cluster = nullptr;
    unsigned cluster_rank = 0;
    float* block_smem = nullptr;                // this block's dynamic shared memory (clusters)
    unsigned long cluster_token = 0;
    bool cluster_arrived = false;
    std::vector<std::function<void()>> wg_open;                 // issued wgmmas, not yet committed
    std::vector<std::vector<std::function<void()>>> wg_groups;  // committed wgmma groups, oldest first
    // ThreadSanitizer builds: the sync objects the asynchronous unit releases once it has done a group's
    // accesses (emu_hb_async) and the wait that retires the group acquires: the open group's, then the
    // committed ones', as above
    EmuHbGroups cp_hb, wg_hb;
};
static EmuThread emu_host_thread;
static inline EmuThread& emu_self() {
    void* u = emu_fiber_user();
    return u ? *static_cast<EmuThread*>(u) : emu_host_thread;
}
#define threadIdx (emu_self().tid)
#define blockIdx (emu_self().bid)

inline void __syncthreads() { emu_self().block->bar.arrive_and_wait(); }
// Named barriers (kernels/common.cuh): every thread of the subset calls; sync waits, arrive does not.
// Every caller's earlier accesses come before what the waiters do after the generation turns
// (bar.arrive releases, bar.sync releases and acquires: ThreadSanitizer builds).
EMU_NO_TSAN inline void emu_named_bar(int id, int n, bool wait) {
    if (id <= 0 || id >= 16 || n <= 0 || n % 32 != 0) { std::fprintf(stderr, "bad named barrier %d, %d\n", id, n); std::abort(); }
    EmuNamedBar& b = emu_self().block->named[id];
    emu_fiber_note_progress();
    const unsigned gen = b.gen;
    emu_hb_release(&b.hb[gen % EMU_HB_GENS]);
    if (++b.count == n) { b.count = 0; ++b.gen; }
    else if (wait) emu_wait_while(&b.gen, gen);
    if (wait) emu_hb_acquire(&b.hb[gen % EMU_HB_GENS]);
}
inline void named_bar_sync(int id, int n) { emu_named_bar(id, n, true); }
inline void named_bar_arrive(int id, int n) { emu_named_bar(id, n, false); }

// The warp collectives (shuffles, vote, warp MMAs, ldmatrix, movmatrix, stmatrix) exchange values
// through the warp's buffers over rendezvous that order no memory (EmuBarrier::arrive_and_wait(false)),
// as a collective orders no memory in the PTX model; their exchanges are out of ThreadSanitizer's
// sight (EMU_QUIET), and only their shared-memory accesses (ldmatrix's rows, stmatrix's) are seen.
inline float __shfl_xor_sync(unsigned, float x, int offset) {
    EMU_QUIET;
    const unsigned lane = threadIdx.x % 32;
    EmuWarp& w = *emu_self().block->warps[threadIdx.x / 32];
    w.buf[lane] = x;
    w.bar.arrive_and_wait(false);     // everyone has published
    const float r = w.buf[lane ^ offset];
    w.bar.arrive_and_wait(false);     // everyone has read before the next shuffle overwrites
    return r;
}
inline float __int_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float __uint_as_float(unsigned u) { return __int_as_float(u); }
inline unsigned __float_as_uint(float x) { unsigned u; std::memcpy(&u, &x, 4); return u; }
inline void __syncwarp(unsigned = 0xffffffffu) { emu_self().block->warps[threadIdx.x / 32]->bar.arrive_and_wait(); }
inline float fast_exp2(float x) { return std::exp2(x); }

// ---- cp.async (kernels/common.cuh): each copy's source is read at issue, its destination written
// at the cp_async_wait<N> that retires its group, so reading shared memory too early sees stale data.
// (ThreadSanitizer builds: the destination written by the asynchronous unit between the issue and
// that wait, emu_cp_async_hb.)
static char emu_cp_async_channel, emu_wgmma_channel;   // completion channels (emu_hb_async): their addresses
inline void emu_cp_async_hb(void* dst) {
#if EMU_FIBER_TSAN
    const EmuHbRange r{dst, 16};
    emu_hb_async(&emu_cp_async_channel, &r, 1, true, emu_self().cp_hb.open_obj());
#else
    (void)dst;
#endif
}
inline void cp_async16(void* dst, const void* src) {
    EmuCopy c{dst, {}};
    std::memcpy(c.data, src, 16);
    emu_cp_async_hb(dst);
    emu_self().open.push_back(c);
}
inline void cp_async16_zfill(void* dst, const void* src, bool valid) {
    emu_cp_async_hb(dst);
    EmuCopy c{dst, {}};
    if (valid) std::memcpy(c.data, src, 16); else std::memset(c.data, 0, 16);
    emu_self().open.push_back(c);
}
inline void cp_async_commit() {
    EmuThread& me = emu_self();
    me.groups.push_back(std::move(me.open));
    me.open.clear();
    if (EMU_FIBER_TSAN) me.cp_hb.commit();
}
template <int N>
inline void cp_async_wait() {
    EmuThread& me = emu_self();
    while (me.groups.size() > (size_t)N) {
        {
            EMU_QUIET;   // TSan saw these bytes written by the asynchronous unit
            for (auto& c : me.groups.front()) std::memcpy(c.dst, c.data, 16);
        }
        me.groups.erase(me.groups.begin());
        if (EMU_FIBER_TSAN) me.cp_hb.retire_oldest();
    }
}

// ---- 16-bit floats: storage as unsigned short, conversions round to nearest even like cvt.rn.
inline float emu_bf16_to_float(unsigned short x) { return __uint_as_float((unsigned)x << 16); }
inline unsigned short emu_float_to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;                 // NaN stays NaN
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float f16_to_float(unsigned short x) { _Float16 h; std::memcpy(&h, &x, 2); return (float)h; }
inline unsigned short emu_float_to_f16(float f) { _Float16 h = (_Float16)f; unsigned short x; std::memcpy(&x, &h, 2); return x; }
inline unsigned pack_bf16x2(float lo, float hi) { return emu_float_to_bf16(lo) | ((unsigned)emu_float_to_bf16(hi) << 16); }
inline unsigned pack_f16x2(float lo, float hi) { return emu_float_to_f16(lo) | ((unsigned)emu_float_to_f16(hi) << 16); }

// ---- warp MMAs (kernels/mma.cuh): every lane posts its fragments, then computes its own four
// accumulator elements from the whole warp's, in the PTX ISA fragment layouts, with the tensor
// core's fp32 accumulation as published (Fasi, Higham, Mikaitis, Pranesh 2021, "Numerical behavior
// of NVIDIA tensor cores"; Khattak, Mikaitis 2025): the products are exact; C and the products of
// one block are aligned to the largest exponent among them, and each addend loses the bits below
// EMU_MMA_GUARD guard positions under that largest addend's fp32 significand (sign-magnitude
// truncation: toward zero, EMU_MMA_TRUNC = 0; or two's complement: toward -inf, 1); the exact sum
// of what is left is normalised to fp32 with round toward zero. EMU_MMA_BLOCK products form one
// block (0: all of k in one block); EMU_MMA_MODEL = 0 keeps the older, kinder model (exact sum of
// C and all products, then round toward zero), for comparison.
#ifndef EMU_MMA_MODEL
#define EMU_MMA_MODEL 1
#endif
#ifndef EMU_MMA_GUARD
#define EMU_MMA_GUARD 3
#endif
#ifndef EMU_MMA_TRUNC
#define EMU_MMA_TRUNC 1
#endif
#ifndef EMU_MMA_BLOCK
#define EMU_MMA_BLOCK 0
#endif
inline EmuWarp& emu_warp() { return *emu_self().block->warps[threadIdx.x / 32]; }
// double -> float rounded toward zero (a NaN or infinity passes through).
inline float emu_float_rz(double x) {
    float f = (float)x;
    if (std::isfinite(f) && std::fabs((double)f) > std::fabs(x)) f = std::nextafter(f, 0.0f);
    return f;
}
// One block FMA: c + sum of the n exact products p[0..n) as the tensor core adds them.
inline float emu_block_fma(float c, const double* p, int n) {
    if (EMU_MMA_MODEL == 0) {
        double acc = c;
        for (int i = 0; i < n; ++i) acc += p[i];
        return emu_float_rz(acc);
    }
    double amax = std::fabs((double)c);
    double naive = c;
    for (int i = 0; i < n; ++i) { amax = std::max(amax, std::fabs(p[i])); naive += p[i]; }
    if (!std::isfinite(naive) || amax == 0.0) return (float)naive;   // NaN/inf/zeros: no alignment
    // Quantum: the last kept bit, GUARD positions below the fp32 ulp of the largest addend.
    const int e = std::ilogb(amax);
    const double qu = std::ldexp(1.0, e - 23 - EMU_MMA_GUARD);
    auto cut = [&](double x) { return EMU_MMA_TRUNC ? std::floor(x / qu) * qu : std::trunc(x / qu) * qu; };
    double acc = cut((double)c);   // every term a multiple of qu below 2^(e+1): the sum is exact in double
    for (int i = 0; i < n; ++i) acc += cut(p[i]);
    if (EMU_MMA_TRUNC == 2) {   // two's complement through the normalisation too: round toward -inf
        float f = (float)acc;
        if ((double)f > acc) f = std::nextafter(f, -INFINITY);
        return f;
    }
    return emu_float_rz(acc);
}
template <int KA, typename Elem>
inline void emu_mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], Elem elem) {
    EMU_QUIET;
    const unsigned lane = threadIdx.x % 32;
    EmuWarp& w = emu_warp();
    for (int i = 0; i < 4; ++i) w.frag_a[lane][i] = a[i];
    for (int i = 0; i < 2; ++i) w.frag_b[lane][i] = b[i];
    w.bar.arrive_and_wait(false);
    const int g = lane / 4, t = lane % 4;
    constexpr int NB = EMU_MMA_BLOCK > 0 && EMU_MMA_BLOCK < KA ? EMU_MMA_BLOCK : KA;
    for (int r = 0; r < 4; ++r) {
        const int m = g + 8 * (r / 2), n = 2 * t + r % 2;
        double prod[KA];   // exact: TF32 / 16-bit significands multiply into <= 22 bits
        for (int k = 0; k < KA; ++k) prod[k] = (double)elem(w, true, m, k) * (double)elem(w, false, k, n);
        float c = d[r];
        for (int k0 = 0; k0 < KA; k0 += NB) c = emu_block_fma(c, prod + k0, NB);
        d[r] = c;
    }
    w.bar.arrive_and_wait(false);
}
// TF32 m16n8k8: A[m][k] in lane (m%8)*4 + k%4, register m/8 + 2(k/4); B[k][n] in lane n*4 + k%4,
// register k/4. The tensor core ignores the low 13 bits of each operand.
inline void mma_m16n8k8_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    emu_mma<8>(d, a, b, [](EmuWarp& w, bool isA, int r, int c) {
        const unsigned u = isA ? w.frag_a[(r % 8) * 4 + c % 4][r / 8 + 2 * (c / 4)] : w.frag_b[c * 4 + r % 4][r / 4];
        return __uint_as_float(u & 0xffffe000u);
    });
}
// 16-bit m16n8k16: A[m][k] in lane (m%8)*4 + (k%8)/2, register m/8 + 2(k/8), half k%2;
// B[k][n] in lane n*4 + (k%8)/2, register k/8, half k%2.
template <bool BF16>
inline float emu_half(const EmuWarp& w, bool isA, int r, int c) {
    const unsigned u = isA ? w.frag_a[(r % 8) * 4 + (c % 8) / 2][r / 8 + 2 * (c / 8)] >> (16 * (c % 2))
                           : w.frag_b[c * 4 + (r % 8) / 2][r / 8] >> (16 * (r % 2));
    return BF16 ? emu_bf16_to_float((unsigned short)u) : f16_to_float((unsigned short)u);
}
inline void mma_m16n8k16_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    emu_mma<16>(d, a, b, [](EmuWarp& w, bool isA, int r, int c) { return emu_half<true>(w, isA, r, c); });
}
inline void mma_m16n8k16_f16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    emu_mma<16>(d, a, b, [](EmuWarp& w, bool isA, int r, int c) { return emu_half<false>(w, isA, r, c); });
}
// ldmatrix.x{1,2,4}[.trans]: lanes 8i..8i+7 post the row addresses of 8x8 matrix i (8 16-bit values
// a row); lane l receives from matrix i row l/4, elements 2(l%4) and 2(l%4)+1 (or, transposed,
// column l/4 of rows 2(l%4) and 2(l%4)+1).
template <int X, bool TRANS>
inline void emu_ldmatrix(unsigned* r, const void* p) {
    const unsigned lane = threadIdx.x % 32;
    EmuWarp& w = emu_warp();
    auto row = [&](int j) { EMU_QUIET; return static_cast<const unsigned short*>(w.rows[j]); };   // posted addresses
    {
        EMU_QUIET;
        w.rows[lane] = p;
    }
    w.bar.arrive_and_wait(false);
    for (int i = 0; i < X; ++i) {   // the shared-memory reads themselves: this lane's, as TSan sees them
        unsigned short lo, hi;
        if (!TRANS) {
            lo = row(8 * i + lane / 4)[2 * (lane % 4)];
            hi = row(8 * i + lane / 4)[2 * (lane % 4) + 1];
        } else {
            lo = row(8 * i + 2 * (lane % 4))[lane / 4];
            hi = row(8 * i + 2 * (lane % 4) + 1)[lane / 4];
        }
        r[i] = lo | ((unsigned)hi << 16);
    }
    w.bar.arrive_and_wait(false);
}
inline void ldmatrix_x4(unsigned (&r)[4], const void* p) { emu_ldmatrix<4, false>(r, p); }
inline void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) { emu_ldmatrix<4, true>(r, p); }
inline void ldmatrix_x2(unsigned (&r)[2], const void* p) { emu_ldmatrix<2, false>(r, p); }
inline void ldmatrix_x2_trans(unsigned (&r)[2], const void* p) { emu_ldmatrix<2, true>(r, p); }

// movmatrix.m8n8.trans.b16: lane l posts row l/4, elements 2(l%4), +1 of an 8x8 matrix and
// receives the same positions of its transpose: M[2(l%4)][l/4] (low half), M[2(l%4)+1][l/4].
inline unsigned movmatrix_trans(unsigned x) {
    EMU_QUIET;
    const unsigned lane = threadIdx.x % 32;
    EmuWarp& w = emu_warp();
    w.frag_a[lane][0] = x;
    w.bar.arrive_and_wait(false);
    auto elem = [&](int r, int c) { return (unsigned short)(w.frag_a[4 * r + c / 2][0] >> (16 * (c % 2))); };
    const unsigned r = elem(2 * (lane % 4), lane / 4) | ((unsigned)elem(2 * (lane % 4) + 1, lane / 4) << 16);
    w.bar.arrive_and_wait(false);
    return r;
}

// Other shuffles the tensor-core kernels use (same two-phase exchange as the float one above).
template <typename T>
inline T emu_shfl(T x, int src_lane) {
    static_assert(sizeof(T) == 4, "32-bit shuffles only");
    EMU_QUIET;
    const unsigned lane = threadIdx.x % 32;
    EmuWarp& w = emu_warp();
    std::memcpy(&w.buf[lane], &x, 4);
    w.bar.arrive_and_wait(false);
    T r;
    std::memcpy(&r, &w.buf[src_lane & 31], 4);
    w.bar.arrive_and_wait(false);
    return r;
}
inline unsigned __shfl_xor_sync(unsigned, unsigned x, int offset) { return emu_shfl(x, (int)(threadIdx.x % 32) ^ offset); }
inline int __shfl_xor_sync(unsigned, int x, int offset) { return emu_shfl(x, (int)(threadIdx.x % 32) ^ offset); }
inline float __shfl_sync(unsigned, float x, int src) { return emu_shfl(x, src); }
// Warp vote: every lane posts its predicate, every lane sees whether any was set.
inline bool __any_sync(unsigned, bool p) {
    int x = p ? 1 : 0;
    for (int off = 16; off > 0; off >>= 1) x |= __shfl_xor_sync(0xffffffffu, x, off);
    return x != 0;
}
inline unsigned __shfl_sync(unsigned, unsigned x, int src) { return emu_shfl(x, src); }

// One CUDA thread: the kernel, then no cp.async copy may be left unwaited.
inline void emu_run_thread(const std::function<void()>& kernel) {
    kernel();
    const EmuThread& me = emu_self();
    if (!me.open.empty() || !me.groups.empty()) {
        std::fprintf(stderr, "thread %u ended with cp.async copies never waited for\n", me.tid.x);
        std::abort();
    }
    if (!me.wg_open.empty() || !me.wg_groups.empty()) {
        std::fprintf(stderr, "thread %u ended with wgmmas never waited for\n", me.tid.x);
        std::abort();
    }
}
inline dim3 emu_block_index(dim3 grid, unsigned b) {
    return dim3{b % grid.x, (b / grid.x) % grid.y, b / (grid.x * grid.y)};
}
// A finished block may leave no named barrier with arrivals that nothing consumed.
inline void emu_check_named_barriers(const EmuBlock& blk) {
    for (int id = 1; id < 16; ++id)
        if (blk.named[id].count != 0) {
            std::fprintf(stderr, "named barrier %d left with %d pending arrivals\n", id, blk.named[id].count);
            std::abort();
        }
}

// A finished block may leave no bulk copy that never landed (issued, never waited for), and every
// mbarrier between phases: all its arrivals still to come and no transaction bytes outstanding (a
// count told too few or too many bytes leaves the difference behind).
inline void emu_check_mbarriers(const EmuBlock& blk) {
    for (const auto& [addr, m] : blk.mbars) {
        if (!m.inflight.empty()) {
            std::fprintf(stderr, "mbarrier at byte %u left with %zu bulk copies nobody waited for\n", addr, m.inflight.size());
            std::abort();
        }
        if (m.tx != 0 || m.pending != m.count) {
            std::fprintf(stderr, "mbarrier at byte %u left mid-phase: %u of %u arrivals, %lld transaction bytes outstanding\n",
                         addr, m.count - m.pending, m.count, m.tx);
            std::abort();
        }
    }
}

// Device-wide atomics and fences (kernels/attention/10h: blocks hand parts of a row block to the
// last one to finish it). Blocks run one after another here, so an atomic is a plain
// read-modify-write and a fence orders nothing further; which block comes last is what varies,
// and emu_reverse_blocks runs a grid's blocks in the opposite order to cover both.
inline int atomicAdd(int* p, int x) { const int old = *p; *p = old + x; return old; }
inline void __threadfence() {}
inline float __ldcg(const float* p) { return *p; }
inline bool emu_reverse_blocks = false;

// Run grid blocks in turn (x fastest; last first with emu_reverse_blocks), each with `threads`
// CUDA threads (fibers) executing `kernel`.
// The dynamic shared memory the running launch was given (%dynamic_smem_size; kda_hooks.h).
inline size_t emu_launch_smem_bytes = 0;
inline void emu_launch3(dim3 grid, unsigned threads, size_t smem_bytes, const std::function<void()>& kernel) {
    if (threads % 32 != 0 || smem_bytes > sizeof(smem)) {
        std::fprintf(stderr, "bad launch: %u threads, %zu bytes of shared memory\n", threads, smem_bytes);
        std::abort();
    }
    emu_launch_smem_bytes = smem_bytes;
    gridDim = grid;
    blockDim = dim3{threads, 1, 1};
    const unsigned nblocks = grid.x * grid.y * grid.z;
    std::vector<EmuThread> ts(threads);
    std::vector<void*> users(threads);
    for (unsigned b = 0; b < nblocks; ++b) {
        EmuBlock blk;
        blk.bar = EmuBarrier(threads);
        blk.smem_base = reinterpret_cast<unsigned char*>(smem);
        for (unsigned w = 0; w < threads / 32; ++w) blk.warps.push_back(std::make_unique<EmuWarp>());
        std::fill(smem, smem + smem_bytes / sizeof(float), std::numeric_limits<float>::quiet_NaN());
        for (unsigned t = 0; t < threads; ++t) {
            ts[t] = EmuThread{};
            ts[t].tid = dim3{t, 0, 0};
            ts[t].bid = emu_block_index(grid, emu_reverse_blocks ? nblocks - 1 - b : b);
            ts[t].block = &blk;
            users[t] = &ts[t];
        }
        emu_fibers_run(threads, [&](unsigned) { emu_run_thread(kernel); }, users.data());
        emu_check_named_barriers(blk);
        emu_check_mbarriers(blk);
    }
}
inline void emu_launch(unsigned grid, unsigned threads, size_t smem_bytes, const std::function<void()>& kernel) {
    emu_launch3(dim3{grid, 1, 1}, threads, smem_bytes, kernel);
}

// ---- thread-block clusters (kernels/common.cuh: cluster_ctarank, cluster_sync, cluster_map_shared).
// emu_launch_cluster runs the blocks of each cluster (cluster_x consecutive blocks along x) at the
// same time, each with its own dynamic shared memory (emu_dynamic_smem(); NaN-poisoned); a
// cluster barrier waits for every thread of the cluster, and cluster_map_shared turns an address
// in the calling block's shared memory into the same offset in another block's (DSMEM).
// The dynamic shared memory of the calling block: its own array in a cluster launch, else `smem`.
inline float* emu_dynamic_smem() { return emu_self().block_smem ? emu_self().block_smem : smem; }
// Shared-space addresses (kernels/mma.cuh: smem_u32, ldmatrix_x4_at): byte offsets into the calling
// block's dynamic shared memory.
inline unsigned smem_u32(const void* p) {
    return (unsigned)(static_cast<const char*>(p) - reinterpret_cast<const char*>(emu_dynamic_smem()));
}
inline void ldmatrix_x4_at(unsigned (&r)[4], unsigned addr, unsigned off) {
    emu_ldmatrix<4, false>(r, reinterpret_cast<const char*>(emu_dynamic_smem()) + addr + off);
}
inline void ldmatrix_x4_trans_at(unsigned (&r)[4], unsigned addr, unsigned off) {
    emu_ldmatrix<4, true>(r, reinterpret_cast<const char*>(emu_dynamic_smem()) + addr + off);
}
// stmatrix.x4.trans: lane l posts its four registers (matrix i: row l/4, elements 2(l%4), +1) and
// the address of row l%8 of the transpose of matrix l/8, which receives column l%8 of matrix l/8.
inline void stmatrix_x4_trans(unsigned addr, const unsigned (&r)[4]) {
    const unsigned lane = threadIdx.x % 32;
    EmuWarp& w = emu_warp();
    {
        EMU_QUIET;
        for (int i = 0; i < 4; ++i) w.frag_a[lane][i] = r[i];
    }
    w.bar.arrive_and_wait(false);
    const int mi = lane / 8, col = lane % 8;
    unsigned short* row = reinterpret_cast<unsigned short*>(reinterpret_cast<char*>(emu_dynamic_smem()) + addr);
    if (addr + 16 > emu_launch_smem_bytes || addr % 16 != 0) {
        std::fprintf(stderr, "stmatrix row address %u: outside the dynamic shared memory or not 16-byte aligned\n", addr);
        std::abort();
    }
    unsigned short vals[8];
    {
        EMU_QUIET;
        for (int k = 0; k < 8; ++k) vals[k] = (unsigned short)(w.frag_a[4 * k + col / 2][mi] >> (16 * (col % 2)));
    }
    w.bar.arrive_and_wait(false);   // every lane has read the fragments before any row is written
    std::memcpy(row, vals, 16);     // the shared-memory write: this lane's, as TSan sees it
    w.bar.arrive_and_wait(false);
}
inline unsigned cluster_ctarank() { return emu_self().cluster ? emu_self().cluster_rank : 0u; }
inline unsigned cluster_nctarank() { return emu_self().cluster ? (unsigned)emu_self().cluster->smem.size() : 1u; }
inline void cluster_sync() {
    if (emu_self().cluster) emu_self().cluster->bar.arrive_and_wait();
    else __syncthreads();
}
// The split cluster barrier: each thread alternates arrive and wait; wait returns once every thread
// of the cluster has arrived in the phase this thread's arrive belongs to.
inline void cluster_arrive() {
    EmuThread& me = emu_self();
    if (!me.cluster || me.cluster_arrived) {
        std::fprintf(stderr, "cluster_arrive: %s\n", me.cluster ? "arrived twice without a wait" : "not in a cluster launch");
        std::abort();
    }
    me.cluster_token = me.cluster->bar.arrive();
    me.cluster_arrived = true;
}
inline void cluster_wait() {
    EmuThread& me = emu_self();
    if (!me.cluster || !me.cluster_arrived) {
        std::fprintf(stderr, "cluster_wait: %s\n", me.cluster ? "no arrive before it" : "not in a cluster launch");
        std::abort();
    }
    me.cluster->bar.wait(me.cluster_token);
    me.cluster_arrived = false;
}
// A kernel's compile-time cluster shape (CUDA's attribute): the harness passes it to emu_launch_cluster.
#ifndef __cluster_dims__
#define __cluster_dims__(...)
#endif
template <class T>
inline T* cluster_map_shared(T* p, unsigned rank) {
    const EmuThread& me = emu_self();
    if (!me.cluster || rank >= me.cluster->smem.size()) {
        std::fprintf(stderr, "cluster_map_shared: rank %u outside the cluster\n", rank);
        std::abort();
    }
    const std::ptrdiff_t off = reinterpret_cast<char*>(p) - reinterpret_cast<char*>(me.block_smem);
    return reinterpret_cast<T*>(reinterpret_cast<char*>(me.cluster->smem[rank]) + off);
}
inline void emu_launch_cluster(dim3 grid, unsigned cluster_x, unsigned threads, size_t smem_bytes,
                               const std::function<void()>& kernel) {
    if (threads % 32 != 0 || cluster_x == 0 || grid.x % cluster_x != 0) {
        std::fprintf(stderr, "bad cluster launch: %u threads, cluster of %u, grid.x %u\n", threads, cluster_x, grid.x);
        std::abort();
    }
    emu_launch_smem_bytes = smem_bytes;
    gridDim = grid;
    blockDim = dim3{threads, 1, 1};
    const unsigned nblocks = grid.x * grid.y * grid.z;
    for (unsigned b0 = 0; b0 < nblocks; b0 += cluster_x) {
        EmuCluster cl;
        cl.bar = EmuBarrier(cluster_x * threads);
        std::vector<std::vector<float>> mem(cluster_x, std::vector<float>(smem_bytes / sizeof(float) + 4,
                                                                         std::numeric_limits<float>::quiet_NaN()));
        std::vector<EmuBlock> blks(cluster_x);
        for (unsigned r = 0; r < cluster_x; ++r) {
            cl.smem.push_back(mem[r].data());
            blks[r].bar = EmuBarrier(threads);
            blks[r].smem_base = reinterpret_cast<unsigned char*>(mem[r].data());
            cl.blocks.push_back(&blks[r]);
            for (unsigned w = 0; w < threads / 32; ++w) blks[r].warps.push_back(std::make_unique<EmuWarp>());
        }
        std::vector<EmuThread> ts(cluster_x * threads);
        std::vector<void*> users(cluster_x * threads);
        for (unsigned r = 0; r < cluster_x; ++r)
            for (unsigned t = 0; t < threads; ++t) {
                EmuThread& th = ts[r * threads + t];
                th.tid = dim3{t, 0, 0};
                th.bid = emu_block_index(grid, b0 + r);
                th.block = &blks[r];
                th.cluster = &cl;
                th.cluster_rank = r;
                th.block_smem = cl.smem[r];
                users[r * threads + t] = &th;
            }
        emu_fibers_run(cluster_x * threads, [&](unsigned) { emu_run_thread(kernel); }, users.data());
        for (auto& blk : blks) {
            emu_check_named_barriers(blk);
            emu_check_mbarriers(blk);
        }
    }
}

// ---- mbarriers and bulk copies (kernels/hopper.cuh: mbar_*, bulk_copy, bulk_copy_multicast), the forms
// kernels/delta/14 uses. A barrier is addressed by its shared-space byte offset; its state lives
// beside the block (EmuBlock::mbars), and mbar_init writes a marker into its 8 bytes of shared
// memory, so a tile written over a barrier, or a barrier used before its init, aborts. A bulk copy
// reads its source when issued and is delivered, to the same offset in each block of its cluster
// mask, when a thread waits on that block's barrier (a read of the tile before the wait sees what
// was there before); the barrier's phase completes when its arrivals are in and its transaction
// bytes have landed, as on the GPU.
constexpr unsigned long long EMU_MBAR_MARK = 0x6d62617272696572ull;   // "mbarrier"
inline EmuBlock& emu_cluster_block(unsigned rank, const char* what) {
    EmuThread& me = emu_self();
    if (!me.cluster) {
        if (rank != 0) { std::fprintf(stderr, "%s: rank %u outside a cluster launch\n", what, rank); std::abort(); }
        return *me.block;
    }
    if (rank >= me.cluster->blocks.size()) {
        std::fprintf(stderr, "%s: rank %u outside the cluster of %zu\n", what, rank, me.cluster->blocks.size());
        std::abort();
    }
    return *me.cluster->blocks[rank];
}
inline EmuMbar& emu_mbar(EmuBlock& blk, unsigned bar) {
    EMU_QUIET;   // the model's bookkeeping (and its marker check), not the kernel's accesses
    auto it = blk.mbars.find(bar);
    if (it == blk.mbars.end()) { std::fprintf(stderr, "mbarrier at byte %u used before mbar_init\n", bar); std::abort(); }
    unsigned long long mark;
    std::memcpy(&mark, blk.smem_base + bar, 8);
    if (mark != EMU_MBAR_MARK) { std::fprintf(stderr, "mbarrier at byte %u overwritten in shared memory\n", bar); std::abort(); }
    return it->second;
}
inline void emu_mbar_complete(EmuMbar& m) {
    if (m.pending == 0 && m.tx == 0) { ++m.phase; m.pending = m.count; }
}
inline void emu_mbar_arrive(EmuMbar& m, unsigned bar) {
    emu_hb_release(&m.hb[m.phase % EMU_HB_GENS]);   // this thread's accesses before the phase's waiters
    EMU_QUIET;
    emu_fiber_note_progress();
    if (m.pending == 0) { std::fprintf(stderr, "mbarrier at byte %u: more arrivals than its count\n", bar); std::abort(); }
    --m.pending;
    emu_mbar_complete(m);
}
// Deliver the copies addressed to barrier `bar` of block `blk`: bytes into its shared memory, then
// their transactions completed.
// A copy must land in the phase it was issued in: one that lands after that phase completed was not
// counted by it (the barrier was told too few bytes, or a waiter went on before it landed).
inline void emu_mbar_land(EmuBlock& blk, EmuMbar& m) {
    EMU_QUIET;   // TSan saw the bytes written by the issuer's asynchronous unit (emu_hb_async)
    for (const EmuBulk& c : m.inflight) {
        if (c.phase != m.phase) {
            std::fprintf(stderr, "bulk copy to byte %u issued in phase %u of its mbarrier landed in phase %u: the "
                                 "barrier completed without its bytes\n", c.dst, c.phase, m.phase);
            std::abort();
        }
        std::memcpy(blk.smem_base + c.dst, c.data.data(), c.data.size());
        m.tx -= (long long)c.data.size();
        emu_fiber_note_progress();
        emu_mbar_complete(m);
    }
    m.inflight.clear();
    emu_mbar_complete(m);
}
inline void mbar_init(unsigned bar, unsigned count) {
    EMU_QUIET;
    EmuBlock& blk = *emu_self().block;
    if (bar % 8 != 0 || bar + 8 > emu_launch_smem_bytes || count == 0) {
        std::fprintf(stderr, "mbar_init at byte %u (count %u): not 8-byte aligned inside the shared memory\n", bar, count);
        std::abort();
    }
    std::memcpy(blk.smem_base + bar, &EMU_MBAR_MARK, 8);
    EmuMbar& m = blk.mbars[bar];
    m = EmuMbar{};
    m.count = m.pending = count;
}
inline void mbar_init_fence() {}
inline void mbar_arrive(unsigned bar) {
    EmuBlock& blk = *emu_self().block;
    emu_mbar_arrive(emu_mbar(blk, bar), bar);
}
inline void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
    EmuBlock& blk = *emu_self().block;
    EmuMbar& m = emu_mbar(blk, bar);
    {
        EMU_QUIET;
        m.tx += bytes;
    }
    emu_mbar_arrive(m, bar);
}
// An arrival on the barrier at the same offset in block `rank` of the cluster (release, cluster scope).
inline void mbar_arrive_cluster(unsigned bar, unsigned rank) {
    EmuBlock& blk = emu_cluster_block(rank, "mbar_arrive_cluster");
    emu_mbar_arrive(emu_mbar(blk, bar), bar);
}
// Wait until the phase of parity `parity` has completed (try_wait.parity in a loop).
inline void mbar_wait(unsigned bar, unsigned parity) {
    EmuBlock& blk = *emu_self().block;
    EmuMbar& m = emu_mbar(blk, bar);
    {
        EMU_QUIET;
        emu_mbar_land(blk, m);
        ++m.waiters;
        while ((m.phase & 1u) == (parity & 1u)) emu_wait_while(&m.phase, m.phase);
        --m.waiters;
    }
    emu_hb_acquire(&m.hb[(m.phase - 1) % EMU_HB_GENS]);   // the phase just completed: its arrivals and copies
}
inline void mbar_wait_cluster(unsigned bar, unsigned parity) { mbar_wait(bar, parity); }
// cp.async.bulk global -> shared::cluster, multicast: `bytes` from src to offset dst of every block
// whose rank is set in `mask`, each completing its transactions on its barrier at offset `bar`. The
// copy into the issuing block lands when that block waits (a read before the wait sees the old
// tile); the copies into other blocks land at once (a block that has not finished with its tile
// sees it overwritten): the two orders a missing wait on either side shows up in.
inline void bulk_copy_multicast(unsigned dst, const void* src, unsigned bytes, unsigned bar, unsigned short mask) {
    if (dst % 16 != 0 || bytes % 16 != 0 || bytes == 0 || reinterpret_cast<std::uintptr_t>(src) % 16 != 0 ||
        dst + bytes > emu_launch_smem_bytes || mask == 0) {
        std::fprintf(stderr, "bulk copy of %u bytes to byte %u (mask %x): sizes and addresses must be multiples of 16 "
                             "inside the shared memory\n", bytes, dst, (unsigned)mask);
        std::abort();
    }
    if (dst < bar + 8 && bar < dst + bytes) {
        std::fprintf(stderr, "bulk copy to bytes %u..%u overwrites its mbarrier at %u\n", dst, dst + bytes, bar);
        std::abort();
    }
    for (unsigned r = 0; r < 16; ++r) {
        if (!(mask >> r & 1u)) continue;
        EmuBlock& blk = emu_cluster_block(r, "bulk_copy_multicast");
        EmuMbar& m = emu_mbar(blk, bar);
        const EmuHbRange to{blk.smem_base + dst, bytes};   // written after the issue, before the phase's waiters go on
        emu_hb_async(blk.smem_base + bar, &to, 1, true, &m.hb[m.phase % EMU_HB_GENS]);   // this barrier's channel
        EMU_QUIET;
        EmuBulk c{dst, std::vector<unsigned char>(bytes), m.phase};
        std::memcpy(c.data.data(), src, bytes);
        m.inflight.push_back(std::move(c));
        if (m.waiters > 0 || r != cluster_ctarank()) emu_mbar_land(blk, m);   // someone waits, or another block: now
    }
}
inline void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    bulk_copy_multicast(dst, src, bytes, bar, (unsigned short)(1u << cluster_ctarank()));
}
// cp.async.bulk shared::cta -> shared::cluster (kernels/delta/28): `bytes` of this block's shared memory from offset
// src to offset dst of block `rank`, completing on its barrier at offset bar: read when issued, landing at once in
// another block (as the multicast copies do), so a block that is still reading the bytes sees them overwritten.
inline void bulk_copy_to_peer(unsigned dst, unsigned src, unsigned bytes, unsigned bar, unsigned rank) {
    if (src % 16 != 0 || src + bytes > emu_launch_smem_bytes) {
        std::fprintf(stderr, "bulk copy of %u bytes from shared byte %u: a multiple of 16 inside the shared memory\n",
                     bytes, src);
        std::abort();
    }
    bulk_copy_multicast(dst, emu_self().block->smem_base + src, bytes, bar, (unsigned short)(1u << rank));
}
// cp.async.bulk shared -> global (kernels/hopper.cuh: bulk_store, its commit and wait): the model reads the shared
// bytes and writes them when the thread waits for its groups, after letting the other threads run, so that shared
// memory written over before the wait shows up in global memory, and global memory read before the wait (a flag
// published before it) sees the old bytes.
inline void bulk_store(void* dst, unsigned src, unsigned bytes) {
    if (src % 16 != 0 || bytes % 16 != 0 || bytes == 0 || reinterpret_cast<std::uintptr_t>(dst) % 16 != 0 ||
        src + bytes > emu_launch_smem_bytes) {
        std::fprintf(stderr, "bulk store of %u bytes from byte %u: sizes and addresses must be multiples of 16 inside "
                             "the shared memory\n", bytes, src);
        std::abort();
    }
    emu_self().bulk_stores.push_back(EmuBulkStore{dst, src, bytes});
}
inline void bulk_store_commit() {}
inline void bulk_store_wait_all() {
    emu_fiber_note_progress();   // (a step that completes: the pass that runs the others is not a deadlock)
    emu_yield();   // the others run first: whatever they read of the destination before the wait is the old bytes
    EmuThread& me = emu_self();
    EMU_QUIET;
    for (const EmuBulkStore& c : me.bulk_stores)
        std::memcpy(c.dst, reinterpret_cast<unsigned char*>(emu_dynamic_smem()) + c.src, c.bytes);
    me.bulk_stores.clear();
    emu_fiber_note_progress();
}

// ---- TMA tensor copies (kernels/hopper.cuh: tma_load_4d; kernels/delta/14's "tma" forms). The
// model's TmaMap is what cuTensorMapEncodeTiled is given: the global address, the element size, the
// shared-memory swizzle (0, 32, 64 or 128 bytes), the dimensions and byte strides (innermost first)
// and the box; a copy reads the box at the given coordinates when issued, elements outside the
// dimensions as zeros (the engine's fill), and lands it like a bulk copy, the whole box's bytes
// counted on the barrier: densely (box[0] innermost), or with swizzle S the 16-byte piece at shared
// address A moved to A ^ (((A >> 7) & (S / 16 - 1)) << 4) (CUTLASS's Swizzle<log2(S / 16), 4, 3>;
// the destination aligned to 8 S bytes, a box row S bytes or fewer).
#define __grid_constant__
struct TmaMap {
    const unsigned char* base;
    unsigned esz, swizzle;
    unsigned long long dims[4], strides[4];   // strides[0] = esz
    unsigned box[4];
};
// The shared address the copy engine's swizzle of `swizzle` bytes moves the 16-byte piece at `a` to.
inline unsigned emu_tma_swizzled(unsigned a, unsigned swizzle) {
    return swizzle ? a ^ (((a >> 7) & (swizzle / 16 - 1)) << 4) : a;
}
static_assert(sizeof(TmaMap) == 96, "tests/delta_emu/fake_device.py encodes this layout");
// A prefetch into L2 has no effect the model can see (the CPU model has no L2): nothing to do.
inline void tma_prefetch_4d(const TmaMap*, int, int, int, int) {}
inline void tma_load_4d(unsigned dst, const TmaMap* map, int c0, int c1, int c2, int c3, unsigned bar) {
    const TmaMap& m = *map;
    const size_t row = (size_t)m.box[0] * m.esz, bytes = row * m.box[1] * m.box[2] * m.box[3];
    if (dst % 128 != 0 || row % 16 != 0 || dst + bytes > emu_launch_smem_bytes) {
        std::fprintf(stderr, "tma_load_4d to byte %u: the box (%zu bytes) must land 128-byte aligned inside the shared memory\n",
                     dst, bytes);
        std::abort();
    }
    if (m.swizzle && (!(m.swizzle == 32 || m.swizzle == 64 || m.swizzle == 128) || dst % (8 * m.swizzle) != 0 ||
                      row > m.swizzle)) {
        std::fprintf(stderr, "tma_load_4d to byte %u: a %u-byte swizzle needs a %u-byte aligned destination and box rows "
                     "of at most %u bytes (got %zu)\n", dst, m.swizzle, 8 * m.swizzle, m.swizzle, row);
        std::abort();
    }
    EmuBlock& blk = *emu_self().block;
    EmuMbar& mb = emu_mbar(blk, bar);
    EmuBulk c{dst, std::vector<unsigned char>(bytes, 0), mb.phase};
    const int at[4] = {c0, c1, c2, c3};
    size_t o = 0;
    for (unsigned i3 = 0; i3 < m.box[3]; ++i3)
        for (unsigned i2 = 0; i2 < m.box[2]; ++i2)
            for (unsigned i1 = 0; i1 < m.box[1]; ++i1)
                for (unsigned i0 = 0; i0 < m.box[0]; ++i0, o += m.esz) {
                    const long long x[4] = {at[0] + (long long)i0, at[1] + (long long)i1, at[2] + (long long)i2,
                                            at[3] + (long long)i3};
                    bool in = true;
                    size_t off = 0;
                    for (int d = 0; d < 4; ++d) {
                        in = in && x[d] >= 0 && (unsigned long long)x[d] < m.dims[d];
                        off += (size_t)x[d] * m.strides[d];
                    }
                    if (in) std::memcpy(c.data.data() + o, m.base + off, m.esz);
                }
    if (m.swizzle) {   // each 16-byte piece to its swizzled place (a permutation within each 8 S-byte span)
        std::vector<unsigned char> sw(bytes);
        for (size_t p = 0; p < bytes; p += 16)
            std::memcpy(sw.data() + (emu_tma_swizzled(dst + (unsigned)p, m.swizzle) - dst), c.data.data() + p, 16);
        c.data = std::move(sw);
    }
    const EmuHbRange to{blk.smem_base + dst, bytes};   // the box's bytes (swizzled within them), as for a bulk copy
    emu_hb_async(blk.smem_base + bar, &to, 1, true, &mb.hb[mb.phase % EMU_HB_GENS]);
    EMU_QUIET;
    mb.inflight.push_back(std::move(c));
    if (mb.waiters > 0) emu_mbar_land(blk, mb);
}

// ---- warpgroup MMAs (kernels/hopper.cuh: wgmma_ss, wgmma_rs_kb, wgmma_rs and their fences), the
// forms kernels/delta/13-16 use: m64nNk16, fp32 accumulators, bf16/fp16 operands, K-major A and B in
// the 128- or 64-byte swizzle (descriptor layouts 1, 2), MN-major B (wgmma_rs) or A (wgmma_ss_mna) in the 128-byte swizzle
// (anything else aborts), A from shared memory (_ss) or from the warp's registers in the
// mma.m16n8k16 A layout (_rs_kb, _rs). A wgmma is asynchronous: here the
// issuing thread records it, registers it reads (A) are copied at issue, and it is computed at the
// wgmma_wait that retires its group: shared memory is read then, and the accumulators are written
// then, so a read of them before the wait sees the old values and a tile overwritten before the
// wait is read overwritten. Rows: warp w of the warpgroup (threadIdx.x / 32 % 4) holds rows 16w + g
// and 16w + g + 8 of the 64 (g = lane / 4); d[4i + 0, 1] = row 16w + g, columns 8i + 2t, +1 (t =
// lane % 4), d[4i + 2, 3] = row 16w + g + 8. Each element is one emu_block_fma of C and the 16 exact
// products, as for mma.sync.
// Decode a shared-memory matrix descriptor: (byte offset of element (row r, k) in the block's shared
// memory). K-major, 128-byte swizzle: rows of 128 bytes in 8-row atoms SBO apart; the 16-byte chunk
// of address bits 4-6 XORed with bits 7-9 (the address of the element, start included).
inline size_t emu_sw128_offset(unsigned long long desc, int r, int k) {
    const unsigned long long layout = desc >> 62;
    if (layout != 1ull && layout != 2ull) {
        std::fprintf(stderr, "wgmma descriptor %016llx: only the 128- and 64-byte swizzles (layouts 1, 2) are modelled\n", desc);
        std::abort();
    }
    const size_t start = (size_t)(desc & 0x3FFFull) << 4, sbo = (size_t)((desc >> 32) & 0x3FFFull) << 4;
    if (layout == 2ull) {   // 64-byte swizzle: rows of 64 bytes, chunk bits 4-5 XORed with bits 7-8
        const size_t logical = start + (size_t)(r / 8) * sbo + (size_t)(r % 8) * 64 + 2 * (size_t)k;
        return logical ^ (((logical >> 7) & 3) << 4);
    }
    const size_t logical = start + (size_t)(r / 8) * sbo + (size_t)(r % 8) * 128 + 2 * (size_t)k;
    return logical ^ (((logical >> 7) & 7) << 4);
}
// MN-major B (wgmma_rs, tnspB) or A (wgmma_ss_mna, tnspA), 128-byte swizzle: K rows of 64 N- (M-)
// values (128 bytes), 8-row K groups SBO apart, 64-wide N (M) chunks LBO apart; the same XOR of address bits.
inline size_t emu_sw128_mn_offset(unsigned long long desc, int n, int k) {
    if ((desc >> 62) != 1ull) {
        std::fprintf(stderr, "wgmma descriptor %016llx: MN-major operands are modelled in the 128-byte swizzle only\n", desc);
        std::abort();
    }
    const size_t start = (size_t)(desc & 0x3FFFull) << 4, lbo = (size_t)((desc >> 16) & 0x3FFFull) << 4,
                 sbo = (size_t)((desc >> 32) & 0x3FFFull) << 4;
    const size_t logical = start + (size_t)(n / 64) * lbo + (size_t)(k / 8) * sbo + (size_t)(k % 8) * 128 + 2 * (size_t)(n % 64);
    return logical ^ (((logical >> 7) & 7) << 4);
}
template <bool BF16, bool MN = false>
inline float emu_smem_half(unsigned long long desc, int r, int k) {
    const size_t off = MN ? emu_sw128_mn_offset(desc, r, k) : emu_sw128_offset(desc, r, k);
    const unsigned char* base = reinterpret_cast<const unsigned char*>(emu_dynamic_smem());
    if (off + 2 > emu_launch_smem_bytes) {
        std::fprintf(stderr, "wgmma operand at byte %zu outside the %zu bytes of dynamic shared memory\n", off,
                     emu_launch_smem_bytes);
        std::abort();
    }
    unsigned short x;
    std::memcpy(&x, base + off, 2);
    return BF16 ? emu_bf16_to_float(x) : f16_to_float(x);
}
// Record one wgmma: arow(m, k) gives A[m][k] for this thread's rows m (0 = row g, 1 = row g + 8);
// AM says where A lives (0: registers, 1: shared memory K-major as descriptor da, 2: MN-major).
template <int N, bool BF16, class ARow, bool MNB = false, int AM = 0>
inline void emu_wgmma(float* d, ARow arow, unsigned long long db, int acc, unsigned long long da = 0) {
    EmuThread& me = emu_self();
    const unsigned lane = threadIdx.x % 32, wiw = (threadIdx.x / 32) % 4;
    const int g = lane / 4, t = lane % 4;
#if EMU_FIBER_TSAN
    // The tensor core reads this thread's operand elements any time from the issue to the wait that
    // retires the group (the computation below reads them at the wait, out of TSan's sight).
    {
        EmuHbRange r[32 + 4 * N];
        int nr = 0;
        const unsigned char* base = reinterpret_cast<const unsigned char*>(emu_dynamic_smem());
        for (int m = 0; m < 2 && AM != 0; ++m)
            for (int k = 0; k < 16; ++k)
                r[nr++] = {base + (AM == 1 ? emu_sw128_offset(da, 16 * wiw + g + 8 * m, k)
                                           : emu_sw128_mn_offset(da, 16 * wiw + g + 8 * m, k)), 2};
        for (int col = 2 * t; col < N; col += (col % 2 == 0 ? 1 : 7))   // columns 8i + 2t, 8i + 2t + 1
            for (int k = 0; k < 16; ++k)
                r[nr++] = {base + (MNB ? emu_sw128_mn_offset(db, col, k) : emu_sw128_offset(db, col, k)), 2};
        emu_hb_async(&emu_wgmma_channel, r, nr, false, me.wg_hb.open_obj());
    }
#endif
    me.wg_open.push_back([=]() {
        for (int e = 0; e < N / 2; ++e) {
            const int i = e / 4, r = e % 4, m = r / 2;
            const int row = 16 * wiw + g + 8 * m, col = 8 * i + 2 * t + r % 2;
            double prod[16];
            for (int k = 0; k < 16; ++k) prod[k] = (double)arow(m, row, k) * (double)emu_smem_half<BF16, MNB>(db, col, k);
            d[e] = emu_block_fma(acc ? d[e] : 0.0f, prod, 16);
        }
    });
}
template <int N, bool BF16>
inline void wgmma_ss(float (&d)[N / 2], unsigned long long da, unsigned long long db, int acc) {
    auto arow = [da](int, int row, int k) { return emu_smem_half<BF16>(da, row, k); };
    emu_wgmma<N, BF16, decltype(arow), false, 1>(d, arow, db, acc, da);
}
// A MN-major (tnspA: K rows of the M values, 128-byte swizzle), bf16, B K-major: kernels/hopper.cuh's wgmma_ss_mna
template <int N>
inline void wgmma_ss_mna(float (&d)[N / 2], unsigned long long da, unsigned long long db, int acc) {
    static_assert(N == 16 || N == 32 || N == 64, "wgmma_ss_mna: N in {16, 32, 64}");
    auto arow = [da](int, int row, int k) { return emu_smem_half<true, true>(da, row, k); };
    emu_wgmma<N, true, decltype(arow), false, 2>(d, arow, db, acc, da);
}
// A from the warp's registers (rows g and g + 8 of its 16, all 16 k), copied at issue
template <int N, bool BF16, bool MNB>
inline void emu_wgmma_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long db, int acc) {
    const unsigned lane = threadIdx.x % 32;
    EmuWarp& w = emu_warp();
    std::array<float, 32> rows;
    {
        EMU_QUIET;
        for (int i = 0; i < 4; ++i) w.frag_a[lane][i] = a[i];
        w.bar.arrive_and_wait(false);
        const int g = lane / 4;
        for (int m = 0; m < 2; ++m)
            for (int k = 0; k < 16; ++k) rows[16 * m + k] = emu_half<BF16>(w, true, g + 8 * m, k);
        w.bar.arrive_and_wait(false);
    }
    auto arow = [rows](int m, int, int k) { return rows[16 * m + k]; };
    emu_wgmma<N, BF16, decltype(arow), MNB>(d, arow, db, acc);
}
template <int N, bool BF16>
inline void wgmma_rs_kb(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long db, int acc) {
    static_assert(N == 16 || N == 32 || N == 64 || N == 128, "wgmma_rs_kb: N in {16, 32, 64, 128}");
    emu_wgmma_rs<N, BF16, false>(d, a, db, acc);
}
template <int N, bool BF16>
inline void wgmma_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long db, int acc) {
    static_assert(N == 64 || N == 128, "wgmma_rs: N in {64, 128}");
    emu_wgmma_rs<N, BF16, true>(d, a, db, acc);
}
inline void wgmma_fence() {}
inline void fence_proxy_async() {}
template <int N>
inline void fence_regs(float (&)[N]) {}
inline void wgmma_commit() {
    EmuThread& me = emu_self();
    me.wg_groups.push_back(std::move(me.wg_open));
    me.wg_open.clear();
    if (EMU_FIBER_TSAN) me.wg_hb.commit();
}
template <int N>
inline void wgmma_wait() {
    EmuThread& me = emu_self();
    while (me.wg_groups.size() > (size_t)N) {
        {
            EMU_QUIET;   // TSan saw the operands read by the asynchronous unit
            for (auto& op : me.wg_groups.front()) op();
        }
        me.wg_groups.erase(me.wg_groups.begin());
        if (EMU_FIBER_TSAN) me.wg_hb.retire_oldest();
    }
}

// ---- raw float32 files for the harnesses (tests/ladder_emu/harness*.cpp)
#include <string>
inline std::vector<float> read_f32(const std::string& path, size_t n) {
    std::vector<float> v(n);
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f || std::fread(v.data(), 4, n, f) != n) { std::fprintf(stderr, "cannot read %s\n", path.c_str()); std::exit(2); }
    std::fclose(f);
    return v;
}
inline void write_f32(const std::string& path, const std::vector<float>& v) {
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(v.data(), 4, v.size(), f);
    std::fclose(f);
}
