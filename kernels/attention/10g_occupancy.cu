// 10g — flash attention on tensor cores: 10f with the register budget sized for more warps per SM
// at D = 128 (12 or 16 instead of 8), by smaller key tiles and, optionally, Q's fragments re-read
// from shared memory instead of held in registers.
//
//   O[b,h,i,:] = sum_j softmax_j(scale * Q[b,h,i,:] . K[b,h,j,:]) * V[b,h,j,:]   (j <= i if CAUSAL)
//
// What changed from 10f_fixed_offsets (same fragments, same loads at base + immediate, same
// softmax; with QREG = 1 the arithmetic is 10f's in the same order, so the output is bit-identical):
//  1. Why. 10f's per-instruction counters at D = 128 (scripts/ncu_source.py, H200) put 58 % of the
//     warp-stall samples on HMMA and 13 % on LDSM, with short_scoreboard (27 %), wait (27 %) and
//     mio_throttle (12 %) the reasons: warps wait for their ldmatrix results and for their own
//     MMA chains. 10f runs 8 warps per SM at D = 128 (O is 64 registers a thread, Q's fragments 32,
//     S 32-64: 248-255 registers, one block of 8 warps or two of 4), half of what it runs at D = 64,
//     where the same kernel reaches 1.1x SDPA's flash kernel. More warps per SM hide that latency.
//  2. MINB (template parameter): the blocks per SM that __launch_bounds__ sizes the registers for
//     (0: 10f's choice). With 4 warps a block, MINB = 3 caps a thread at 168 registers and MINB = 4
//     at 128. The shared memory must fit too: (BM + 2*STAGES*BN) * D * 2 bytes a block, at most
//     227 KB per SM, so at D = 128 and BM = 64, three blocks need BN = 32 (STAGES <= 3) or BN = 48
//     (STAGES = 2), and four need BN = 32 with STAGES = 2.
//  3. QREG (template parameter): 1 keeps 10f's Q fragments in registers for the whole kernel (32
//     registers at D = 128); 0 re-reads Q's A fragment by ldmatrix at each k-step of S (one more
//     ldmatrix.x4 per k-step and n-tile pair, at a base register + immediate like the others), which
//     is what makes 128 registers (MINB = 4) possible at D = 128.
//  4. (Later, for 10h.) The work on one row block is attn10g::row_block (a range of key tiles
//     [j0, j1), here always all of them) and the epilogue attn10g::store_rows, so 10h schedules
//     the same body; and the tile copy also takes blocks whose threads are not a multiple of 8
//     rows (6 warps at D = 128: the first 128 threads copy). Same instructions at 10g's tiles.
//  5. (Later, for 10i.) The tile copy, row_block and the kernel's body (attn10g::occupancy_block)
//     take CW, the warps that issue the cp.async copies; CW = 0 (10g, 10h) is the rule above and
//     compiles to the same instructions.
//  Smaller key tiles cost one barrier and one speculative-softmax vote per BN keys instead of per
//  64 or 128, and QREG = 0 more shared-memory reads per MMA; notebook 10's scan weighs them.
//
// Masking, NaN rows, tails, the speculative-softmax bound and the layout are 10d's (see its header).
//
// Template: D in {32, 64, 128}; BM = 16 * WARPS query rows per block, 32*WARPS a multiple of D;
// BN keys per tile, a multiple of 16 and of 256*WARPS/D; BF16 = true -> bf16, false -> fp16
// (inputs and output, passed as the bit patterns in unsigned short); CAUSAL; STAGES in {2, 3};
// MINB >= 0; QREG in {0, 1}.
// Layout: q, k, v, o contiguous [B, H, N, D] 16-bit, 16-byte aligned (cp.async of 16 bytes).
// Launch: grid = (ceil(n / BM), B*H), blockIdx.y = b*H + h; block = 32*WARPS threads;
//         dynamic shared memory = (BM + 2*STAGES*BN) * D * 2 bytes (attn_occupancy_smem_bytes),
//         which needs cudaFuncAttributeMaxDynamicSharedMemorySize above 48 KB.
// Barriers: as 10d (one after the prologue, one per tile; __syncwarp in the epilogue).
#pragma once  // 10h builds on this file
#include "mma.cuh"

