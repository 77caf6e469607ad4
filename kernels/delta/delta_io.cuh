// Input/output element types of the 3xBF16 delta kernels (07, 10): fp32, or bf16 storage with fp32
// arithmetic (issue 13's bf16-I/O path: q, k, v, g, beta and o in bf16; the state stays fp32).
// A bf16 value is the top half of an fp32 one, so widening is exact; narrowing rounds to nearest
// even (cvt.rn.bf16x2).
#pragma once

#include "mma.cuh"

template <bool BF> struct KdaIn { using T = float; };
template <> struct KdaIn<true> { using T = unsigned short; };

// Two adjacent elements as loaded, before widening: a float2, or one word holding two bf16.
// Kernels that load a chunk ahead keep this raw form in registers and widen it only where the
// values are used: widening right after the load would make the thread wait for the load there
// (on the bf16 path of 10 that wait, before a barrier, was a 2.3x slowdown: Nsight Compute's
// long-scoreboard stalls; fp32 has nothing to widen, so its code is unchanged).
template <bool BF> struct KdaRaw2 { using T = float2; };
template <> struct KdaRaw2<true> { using T = unsigned; };

// p 8-byte aligned for fp32, 4-byte for bf16
template <bool BF>
static __device__ __forceinline__ typename KdaRaw2<BF>::T kda_raw2(const typename KdaIn<BF>::T* p) {
    if constexpr (BF) return *reinterpret_cast<const unsigned*>(p);
    else return *reinterpret_cast<const float2*>(p);
}
template <bool BF>
static __device__ __forceinline__ typename KdaRaw2<BF>::T kda_raw2_zero() {
    if constexpr (BF) return 0u; else return make_float2(0.f, 0.f);
}
template <bool BF>
static __device__ __forceinline__ float2 kda_widen2(typename KdaRaw2<BF>::T w) {
    if constexpr (BF) return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
    else return w;
}
template <bool BF>
static __device__ __forceinline__ float kda_widen1(typename KdaIn<BF>::T x) {
    if constexpr (BF) return bf16_to_float(x); else return x;
}
// Two adjacent elements as fp32, loaded and widened at once.
template <bool BF>
static __device__ __forceinline__ float2 kda_ld2(const typename KdaIn<BF>::T* p) {
    return kda_widen2<BF>(kda_raw2<BF>(p));
}
template <bool BF>
static __device__ __forceinline__ float kda_ld1(const typename KdaIn<BF>::T* p) {
    return kda_widen1<BF>(*p);
}
// One element from fp32 (rounded to bf16 on the bf16 path).
template <bool BF>
static __device__ __forceinline__ void kda_st1(typename KdaIn<BF>::T* p, float a) {
    if constexpr (BF) *p = (unsigned short)(pack_bf16x2(a, 0.f) & 0xffffu);
    else *p = a;
}
// Two adjacent elements from fp32 (rounded to bf16 on the bf16 path).
template <bool BF>
static __device__ __forceinline__ void kda_st2(typename KdaIn<BF>::T* p, float a, float b) {
    if constexpr (BF) *reinterpret_cast<unsigned*>(p) = pack_bf16x2(a, b);
    else *reinterpret_cast<float2*>(p) = make_float2(a, b);
}
