// 11c — 11b with the softmax overlapping the tensor cores: while the MMAs of O += P V for tile
// j - 1 run, the warpgroup computes the softmax of tile j.
//
//   O[b,h,i,:] = sum_j softmax_j(scale * Q[b,h,i,:] . K[b,h,j,:]) * V[b,h,j,:]   (j <= i if CAUSAL)
//
// What changed from 11b (per tile: S MMAs, wait, softmax with the tensor cores idle, P V MMAs,
// wait, so the exponentials and the MMAs take turns): wgmma is asynchronous, so the next product
// can be in flight while the threads compute. Per tile j >= 1:
//   wait full[s_j]; issue S_j = Q K_j^T (commit); issue O += P_{j-1} V_{j-1} (commit)
//   wait_group 1: S_j has landed (P V of tile j - 1 may still run)
//   mask, online softmax of S_j in fp32 registers (row max, alpha_j, the exponentials, l)
//   wait_group 0: P V of tile j - 1 done; O *= alpha_j; P_j packed to 16 bits (its registers were
//   the A operand of the MMAs just finished, so they are written only now)
//   release tile j - 1's stage (__syncthreads; thread 0 requests tile j - 1 + STAGES there)
// Tile 0 runs S and its softmax alone; after the loop the last P V runs alone. The price: tile
// j - 1's stage is held one step longer (its V is read during step j), so the copy of tile
// j - 1 + STAGES starts later: with STAGES = 2 it is requested just before it is needed.
// Everything else as 11a/11b (layouts, descriptors, masking, softmax, NaN rows).
// Shared memory (dynamic, aligned up to 1024 B): Q [D/64][BM][64], then per stage K [D/64][BN][64]
// and V [D/64][BN][64], 16-bit: smem_bytes() below (+1024 for the alignment).
// Template: D in {64, 128}; BN in {64, 128}; STAGES in {2, 3}; BF16 (else fp16); CAUSAL.
#include "common.cuh"
#include "mma.cuh"
#include "hopper.cuh"

namespace attn11c {
constexpr int BM = 64;   // query rows per block: one warpgroup's m64
__host__ __device__ constexpr int smem_bytes(int D, int BN, int STAGES) {
    return 2 * D * (BM + 2 * STAGES * BN) + 1024;
}
}  // namespace attn11c

template <int D, int BN, int STAGES, bool BF16, bool CAUSAL>
__global__ void __launch_bounds__(128)
attn_wgmma_overlap(const __grid_constant__ TmaMap tq, const __grid_constant__ TmaMap tk,
               const __grid_constant__ TmaMap tv, unsigned short* __restrict__ o, int n, float scale) {
    using attn11c::BM;
    static_assert(D == 64 || D == 128, "head dim 64 or 128");
    static_assert(BN == 64 || BN == 128, "BN 64 or 128");
    static_assert(STAGES >= 2 && STAGES <= 3, "2 or 3 stages (one is 11a)");
    constexpr int DC = D / 64;                      // 64-column chunks (128-byte swizzle rows)
    constexpr unsigned Q_BYTES = 2u * BM * D, KV_BYTES = 2u * BN * D;   // one tile of Q; of K (or V)

    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) unsigned long long bar_q, bar_full[STAGES];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;      // swizzled tiles: 1024-aligned
    const unsigned sq = base;
    auto sk = [&](int s) { return base + Q_BYTES + 2u * s * KV_BYTES; };
    auto sv = [&](int s) { return base + Q_BYTES + 2u * s * KV_BYTES + KV_BYTES; };
    const unsigned bq = smem_u32(&bar_q);
    auto bfull = [&](int s) { return smem_u32(&bar_full[s]); };

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int bh = blockIdx.y;
    // CAUSAL: the longest row blocks first (they have the most tiles), so the tail of the grid is short.
    const int mblk = CAUSAL ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int m0 = mblk * BM;
    int n_tiles = (n + BN - 1) / BN;
    if (CAUSAL) n_tiles = min(n_tiles, (m0 + BM + BN - 1) / BN);   // tiles with a key <= the last row

    if (tid == 0) {
        mbar_init(bq, 1);
        for (int s = 0; s < STAGES; ++s) mbar_init(bfull(s), 1);
        mbar_init_fence();
    }
    __syncthreads();
    if (tid == 0) {
        mbar_arrive_expect_tx(bq, Q_BYTES);
        for (int c = 0; c < DC; ++c) tma_load_3d(sq + c * (2 * BM * 64), &tq, 64 * c, m0, bh, bq);
        for (int s = 0; s < STAGES && s < n_tiles; ++s) {
            mbar_arrive_expect_tx(bfull(s), 2 * KV_BYTES);
            for (int c = 0; c < DC; ++c) {
                tma_load_3d(sk(s) + c * (2 * BN * 64), &tk, 64 * c, s * BN, bh, bfull(s));
                tma_load_3d(sv(s) + c * (2 * BN * 64), &tv, 64 * c, s * BN, bh, bfull(s));
            }
        }
    }

    const float sl2 = scale * 1.4426950408889634f;
    float acc[D / 2];                  // O, this thread's accumulators (layout: hopper.cuh)