namespace attn10g {

// Swizzle key of a row: chunk c of row r is stored at chunk c ^ key(r) (see 10b for the bank
// argument). Rows r0 + 8i share the key of r0.
template <int D>
static __device__ __forceinline__ int swz_key(int row) {
    if constexpr (D >= 64) return row & 7; else return (row >> 1) & 3;
}
template <int D>
static __device__ __forceinline__ int swz(int row, int chunk) { return row * D + ((chunk ^ swz_key<D>(row)) << 3); }

// Blocks per SM the register budget is sized for (__launch_bounds__' second argument): 128
// registers a thread at D <= 64 (2 blocks of 256 threads per SM; 3 blocks at D = 32 would need
// <= 80 and spill), 255 at D = 128 (1 block of 256 threads).
__host__ __device__ constexpr int min_blocks(int D, int threads) {
    return 65536 / (threads * (D <= 64 ? 128 : 255)) > 0 ? 65536 / (threads * (D <= 64 ? 128 : 255)) : 1;
}

// ROWS x D tile copies by cp.async from one [n][D] global matrix into swizzled shared tiles: thread
// tid moves chunk tid % CPR of rows tid / CPR + i*RPP. RPP is a multiple of 8, so the swizzle key,
// hence the shared offset step, is the same each pass: the per-thread pointers are computed once
// and every pass and every tile is a compile-time or warp-uniform offset from them.
// Only the first COPIERS threads copy: with CW = 0 the largest multiple of 8 rows' worth of threads
// in the block (all of them when THREADS is such a multiple; 128 of 192 with 6 warps at D = 128);
// with CW > 0 the first CW warps (10i), RPP = 32*CW / CPR rows a pass, a multiple of 4: when it is
// not one of 8 (2 warps at D = 128: 4 rows a pass), rows r and r + RPP have swizzle keys that
// differ in one bit, so odd passes take a second per-thread offset (TWO), still fixed.
template <int D, int ROWS, int THREADS, int CW = 0>
struct TileCopy {
    static constexpr int CPR = D / 8;           // 16-byte chunks per row
    static constexpr int COPIERS = CW > 0 ? 32 * CW : THREADS / (8 * CPR) * (8 * CPR);
    static constexpr int RPP = COPIERS / CPR;   // rows per pass
    static constexpr bool TWO = RPP % 8 != 0;   // two swizzle patterns, alternating by pass
    static constexpr int PASSES = ROWS / RPP;
    static_assert(COPIERS > 0 && COPIERS <= THREADS && COPIERS % CPR == 0 && RPP % 4 == 0 && ROWS % RPP == 0,
                  "tile copy: the copying threads must cover 4 (CW > 0) or 8 rows a pass and ROWS a whole number of passes");
    static __device__ __forceinline__ bool copier() { return COPIERS == THREADS || (int)threadIdx.x < COPIERS; }
    unsigned short* s;        // this thread's first chunk in a tile at smem_base (even passes)
    int odd;                  // TWO: odd passes' chunk is at s + odd + i * RPP * D
    const unsigned short* g;  // this thread's first chunk in the tile starting at row 0 of src
    const unsigned short* g0; // row 0 of src: a valid address for zero-filled copies
    int row;                  // this thread's first row within a tile
    __device__ __forceinline__ TileCopy(unsigned short* smem_base, const unsigned short* src) {
        row = threadIdx.x / CPR;
        const int c = threadIdx.x % CPR;
        s = smem_base + swz<D>(row, c);
        if constexpr (TWO) odd = swz<D>(row + RPP, c) - RPP * D - swz<D>(row, c);
        g = src + row * D + c * 8;
        g0 = src;
    }
    // Tile of rows row0.. of src into the tile at smem_base + dst_off; every row exists.
    __device__ __forceinline__ void full(int dst_off, long long row0) const {
        if (!copier()) return;
        unsigned short* d = s + dst_off;
        const unsigned short* src = g + row0 * D;
#pragma unroll
        for (int i = 0; i < PASSES; ++i) {
            if constexpr (TWO) cp_async16(d + i * RPP * D + ((i & 1) ? odd : 0), src + i * RPP * D);
            else cp_async16(d + i * RPP * D, src + i * RPP * D);
        }
    }
    // Only rows < rows_valid of the tile exist; the others are zero-filled (source clamped).
    __device__ __forceinline__ void guarded(int dst_off, long long row0, int rows_valid) const {
        if (!copier()) return;
        unsigned short* d = s + dst_off;
        const unsigned short* src = g + row0 * D;
#pragma unroll
        for (int i = 0; i < PASSES; ++i) {
            const bool valid = row + i * RPP < rows_valid;
            if constexpr (TWO) cp_async16_zfill(d + i * RPP * D + ((i & 1) ? odd : 0), valid ? src + i * RPP * D : g0, valid);
            else cp_async16_zfill(d + i * RPP * D, valid ? src + i * RPP * D : g0, valid);
        }
    }
};

// One block's work on one row block: query rows m0..m0+BM-1 of the head at element offset `head`,
// key tiles [j0, j1) (the whole range in 10g; 10h also gives it parts of it). The K/V pipeline,
// S, the speculative softmax and O += P V as in 10f. On return this thread's registers hold its O
// fragments relative to 2^mus (acc), its partial row sums (l_run) and its two rows' reference
// points (mus); every cp.async group is retired and every warp is past its last read of the
// K/V stages (sQ may still be read by this warp's epilogue: barrier before refilling it).
template <int D, int BM, int BN, int WARPS, bool BF16, bool CAUSAL, int STAGES, int QREG, int CW = 0>
static __device__ __forceinline__ void row_block(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
                                                 const unsigned short* __restrict__ v, int n, float scale,
                                                 long long head, int m0, int j0, int j1, float* smem,
                                                 float (&acc)[D / 8][4], float (&mus)[2], float (&l_run)[2]) {
    static_assert(D == 32 || D == 64 || D == 128, "head dim 32, 64 or 128");
    static_assert(BM == 16 * WARPS, "each warp owns 16 query rows");
    static_assert(BN % 16 == 0 && BN >= 16, "a K/V tile is a whole number of k16 steps");
    static_assert(STAGES == 2 || STAGES == 3, "2 or 3 K/V stages");
    static_assert(QREG == 0 || QREG == 1, "QREG 0 or 1");
    constexpr int THREADS = 32 * WARPS;
    constexpr int DK = D / 16;   // k16 steps of S = Q K^T
    constexpr int NT = BN / 8;   // n8 tiles of S (keys)
    constexpr int DT = D / 8;    // n8 tiles of O (head dims)
    constexpr int KT = BN / 16;  // k16 steps of O += P V
    constexpr int STAGE = 2 * BN * D;          // elements per stage: K tile then V tile
    constexpr float P_BOUND = 256.0f;          // largest p accepted without a rescale (fp16-safe)

    unsigned short* sQ = reinterpret_cast<unsigned short*>(smem);  // [BM][D], later the output
    unsigned short* sKV = sQ + BM * D;                             // [STAGES][K [BN][D], V [BN][D]]

    // Keys from k0 = j0 * BN on: K and V from that row, nk keys, tiles 0..nt-1 of the range (so
    // the copies, stages and tail masks are 10g's own with j0 = 0); k0 only enters causal masks.
    const int k0 = j0 * BN, nk = n - k0, nt = j1 - j0;
    const unsigned short* kh = k + head + (long long)k0 * D;
    const unsigned short* vh = v + head + (long long)k0 * D;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int wrow0 = m0 + warp * 16;  // the warp's first row; this thread's rows: wrow0+g, wrow0+g+8

    // Prologue: groups [Q + tile 0], [tile 1], ..., [tile S-2] of the range (empty past its end).
    // K and V of tile jt into stage jt % STAGES (guarded only when the tile passes n).
    const TileCopy<D, BN, THREADS, CW> k_copy(sKV, kh), v_copy(sKV + BN * D, vh);
    auto load_kv = [&](int jt) {
        const int st = (jt % STAGES) * STAGE;
        if ((jt + 1) * BN <= nk) {
            k_copy.full(st, (long long)jt * BN);
            v_copy.full(st, (long long)jt * BN);
        } else {
            k_copy.guarded(st, (long long)jt * BN, nk - jt * BN);
            v_copy.guarded(st, (long long)jt * BN, nk - jt * BN);
        }
    };
    {
        const TileCopy<D, BM, THREADS, CW> q_copy(sQ, q + head);
        q_copy.guarded(0, m0, n - m0);
    }
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
        if (st < nt) load_kv(st);
        cp_async_commit();
    }
    // Tile 0 and Q have landed (newer groups: tiles 1..S-2); barrier: for every thread's copies.
    cp_async_wait<STAGES - 2>();
    __syncthreads();

