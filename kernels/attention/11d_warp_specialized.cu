// 11d — warp specialisation: a producer warpgroup that only copies, two consumer warpgroups that
// only compute, sharing every K/V tile; registers moved from the producer to the consumers.
//
//   O[b,h,i,:] = sum_j softmax_j(scale * Q[b,h,i,:] . K[b,h,j,:]) * V[b,h,j,:]   (j <= i if CAUSAL)
//
// What changed from 11b (one warpgroup per 64 rows, every thread both waits for copies and
// computes, a block-wide barrier per tile before a buffer is refilled):
//  * 3 warpgroups, 384 threads, BM = 128 query rows: warpgroup 0 is the producer (one thread
//    issues every TMA copy), warpgroups 1 and 2 each own 64 rows and read the same K/V tiles, so a
//    tile copied once feeds two warpgroups' MMAs (half the copy traffic per query row of 11b).
//  * Two barriers per stage: full[s] (the copy engine's bytes landed, as before) and empty[s]
//    (every consumer thread arrives when its MMAs have finished reading stage s: 256 arrivals). The
//    producer waits on empty[s] before refilling it; no __syncthreads in the loop. A consumer
//    warpgroup waits on full[s] before it arrives on empty[s] even for a tile it skips (causal), so
//    its arrivals can never be counted towards a later use of the stage.
//  * setmaxnreg: the kernel starts under __launch_bounds__(384, 1) (65536 / 384 = 170 registers a
//    thread); the producer gives registers back (setmaxnreg.dec to 40) and the consumers take them
//    (setmaxnreg.inc to 232): 40 * 128 + 232 * 256 = 64512 of the SM's 65536.
//  * The two consumer warpgroups run the same loop independently; the warp schedulers interleave
//    one's softmax with the other's MMAs (no explicit ping-pong ordering yet).
// Per tile j (stage s = j % STAGES), producer thread: wait empty[s] (use j / STAGES - 1; not for the
// first STAGES tiles), expect_tx(full[s]), TMA K and V. Consumers: wait full[s]; S = Q K^T (their
// 64 rows of Q); mask; online softmax; O += P V; arrive empty[s].
// Everything else as 11a/11b (layouts, descriptors, masking, softmax, NaN rows, epilogue).
// Shared memory (dynamic, aligned up to 1024 B): Q [D/64][128][64] (consumer c's rows at 64c), then
// per stage K [D/64][BN][64] and V [D/64][BN][64], 16-bit: smem_bytes() below (+1024 for alignment).
// Template: D in {64, 128}; BN in {64, 128}; STAGES in {2, 3, 4}; BF16 (else fp16); CAUSAL.
#include "common.cuh"
#include "mma.cuh"
#include "hopper.cuh"

namespace attn11d {
constexpr int BM = 128;  // query rows per block: two consumer warpgroups' m64
__host__ __device__ constexpr int smem_bytes(int D, int BN, int STAGES) {
    return 2 * D * (BM + 2 * STAGES * BN) + 1024;
}
}  // namespace attn11d

template <int D, int BN, int STAGES, bool BF16, bool CAUSAL>
__global__ void __launch_bounds__(384, 1)
attn_warp_specialized(const __grid_constant__ TmaMap tq, const __grid_constant__ TmaMap tk,
               const __grid_constant__ TmaMap tv, unsigned short* __restrict__ o, int n, float scale) {
    using attn11d::BM;
    static_assert(D == 64 || D == 128, "head dim 64 or 128");
    static_assert(BN == 64 || BN == 128, "BN 64 or 128");
    static_assert(STAGES >= 2 && STAGES <= 4, "2 to 4 stages");
    constexpr int DC = D / 64;                      // 64-column chunks (128-byte swizzle rows)
    constexpr unsigned Q_BYTES = 2u * BM * D, KV_BYTES = 2u * BN * D;   // one tile of Q; of K (or V)

    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) unsigned long long bar_q, bar_full[STAGES], bar_empty[STAGES];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;      // swizzled tiles: 1024-aligned
    const unsigned sq = base;
    auto sk = [&](int s) { return base + Q_BYTES + 2u * s * KV_BYTES; };
    auto sv = [&](int s) { return base + Q_BYTES + 2u * s * KV_BYTES + KV_BYTES; };
    const unsigned bq = smem_u32(&bar_q);
    auto bfull = [&](int s) { return smem_u32(&bar_full[s]); };
    auto bempty = [&](int s) { return smem_u32(&bar_empty[s]); };

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int bh = blockIdx.y;
    // CAUSAL: the longest row blocks first (they have the most tiles), so the tail of the grid is short.
    const int mblk = CAUSAL ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int m0 = mblk * BM;
    int n_tiles = (n + BN - 1) / BN;
    if (CAUSAL) n_tiles = min(n_tiles, (m0 + BM + BN - 1) / BN);   // tiles with a key <= the last row

    if (tid == 0) {
        mbar_init(bq, 1);
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(bfull(s), 1);
            mbar_init(bempty(s), 256);   // every consumer thread arrives once per use
        }
        mbar_init_fence();
    }
    __syncthreads();

    const int wg = tid / 128;   // 0: producer, 1 and 2: consumers
    if (wg == 0) {
        // ---------------------------------------------------------------- producer
        setmaxnreg_dec<40>();
        if (tid == 0) {
            mbar_arrive_expect_tx(bq, Q_BYTES);
            for (int c = 0; c < DC; ++c) tma_load_3d(sq + c * (2 * BM * 64), &tq, 64 * c, m0, bh, bq);
            for (int j = 0; j < n_tiles; ++j) {
                const int s = j % STAGES;
                if (j >= STAGES) mbar_wait(bempty(s), ((j / STAGES) - 1) & 1);   // both consumers done with use j/STAGES - 1
                mbar_arrive_expect_tx(bfull(s), 2 * KV_BYTES);
                for (int c = 0; c < DC; ++c) {
                    tma_load_3d(sk(s) + c * (2 * BN * 64), &tk, 64 * c, j * BN, bh, bfull(s));
                    tma_load_3d(sv(s) + c * (2 * BN * 64), &tv, 64 * c, j * BN, bh, bfull(s));
                }
            }
        }
        return;
    }
    // -------------------------------------------------------------------- consumers
    setmaxnreg_inc<232>();
    const int cw = wg - 1;                      // consumer 0 or 1: rows m0 + 64 cw ..
    const int wq = warp % 4;                    // warp within the warpgroup
    const unsigned sq_c = sq + cw * (2 * 64 * 64);   // this consumer's 64 rows inside each Q column chunk
    const float sl2 = scale * 1.4426950408889634f;
    float acc[D / 2];                  // O, this thread's accumulators (layout: hopper.cuh)
