// 04b — tiled, float4, padded softmax attention with ping-pong (double-buffered) K/V tiles filled
// by cp.async. Seed 000's failed side experiment (section 7), revisited on sm_80+.
//
//   O[b,h,i,:] = sum_j softmax_j(scale * Q[b,h,i,:] . K[b,h,j,:]) * V[b,h,j,:]
//
// What changed from 04_vec_padded: shared memory holds two K/V stages. While the warps compute on
// tile t in one stage, the copies of tile t+1 into the other stage are already in flight, so the
// global-memory latency of a tile hides behind the maths of the previous one. On sm_80+ the copies
// are cp.async.cg (16 bytes, global -> shared directly, no register staging, bypassing L1); the
// thread issues them and moves on. Before sm_80 there is no cp.async: the same schedule runs with
// plain float4 copies, which stall the issuing thread until its loads return — the seed's Turing
// experiment, which it found 7-9 % slower (no cp.async, and twice the shared memory per block).
// One barrier per tile instead of two: the barrier that publishes tile t also proves every warp
// has finished tile t-1, so its stage can be refilled right after it.
// Requirement: q, k, v must be 16-byte aligned (float4 / cp.async 16-byte copies); the launcher
// refuses misaligned views. Partial tiles are guarded in whole float4s and never read past K/V.
//
// Layout: q, k, v, o are contiguous [B, H, N, D] float32.
// Launch: row_tiles = ceil(n / TILE_ROWS); grid = B*H*row_tiles blocks (1-D);
//         block = 32*TILE_ROWS threads; dynamic shared memory = (TILE_ROWS + 4*TILE_KV)*(D + 4)*4 B:
//         Q tile [TILE_ROWS][D+4], then stage 0 K, V [TILE_KV][D+4] each, then stage 1 K, V.
#include "common.cuh"

// cp.async16 / cp_async_commit / cp_async_wait<0> come from common.cuh (plain copies before sm_80).

// Issue the copies of one K/V tile (`rows` valid rows, contiguous in global memory) into a stage
// with row stride STRIDE. Guarded in whole float4s: a partial tile never reads past the end of K/V.
template <int D4, int STRIDE, int THREADS>
static __device__ __forceinline__ void issue_kv_tile(float* k_dst, float* v_dst, const float* k_src,
                                                     const float* v_src, int rows) {
    const int valid4 = rows * D4;
    // unroll 2: two loads in flight per thread; the same factor in 02-05, so the
    // ladder compares copy widths, not unroll factors (full unrolling only adds registers).
#pragma unroll 2
    for (int idx = threadIdx.x; idx < valid4; idx += THREADS) {
        const int at = (idx / D4) * STRIDE + (idx % D4) * 4;
        cp_async16(k_dst + at, k_src + 4 * idx);
        cp_async16(v_dst + at, v_src + 4 * idx);
    }
}

