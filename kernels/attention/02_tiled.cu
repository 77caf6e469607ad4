// 02 — tiled softmax attention: a block of TILE_ROWS warps (one warp per query row, as in 01)
// shares K/V tiles of TILE_KV rows staged in shared memory. Seed 000, section 4.
//
//   O[b,h,i,:] = sum_j softmax_j(scale * Q[b,h,i,:] . K[b,h,j,:]) * V[b,h,j,:]
//
// What changed from 01_naive: in 01 every warp streams all of K and V from global memory, so a
// head's K/V are read N times (once per query row; L2 absorbs much of it). Here the TILE_ROWS warps
// of a block load each K/V tile into shared memory once and all read it from there, so global
// K/V traffic drops by a factor TILE_ROWS. The arithmetic per key is exactly 01's, in the same
// order (same fmaf chain, same butterfly reduction, same online-softmax update), so the output
// should be bit-identical to the naive kernel's.
//
// Layout: q, k, v, o are contiguous [B, H, N, D] float32.
// Launch: row_tiles = ceil(n / TILE_ROWS); grid = B*H*row_tiles blocks (1-D);
//         block = 32*TILE_ROWS threads; dynamic shared memory = (TILE_ROWS + 2*TILE_KV) * D * 4 B:
//         Q tile [TILE_ROWS][D], K tile [TILE_KV][D], V tile [TILE_KV][D], row stride D.
// Copies global -> shared are scalar (4 bytes per thread per instruction), as in the seed.
#include "common.cuh"

template <int D, int TILE_ROWS, int TILE_KV>
__global__ void attn_tiled(const float* __restrict__ q, const float* __restrict__ k,
                           const float* __restrict__ v, float* __restrict__ o,
                           int n, float scale) {
    static_assert(D % 32 == 0, "head dim must be a multiple of the warp size");
    static_assert(TILE_ROWS >= 1 && TILE_ROWS <= 32, "a block holds 1..32 warps");
    static_assert(TILE_KV >= 1, "a K/V tile holds at least one row");
    constexpr int PER_LANE = D / 32;
    constexpr int THREADS = 32 * TILE_ROWS;

    extern __shared__ __align__(16) float smem[];
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
    // coalesced copy. Rows past n are zero-filled (never used, but never garbage either).
    const int q_valid = min(TILE_ROWS, n - row0) * D;
    for (int idx = threadIdx.x; idx < TILE_ROWS * D; idx += THREADS) {
        q_tile[idx] = idx < q_valid ? q_head[(long long)row0 * D + idx] : 0.0f;
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
        const int valid = rows * D;
        // A tile's rows are contiguous in global memory: one flat coalesced scalar copy.
        const float* k_src = k_head + (long long)kv0 * D;
        const float* v_src = v_head + (long long)kv0 * D;
        // unroll 2: two loads in flight per thread; the same factor in 02-05, so the
        // ladder compares copy widths, not unroll factors (full unrolling only adds registers).
#pragma unroll 2
        for (int idx = threadIdx.x; idx < valid; idx += THREADS) {
            k_tile[idx] = k_src[idx];
            v_tile[idx] = v_src[idx];
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
