// 03 — tiled softmax attention with 128-bit (float4) global -> shared copies. Seed 000, section 5.
//
//   O[b,h,i,:] = sum_j softmax_j(scale * Q[b,h,i,:] . K[b,h,j,:]) * V[b,h,j,:]
//
// What changed from 02_tiled: only the copies into shared memory. Each thread now moves 16 bytes
// per load/store instruction (ld.global.v4.f32 / st.shared.v4.f32) instead of 4, so a tile takes
// a quarter of the load instructions and a quarter of the loop iterations; the bytes moved, the
// shared-memory layout (row stride D) and the maths are unchanged, so the output is still
// bit-identical to 01/02.
// Requirement: q, k, v must be 16-byte aligned (float4 loads fault otherwise); the launcher
// refuses misaligned views. D is a multiple of 32, so every row is a whole number of float4s and
// every tile starts on a 16-byte boundary; partial tiles are guarded at float4 granularity and
// never read past the end of K/V.
//
// Layout: q, k, v, o are contiguous [B, H, N, D] float32.
// Launch: row_tiles = ceil(n / TILE_ROWS); grid = B*H*row_tiles blocks (1-D);
//         block = 32*TILE_ROWS threads; dynamic shared memory = (TILE_ROWS + 2*TILE_KV) * D * 4 B:
//         Q tile [TILE_ROWS][D], K tile [TILE_KV][D], V tile [TILE_KV][D], row stride D.
#include "common.cuh"

template <int D, int TILE_ROWS, int TILE_KV>
__global__ void attn_vec_load(const float* __restrict__ q, const float* __restrict__ k,
                              const float* __restrict__ v, float* __restrict__ o,
                              int n, float scale) {
    static_assert(D % 32 == 0, "head dim must be a multiple of the warp size");
    static_assert(TILE_ROWS >= 1 && TILE_ROWS <= 32, "a block holds 1..32 warps");
    static_assert(TILE_KV >= 1, "a K/V tile holds at least one row");
    constexpr int PER_LANE = D / 32;
    constexpr int THREADS = 32 * TILE_ROWS;
    constexpr int D4 = D / 4;  // float4s per row

    extern __shared__ __align__(16) float smem[];  // 16-byte aligned: float4 stores land here
    float* q_tile = smem;                      // [TILE_ROWS][D]
    float* k_tile = q_tile + TILE_ROWS * D;    // [TILE_KV][D]
    float* v_tile = k_tile + TILE_KV * D;      // [TILE_KV][D]

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
    // coalesced copy, 16 bytes per thread. Rows past n are zero-filled (never used, never garbage).
    const int q_valid4 = min(TILE_ROWS, n - row0) * D4;
    const float4* q_src4 = reinterpret_cast<const float4*>(q_head + (long long)row0 * D);
    float4* q_tile4 = reinterpret_cast<float4*>(q_tile);
    for (int idx = threadIdx.x; idx < TILE_ROWS * D4; idx += THREADS) {
        q_tile4[idx] = idx < q_valid4 ? q_src4[idx] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    // Barrier: a warp's Q row was written by threads of other warps.
    __syncthreads();

    // As in 01: the query row lives in registers, pre-scaled (one multiply fewer per score).
    float q_reg[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) q_reg[i] = q_tile[warp * D + lane + 32 * i] * scale;

    float m = ATTNLAB_NEG_INF;
    float l = 0.0f;
    float acc[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) acc[i] = 0.0f;

    for (int kv0 = 0; kv0 < n; kv0 += TILE_KV) {
        // The last tile may be partial: only its first `rows` rows exist (never read past K/V).
        const int rows = min(TILE_KV, n - kv0);
        const int valid4 = rows * D4;
        // A tile's rows are contiguous in global memory: one flat coalesced copy, one float4
        // (16 bytes) per thread per instruction; the guard is in whole float4s (whole rows).
        const float4* k_src4 = reinterpret_cast<const float4*>(k_head + (long long)kv0 * D);
        const float4* v_src4 = reinterpret_cast<const float4*>(v_head + (long long)kv0 * D);
        float4* k_tile4 = reinterpret_cast<float4*>(k_tile);
        float4* v_tile4 = reinterpret_cast<float4*>(v_tile);
        // unroll 2: two loads in flight per thread; the same factor in 02-05, so the
        // ladder compares copy widths, not unroll factors (full unrolling only adds registers).
#pragma unroll 2
        for (int idx = threadIdx.x; idx < valid4; idx += THREADS) {
            k_tile4[idx] = k_src4[idx];
            v_tile4[idx] = v_src4[idx];
        }
        // Barrier: every warp reads every row of the tile, which other warps wrote.
        __syncthreads();

        if (active) {
            for (int j = 0; j < rows; ++j) {
                const float* k_row = k_tile + j * D;
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
                const float* v_row = v_tile + j * D;
#pragma unroll
                for (int i = 0; i < PER_LANE; ++i) acc[i] = fmaf(p, v_row[lane + 32 * i], acc[i] * alpha);
                m = m_new;
            }
        }
        // Barrier: all warps must be done reading this tile before the next iteration overwrites it.
        __syncthreads();
    }

    if (active) {
        // l >= 1 (the maximum key contributes exp(0) = 1), so the division is safe.
        const float inv_l = 1.0f / l;
        float* o_row = o + head_offset(bh, n, D) + (long long)row * D;
#pragma unroll
        for (int i = 0; i < PER_LANE; ++i) o_row[lane + 32 * i] = acc[i] * inv_l;
    }
}
