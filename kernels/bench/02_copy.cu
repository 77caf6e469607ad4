// Device-memory copy bandwidth: the bandwidth ceiling of the roofline.
//
// dst[i] = src[i] over n float4 (16-byte) elements, grid-stride. Bytes moved per launch =
// read + written = 2 * 16 * n (attnlab.roofline.copy_bytes). The buffers must be much larger
// than L2 (the host uses >= 8x L2) so the copy measures DRAM, not the cache.
//
// 128-bit accesses: a warp moves 512 contiguous bytes per instruction (4 full 128-byte lines),
// the fewest instructions per byte. Each thread keeps COPY_UNROLL independent loads in flight
// before it stores: DRAM latency is ~0.5-1 us, so at ~4.8 TB/s several MB must be in flight
// GPU-wide, more than one 16-byte load per resident thread provides.
// All loads of a trip are issued before any store (restrict: src and dst do not alias).

#ifndef COPY_UNROLL
#define COPY_UNROLL 4
#endif

// 256 threads per block (the host launches exactly that). The min-blocks hint caps registers at
// 32 per thread so a full SM's worth of threads is resident (2048 threads on sm_80+/sm_90, 1024 on
// sm_75): without it ptxas takes 34 registers on sm_90 and occupancy drops to 75 %.
#define COPY_THREADS 256
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define COPY_MIN_BLOCKS 8
#else
#define COPY_MIN_BLOCKS 4
#endif

extern "C" __global__ void __launch_bounds__(COPY_THREADS, COPY_MIN_BLOCKS) copy_f4(const float4* __restrict__ src, float4* __restrict__ dst,
                                   long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long base = (long long)blockIdx.x * blockDim.x + threadIdx.x; base < n;
         base += stride * COPY_UNROLL) {
        float4 r[COPY_UNROLL];
#pragma unroll
        for (int u = 0; u < COPY_UNROLL; ++u) {
            const long long i = base + u * stride;
            if (i < n) r[u] = src[i];
        }
#pragma unroll
        for (int u = 0; u < COPY_UNROLL; ++u) {
            const long long i = base + u * stride;
            if (i < n) dst[i] = r[u];
        }
    }
}