    // Per-lane ldmatrix offsets (elements). Lanes 8i..8i+7 address the rows of 8x8 matrix i.
    // A / V^T pattern: matrix i = rows 8*(i%2).., chunk 2k + i/2; K pattern (two n8 tiles):
    // matrix i = keys 8*(i/2).., chunk 2k + i%2. Rows are lr mod 8, so the swizzle key is
    // swz_key(lr) and chunk (2k + c) ^ key = (c ^ key) ^ 2k.
    const int lr = lane & 7, li = lane >> 3;
    const int key = swz_key<D>(lr);
    const int a_row = lr + 8 * (li & 1), a_c = (li >> 1) ^ key;  // Q (A) and V (.trans B)
    const int k_row = lr + 8 * (li >> 1), k_c = (li & 1) ^ key;  // K (B, two n-tiles)
    // This lane's K and V^T row addresses in stage 0 (shared-space bytes), one per XOR pattern x:
    // chunk (c ^ key) ^ 2k = ((c ^ key) ^ 2x) + 2*NX*h for k = x + NX*h (see the header).
    constexpr int NX = DK < 4 ? DK : 4;
    unsigned kb0[NX], vb0[NX], qb[QREG ? 1 : NX];   // qb: this lane's Q rows (QREG = 0), same patterns
    {
        const unsigned kv_base = smem_u32(sKV), q_base = smem_u32(sQ + warp * 16 * D);
#pragma unroll
        for (int x = 0; x < NX; ++x) {
            kb0[x] = kv_base + 2u * (unsigned)(k_row * D + ((k_c ^ (2 * x)) << 3));
            vb0[x] = kv_base + 2u * (unsigned)(a_row * D + ((a_c ^ (2 * x)) << 3));
            if constexpr (!QREG) qb[x] = q_base + 2u * (unsigned)(a_row * D + ((a_c ^ (2 * x)) << 3));
        }
    }

