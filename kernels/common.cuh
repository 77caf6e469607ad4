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

// ---- cp.async: 16-byte global -> shared copies that complete asynchronously (sm_80+).
// A thread's copies are grouped by cp_async_commit(); cp_async_wait<N>() returns once all but the
// newest N of its groups have landed. A barrier must follow before other threads read them.
// Before sm_80 (and in nvcc's host pass) the copy is a plain synchronous load/store, so the same
// schedule and barriers still compute the right result. The CPU model (tests/ladder_emu/) defines
// ATTNLAB_HOST_EMULATION and supplies versions that really defer each copy to its wait.
#ifndef ATTNLAB_HOST_EMULATION
// The shared-state-space byte address of a pointer into shared memory (what ldmatrix, cp.async,
// mbarrier and TMA instructions take).
// (CUDA compilers only: a plain C++ build of these headers, such as tests/delta_emu's, has no cvta.)
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
static __device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
#endif
static __device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem_src) : "memory");
#else
    *reinterpret_cast<float4*>(smem_dst) = *reinterpret_cast<const float4*>(gmem_src);
#endif
}
// As cp_async16, but writes 16 zero bytes (reading nothing) when !valid: rows past the end.
static __device__ __forceinline__ void cp_async16_zfill(void* smem_dst, const void* gmem_src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    const int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem_src), "r"(src_bytes)
                 : "memory");
#else
    *reinterpret_cast<float4*>(smem_dst) =
        valid ? *reinterpret_cast<const float4*>(gmem_src) : make_float4(0.f, 0.f, 0.f, 0.f);
#endif
}
static __device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
static __device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}
// ---- named barriers (bar.sync / bar.arrive on ids 1-15; id 0 is __syncthreads): a subset of the
// block's warps synchronises (sync), or signals without waiting (arrive), e.g. a producer warp group
// handing a shared-memory buffer to consumer warps. n counts threads, a multiple of 32; every warp
// of the subset takes part with all its threads. Shared-memory writes before an arrive are visible
// to the threads released by the matching sync.
static __device__ __forceinline__ void named_bar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
static __device__ __forceinline__ void named_bar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}
// ---- thread-block clusters (sm_90): the block's rank in its cluster, a barrier over every thread
// of the cluster (release/acquire: shared-memory writes before it, local or to another block's
// shared memory, are visible after it), and a generic pointer to the same offset in another
// block's shared memory (distributed shared memory: plain loads and stores reach it).
static __device__ __forceinline__ unsigned cluster_ctarank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
static __device__ __forceinline__ unsigned cluster_nctarank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}
static __device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The same barrier split in two: a thread arrives (its shared-memory writes, local or remote, are
// released), may work on, then waits for the phase to complete; each thread alternates the two.
static __device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
static __device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
template <class T>
static __device__ __forceinline__ T* cluster_map_shared(T* p, unsigned rank) {
    unsigned long long r;
    asm volatile("mapa.u64 %0, %1, %2;" : "=l"(r) : "l"(reinterpret_cast<unsigned long long>(p)), "r"(rank));
    return reinterpret_cast<T*>(r);
}
#endif  // ATTNLAB_HOST_EMULATION