#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc[i] = 0.0f;
    float m_run[2] = {ATTNLAB_NEG_INF, ATTNLAB_NEG_INF};   // running max * sl2, rows g and g + 8
    float l_run[2] = {0.0f, 0.0f};                          // this thread's partial row sums
    const int r0 = m0 + 64 * cw;                             // this warpgroup's first row
    const int row0 = r0 + 16 * wq + g;                       // this thread's rows: row0, row0 + 8

    mbar_wait(bq, 0);
    for (int j = 0; j < n_tiles; ++j) {
        const int s = j % STAGES;
        const int kv0 = j * BN;
        mbar_wait(bfull(s), (j / STAGES) & 1);
        // CAUSAL: a tile whose first key is past this warpgroup's last row adds nothing to it
        // (warpgroup-uniform, so the wgmmas stay aligned); it still waits and arrives, see header.
        if (!CAUSAL || kv0 <= r0 + 63) {
            // ---- S = Q K^T: k-step kk reads column chunk kk / 4 at byte 32 * (kk % 4) of each row.
            float sacc[BN / 2];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                const unsigned long long da = wgmma_desc_sw128(sq_c + (kk / 4) * (2 * BM * 64) + 32 * (kk % 4), 16, 1024);
                const unsigned long long db = wgmma_desc_sw128(sk(s) + (kk / 4) * (2 * BN * 64) + 32 * (kk % 4), 16, 1024);
                wgmma_ss<BN, BF16>(sacc, da, db, kk > 0);
            }
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(sacc);

            // ---- mask: keys >= n (tail tile), CAUSAL keys > row (tiles reaching past this warpgroup's first row)
            if ((kv0 + BN > n) || (CAUSAL && kv0 + BN - 1 > r0)) {
#pragma unroll
                for (int i = 0; i < BN / 8; ++i)
#pragma unroll
                    for (int r = 0; r < 4; ++r) {
                        const int col = kv0 + 8 * i + 2 * t + (r & 1), row = row0 + 8 * (r >> 1);
                        if (col >= n || (CAUSAL && col > row)) sacc[4 * i + r] = ATTNLAB_NEG_INF;
                    }
            }

            // ---- online softmax, rows g (h = 0) and g + 8 (h = 1)
            unsigned pa[BN / 16][4];   // P as the A fragments of the BN / 16 k-steps of O += P V
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float mx = ATTNLAB_NEG_INF;
#pragma unroll
                for (int i = 0; i < BN / 8; ++i) mx = fmaxf(mx, fmaxf(sacc[4 * i + 2 * h], sacc[4 * i + 2 * h + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(ATTNLAB_FULL_MASK, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(ATTNLAB_FULL_MASK, mx, 2));
                const float m_new = fmaxf(m_run[h], mx * sl2);
                const float m_sub = m_new == ATTNLAB_NEG_INF ? 0.0f : m_new;   // all masked so far: p = 0
                const float alpha = fast_exp2(m_run[h] - m_sub);                 // 0 on the first tile
                m_run[h] = m_new;
                float rs = 0.0f;
#pragma unroll
                for (int i = 0; i < BN / 8; ++i) {
                    const float p0 = fast_exp2(fmaf(sacc[4 * i + 2 * h], sl2, -m_sub));
                    const float p1 = fast_exp2(fmaf(sacc[4 * i + 2 * h + 1], sl2, -m_sub));
                    rs += p0 + p1;
                    pa[i / 2][(i % 2) * 2 + h] = pack2<BF16>(p0, p1);
                }
                l_run[h] = l_run[h] * alpha + rs;
#pragma unroll
                for (int i = 0; i < D / 8; ++i) {
                    acc[4 * i + 2 * h] *= alpha;
                    acc[4 * i + 2 * h + 1] *= alpha;
                }
            }

            // ---- O += P V
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
                const unsigned long long db = wgmma_desc_sw128(sv(s) + kk * 2048, 2 * BN * 64, 1024);
                wgmma_rs<D, BF16>(acc, pa[kk], db, 1);
            }
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(acc);
        }
        mbar_arrive(bempty(s));   // this thread's reads of stage s are done
    }

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
