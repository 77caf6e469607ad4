// 10a — flash attention on tensor cores (FlashAttention-2 scheme), bf16/fp16 in and out,
// mma.sync m16n8k16 with fp32 accumulation. Baseline of the 10x ladder.
//
//   O[b,h,i,:] = sum_j softmax_j(scale * Q[b,h,i,:] . K[b,h,j,:]) * V[b,h,j,:]   (j <= i if CAUSAL)
//
// What changed from the fp32 SIMT ladder (01-05, best ~7 TFLOP/s): the two products run on the
// tensor cores. Each warp owns 16 query rows (one m16 tile); per K/V tile of BN keys it computes
// S = Q K^T as (BN/8) x (D/16) mma.m16n8k16 and O += P V as (D/8) x (BN/16) more, all in fp32
// accumulator fragments. Why it should be much faster: one mma.sync does 4096 FLOPs for a few
// issue slots, against 2 per FFMA lane-instruction.
//  * Q fragments are read once (A operand, D/16 k-steps x 4 registers) and stay in registers for
//    the whole block.
//  * Online softmax on the accumulator fragments: thread (g = lane/4, t = lane%4) holds S rows g
//    and g+8, columns 2t, 2t+1 of every n8 tile, so a row's max needs only the 4 lanes of a quad
//    (two xor-shuffles, 1 and 2). Exponentials are fast_exp2 (MUFU.EX2) with scale*log2(e)
//    folded into one FFMA per score: p = 2^(s*scale*log2e - m*scale*log2e). The row sum l stays
//    a per-thread partial sum (every lane of a quad rescales it by the same factor) and is
//    quad-reduced once at the end.
//  * P never goes through shared memory: the accumulator layout of two adjacent n8 tiles
//    (rows g, g+8; columns 2t..2t+1 and 8+2t..8+2t+1) is exactly the A-fragment layout of one
//    k16 step, so P is packed to 16-bit pairs in registers (pack_bf16x2 / pack_f16x2) and used
//    directly as the A operand of P V.
//  * K/V tiles go through shared memory with plain 16-byte loads and stores, unpadded and
//    row-major [key][d]. Fragments are read with scalar loads: 32-bit words for K (a B-fragment
//    register of S = Q K^T is two adjacent d's of one key row) and two 16-bit loads for V (a
//    B-fragment register of P V is two adjacent keys of one d column). With a row stride of D
//    16-bit values (a multiple of 32 banks' worth of words for D >= 64), the 8 lanes g = 0..7 of a
//    K read all hit the same bank: an 8-way conflict (4-way for V). That is the point of 10b.
// Expected effect: far above the fp32 ladder but bound by shared memory: each MMA costs ~16 bank
// wavefronts of fragment loads (S: two 8-way 32-bit loads; P V: four 4-way 16-bit loads) against
// 2 with ldmatrix in 10b, so tens of TFLOP/s, not hundreds; and each K/V tile is loaded
// synchronously (load, barrier, compute, barrier), with no overlap of loads and MMAs.
//
// Masking: key columns >= n get -inf (tail tile only); CAUSAL: row i sees keys j <= i, K/V tiles
// entirely above the diagonal are skipped (the loop stops at the block's last row), and the mask
// is only evaluated on tiles that cross the diagonal or the end. Rows whose running max is still
// -inf subtract 0 instead (no -inf - -inf = NaN); a NaN in a query row makes that row's scores NaN,
// hence its p, l and output NaN, and nothing else (rows never mix: quads share a row).
// Rows >= n are computed on zero-filled Q rows and never stored; K/V rows >= n are zero-filled
// (V must be finite: 0 * garbage could be NaN).
//
// Template: D in {32, 64, 128}; BM = 16 * WARPS query rows per block; BN keys per tile
// (multiple of 16); BF16 = true -> bf16, false -> fp16 (inputs and output, passed as the bit
// patterns in unsigned short); CAUSAL.
// Layout: q, k, v, o contiguous [B, H, N, D] 16-bit, 16-byte aligned (16-byte loads).
// Launch: grid = (ceil(n / BM), B*H), blockIdx.y = b*H + h; block = 32*WARPS threads;
//         dynamic shared memory = (BM + 2*BN) * D * 2 bytes: Q tile [BM][D], K tile [BN][D],
//         V tile [BN][D], all 16-bit, unpadded row-major.
//         Above 48 KB (e.g. 64 KB at D = 128, BM = 128, BN = 64) the launcher must raise
//         cudaFuncAttributeMaxDynamicSharedMemorySize.
#include "mma.cuh"

