// Warp-level tensor-core helpers shared by the attention kernels (kernels/attention/09_* onwards):
// mma.sync fragments for TF32 (m16n8k8) and bf16/fp16 (m16n8k16), ldmatrix, operand packing and
// the 3xTF32 split, plus cp.async with group waits.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k8 / m16n8k16"), g = lane / 4,
// t = lane % 4, accumulator d[4] = D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1] for both shapes:
//   TF32 m16n8k8   a[4] = A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]      (one tf32 per register)
//                  b[2] = B[t][g], B[t+4][g]
//   16-bit m16n8k16 a[4] = A[g][2t..2t+1], A[g+8][2t..2t+1], A[g][2t+8..], A[g+8][2t+8..]
//                  b[2] = B[2t..2t+1][g], B[2t+8..2t+9][g]   (two 16-bit values per register,
//                  the lower column/row index in the low half)
// ldmatrix.x4: lanes 8i..8i+7 give the row addresses (16 bytes each) of 8x8 matrix i; lane l
// receives r[i] = matrix i, row l/4, elements 2(l%4), 2(l%4)+1 — exactly an A/B fragment quarter.
// With .trans it receives column l/4, rows 2(l%4), 2(l%4)+1 (the transposed matrix).
//
// Like common.cuh this compiles under NVRTC and nvcc alike (no system headers). The CPU execution
// model in tests/ladder_emu/ defines ATTNLAB_HOST_EMULATION and supplies host versions of every
// function in the #ifndef block below, with the same fragment semantics.
#pragma once

#include "common.cuh"

#ifndef ATTNLAB_HOST_EMULATION
// d += A·B, 16x8x8, TF32 operands (the tensor core reads the top 19 bits of each register).
static __device__ __forceinline__ void mma_m16n8k8_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// d += A·B, 16x8x16, bf16 operands, fp32 accumulation.
static __device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// d += A·B, 16x8x16, fp16 operands, fp32 accumulation.
static __device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ldmatrix: p is this lane's row address in shared memory (see the header comment).
static __device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
static __device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
static __device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], const void* p) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
}
static __device__ __forceinline__ void ldmatrix_x2_trans(unsigned (&r)[2], const void* p) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
}

// Two floats -> one register of two 16-bit values, round to nearest even; lo lands in bits 0-15.
static __device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
static __device__ __forceinline__ unsigned pack_f16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
// 16-bit storage values -> float (bf16 is the top half of a float; fp16 through cvt).
static __device__ __forceinline__ float f16_to_float(unsigned short x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return f;
}
// 2^x on the special-function unit (MUFU.EX2, ~2 ulp); exp2f without -use_fast_math is slower.
static __device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#endif  // ATTNLAB_HOST_EMULATION

// One 16-byte chunk of 16-bit values (a uint4 that the CPU model compiles too).
struct alignas(16) U4 { unsigned x, y, z, w; };

// The m16n8k16 MMA and the two-value packing of either 16-bit type, chosen at compile time.
template <bool BF16>
static __device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    if constexpr (BF16) mma_m16n8k16_bf16(d, a, b); else mma_m16n8k16_f16(d, a, b);
}
template <bool BF16>
static __device__ __forceinline__ unsigned pack2(float lo, float hi) {
    if constexpr (BF16) return pack_bf16x2(lo, hi); else return pack_f16x2(lo, hi);
}

// A bf16 storage value is the top half of a float.
static __device__ __forceinline__ float bf16_to_float(unsigned short x) { return __uint_as_float((unsigned)x << 16); }

// x rounded to TF32 (nearest, ties away from zero) as a register for the MMA, by integer
// arithmetic: add half a TF32 ulp, clear the 13 low bits ("round half ulp, truncate", CUTLASS's
// big/small split). Cheaper than cvt.rna.tf32.f32, which issues at a fraction of the FP32 rate.
static __device__ __forceinline__ unsigned tf32_round(float x) {
    return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}
// 3xTF32 split: x = big + small, big = tf32_round(x), small = x - big exactly in fp32; the MMA
// reads small's top 10 mantissa bits (truncation), an error of at most 2^-21 |x|.
static __device__ __forceinline__ void split_tf32(float x, unsigned& big, unsigned& small) {
    big = tf32_round(x);
    small = __float_as_uint(x - __uint_as_float(big));
}
