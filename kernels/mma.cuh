// Warp-level tensor-core helpers shared by the attention kernels (kernels/attention/09_* onwards)
// and the delta kernels (kernels/delta/06_* onwards):
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
// The same loads at a shared-space byte address plus a byte offset: with a per-lane base in a
// register and `off` a constant once the caller's loops are unrolled, ptxas folds the offset into
// the instruction's immediate ([R+imm]), so the loads need no address arithmetic at all
// (kernels/attention/10f); common.cuh's smem_u32 gives the shared-space address of a pointer.
static __device__ __forceinline__ void ldmatrix_x4_at(unsigned (&r)[4], unsigned addr, unsigned off) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr + off));
}
static __device__ __forceinline__ void ldmatrix_x4_trans_at(unsigned (&r)[4], unsigned addr, unsigned off) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr + off));
}

// The 8 x 8 matrix of 16-bit values held one register per lane (lane l: row l / 4, elements 2(l % 4),
// +1, the layout of an ldmatrix quarter), transposed in registers: lane l receives row l / 4 of the
// transpose (column l / 4 of the original). sm_75+.
static __device__ __forceinline__ unsigned movmatrix_trans(unsigned x) {
    unsigned r;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(x));
    return r;
}
// stmatrix.x4.trans (sm_90): four 8 x 8 matrices of 16-bit values, held as ldmatrix leaves them
// (register i = matrix i; lane l: row l / 4, elements 2(l % 4), +1), stored transposed: lane 8i + j
// gives the shared-space byte address of row j of matrix i's transpose (column j of matrix i, 16 bytes).
static __device__ __forceinline__ void stmatrix_x4_trans(unsigned addr, const unsigned (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
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

// One 16-byte chunk of 16-bit values (a uint4 that the CPU model compiles too), and half of one.
struct alignas(16) U4 { unsigned x, y, z, w; };
struct alignas(8) U2 { unsigned x, y; };

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
// 3xBF16 split of a pair: (x0, x1) -> hi = bf16 pair nearest to it, lo = bf16 pair nearest to the
// remainder, so x ~= hi + lo to 16 significant bits (relative error <= 2^-17). Three m16n8k16 MMAs,
// a_lo b_hi + a_hi b_lo + a_hi b_hi, then give a product to ~2^-16 at twice TF32's MMA rate.
static __device__ __forceinline__ void split_bf16x2(float x0, float x1, unsigned& hi, unsigned& lo) {
    hi = pack_bf16x2(x0, x1);
    lo = pack_bf16x2(x0 - __uint_as_float(hi << 16), x1 - __uint_as_float(hi & 0xffff0000u));
}

// ---- 3xBF16 on operands kept in shared memory as split bf16 pairs (kernels/delta/06 onwards).
// An operand matrix is two arrays of 32-bit words, hi and lo, each word a pair of bf16 values
// adjacent along the MMA's k dimension ([m][k/2] for A, [n][k/2] for B, i.e. B transposed).
// d += A B with A, B given as (hi, lo) bf16 fragments: three MMAs, small terms first.
static __device__ __forceinline__ void mma_3xbf16(float (&d)[4], const unsigned (&ah)[4], const unsigned (&al)[4],
                                                  const unsigned (&bh)[2], const unsigned (&bl)[2]) {
    mma_m16n8k16_bf16(d, al, bh);
    mma_m16n8k16_bf16(d, ah, bl);
    mma_m16n8k16_bf16(d, ah, bh);
}

// Fragments from arrays of bf16 pairs (32-bit words, row stride ld words, 16-byte aligned rows),
// by ldmatrix: lane l gives the address of row l % 8 of 8 x 8 matrix l / 8 (8 rows x 4 words).
// A (16 x 16 at s, rows m, words along k): matrices (rows 0-7 | 8-15) x (words 0-3 | 4-7).
static __device__ __forceinline__ void ldm_a16(const unsigned* s, int ld, int lane, unsigned (&a)[4]) {
    ldmatrix_x4(a, s + (((lane >> 3) & 1) * 8 + (lane & 7)) * ld + (lane >> 4) * 4);
}
// B of two 8-column tiles, stored transposed ([n][k/2], 16 rows n at s): b[0..1] tile 0, b[2..3] tile 1.
static __device__ __forceinline__ void ldm_b16x2(const unsigned* s, int ld, int lane, unsigned (&b)[4]) {
    ldmatrix_x4(b, s + ((lane >> 4) * 8 + (lane & 7)) * ld + ((lane >> 3) & 1) * 4);
}
// B of one 8-column tile (8 rows n at s).
static __device__ __forceinline__ void ldm_b16x1(const unsigned* s, int ld, int lane, unsigned (&b)[2]) {
    ldmatrix_x2(b, s + (lane & 7) * ld + ((lane >> 3) & 1) * 4);
}
// Word offset of (row r, word w) in an array of LD-word rows whose 16-byte chunks are XOR-swizzled
// by row: chunk w / 4 is stored at chunk (w / 4) ^ ((r / 8) % 4). Eight consecutive rows (one
// ldmatrix matrix) share the XOR, so ldmatrix sees plain padded rows, while 16-byte stores from
// lanes holding rows 8 apart spread over more banks (kernels/delta/10 and 11: Kd^T).
template <int LD>
static __device__ __forceinline__ int kdt_word(int r, int w) {
    return r * LD + ((((w >> 2) ^ (r >> 3)) & 3) << 2) + (w & 3);
}
// d += A B for (hi, lo) fragments where B is one tile of a ldm_b16x2 pair (half = 0 or 1).
static __device__ __forceinline__ void mma_3xbf16_half(float (&d)[4], const unsigned (&ah)[4], const unsigned (&al)[4],
                                                       const unsigned (&bh)[4], const unsigned (&bl)[4], int half) {
    const unsigned h2[2] = {bh[2 * half], bh[2 * half + 1]}, l2[2] = {bl[2 * half], bl[2 * half + 1]};
    mma_3xbf16(d, ah, al, h2, l2);
}

// Store a 16 x 8 accumulator tile D (rows m0.., columns n0..) transposed and split: word
// [n][m/2] of H and L holds (D[m][n], D[m+1][n]). Rows m and m+1 live in lanes g and g^1
// (lane ^ 4): even-g lanes store rows g, g+1; odd-g lanes store rows g+7, g+8.
static __device__ __forceinline__ void store_acc_split_t(unsigned* H, unsigned* L, int ld, int m0, int n0,
                                                         const float (&d)[4], int g, int t) {
    float p[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) p[e] = __shfl_xor_sync(ATTNLAB_FULL_MASK, d[e], 4);
    const bool even = (g & 1) == 0;
    const int m = even ? m0 + g : m0 + g + 7;                     // first row of this lane's pairs
    const float a0 = even ? d[0] : p[2], b0 = even ? p[0] : d[2];   // column n0 + 2t
    const float a1 = even ? d[1] : p[3], b1 = even ? p[1] : d[3];   // column n0 + 2t + 1
    unsigned h, l;
    split_bf16x2(a0, b0, h, l);
    H[(n0 + 2 * t) * ld + m / 2] = h;
    L[(n0 + 2 * t) * ld + m / 2] = l;
    split_bf16x2(a1, b1, h, l);
    H[(n0 + 2 * t + 1) * ld + m / 2] = h;
    L[(n0 + 2 * t + 1) * ld + m / 2] = l;
}
// Store a 16 x 8 accumulator tile row-major and split: word [m][n/2] holds (D[m][n], D[m][n+1]).
static __device__ __forceinline__ void store_acc_split(unsigned* H, unsigned* L, int ld, int m0, int n0,
                                                       const float (&d)[4], int g, int t) {
    unsigned h, l;
    split_bf16x2(d[0], d[1], h, l);
    H[(m0 + g) * ld + n0 / 2 + t] = h;
    L[(m0 + g) * ld + n0 / 2 + t] = l;
    split_bf16x2(d[2], d[3], h, l);
    H[(m0 + g + 8) * ld + n0 / 2 + t] = h;
    L[(m0 + g + 8) * ld + n0 / 2 + t] = l;
}
