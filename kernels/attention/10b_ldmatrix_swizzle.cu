// 10b — flash attention on tensor cores: fragments by ldmatrix from XOR-swizzled shared memory.
//
//   O[b,h,i,:] = sum_j softmax_j(scale * Q[b,h,i,:] . K[b,h,j,:]) * V[b,h,j,:]   (j <= i if CAUSAL)
//
// What changed from 10a_mma_baseline: how fragments leave shared memory, and the shared-memory
// layout that makes that conflict-free. Everything else (16 rows a warp, Q in registers, online
// softmax on fragments, P reused in registers, synchronous tile loads) is unchanged.
//  * Fragments come from ldmatrix (.x4: four 8x8 16-bit matrices, one instruction, each lane
//    giving one 16-byte row address): Q's A fragments (one x4 per k16 step), K's B fragments for
//    two n8 tiles of keys at once (x4: keys 8p..8p+15 x one k16 step), and V's B fragments with
//    ldmatrix.x4.trans (keys kk*16..+15 x two n8 tiles of d): .trans hands each lane a column
//    pair of an 8x8 matrix, i.e. two adjacent keys of one d, so V stays row-major [key][d] in
//    shared memory with no transposition. One ldmatrix.x4 (4 conflict-free 128-byte
//    wavefronts) replaces 4 scalar 32-bit loads, 8-way conflicted (32 wavefronts), for K, or 8
//    16-bit loads, 4-way conflicted (32 wavefronts), plus their packing, for V.
//  * Rows are XOR-swizzled on 16-byte chunks: chunk c of row r is stored at chunk c ^ (r % 8)
//    (D >= 64; D = 32 has 4 chunks a row and uses c ^ ((r / 2) % 4)). Bank argument: shared memory
//    serves 128 bytes (32 banks x 4 B) per cycle, so a 16-byte access is conflict-free when the 8
//    lanes of each quarter-warp phase hit 8 different 16-byte slots (address / 16 mod 8). An
//    ldmatrix phase reads one 8x8 matrix = the same logical chunk c of 8 consecutive rows r0..r0+7
//    (r0 a multiple of 8). A row is D*2 bytes, a multiple of 128 for D >= 64, so row r's chunk c
//    sits in slot (c ^ (r % 8)) % 8 = (c % 8) ^ (r % 8): 8 distinct slots as r % 8 runs over 0..7,
//    no conflict (unswizzled, all 8 rows would share slot c % 8: 8-way). For D = 32 (64-byte rows)
//    the slot is 4 (r % 2) + (c ^ ((r / 2) % 4)), again 8 distinct values over r0..r0+7. The
//    16-byte stores of a tile (8 consecutive threads write 8 consecutive chunks: one row, or two
//    rows for D = 32) permute chunks within a row, so they stay conflict-free too. The swizzle only
//    permutes within a 128-byte line, so global loads stay fully coalesced.
// Expected effect: several times 10a: the conflicts (8-way on K, 4-way on V) made shared memory the
// bottleneck; now each fragment byte costs one bank access and far fewer load instructions issue.
// Loads are still synchronous (load, barrier, compute, barrier): that is 10c.
//
// Masking: key columns >= n get -inf (tail tile only); CAUSAL: row i sees keys j <= i, K/V tiles
// entirely above the diagonal are skipped (the loop stops at the block's last row), and the mask
// is only evaluated on tiles that cross the diagonal or the end. Rows whose running max is still
// -inf subtract 0 instead (no -inf - -inf = NaN); a NaN in a query row makes that row's scores NaN,
// hence its p, l and output NaN, and nothing else (rows never mix: quads share a row).
// Rows >= n are computed on zero-filled Q rows and never stored; K/V rows >= n are zero-filled.
//
// Template: D in {32, 64, 128}; BM = 16 * WARPS query rows per block; BN keys per tile
// (multiple of 16); BF16 = true -> bf16, false -> fp16 (inputs and output, passed as the bit
// patterns in unsigned short); CAUSAL.
// Layout: q, k, v, o contiguous [B, H, N, D] 16-bit, 16-byte aligned (16-byte loads).
// Launch: grid = (ceil(n / BM), B*H), blockIdx.y = b*H + h; block = 32*WARPS threads;
//         dynamic shared memory = (BM + 2*BN) * D * 2 bytes: Q tile [BM][D], K tile [BN][D],
//         V tile [BN][D], 16-bit, row-major with 16-byte chunks XOR-swizzled within each row.
//         Above 48 KB (e.g. 64 KB at D = 128, BM = 128, BN = 64) the launcher must raise
//         cudaFuncAttributeMaxDynamicSharedMemorySize.
#include "mma.cuh"

