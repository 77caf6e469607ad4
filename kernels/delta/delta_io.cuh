// Input/output element types of the 3xBF16 delta kernels (07, 10): fp32, or bf16 storage with fp32
// arithmetic (issue 13's bf16-I/O path: q, k, v, g, beta and o in bf16; the state stays fp32).
// A bf16 value is the top half of an fp32 one, so widening is exact; narrowing rounds to nearest
// even (cvt.rn.bf16x2).
#pragma once

#include "mma.cuh"

template <bool BF> struct KdaIn { using T = float; };
template <> struct KdaIn<true> { using T = unsigned short; };

// Two adjacent elements (p 8-byte aligned for fp32, 4-byte for bf16) as fp32.
template <bool BF>
static __device__ __forceinline__ float2 kda_ld2(const typename KdaIn<BF>::T* p) {
    if constexpr (BF) {
        const unsigned w = *reinterpret_cast<const unsigned*>(p);
        return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
    } else {
        return *reinterpret_cast<const float2*>(p);
    }
}
template <bool BF>
static __device__ __forceinline__ float kda_ld1(const typename KdaIn<BF>::T* p) {
    if constexpr (BF) return bf16_to_float(*p); else return *p;
}
// Two adjacent elements from fp32 (rounded to bf16 on the bf16 path).
template <bool BF>
static __device__ __forceinline__ void kda_st2(typename KdaIn<BF>::T* p, float a, float b) {
    if constexpr (BF) *reinterpret_cast<unsigned*>(p) = pack_bf16x2(a, b);
    else *reinterpret_cast<float2*>(p) = make_float2(a, b);
}
