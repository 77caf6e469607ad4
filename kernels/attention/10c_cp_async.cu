// 10c — flash attention on tensor cores: K/V tiles by cp.async in a STAGES-deep pipeline.
//
//   O[b,h,i,:] = sum_j softmax_j(scale * Q[b,h,i,:] . K[b,h,j,:]) * V[b,h,j,:]   (j <= i if CAUSAL)
//
// What changed from 10b_ldmatrix_swizzle: the tile loads. In 10b every tile was loaded
// synchronously (global -> registers -> shared, barrier, compute, barrier): the tensor cores sat
// idle for a full global-memory latency per tile, and every thread spent registers and issue slots
// on the copies. Now copies are cp.async (global -> shared directly, 16 bytes each,
// cp_async16_zfill writing zeros for key rows >= n; the source address is clamped to row 0 so it
// is always valid), into STAGES buffers of K and V (STAGES = 2 or 3), committed as separate
// groups in the order [Q + K_0], [V_0], [K_1], [V_1], ...:
//   prologue: issue Q with K_0, then V_0, ..., K_{S-2}, V_{S-2}            (S = STAGES)
//   tile j:   wait until K_j has landed (cp_async_wait<2S-3>), barrier (a)
//             issue K_{j+S-1}, V_{j+S-1} into the stage tile j-1 used (2 groups, empty past the end)
//             S = Q K_j, mask, online softmax
//             wait until V_j has landed (cp_async_wait<2S-2>), barrier (b)
//             O += P V_j
// so the loads of tile j+S-1 (K and V) overlap the MMAs and softmax of tiles j..j+S-2, and V_j
// keeps loading while S = Q K_j and the softmax run. Barrier (a) makes K_j (copied by all threads)
// visible and also proves every warp finished tile j-1, so its stage may be overwritten right
// after it; barrier (b) makes V_j visible. Two barriers per tile, as in 10b, but no thread ever
// waits on a load it issued in the same iteration (for S = 2 the prefetch distance is one tile).
// The swizzled layout, ldmatrix fragments and the maths are unchanged from 10b.
// Expected effect: the tile loop becomes compute-bound instead of latency-bound: global loads are
// hidden behind one (S = 2) or two (S = 3) tiles of MMAs; S = 3 helps when one tile's compute is
// shorter than a load's latency (small D, causal diagonal tiles), at BN*D*4 more bytes of
// shared memory.
//
// Masking: key columns >= n get -inf (tail tile only); CAUSAL: row i sees keys j <= i, K/V tiles
// entirely above the diagonal are skipped (never loaded), and the mask is only evaluated on tiles
// that cross the diagonal or the end. Rows whose running max is still -inf subtract 0 instead
// (no -inf - -inf = NaN); a NaN in a query row makes that row's scores NaN, hence its p, l and
// output NaN, and nothing else (rows never mix: quads share a row). Rows >= n are computed on
// zero-filled Q rows and never stored; K/V rows >= n are zero-filled.
//
// Template: D in {32, 64, 128}; BM = 16 * WARPS query rows per block; BN keys per tile
// (multiple of 16); BF16 = true -> bf16, false -> fp16 (inputs and output, passed as the bit
// patterns in unsigned short); CAUSAL; STAGES in {2, 3}.
// Layout: q, k, v, o contiguous [B, H, N, D] 16-bit, 16-byte aligned (cp.async of 16 bytes).
// Launch: grid = (ceil(n / BM), B*H), blockIdx.y = b*H + h; block = 32*WARPS threads;
//         dynamic shared memory = (BM + 2*STAGES*BN) * D * 2 bytes: Q tile [BM][D], K stages
//         [STAGES][BN][D], V stages [STAGES][BN][D], 16-bit, rows 16-byte-chunk XOR-swizzled as in 10b.
//         Above 48 KB (e.g. 96 KB at D = 128, BM = 128, BN = 64, STAGES = 2) the launcher must raise
//         cudaFuncAttributeMaxDynamicSharedMemorySize.
#include "mma.cuh"

namespace attn10c {

// Element offset of 16-byte chunk `chunk` of row `row` in a swizzled [rows][D] 16-bit tile.
template <int D>
static __device__ __forceinline__ int swz(int row, int chunk) {
    if constexpr (D >= 64) return row * D + ((chunk ^ (row & 7)) << 3);
    else return row * D + ((chunk ^ ((row >> 1) & 3)) << 3);
}

// rows x D tile from global (row0..) into swizzled shared memory by cp.async, 16 B a copy; rows
// >= n are zero-filled (their source clamped to row 0, a valid address that is not read).
template <int D, int ROWS, int THREADS>
static __device__ __forceinline__ void load_tile_async(unsigned short* dst, const unsigned short* src, int row0, int n) {
    constexpr int CPR = D / 8;  // 16-byte chunks per row
#pragma unroll
    for (int idx = threadIdx.x; idx < ROWS * CPR; idx += THREADS) {
        const int r = idx / CPR, c = idx % CPR;
        const bool valid = row0 + r < n;
        cp_async16_zfill(dst + swz<D>(r, c), src + (long long)(valid ? row0 + r : 0) * D + c * 8, valid);
    }
}

}  // namespace attn10c

