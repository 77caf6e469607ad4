// 03 — chunked KDA, stage 2 of 3: the UT / WY transform of each chunk.
//
// Solve the unit lower-triangular systems (I + Akk) W = Kbg and (I + Akk) U = beta v for one chunk
// (one block per (chunk, head, batch)). W overwrites Kbg in place. Both right-hand sides have
// their columns solved independently, so thread t owns whole columns (CPT of them) in registers
// and runs the right-looking forward substitution
//     for j = 0 .. C-2:  x_i -= Akk[i, j] x_j   for every i > j
// whose inner updates are independent of each other (instruction-level parallelism), instead of
// the dot-product form x_i -= sum_j Akk[i, j] x_j whose sum is one long dependent chain.
//
// Akk's strict lower triangle is kept in shared memory column by column, each column padded to
// start at a row multiple of 4, so one float4 load (a broadcast: every thread reads the same
// address) gives four multipliers. Loop bounds are compile-time, the loops are unrolled and the
// columns stay in registers.
#include "delta_common.cuh"

// First stored row of column j: j+1 rounded down to a multiple of 4.
static __host__ __device__ constexpr int kda_solve_row0(int j) { return ((j + 1) / 4) * 4; }
// Offset of column j in the packed store: sum over j' < j of (C - row0(j')).
static __host__ __device__ constexpr int kda_solve_col_offset(int C, int j) {
    return C * j - 4 * (2 * (j / 4) * (j / 4 - 1) + ((j % 4) + 1) * (j / 4));
}

template <int K, int V, int C, int CPT>
__global__ void __launch_bounds__((K + V) / CPT)
kda_chunk_solve(const float* __restrict__ Akk,    // [B, H, NT, C, C]
                float* __restrict__ Kbg,          // [B, H, Tp, K]   in: beta k e^G, out: W
                const float* __restrict__ v,      // [B, T, H, V]
                const float* __restrict__ beta,   // [B, T, H]
                float* __restrict__ U,            // [B, H, Tp, V]
                int T, int H) {
    static_assert(C == 16 || C == 32 || C == 64 || C == 128, "chunk size must be 16, 32, 64 or 128");
    static_assert((K + V) % CPT == 0 && ((K + V) / CPT) % 32 == 0, "threads must be whole warps");
    static_assert(K % 32 == 0, "K must be a multiple of 32 (a warp never straddles W and U)");
    constexpr int NTH = (K + V) / CPT;
    constexpr int PACKED = kda_solve_col_offset(C, C);

    __shared__ __align__(16) float sA[PACKED];
    __shared__ float sBeta[C];

    const int tid = threadIdx.x;
    const int n = blockIdx.x;
    const int h = blockIdx.y;
    const int b = blockIdx.z;
    const int NT = gridDim.x;
    const long long TT = T;
    const long long t0 = (long long)n * C;
    const long long bh = (long long)b * H + h;
    const long long Tp = (long long)NT * C;

    const float* A = Akk + (bh * NT + n) * (long long)(C * C);
    // Rows of A are read contiguously (coalesced) and scattered into the column store.
    for (int idx = tid; idx < C * C; idx += NTH) {
        const int i = idx / C;
        const int j = idx % C;
        const int r0 = kda_solve_row0(j);
        if (j < C - 1 && i >= r0) sA[kda_solve_col_offset(C, j) + i - r0] = j < i ? A[idx] : 0.0f;
    }
    for (int i = tid; i < C; i += NTH) {
        const long long t = t0 + i;
        sBeta[i] = t < TT ? beta[(b * TT + t) * H + h] : 0.0f;
    }
    __syncthreads();   // A and beta are staged before any thread starts its columns

    float x[CPT][C];
#pragma unroll
    for (int r = 0; r < CPT; ++r) {
        const int col = tid + r * NTH;
#pragma unroll
        for (int i = 0; i < C; ++i) {
            const long long t = t0 + i;
            if (col < K) {
                x[r][i] = Kbg[(bh * Tp + t) * K + col];
            } else {
                x[r][i] = t < TT ? sBeta[i] * v[kda_bthd(b, t, h, col - K, TT, H, V)] : 0.0f;
            }
        }
    }

#pragma unroll
    for (int j = 0; j < C - 1; ++j) {
        const int r0 = kda_solve_row0(j);
        const float* colj = sA + kda_solve_col_offset(C, j) - r0;
#pragma unroll
        for (int i4 = r0; i4 < C; i4 += 4) {
            const float4 a = kda_ld4(colj + i4);
            const float av[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = i4 + e;
                if (i > j) {
#pragma unroll
                    for (int r = 0; r < CPT; ++r) x[r][i] = fmaf(-av[e], x[r][j], x[r][i]);
                }
            }
        }
    }

#pragma unroll
    for (int r = 0; r < CPT; ++r) {
        const int col = tid + r * NTH;
#pragma unroll
        for (int i = 0; i < C; ++i) {
            const long long row = bh * Tp + t0 + i;
            if (col < K) Kbg[row * K + col] = x[r][i];
            else U[row * V + col - K] = x[r][i];
        }
    }
}