namespace attn10b {


// Element offset of 16-byte chunk `chunk` of row `row` in a swizzled [rows][D] 16-bit tile.
template <int D>
static __device__ __forceinline__ int swz(int row, int chunk) {
    if constexpr (D >= 64) return row * D + ((chunk ^ (row & 7)) << 3);
    else return row * D + ((chunk ^ ((row >> 1) & 3)) << 3);
}

// rows x D tile from global (row0.., rows >= n zero-filled) into swizzled shared memory, 16 B a thread.
template <int D, int ROWS, int THREADS>
static __device__ __forceinline__ void load_tile(unsigned short* dst, const unsigned short* src, int row0, int n) {
    constexpr int CPR = D / 8;  // 16-byte chunks per row
    for (int idx = threadIdx.x; idx < ROWS * CPR; idx += THREADS) {
        const int r = idx / CPR, c = idx % CPR;
        U4 val{0u, 0u, 0u, 0u};
        if (row0 + r < n) val = *reinterpret_cast<const U4*>(src + (long long)(row0 + r) * D + c * 8);
        *reinterpret_cast<U4*>(dst + swz<D>(r, c)) = val;
    }
}

}  // namespace attn10b

template <int D, int BM, int BN, int WARPS, bool BF16, bool CAUSAL>
__global__ void __launch_bounds__(WARPS * 32)
attn_ldmatrix_swizzle(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
                      const unsigned short* __restrict__ v, unsigned short* __restrict__ o, int n, float scale) {
    using namespace attn10b;
    static_assert(D == 32 || D == 64 || D == 128, "head dim 32, 64 or 128");
    static_assert(BM == 16 * WARPS, "each warp owns 16 query rows");
    static_assert(BN % 16 == 0 && BN >= 16, "a K/V tile is a whole number of k16 steps");
    constexpr int THREADS = 32 * WARPS;
    constexpr int DK = D / 16;   // k16 steps of S = Q K^T
    constexpr int NT = BN / 8;   // n8 tiles of S (keys)
    constexpr int DT = D / 8;    // n8 tiles of O (head dims)
    constexpr int KT = BN / 16;  // k16 steps of O += P V

    extern __shared__ __align__(16) float smem[];
    unsigned short* sQ = reinterpret_cast<unsigned short*>(smem);  // [BM][D]
    unsigned short* sK = sQ + BM * D;                              // [BN][D]
    unsigned short* sV = sK + BN * D;                              // [BN][D]

    const int m0 = blockIdx.x * BM;
    const long long head = head_offset(blockIdx.y, n, D);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int row_a = m0 + warp * 16 + g;  // this thread's two rows: row_a, row_a + 8

    load_tile<D, BM, THREADS>(sQ, q + head, m0, n);
    // Barrier: a warp's 16 Q rows were stored by threads of other warps.
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

    int n_tiles = (n + BN - 1) / BN;
    if (CAUSAL) n_tiles = min(n_tiles, (m0 + BM + BN - 1) / BN);  // tiles with a key <= the last row

    for (int j = 0; j < n_tiles; ++j) {
        const int kv0 = j * BN;
        // Barrier: every warp has finished reading the previous K/V tile before it is overwritten.
        __syncthreads();
        load_tile<D, BN, THREADS>(sK, k + head, kv0, n);
        load_tile<D, BN, THREADS>(sV, v + head, kv0, n);
        // Barrier: every warp reads every key row, stored by other warps.
        __syncthreads();

        // S = Q K^T: one ldmatrix.x4 gives the B fragments of n-tiles 2np, 2np+1 for k-step ks.
        float s[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < DK; ++ks) {
#pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
                unsigned r[4];
                ldmatrix_x4(r, sK + swz<D>(np * 16 + lr + 8 * (li >> 1), 2 * ks + (li & 1)));
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
                ldmatrix_x4_trans(r, sV + swz<D>(kk * 16 + lr + 8 * (li & 1), 2 * dp + (li >> 1)));
                const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
                mma16816<BF16>(acc[2 * dp], a, b0);
                mma16816<BF16>(acc[2 * dp + 1], a, b1);
            }
        }
    }

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