namespace attn10a {

static __device__ __forceinline__ unsigned ld32(const unsigned short* p) { return *reinterpret_cast<const unsigned*>(p); }

// rows x D tile from global (row0.., rows >= n zero-filled) into unpadded shared memory, 16 B a thread.
template <int D, int ROWS, int THREADS>
static __device__ __forceinline__ void load_tile(unsigned short* dst, const unsigned short* src, int row0, int n) {
    constexpr int CPR = D / 8;  // 16-byte chunks per row
    for (int idx = threadIdx.x; idx < ROWS * CPR; idx += THREADS) {
        const int r = idx / CPR, c = idx % CPR;
        U4 val{0u, 0u, 0u, 0u};
        if (row0 + r < n) val = *reinterpret_cast<const U4*>(src + (long long)(row0 + r) * D + c * 8);
        *reinterpret_cast<U4*>(dst + r * D + c * 8) = val;
    }
}

}  // namespace attn10a

template <int D, int BM, int BN, int WARPS, bool BF16, bool CAUSAL>
__global__ void __launch_bounds__(WARPS * 32)
attn_mma_baseline(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
                  const unsigned short* __restrict__ v, unsigned short* __restrict__ o, int n, float scale) {
    using namespace attn10a;
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
    unsigned qf[DK][4];
    {
        const unsigned short* qw = sQ + warp * 16 * D;
#pragma unroll
        for (int ks = 0; ks < DK; ++ks) {
            qf[ks][0] = ld32(qw + g * D + ks * 16 + 2 * t);
            qf[ks][1] = ld32(qw + (g + 8) * D + ks * 16 + 2 * t);
            qf[ks][2] = ld32(qw + g * D + ks * 16 + 8 + 2 * t);
            qf[ks][3] = ld32(qw + (g + 8) * D + ks * 16 + 8 + 2 * t);
        }
    }

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

        // S = Q K^T: B fragment of n-tile nt, k-step ks = K[nt*8+g][ks*16+2t..] and [..+8+2t..].
        float s[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < DK; ++ks) {
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const unsigned short* kr = sK + (nt * 8 + g) * D + ks * 16 + 2 * t;
                const unsigned b[2] = {ld32(kr), ld32(kr + 8)};
                mma16816<BF16>(s[nt], qf[ks], b);
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

        // O += P V: P's A fragment for k-step kk is S tiles 2kk, 2kk+1 packed; the B fragment of
        // d-tile dt is V[kk*16+2t, +1][dt*8+g] and V[kk*16+8+2t, +1][dt*8+g] (16-bit loads).
#pragma unroll
        for (int kk = 0; kk < KT; ++kk) {
            const unsigned a[4] = {pack2<BF16>(s[2 * kk][0], s[2 * kk][1]), pack2<BF16>(s[2 * kk][2], s[2 * kk][3]),
                                   pack2<BF16>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                   pack2<BF16>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                const unsigned short* vc = sV + (kk * 16 + 2 * t) * D + dt * 8 + g;
                const unsigned b[2] = {(unsigned)vc[0] | ((unsigned)vc[D] << 16),
                                       (unsigned)vc[8 * D] | ((unsigned)vc[9 * D] << 16)};
                mma16816<BF16>(acc[dt], a, b);
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
