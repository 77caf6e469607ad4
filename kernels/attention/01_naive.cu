// 01 — naive softmax attention: one warp per query row, online softmax in one pass, fp32,
// no shared memory. The starting point of seed 000's ladder.
//
//   O[b,h,i,:] = sum_j softmax_j(scale * Q[b,h,i,:] . K[b,h,j,:]) * V[b,h,j,:]
//
// Layout: q, k, v, o are contiguous [B, H, N, D] float32.
// Launch: grid = B*H*N blocks (1-D), block = 32 threads (one warp = one query row).
// Each lane owns the D/32 columns lane, lane+32, ... so every load of a K or V row is one
// coalesced 128-byte transaction per 32 columns.
#include "common.cuh"

template <int D>
__global__ void attn_naive(const float* __restrict__ q, const float* __restrict__ k,
                           const float* __restrict__ v, float* __restrict__ o,
                           int n, float scale) {
    static_assert(D % 32 == 0, "head dim must be a multiple of the warp size");
    constexpr int PER_LANE = D / 32;

    const long long row = blockIdx.x;      // flattened (b*H + h)*N + i
    const long long bh = row / n;
    const int lane = threadIdx.x;

    const float* q_row = q + row * D;
    const float* k_head = k + head_offset(bh, n, D);
    const float* v_head = v + head_offset(bh, n, D);

    // The query row lives in registers for the whole pass; pre-scaling it saves one multiply
    // per score.
    float q_reg[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) q_reg[i] = q_row[lane + 32 * i] * scale;

    // Online softmax state: running max m, running denominator l, unnormalised output acc.
    float m = ATTNLAB_NEG_INF;
    float l = 0.0f;
    float acc[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) acc[i] = 0.0f;

    for (int j = 0; j < n; ++j) {
        const float* k_row = k_head + (long long)j * D;
        float partial = 0.0f;
#pragma unroll
        for (int i = 0; i < PER_LANE; ++i) partial = fmaf(q_reg[i], k_row[lane + 32 * i], partial);
        const float s = warp_allreduce_sum(partial);  // the score, identical on every lane

        // Rescale what we have so far to the new maximum; exp of a non-positive number never
        // overflows. On the first key m = -inf, so alpha = exp(-inf) = 0 wipes nothing real.
        const float m_new = fmaxf(m, s);
        const float alpha = expf(m - m_new);
        const float p = expf(s - m_new);
        l = l * alpha + p;
        const float* v_row = v_head + (long long)j * D;
#pragma unroll
        for (int i = 0; i < PER_LANE; ++i) acc[i] = fmaf(p, v_row[lane + 32 * i], acc[i] * alpha);
        m = m_new;
    }

    // l >= 1 after the first key (the maximum contributes exp(0) = 1), so the division is safe.
    const float inv_l = 1.0f / l;
    float* o_row = o + row * D;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) o_row[lane + 32 * i] = acc[i] * inv_l;
}
