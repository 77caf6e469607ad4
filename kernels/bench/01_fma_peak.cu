// FP32 FMA throughput: the compute ceiling of the roofline, measured rather than read off a datasheet.
//
// Each thread runs FMA_CHAINS independent dependency chains x = x * a + b. One chain alone would
// stall on the FMA latency (~4 cycles) every instruction; with 8 chains per thread and several warps
// per scheduler there is always an independent FMA ready to issue, so the FP32 pipes, not latency,
// set the pace. The inner loop is fully unrolled (FMA_UNROLL x FMA_CHAINS FMAs per trip) so the loop
// counter, compare and branch are ~2 % of issued instructions.
//
// FLOPs per launch = 2 * gridDim.x * blockDim.x * iters * FMA_CHAINS * FMA_UNROLL
// (attnlab.roofline.fma_flops); the host must use the same FMA_CHAINS / FMA_UNROLL (read back from
// fma_peak_config so the two can never disagree).
//
// `a` and `b` are kernel arguments, so the compiler cannot fold the chains into a closed form; the
// sum of the chains is stored, so none of them is dead code. With |a| < 1 the chains converge to
// b / (1 - a): no overflow, no NaN, whatever `iters` is.

#ifndef FMA_CHAINS
#define FMA_CHAINS 8
#endif
#ifndef FMA_UNROLL
#define FMA_UNROLL 16
#endif

extern "C" __global__ void fma_peak(float* __restrict__ out, float a, float b, int iters) {
    const int tid = blockIdx.x * blockDim.x + threadIdx.x;
    float x[FMA_CHAINS];
#pragma unroll
    for (int c = 0; c < FMA_CHAINS; ++c) {
        // distinct start values per thread and chain: nothing for the compiler to share
        x[c] = (float)(tid + c) * 1.0e-7f;
    }
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int u = 0; u < FMA_UNROLL; ++u) {
#pragma unroll
            for (int c = 0; c < FMA_CHAINS; ++c) {
                x[c] = fmaf(x[c], a, b);
            }
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < FMA_CHAINS; ++c) {
        s += x[c];
    }
    out[tid] = s;   // one store per thread: negligible next to iters * 128 FMAs
}

// The compile-time shape of the loop, so the host computes FLOPs from what was actually compiled.
extern "C" __global__ void fma_peak_config(int* __restrict__ out) {
    out[0] = FMA_CHAINS;
    out[1] = FMA_UNROLL;
}