    // Q's A fragments: held for the whole kernel (QREG = 1, as 10f), or re-read at each k-step.
    unsigned qf[QREG ? DK : 1][4];
    if constexpr (QREG) {
#pragma unroll
        for (int ks = 0; ks < DK; ++ks) ldmatrix_x4(qf[ks], sQ + (warp * 16 + a_row) * D + ((a_c ^ (2 * ks)) << 3));
    }

    const float sl2 = scale * 1.4426950408889634f;  // scores in log2 units: one FFMA per score
    float mu[2] = {ATTNLAB_NEG_INF, ATTNLAB_NEG_INF};  // subtracted max (log2 units), -inf: none yet
    mus[0] = mus[1] = 0.0f;                            // the same, 0 while -inf (no -inf - -inf)
    l_run[0] = l_run[1] = 0.0f;                        // per-thread partial row sums
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;

    for (int j = 0; j < nt; ++j) {
        const int kv0 = j * BN;  // relative to k0
        // Issue tile j+S-1 into the stage of tile j-1 (every warp finished it before the last barrier).
        if (j + STAGES - 1 < nt) load_kv(j + STAGES - 1);
        cp_async_commit();

        // CAUSAL: a tile entirely above this warp's last row contributes nothing to it.
        if (!CAUSAL || k0 + kv0 <= wrow0 + 15) {
            // This tile's stage: the per-lane bases plus the stage's offset (NX adds each).
            const unsigned st_bytes = 2u * (unsigned)((j % STAGES) * STAGE);
            unsigned kb[NX], vb[NX];
#pragma unroll
            for (int x = 0; x < NX; ++x) {
                kb[x] = kb0[x] + st_bytes;
                vb[x] = vb0[x] + st_bytes;
            }

            float s[NT][4];    // S = Q K^T of this tile (fp32 accumulators)
            unsigned pf[KT][4];  // P packed to 16-bit pairs: P V's A fragments
            float rs[2];         // this thread's partial row sums of P for this tile
            // S = Q K^T: one ldmatrix.x4 gives the B fragments of n-tiles 2np, 2np+1 for k-step
            // ks, at kb[ks % NX] + (rows np*16, chunk group ks / NX) as an immediate.
            auto qk = [&]() {
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
                for (int np = 0; np < NT / 2; ++np) {
#pragma unroll
                    for (int ks = 0; ks < DK; ++ks) {
                        unsigned r[4], qa[4];
                        if constexpr (QREG) {
                            qa[0] = qf[ks][0]; qa[1] = qf[ks][1]; qa[2] = qf[ks][2]; qa[3] = qf[ks][3];
                        } else {
                            ldmatrix_x4_at(qa, qb[ks % NX], 32 * NX * (ks / NX));
                        }
                        ldmatrix_x4_at(r, kb[ks % NX], 2 * (np * 16 * D) + 32 * NX * (ks / NX));
                        const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
                        mma16816<BF16>(s[2 * np], qa, b0);
                        mma16816<BF16>(s[2 * np + 1], qa, b1);
                    }
                }
            };
            // Mask: CAUSAL: key col > row (element (nt, r) has col - row = nt*8 + (r&1) - 8*(r>>1) -
            // diff); else key col >= n.
            auto mask = [&]() {
                const int diff = CAUSAL ? (wrow0 + g) - (k0 + kv0 + 2 * t) : nk - (kv0 + 2 * t);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
                    for (int r = 0; r < 4; ++r) {
                        const bool masked = CAUSAL ? (nt * 8 + (r & 1) - 8 * (r >> 1) > diff) : (nt * 8 + (r & 1) >= diff);
                        if (masked) s[nt][r] = ATTNLAB_NEG_INF;
                    }
                }
            };
            // P = 2^(s*sl2 - mus) with the current reference point mus.
            auto exponentiate = [&]() {
                rs[0] = rs[1] = 0.0f;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const float p0 = fast_exp2(s[nt][0] * sl2 - mus[0]), p1 = fast_exp2(s[nt][1] * sl2 - mus[0]);
                    const float p2 = fast_exp2(s[nt][2] * sl2 - mus[1]), p3 = fast_exp2(s[nt][3] * sl2 - mus[1]);
                    rs[0] += p0 + p1;
                    rs[1] += p2 + p3;
                    pf[nt / 2][2 * (nt % 2)] = pack2<BF16>(p0, p1);
                    pf[nt / 2][2 * (nt % 2) + 1] = pack2<BF16>(p2, p3);
                }
            };
            // Speculative softmax: exponentiate against the current mu and accept when every
            // lane's partial row sums are <= P_BOUND (so every p <= P_BOUND) and mu is set (NaN
            // sums fail; the first tile always fails, mu = -inf). No row maximum, no shuffles and
            // no rescale on the common path. Only tiles crossing the diagonal / the end pay for
            // the mask; each branch is one straight-line block of MMAs and exponentials.
            if (CAUSAL ? (k0 + kv0 + BN - 1 > wrow0) : (kv0 + BN > nk)) {
                qk();
                mask();
                exponentiate();
            } else {
                qk();
                exponentiate();
            }
            if (__any_sync(ATTNLAB_FULL_MASK, !(rs[0] <= P_BOUND && rs[1] <= P_BOUND && mu[0] != ATTNLAB_NEG_INF && mu[1] != ATTNLAB_NEG_INF))) {
                // Exact path: row maxima over the quad, raise mu, rescale O and l, redo the exponentials.
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    float m = fmaxf(s[0][2 * h], s[0][2 * h + 1]);
#pragma unroll
                    for (int nt = 1; nt < NT; ++nt) m = fmaxf(m, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
                    m = fmaxf(m, __shfl_xor_sync(ATTNLAB_FULL_MASK, m, 1));
                    m = fmaxf(m, __shfl_xor_sync(ATTNLAB_FULL_MASK, m, 2));
                    const float mu_new = fmaxf(mu[h], m * sl2);
                    const float mus_new = mu_new == ATTNLAB_NEG_INF ? 0.0f : mu_new;
                    const float alpha = fast_exp2(mu[h] - mus_new);  // 0 while mu = -inf; 1 if unchanged
                    mu[h] = mu_new;
                    mus[h] = mus_new;
                    l_run[h] *= alpha;
#pragma unroll
                    for (int dt = 0; dt < DT; ++dt) {
                        acc[dt][2 * h] *= alpha;
                        acc[dt][2 * h + 1] *= alpha;
                    }
                }
                exponentiate();
            }
            l_run[0] += rs[0];
            l_run[1] += rs[1];