template <int D, int BM, int BN, int WARPS, bool BF16, bool CAUSAL, int STAGES>
__global__ void __launch_bounds__(WARPS * 32)
attn_cp_async(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
              const unsigned short* __restrict__ v, unsigned short* __restrict__ o, int n, float scale) {
    using namespace attn10c;
    static_assert(D == 32 || D == 64 || D == 128, "head dim 32, 64 or 128");
    static_assert(BM == 16 * WARPS, "each warp owns 16 query rows");
    static_assert(BN % 16 == 0 && BN >= 16, "a K/V tile is a whole number of k16 steps");
    static_assert(STAGES == 2 || STAGES == 3, "2 or 3 K/V stages");
    constexpr int THREADS = 32 * WARPS;
    constexpr int DK = D / 16;   // k16 steps of S = Q K^T
    constexpr int NT = BN / 8;   // n8 tiles of S (keys)
    constexpr int DT = D / 8;    // n8 tiles of O (head dims)
    constexpr int KT = BN / 16;  // k16 steps of O += P V

    extern __shared__ __align__(16) float smem[];
    unsigned short* sQ = reinterpret_cast<unsigned short*>(smem);  // [BM][D]
    unsigned short* sK = sQ + BM * D;                              // [STAGES][BN][D]
    unsigned short* sV = sK + STAGES * BN * D;                     // [STAGES][BN][D]

    const int m0 = blockIdx.x * BM;
    const long long head = head_offset(blockIdx.y, n, D);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int row_a = m0 + warp * 16 + g;  // this thread's two rows: row_a, row_a + 8

    int n_tiles = (n + BN - 1) / BN;
    if (CAUSAL) n_tiles = min(n_tiles, (m0 + BM + BN - 1) / BN);  // tiles with a key <= the last row

    // Prologue: groups [Q + K_0], [V_0], ..., [K_{S-2}], [V_{S-2}] (empty groups past the last tile,
    // so the wait counts below hold for every j).
    load_tile_async<D, BM, THREADS>(sQ, q + head, m0, n);
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
        if (st < n_tiles) load_tile_async<D, BN, THREADS>(sK + st * BN * D, k + head, st * BN, n);
        cp_async_commit();
        if (st < n_tiles) load_tile_async<D, BN, THREADS>(sV + st * BN * D, v + head, st * BN, n);
        cp_async_commit();
    }
    // Wait for [Q + K_0]; barrier: a warp's Q rows were copied by threads of other warps.
    cp_async_wait<2 * STAGES - 3>();
    __syncthreads();
    // ldmatrix.x4 lane roles: lanes 8i..8i+7 address the rows of 8x8 matrix i. For an A fragment
    // (and V's .trans B fragments) matrix i = rows 8*(i%2).., chunk i/2; for K's two n-tiles,
    // matrix i = keys 8*(i/2).., chunk i%2.
    const int lr = lane & 7, li = lane >> 3;
    unsigned qf[DK][4];
