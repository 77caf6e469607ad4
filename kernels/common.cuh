// Shared device helpers for attnlab kernels.
//
// Everything here must compile under both NVRTC (CuPy's runtime compiler, which has no host
// headers) and nvcc (the static build), so no #include of system headers.
#pragma once

#define ATTNLAB_FULL_MASK 0xffffffffu

// -infinity without <math.h> (NVRTC has no host headers): the IEEE-754 bit pattern.
#define ATTNLAB_NEG_INF __int_as_float(0xff800000)

// Butterfly all-reduce: after 5 xor-shuffles every lane holds the same sum, summed in the same
// order on every lane, so the result is bit-identical across the warp (no broadcast needed).
static __device__ __forceinline__ float warp_allreduce_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        x += __shfl_xor_sync(ATTNLAB_FULL_MASK, x, offset);
    }
    return x;
}

static __device__ __forceinline__ float warp_allreduce_max(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        x = fmaxf(x, __shfl_xor_sync(ATTNLAB_FULL_MASK, x, offset));
    }
    return x;
}

// Offset of head `bh` (a flattened batch*head index) in a contiguous [B, H, N, D] tensor.
// 64-bit because B*H*N*D passes 2^31 for large grids (e.g. B*H = 1000, N = 4097, D = 128).
static __device__ __forceinline__ long long head_offset(long long bh, int n, int d) {
    return bh * (long long)n * (long long)d;
}