            // O += P V: one ldmatrix.x4.trans gives V's B fragments of d-tiles 2dp, 2dp+1 for
            // k-step kk, at vb[dp % NX] + (V behind K, rows kk*16, chunk group dp / NX).
#pragma unroll
            for (int kk = 0; kk < KT; ++kk) {
#pragma unroll
                for (int dp = 0; dp < DT / 2; ++dp) {
                    unsigned r[4];
                    ldmatrix_x4_trans_at(r, vb[dp % NX], 2 * (BN * D + kk * 16 * D) + 32 * NX * (dp / NX));
                    const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
                    mma16816<BF16>(acc[2 * dp], pf[kk], b0);
                    mma16816<BF16>(acc[2 * dp + 1], pf[kk], b1);
                }
            }
        }

        // Tile j+1 has landed (newer groups: tiles j+2..j+S-1). Barrier: every thread's copies are
        // visible, and every warp is done with tile j, whose stage the next iteration refills.
        cp_async_wait<STAGES - 2>();
        __syncthreads();
    }
    cp_async_wait<0>();  // only empty groups are left; retire them
}

// Epilogue: full row sums over the quad, normalise, stage the warp's 16 rows (wrow0..) in its own
// Q rows of shared memory (only this warp ever read them), then 16-byte coalesced stores of the
// rows < n.
template <int D, bool BF16>
static __device__ __forceinline__ void store_rows(unsigned short* __restrict__ o, int n, long long head, int wrow0,
                                                  float* smem, const float (&acc)[D / 8][4], const float (&l_run)[2]) {
    constexpr int DT = D / 8, CPR = D / 8;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    unsigned short* sO = reinterpret_cast<unsigned short*>(smem) + warp * 16 * D;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float l = l_run[h];
        l += __shfl_xor_sync(ATTNLAB_FULL_MASK, l, 1);
        l += __shfl_xor_sync(ATTNLAB_FULL_MASK, l, 2);
        const float inv = 1.0f / l;  // l >= 1 for a valid row (its max key contributes >= 2^0)
        const int r = g + 8 * h;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
            *reinterpret_cast<unsigned*>(sO + swz<D>(r, dt) + 2 * t) = pack2<BF16>(acc[dt][2 * h] * inv, acc[dt][2 * h + 1] * inv);
    }
    __syncwarp();
    unsigned short* og = o + head + (long long)wrow0 * D;
