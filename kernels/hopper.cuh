// hopper.cuh — sm_90a device helpers for the Hopper step (notebook 11): the bulk tensor copy
// engine (TMA) completing on mbarriers, warpgroup MMAs (wgmma) with shared-memory matrix
// descriptors, and their fences. Kernels that include this must be compiled for sm_90a
// (attnlab.compile.load_kernel(..., arch="sm_90a"); nvcc -gencode=arch=compute_90a,code=sm_90a).
//
// Shared-memory tiles are the TMA's 128-byte-swizzle layout: rows of 64 16-bit values (128 B),
// the 16-byte chunk c of row r stored at chunk c ^ (r % 8), 8-row atoms of 1024 B, every tile
// 1024-byte aligned (the swizzle is a function of the address bits, so TMA writes and wgmma reads
// agree only on such a base). A head dim of 128 is two such tiles side by side ("column chunks").
#pragma once

#include "common.cuh"

// ---- wgmma matrix descriptors (PTX ISA "Matrix Descriptor Format"; CUTLASS GmmaDescriptor):
// bits 0-13 start address >> 4, 16-29 leading byte offset >> 4, 32-45 stride byte offset >> 4,
// 62-63 layout (1 = 128-byte swizzle). For the 128-byte swizzle:
//  * K-major (rows of the M or N dimension, K contiguous: Q and K for S = Q K^T): SBO = 1024 (from
//    one 8-row atom to the next); LBO unused (1). A k16 step inside a 64-wide chunk starts 32 bytes on.
//  * MN-major (K rows, N contiguous: V for O += P V, "transposed" B): LBO = bytes from one 64-wide
//    N chunk to the next, SBO = 1024 (from one 8-row K group to the next).
static __device__ __forceinline__ unsigned long long wgmma_desc_sw128(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16) |
           ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

// The 64-byte swizzle (layout 2), K-major: rows of 64 bytes (32 16-bit values) in 8-row atoms of 512 B,
// the 16-byte chunk c of row r stored at c ^ ((r / 2) % 4) (the TMA's 64-byte swizzle); SBO = 512 for
// dense atoms, a k16 step 32 bytes on; every tile 512-byte aligned.
static __device__ __forceinline__ unsigned long long wgmma_desc_sw64(unsigned addr, unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) |
           ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32) | (2ull << 62);
}

// The CPU model of tests/ladder_emu/ defines ATTNLAB_HOST_EMULATION and supplies host versions of
// the wgmma fences, wgmma_ss, wgmma_rs_kb and wgmma_rs (K-major operands in the 128- or 64-byte
// swizzle, MN-major B in the 128-byte swizzle), fence_regs and fence_proxy_async, the mbarriers, the
// bulk and tensor copies; setmaxnreg is device-only.
#ifndef ATTNLAB_HOST_EMULATION
// A CUtensorMap (driver API, 128 bytes, 64-byte aligned), built on the host by
// cuTensorMapEncodeTiled (attnlab.tma) and passed by value as a __grid_constant__ parameter.
struct alignas(64) TmaMap { unsigned long long opaque[16]; };


// ---- mbarrier: a TMA copy "completes" bytes on a barrier; waiters spin on its phase parity.
static __device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
// Make the initialised barriers visible to the copy engine (async proxy) before first use.
static __device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// One arrival that also announces `bytes` of transactions the barrier must see before the phase flips.
static __device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
// A plain arrival (consumers telling the producer that a buffer may be refilled).
static __device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
static __device__ __forceinline__ void mbar_wait(unsigned bar, unsigned phase) {
    asm volatile(
        "{\n.reg .pred done;\n"
        "WAIT:\n"   // labels are local to the { } block, so every inlined copy may use this name
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n}\n" :: "r"(bar), "r"(phase) : "memory");
}

// ---- a cluster's mbarriers (kernels/delta/14): an arrival on the barrier at the same offset in block
// `rank` of the cluster, released at cluster scope (this thread's earlier shared-memory reads are
// ordered before anything the waiting block does next, such as a copy that overwrites what was
// read), and a wait that acquires at cluster scope (the arrivals of other blocks).
static __device__ __forceinline__ void mbar_arrive_cluster(unsigned bar, unsigned rank) {
    asm volatile(
        "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
        "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n" :: "r"(bar), "r"(rank) : "memory");
}
static __device__ __forceinline__ void mbar_wait_cluster(unsigned bar, unsigned phase) {
    asm volatile(
        "{\n.reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n}\n" :: "r"(bar), "r"(phase) : "memory");
}

// ---- bulk copy (no tensor map): `bytes` (a multiple of 16, 16-byte aligned) of contiguous global
// memory into shared memory at offset `dst` of every block of the cluster whose rank is set in
// `mask`, each completing the bytes on its own barrier at offset `bar` (sm_90a for the multicast).
static __device__ __forceinline__ void bulk_copy_multicast(unsigned dst, const void* src, unsigned bytes, unsigned bar,
                                                           unsigned short mask) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;"
        :: "r"(dst), "l"(src), "r"(bytes), "r"(bar), "h"(mask) : "memory");
}

// The same into this block's shared memory only.
static __device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