#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc[i] = 0.0f;
    float m_run[2] = {ATTNLAB_NEG_INF, ATTNLAB_NEG_INF};   // running max * sl2, rows g and g + 8
    float l_run[2] = {0.0f, 0.0f};                          // this thread's partial row sums
    const int row0 = m0 + 16 * warp + g;                     // this thread's rows: row0, row0 + 8

    mbar_wait(bq, 0);
    unsigned pa[BN / 16][4];   // P of the previous tile: the A fragments of its BN / 16 P V k-steps
    float sacc[BN / 2];        // S of this tile, then its probabilities (fp32) until packed into pa

    // S = Q K^T of tile j into sacc (issued and committed, not waited for).
    auto issue_s = [&](int s) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const unsigned long long da = wgmma_desc_sw128(sq + (kk / 4) * (2 * BM * 64) + 32 * (kk % 4), 16, 1024);
            const unsigned long long db = wgmma_desc_sw128(sk(s) + (kk / 4) * (2 * BN * 64) + 32 * (kk % 4), 16, 1024);
            wgmma_ss<BN, BF16>(sacc, da, db, kk > 0);
        }
        wgmma_commit();
    };
    // O += P V with the V of stage s (issued and committed, not waited for).
    auto issue_pv = [&](int s) {
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            const unsigned long long db = wgmma_desc_sw128(sv(s) + kk * 2048, 2 * BN * 64, 1024);
            wgmma_rs<D, BF16>(acc, pa[kk], db, 1);
        }
        wgmma_commit();
    };
    // Mask and online softmax of tile j in sacc (p left in sacc as fp32); returns nothing, sets alpha.
    float alpha[2];
    auto softmax = [&](int kv0) {
        if ((kv0 + BN > n) || (CAUSAL && kv0 + BN - 1 > m0)) {
#pragma unroll
            for (int i = 0; i < BN / 8; ++i)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int col = kv0 + 8 * i + 2 * t + (r & 1), row = row0 + 8 * (r >> 1);
                    if (col >= n || (CAUSAL && col > row)) sacc[4 * i + r] = ATTNLAB_NEG_INF;
                }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = ATTNLAB_NEG_INF;
#pragma unroll
            for (int i = 0; i < BN / 8; ++i) mx = fmaxf(mx, fmaxf(sacc[4 * i + 2 * h], sacc[4 * i + 2 * h + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(ATTNLAB_FULL_MASK, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(ATTNLAB_FULL_MASK, mx, 2));
            const float m_new = fmaxf(m_run[h], mx * sl2);
            const float m_sub = m_new == ATTNLAB_NEG_INF ? 0.0f : m_new;   // all masked so far: p = 0
            alpha[h] = fast_exp2(m_run[h] - m_sub);                          // 0 on the first tile
            m_run[h] = m_new;
            float rs = 0.0f;
#pragma unroll
            for (int i = 0; i < BN / 8; ++i) {
                sacc[4 * i + 2 * h] = fast_exp2(fmaf(sacc[4 * i + 2 * h], sl2, -m_sub));
                sacc[4 * i + 2 * h + 1] = fast_exp2(fmaf(sacc[4 * i + 2 * h + 1], sl2, -m_sub));
                rs += sacc[4 * i + 2 * h] + sacc[4 * i + 2 * h + 1];
            }
            l_run[h] = l_run[h] * alpha[h] + rs;
        }
    };
    // O *= alpha (no P V in flight) and P packed into pa: block i even -> a[h], odd -> a[2 + h].
    auto rescale_and_pack = [&]() {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int i = 0; i < D / 8; ++i) {
                acc[4 * i + 2 * h] *= alpha[h];
                acc[4 * i + 2 * h + 1] *= alpha[h];
            }
#pragma unroll
            for (int i = 0; i < BN / 8; ++i)
                pa[i / 2][(i % 2) * 2 + h] = pack2<BF16>(sacc[4 * i + 2 * h], sacc[4 * i + 2 * h + 1]);
        }
    };
    // Stage s's last reader (P V) is done: refill it with tile `next`.
    auto release = [&](int s, int next) {
        __syncthreads();
        if (tid == 0 && next < n_tiles) {
            mbar_arrive_expect_tx(bfull(s), 2 * KV_BYTES);
            for (int c = 0; c < DC; ++c) {
                tma_load_3d(sk(s) + c * (2 * BN * 64), &tk, 64 * c, next * BN, bh, bfull(s));
                tma_load_3d(sv(s) + c * (2 * BN * 64), &tv, 64 * c, next * BN, bh, bfull(s));
            }
        }
    };

    // ---- tile 0: S, softmax (nothing to overlap with yet)
    mbar_wait(bfull(0), 0);
    wgmma_fence();
    issue_s(0);
    wgmma_wait<0>();
    fence_regs(sacc);
    softmax(0);
    rescale_and_pack();

    // ---- tiles 1 ..: S_j and P_{j-1} V_{j-1} in flight together; softmax of S_j under the latter
    for (int j = 1; j < n_tiles; ++j) {
        const int s = j % STAGES, sp = (j - 1) % STAGES;
        mbar_wait(bfull(s), (j / STAGES) & 1);
        wgmma_fence();
        issue_s(s);
        issue_pv(sp);
        wgmma_wait<1>();          // S_j done (the older group)
        fence_regs(sacc);
        softmax(j * BN);
        wgmma_wait<0>();          // P_{j-1} V_{j-1} done
        fence_regs(acc);
        rescale_and_pack();
        release(sp, j - 1 + STAGES);
    }
    // ---- the last tile's P V
    wgmma_fence();
    issue_pv((n_tiles - 1) % STAGES);
    wgmma_wait<0>();
    fence_regs(acc);

    // ---- epilogue: full row sums across the quad, normalise, store rows < n (4 bytes a column pair)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float l = l_run[h];
        l += __shfl_xor_sync(ATTNLAB_FULL_MASK, l, 1);
        l += __shfl_xor_sync(ATTNLAB_FULL_MASK, l, 2);
        const float inv = 1.0f / l;
        const int row = row0 + 8 * h;
        if (row < n) {
            unsigned* orow = reinterpret_cast<unsigned*>(o + head_offset(bh, n, D) + (long long)row * D);
#pragma unroll
            for (int i = 0; i < D / 8; ++i) orow[4 * i + t] = pack2<BF16>(acc[4 * i + 2 * h] * inv, acc[4 * i + 2 * h + 1] * inv);
        }
    }
}