#pragma unroll
    for (int i = 0; i < 16 * CPR / 32; ++i) {
        const int idx = lane + 32 * i, r = idx / CPR, c = idx % CPR;
        if (wrow0 + r < n) {
            *reinterpret_cast<U4*>(og + r * D + c * 8) = *reinterpret_cast<const U4*>(sO + swz<D>(r, c));
        }
    }
}

// The kernel's body (10i launches it with CW > 0): one block per row block (blockIdx.x) of one
// head (blockIdx.y); smem is the kernel's dynamic shared memory.
template <int D, int BM, int BN, int WARPS, bool BF16, bool CAUSAL, int STAGES, int QREG, int CW>
static __device__ __forceinline__ void occupancy_block(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
                                                       const unsigned short* __restrict__ v, unsigned short* __restrict__ o,
                                                       int n, float scale, float* smem) {
    // Causal blocks do more work the further they are from the first row: run those first.
    const int mblk = CAUSAL ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int m0 = mblk * BM;
    const long long head = head_offset(blockIdx.y, n, D);
    int n_tiles = (n + BN - 1) / BN;
    if (CAUSAL) n_tiles = min(n_tiles, (m0 + BM + BN - 1) / BN);  // tiles with a key <= the last row
    float acc[D / 8][4], mus[2], l_run[2];
    row_block<D, BM, BN, WARPS, BF16, CAUSAL, STAGES, QREG, CW>(q, k, v, n, scale, head, m0, 0, n_tiles, smem, acc, mus, l_run);
    store_rows<D, BF16>(o, n, head, m0 + (int)(threadIdx.x / 32) * 16, smem, acc, l_run);
}

}  // namespace attn10g

template <int D, int BM, int BN, int WARPS, bool BF16, bool CAUSAL, int STAGES, int MINB, int QREG>
__global__ void __launch_bounds__(WARPS * 32, MINB > 0 ? MINB : attn10g::min_blocks(D, WARPS * 32))
attn_occupancy(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
               const unsigned short* __restrict__ v, unsigned short* __restrict__ o, int n, float scale) {
    static_assert(MINB >= 0, "MINB >= 0 blocks per SM");
    extern __shared__ __align__(16) float smem[];
    attn10g::occupancy_block<D, BM, BN, WARPS, BF16, CAUSAL, STAGES, QREG, 0>(q, k, v, o, n, scale, smem);
}

// Dynamic shared memory in bytes for attn_occupancy<D, BM, BN, WARPS, BF16, CAUSAL, STAGES, MINB, QREG>.
constexpr __host__ __device__ unsigned long long attn_occupancy_smem_bytes(int D, int BM, int BN, int STAGES) {
    return (unsigned long long)(BM + 2 * STAGES * BN) * D * 2;
}

// Tiles, MINB and QREG per head dim: see the registry (lib/attnlab/attention/kernels.py).