// ---- bulk copy between the shared memories of a cluster (kernels/delta/28): `bytes` (a multiple of 16) from this
// block's shared offset src to offset dst of block `rank`, completing its transactions on that block's mbarrier at
// offset bar (the same offsets in every block of the cluster)
static __device__ __forceinline__ void bulk_copy_to_peer(unsigned dst, unsigned src, unsigned bytes, unsigned bar,
                                                         unsigned rank) {
    asm volatile(
        "{\n.reg .b32 rd, rb;\nmapa.shared::cluster.u32 rd, %0, %4;\nmapa.shared::cluster.u32 rb, %3, %4;\n"
        "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [rd], [%1], %2, [rb];\n}\n"
        :: "r"(dst), "r"(src), "r"(bytes), "r"(bar), "r"(rank) : "memory");
}

// ---- bulk stores: `bytes` (a multiple of 16) from shared offset src to global dst, in this thread's bulk group;
// commit the open group; wait until every committed group of this thread has completed (its writes performed).
static __device__ __forceinline__ void bulk_store(void* dst, unsigned src, unsigned bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" :: "l"(dst), "r"(src), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void bulk_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
static __device__ __forceinline__ void bulk_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// ---- TMA: box of a 3-D tensor map at coordinates (c0 innermost, c1, c2) -> shared memory.
static __device__ __forceinline__ void tma_load_3d(unsigned dst, const TmaMap* map, int c0, int c1, int c2,
                                                   unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
        :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
}

// The same for a 4-D tensor map at coordinates (c0 innermost .. c3) (kernels/delta/14: q, k, g as
// (K, H, T, B), a box of C tokens x K channels of one head; rows past T zero-filled by the engine).
static __device__ __forceinline__ void tma_load_4d(unsigned dst, const TmaMap* map, int c0, int c1, int c2, int c3,
                                                   unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];"
        :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
        : "memory");
}

// Prefetch of the same box into L2 (no shared memory, no barrier): a later load of it hits L2.
static __device__ __forceinline__ void tma_prefetch_4d(const TmaMap* map, int c0, int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global [%0, {%1, %2, %3, %4}];"
                 :: "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}

// ---- register reallocation between warpgroups (sm_90a): every thread of the warpgroup executes
// it; the kernel must start under a register cap (__launch_bounds__(threads, 1)). N: multiple of 8.
template <int N>
static __device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(N)); }
template <int N>
static __device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(N)); }

// ---- wgmma fences. fence: before the first wgmma that reads registers written by ordinary
// instructions (accumulators, A fragments); commit: close a group of issued wgmmas; wait<N>: until
// at most N groups are pending (their results in registers, their shared-memory reads done).
static __device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
static __device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
static __device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }

// The compiler sees a wgmma's accumulators as written when the wgmma is issued, not when
// wgmma_wait returns (an asm statement with no register operands), so it could move a read of
// them above the wait. An empty asm that "modifies" each register, placed after the wait, pins
// every later use below it (CUTLASS: warpgroup_fence_operand).
template <int N>
static __device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i]) :: "memory");
}

// ---- wgmma.mma_async m64nNk16, fp32 accumulators d (N/2 per thread), bf16 or fp16 operands.
// _ss: A and B from shared memory (descriptors, both K-major). _rs: A from registers (the
// mma.m16n8k16 A fragment of the thread's warp's 16 rows), B from shared memory, MN-major.
// accumulate = 0: d = A B (d's old values ignored); 1: d += A B.
// Accumulator layout (per warp w of the warpgroup: rows 16w .. 16w + 15; g = lane / 4, t = lane % 4):
// d[4i + 0, 1] = row g, columns 8i + 2t, +1; d[4i + 2, 3] = row g + 8, the same columns.
// (The operand lists below are written out by script: one "+f" per accumulator.)
template <bool BF16>
static __device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], unsigned long long da, unsigned long long db, int accumulate) {
    if constexpr (BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
          : "l"(da), "l"(db), "r"(accumulate));
    }
    if constexpr (!BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
          : "l"(da), "l"(db), "r"(accumulate));
    }
}

template <bool BF16>
static __device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], unsigned long long da, unsigned long long db, int accumulate) {
    if constexpr (BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
          : "l"(da), "l"(db), "r"(accumulate));
    }
    if constexpr (!BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
          : "l"(da), "l"(db), "r"(accumulate));
    }
}

template <bool BF16, int TB = 1>   // TB: B MN-major (1, tnspB) or K-major (0)
static __device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const unsigned (&a)[4], unsigned long long db, int accumulate) {
    if constexpr (BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(TB));
    }
    if constexpr (!BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(TB));
    }
}

template <bool BF16, int TB = 1>   // TB: B MN-major (1, tnspB) or K-major (0)
static __device__ __forceinline__ void wgmma_m64n128k16_rs(float (&d)[64], const unsigned (&a)[4], unsigned long long db, int accumulate) {
    if constexpr (BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(TB));
    }
    if constexpr (!BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(TB));
    }
}