#pragma unroll
    for (int ks = 0; ks < DK; ++ks) ldmatrix_x4(qf[ks], sQ + swz<D>(warp * 16 + lr + 8 * (li & 1), 2 * ks + (li >> 1)));

    const float sl2 = scale * 1.4426950408889634f;  // scores in log2 units: one FFMA per score
    float m_run[2] = {ATTNLAB_NEG_INF, ATTNLAB_NEG_INF};   // running max * sl2
    float l_run[2] = {0.0f, 0.0f};
    float acc[DT][4];
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;

    for (int j = 0; j < n_tiles; ++j) {
        const int kv0 = j * BN;
        const unsigned short* sKj = sK + (j % STAGES) * BN * D;
        const unsigned short* sVj = sV + (j % STAGES) * BN * D;
        // K_j has landed for this thread (newer groups: V_j and K, V of tiles j+1..j+S-2).
        cp_async_wait<2 * STAGES - 3>();
        // Barrier (a): K_j is visible to every warp, and every warp has finished tile j-1, whose
        // stage the copies issued next overwrite.
        __syncthreads();
        {
            const int jn = j + STAGES - 1, st = jn % STAGES;
            if (jn < n_tiles) load_tile_async<D, BN, THREADS>(sK + st * BN * D, k + head, jn * BN, n);
            cp_async_commit();
            if (jn < n_tiles) load_tile_async<D, BN, THREADS>(sV + st * BN * D, v + head, jn * BN, n);
            cp_async_commit();
        }

        // S = Q K^T: one ldmatrix.x4 gives the B fragments of n-tiles 2np, 2np+1 for k-step ks.
        float s[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < DK; ++ks) {
#pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
                unsigned r[4];
                ldmatrix_x4(r, sKj + swz<D>(np * 16 + lr + 8 * (li >> 1), 2 * ks + (li & 1)));
                const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
                mma16816<BF16>(s[2 * np], qf[ks], b0);
                mma16816<BF16>(s[2 * np + 1], qf[ks], b1);
            }
        }

        // Mask keys >= n and (CAUSAL) keys > row, only where some element of the tile can be masked.
        if (kv0 + BN > n || (CAUSAL && kv0 + BN - 1 > m0 + warp * 16)) {
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int col = kv0 + nt * 8 + 2 * t + (r & 1);
                    const int row = row_a + 8 * (r >> 1);
                    if (col >= n || (CAUSAL && col > row)) s[nt][r] = ATTNLAB_NEG_INF;
                }
            }
        }

        // Online softmax, rows g (h = 0) and g + 8 (h = 1).
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = s[0][2 * h];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(ATTNLAB_FULL_MASK, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(ATTNLAB_FULL_MASK, mx, 2));
            // The running max is kept scaled by sl2, so an unchanged max gives alpha = 2^0 = 1
            // exactly (m_old * sl2 - m_new * sl2 would be fused into an FFMA: alpha = 1 + ~1e-7
            // every tile, see 09's header).
            const float m_new = fmaxf(m_run[h], mx * sl2);
            // A row with every key so far masked keeps m = -inf: subtract 0, so p = 2^-inf = 0.
            const float m_sub = m_new == ATTNLAB_NEG_INF ? 0.0f : m_new;
            const float alpha = fast_exp2(m_run[h] - m_sub);  // 0 on the first tile
            m_run[h] = m_new;
            float rs = 0.0f;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                s[nt][2 * h] = fast_exp2(s[nt][2 * h] * sl2 - m_sub);
                s[nt][2 * h + 1] = fast_exp2(s[nt][2 * h + 1] * sl2 - m_sub);
                rs += s[nt][2 * h] + s[nt][2 * h + 1];
            }
            l_run[h] = l_run[h] * alpha + rs;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                acc[dt][2 * h] *= alpha;
                acc[dt][2 * h + 1] *= alpha;
            }
        }

        // V_j has landed for this thread (newer groups: K, V of tiles j+1..j+S-1); barrier (b):
        // for every thread.
        cp_async_wait<2 * STAGES - 2>();
        __syncthreads();

        // O += P V: P's A fragment for k-step kk is S tiles 2kk, 2kk+1 packed; one
        // ldmatrix.x4.trans gives V's B fragments of d-tiles 2dp, 2dp+1 (keys kk*16..+15).
#pragma unroll
        for (int kk = 0; kk < KT; ++kk) {
            const unsigned a[4] = {pack2<BF16>(s[2 * kk][0], s[2 * kk][1]), pack2<BF16>(s[2 * kk][2], s[2 * kk][3]),
                                   pack2<BF16>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                   pack2<BF16>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int dp = 0; dp < DT / 2; ++dp) {
                unsigned r[4];
                ldmatrix_x4_trans(r, sVj + swz<D>(kk * 16 + lr + 8 * (li & 1), 2 * dp + (li >> 1)));
                const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
                mma16816<BF16>(acc[2 * dp], a, b0);
                mma16816<BF16>(acc[2 * dp + 1], a, b1);
            }
        }
    }
    cp_async_wait<0>();  // only empty groups are left; retire them

    // Epilogue: full row sums over the quad, normalise, store rows < n as 16-bit pairs.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float l = l_run[h];
        l += __shfl_xor_sync(ATTNLAB_FULL_MASK, l, 1);
        l += __shfl_xor_sync(ATTNLAB_FULL_MASK, l, 2);
        const float inv = 1.0f / l;  // l >= 1 for a valid row (its max key contributes 2^0)
        const int row = row_a + 8 * h;
        if (row < n) {
            unsigned* orow = reinterpret_cast<unsigned*>(o + head + (long long)row * D);
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
                orow[dt * 4 + t] = pack2<BF16>(acc[dt][2 * h] * inv, acc[dt][2 * h + 1] * inv);
        }
    }
}