template <int D, int TILE_ROWS, int TILE_KV>
__global__ void attn_double_buffer(const float* __restrict__ q, const float* __restrict__ k,
                                   const float* __restrict__ v, float* __restrict__ o,
                                   int n, float scale) {
    static_assert(D % 32 == 0, "head dim must be a multiple of the warp size");
    static_assert(TILE_ROWS >= 1 && TILE_ROWS <= 32, "a block holds 1..32 warps");
    static_assert(TILE_KV >= 1, "a K/V tile holds at least one row");
    constexpr int PER_LANE = D / 32;
    constexpr int THREADS = 32 * TILE_ROWS;
    constexpr int D4 = D / 4;  // float4s per row
    constexpr int STRIDE = D + 4;  // shared-memory row stride in floats (a multiple of 4)

    extern __shared__ __align__(16) float smem[];  // 16-byte aligned: float4 stores land here
    float* q_tile = smem;                                  // [TILE_ROWS][D + 4]
    float* stages = q_tile + TILE_ROWS * STRIDE;           // 2 x (K [TILE_KV][D + 4], V [TILE_KV][D + 4])
    constexpr int STAGE = 2 * TILE_KV * STRIDE;            // floats per stage (K then V)

    const int row_tiles = (n + TILE_ROWS - 1) / TILE_ROWS;
    const long long bh = blockIdx.x / row_tiles;
    const int row0 = (blockIdx.x % row_tiles) * TILE_ROWS;
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int row = row0 + warp;
    // Warps past the last row (n not a multiple of TILE_ROWS) still help load tiles and reach
    // every barrier; they only skip the maths and the store. The flag is warp-uniform, so the
    // shuffles below always run with all 32 lanes present.
    const bool active = row < n;

    const float* q_head = q + head_offset(bh, n, D);
    const float* k_head = k + head_offset(bh, n, D);
    const float* v_head = v + head_offset(bh, n, D);

    // Q tile: the block's TILE_ROWS query rows are contiguous in global memory, so one flat,
    // coalesced read, 16 bytes per thread; in shared memory each row starts at a multiple of
    // STRIDE. Rows past n are zero-filled (never used, never garbage).
    const int q_valid4 = min(TILE_ROWS, n - row0) * D4;
    const float4* q_src4 = reinterpret_cast<const float4*>(q_head + (long long)row0 * D);
    for (int idx = threadIdx.x; idx < TILE_ROWS * D4; idx += THREADS) {
        float4* dst = reinterpret_cast<float4*>(q_tile + (idx / D4) * STRIDE + (idx % D4) * 4);
        *dst = idx < q_valid4 ? q_src4[idx] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    // Start fetching K/V tile 0 into stage 0 now, so it overlaps the Q barrier and register setup.
    const int kv_tiles = (n + TILE_KV - 1) / TILE_KV;
    issue_kv_tile<D4, STRIDE, THREADS>(stages, stages + TILE_KV * STRIDE, k_head, v_head, min(TILE_KV, n));
    cp_async_commit();

    // Barrier: a warp's Q row was written by threads of other warps.
    __syncthreads();

    // As in 01: the query row lives in registers, pre-scaled (one multiply fewer per score).
    float q_reg[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) q_reg[i] = q_tile[warp * STRIDE + lane + 32 * i] * scale;

    float m = ATTNLAB_NEG_INF;
    float l = 0.0f;
    float acc[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) acc[i] = 0.0f;

    for (int t = 0; t < kv_tiles; ++t) {
        const int kv0 = t * TILE_KV;
        // The last tile may be partial: only its first `rows` rows exist.
        const int rows = min(TILE_KV, n - kv0);
        const float* k_tile = stages + (t & 1) * STAGE;
        const float* v_tile = k_tile + TILE_KV * STRIDE;

        // This thread's copies of tile t have landed (they are the only group in flight) ...
        cp_async_wait<0>();
        // Barrier, two jobs: (1) every thread's copies of tile t are now visible to all warps;
        // (2) every warp has finished computing tile t-1, so its stage (the other one) is free.
        __syncthreads();

        // Prefetch tile t+1 into the free stage; it lands while we compute tile t below.
        if (t + 1 < kv_tiles) {
            float* k_next = stages + ((t + 1) & 1) * STAGE;
            issue_kv_tile<D4, STRIDE, THREADS>(k_next, k_next + TILE_KV * STRIDE,
                                               k_head + (long long)(kv0 + TILE_KV) * D,
                                               v_head + (long long)(kv0 + TILE_KV) * D,
                                               min(TILE_KV, n - kv0 - TILE_KV));
            cp_async_commit();
        }

        if (active) {
            for (int j = 0; j < rows; ++j) {
                const float* k_row = k_tile + j * STRIDE;
                float partial = 0.0f;
#pragma unroll
                for (int i = 0; i < PER_LANE; ++i) partial = fmaf(q_reg[i], k_row[lane + 32 * i], partial);
                const float s = warp_allreduce_sum(partial);  // identical on every lane

                // Online softmax across keys and therefore across tiles: the running (m, l, acc)
                // carry over from one tile to the next unchanged, exactly as in 01.
                const float m_new = fmaxf(m, s);
                const float alpha = expf(m - m_new);
                const float p = expf(s - m_new);
                l = l * alpha + p;
                const float* v_row = v_tile + j * STRIDE;
#pragma unroll
                for (int i = 0; i < PER_LANE; ++i) acc[i] = fmaf(p, v_row[lane + 32 * i], acc[i] * alpha);
                m = m_new;
            }
        }
        // No barrier here: the stage of tile t is refilled only after the next iteration's barrier.
    }

    if (active) {
        // l >= 1 (the maximum key contributes exp(0) = 1), so the division is safe.
        const float inv_l = 1.0f / l;
        float* o_row = o + head_offset(bh, n, D) + (long long)row * D;
#pragma unroll
        for (int i = 0; i < PER_LANE; ++i) o_row[lane + 32 * i] = acc[i] * inv_l;
    }
}