// ---- m64nNk16 for the narrow N of the delta recurrence (kernels/delta/13: N = the block's 16 or 32
// value columns), B K-major in both forms: _ss as above, _rs_kb with A from registers and B K-major
// (tnspB = 0; the _rs forms above read B MN-major). (Operand lists written out by script.)
template <bool BF16>
static __device__ __forceinline__ void wgmma_m64n16k16_ss(float (&d)[8], unsigned long long da, unsigned long long db, int accumulate) {
    if constexpr (BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
          : "l"(da), "l"(db), "r"(accumulate));
    }
    if constexpr (!BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
          : "l"(da), "l"(db), "r"(accumulate));
    }
}

template <bool BF16>
static __device__ __forceinline__ void wgmma_m64n16k16_rs_kb(float (&d)[8], const unsigned (&a)[4], unsigned long long db, int accumulate) {
    if constexpr (BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
    }
    if constexpr (!BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
    }
}

template <bool BF16>
static __device__ __forceinline__ void wgmma_m64n32k16_ss(float (&d)[16], unsigned long long da, unsigned long long db, int accumulate) {
    if constexpr (BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
          : "l"(da), "l"(db), "r"(accumulate));
    }
    if constexpr (!BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
          : "l"(da), "l"(db), "r"(accumulate));
    }
}

template <bool BF16>
static __device__ __forceinline__ void wgmma_m64n32k16_rs_kb(float (&d)[16], const unsigned (&a)[4], unsigned long long db, int accumulate) {
    if constexpr (BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
    }
    if constexpr (!BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
    }
}

// A MN-major in shared memory (tnspA = 1: K rows of the M values, 128-byte swizzle; B K-major), bf16:
// for an A operand whose writer holds a column of it (delta step 19: WG_E holds one channel of
// [Kg; Qg] over the chunk's tokens). N = the recurrence's 16, 32 or (27) 64 value columns.
static __device__ __forceinline__ void wgmma_m64n16k16_ss_mna(float (&d)[8], unsigned long long da, unsigned long long db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(da), "l"(db), "r"(accumulate));
}
static __device__ __forceinline__ void wgmma_m64n32k16_ss_mna(float (&d)[16], unsigned long long da, unsigned long long db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(da), "l"(db), "r"(accumulate));
}

static __device__ __forceinline__ void wgmma_m64n64k16_ss_mna(float (&d)[32], unsigned long long da, unsigned long long db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(accumulate));
}

// The m64nNk16 variant for a compile-time N: what the kernels call. wgmma_ss: A and B K-major in
// shared memory, N in {16, 32, 64, 128}; wgmma_ss_mna: A MN-major (below); wgmma_rs: A from registers, B MN-major, N in {64, 128};
// wgmma_rs_kb: A from registers, B K-major, N in {16, 32, 64, 128}.
template <int N, bool BF16>
static __device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], unsigned long long da, unsigned long long db, int acc) {
    if constexpr (N == 16) wgmma_m64n16k16_ss<BF16>(d, da, db, acc);
    else if constexpr (N == 32) wgmma_m64n32k16_ss<BF16>(d, da, db, acc);
    else if constexpr (N == 64) wgmma_m64n64k16_ss<BF16>(d, da, db, acc);
    else wgmma_m64n128k16_ss<BF16>(d, da, db, acc);
}
// wgmma_ss_mna: A MN-major (bf16), B K-major, both in shared memory; N in {16, 32, 64}.
template <int N>
static __device__ __forceinline__ void wgmma_ss_mna(float (&d)[N / 2], unsigned long long da, unsigned long long db, int acc) {
    static_assert(N == 16 || N == 32 || N == 64, "wgmma_ss_mna: N in {16, 32, 64}");
    if constexpr (N == 16) wgmma_m64n16k16_ss_mna(d, da, db, acc);
    else if constexpr (N == 32) wgmma_m64n32k16_ss_mna(d, da, db, acc);
    else wgmma_m64n64k16_ss_mna(d, da, db, acc);
}
template <int N, bool BF16>
static __device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long db, int acc) {
    if constexpr (N == 64) wgmma_m64n64k16_rs<BF16>(d, a, db, acc);
    else wgmma_m64n128k16_rs<BF16>(d, a, db, acc);
}
template <int N, bool BF16>
static __device__ __forceinline__ void wgmma_rs_kb(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long db, int acc) {
    static_assert(N == 16 || N == 32 || N == 64 || N == 128, "wgmma_rs_kb: N in {16, 32, 64, 128}");
    if constexpr (N == 16) wgmma_m64n16k16_rs_kb<BF16>(d, a, db, acc);
    else if constexpr (N == 32) wgmma_m64n32k16_rs_kb<BF16>(d, a, db, acc);
    else if constexpr (N == 64) wgmma_m64n64k16_rs<BF16, 0>(d, a, db, acc);
    else wgmma_m64n128k16_rs<BF16, 0>(d, a, db, acc);
}

// Generic-proxy writes to shared memory (st.shared) made visible to the async proxy that wgmma
// reads operands through: every writing thread, after its stores and before the barrier that hands
// the tile to the wgmma (CUTLASS: fence_view_async_shared).
static __device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
#endif  // ATTNLAB_HOST_EMULATION
