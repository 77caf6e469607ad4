// 10f — flash attention on tensor cores: every fragment load at a per-lane base register plus a
// compile-time immediate, so the loads need no address arithmetic.
//
//   O[b,h,i,:] = sum_j softmax_j(scale * Q[b,h,i,:] . K[b,h,j,:]) * V[b,h,j,:]   (j <= i if CAUSAL)
//
// What changed from 10d_tuned (everything else is 10d's: tiles, cp.async ring with one barrier per
// tile, speculative softmax, causal skipping, staged output; the same MMAs on the same fragments
// in the same order, so the output is bit-identical to 10d's):
//  1. Why. Nsight Compute's per-instruction view of 10d at D = 128 on the H200
//     (scripts/ncu_source.py) shows that the compiler the lab loads kernels with (NVRTC) computes
//     every ldmatrix address anew: per LDSM one LOP3 (the XOR swizzle, (row | chunk) ^ key) and one
//     LEA (element index to byte address, plus the stage base). Per tile and warp that is as many
//     of those instructions as there are HMMAs (LOP3 + LEA 35 M executed against 34 M HMMA and
//     17 M LDSM), about a third of all instructions, each a dependent step in front of its load.
//     10d meant these addresses to be per-lane constants plus immediates ("(c + 2k) ^ x =
//     (c ^ x) ^ 2k"), but an XOR with a constant is not an offset, so the compiler cannot fold it
//     into the load, and with 248 registers live it does not keep the 2 x D/16 XOR results either.
//  2. The fix is arithmetic: the swizzle key of a lane's row is < 8 (3 bits) and a k-step
//     advances the chunk by 2, so chunk (c ^ key) ^ 2k = ((c ^ key) ^ 2x) + 8h for k = x + 4h,
//     x < 4 (bit 3 and up of 2k never meet the key's bits: XOR is addition there). So a lane needs
//     only NX = min(D/16, 4) base addresses per operand (x = 0..NX-1), kept in registers (8 at
//     D >= 64, one add per tile for the stage), and every load of K (B fragments, k-step ks, n-tile
//     pair np) and of V (.trans, k-step kk, d-tile pair dp) is base[x] + an immediate: rows
//     (np*16 or kk*16) * D * 2 bytes, 32 * NX * h bytes for the chunk, and BN*D*2 for V behind K.
//  3. The loads go through ldmatrix_x4_at(r, base, off) / ldmatrix_x4_trans_at (kernels/mma.cuh)
//     with off a constant once the loops are unrolled, and ptxas folds it into the instruction's
//     immediate. Checked in the SASS of NVRTC 13.0, the compiler the lab's loader used on the H200
//     (torch's): 10d's main loop (D = 128, BN = 128) has 196 LOP3 + 202 LEA around its 200 LDSM,
//     all loads [R]; 10f's has 14 + 20 and its loads are [R+UR+imm] (the stage offset is a
//     uniform register). The loop shrinks from 2263 to 1820 instructions, 384 of them HMMA.
//     Expected effect: a fifth fewer instructions in the main loop and no LOP3/LEA between
//     a load's base and the load; whether it shows in the time depends on whether issue or the
//     loads' latency (short_scoreboard) was what held the warps (notebook 10 measures it).
//
// Masking, NaN rows, tails, the speculative-softmax bound and the layout are 10d's (see its header).
//
// Template: D in {32, 64, 128}; BM = 16 * WARPS query rows per block, 32*WARPS a multiple of D;
// BN keys per tile, a multiple of 16 and of 256*WARPS/D; BF16 = true -> bf16, false -> fp16
// (inputs and output, passed as the bit patterns in unsigned short); CAUSAL; STAGES in {2, 3}.
// Layout: q, k, v, o contiguous [B, H, N, D] 16-bit, 16-byte aligned (cp.async of 16 bytes).
// Launch: grid = (ceil(n / BM), B*H), blockIdx.y = b*H + h; block = 32*WARPS threads;
//         dynamic shared memory = (BM + 2*STAGES*BN) * D * 2 bytes (attn_fixed_offsets_smem_bytes),
//         which needs cudaFuncAttributeMaxDynamicSharedMemorySize above 48 KB.
// Barriers: as 10d (one after the prologue, one per tile; __syncwarp in the epilogue).
#include "mma.cuh"

namespace attn10f {

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
template <int D, int ROWS, int THREADS>
struct TileCopy {
    static constexpr int CPR = D / 8;           // 16-byte chunks per row
    static constexpr int RPP = THREADS / CPR;   // rows per pass
    static constexpr int PASSES = ROWS / RPP;
    static_assert(THREADS % CPR == 0 && RPP % 8 == 0 && ROWS % RPP == 0, "tile copy: THREADS must cover 8 rows a pass");
    unsigned short* s;        // this thread's first chunk in a tile at smem_base
    const unsigned short* g;  // this thread's first chunk in the tile starting at row 0 of src
    const unsigned short* g0; // row 0 of src: a valid address for zero-filled copies
    int row;                  // this thread's first row within a tile
    __device__ __forceinline__ TileCopy(unsigned short* smem_base, const unsigned short* src) {
        row = threadIdx.x / CPR;
        const int c = threadIdx.x % CPR;
        s = smem_base + swz<D>(row, c);
        g = src + row * D + c * 8;
        g0 = src;
    }
    // Tile of rows row0.. of src into the tile at smem_base + dst_off; every row exists.
    __device__ __forceinline__ void full(int dst_off, long long row0) const {
        unsigned short* d = s + dst_off;
        const unsigned short* src = g + row0 * D;
#pragma unroll
        for (int i = 0; i < PASSES; ++i) cp_async16(d + i * RPP * D, src + i * RPP * D);
    }
    // Only rows < rows_valid of the tile exist; the others are zero-filled (source clamped).
    __device__ __forceinline__ void guarded(int dst_off, long long row0, int rows_valid) const {
        unsigned short* d = s + dst_off;
        const unsigned short* src = g + row0 * D;
#pragma unroll
        for (int i = 0; i < PASSES; ++i) {
            const bool valid = row + i * RPP < rows_valid;
            cp_async16_zfill(d + i * RPP * D, valid ? src + i * RPP * D : g0, valid);
        }
    }
};

}  // namespace attn10f

template <int D, int BM, int BN, int WARPS, bool BF16, bool CAUSAL, int STAGES>
__global__ void __launch_bounds__(WARPS * 32, attn10f::min_blocks(D, WARPS * 32))
attn_fixed_offsets(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
           const unsigned short* __restrict__ v, unsigned short* __restrict__ o, int n, float scale) {
    using namespace attn10f;
    static_assert(D == 32 || D == 64 || D == 128, "head dim 32, 64 or 128");
    static_assert(BM == 16 * WARPS, "each warp owns 16 query rows");
    static_assert(BN % 16 == 0 && BN >= 16, "a K/V tile is a whole number of k16 steps");
    static_assert(STAGES == 2 || STAGES == 3, "2 or 3 K/V stages");
    constexpr int THREADS = 32 * WARPS;
    constexpr int DK = D / 16;   // k16 steps of S = Q K^T
    constexpr int NT = BN / 8;   // n8 tiles of S (keys)
    constexpr int DT = D / 8;    // n8 tiles of O (head dims)
    constexpr int KT = BN / 16;  // k16 steps of O += P V
    constexpr int CPR = D / 8;   // 16-byte chunks per row
    constexpr int STAGE = 2 * BN * D;          // elements per stage: K tile then V tile
    constexpr float P_BOUND = 256.0f;          // largest p accepted without a rescale (fp16-safe)

    extern __shared__ __align__(16) float smem[];
    unsigned short* sQ = reinterpret_cast<unsigned short*>(smem);  // [BM][D], later the output
    unsigned short* sKV = sQ + BM * D;                             // [STAGES][K [BN][D], V [BN][D]]

    // Causal blocks do more work the further they are from the first row: run those first.
    const int mblk = CAUSAL ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int m0 = mblk * BM;
    const long long head = head_offset(blockIdx.y, n, D);
    const unsigned short* kh = k + head;
    const unsigned short* vh = v + head;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int wrow0 = m0 + warp * 16;  // the warp's first row; this thread's rows: wrow0+g, wrow0+g+8

    int n_tiles = (n + BN - 1) / BN;
    if (CAUSAL) n_tiles = min(n_tiles, (m0 + BM + BN - 1) / BN);  // tiles with a key <= the last row

    // Prologue: groups [Q + tile 0], [tile 1], ..., [tile S-2] (empty past the last tile).
    // K and V of tile jt into stage jt % STAGES (guarded only when the tile passes n).
    const TileCopy<D, BN, THREADS> k_copy(sKV, kh), v_copy(sKV + BN * D, vh);
    auto load_kv = [&](int jt) {
        const int st = (jt % STAGES) * STAGE;
        if ((jt + 1) * BN <= n) {
            k_copy.full(st, (long long)jt * BN);
            v_copy.full(st, (long long)jt * BN);
        } else {
            k_copy.guarded(st, (long long)jt * BN, n - jt * BN);
            v_copy.guarded(st, (long long)jt * BN, n - jt * BN);
        }
    };
    {
        const TileCopy<D, BM, THREADS> q_copy(sQ, q + head);
        q_copy.guarded(0, m0, n - m0);
    }
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
        if (st < n_tiles) load_kv(st);
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
    unsigned kb0[NX], vb0[NX];
    {
        const unsigned kv_base = smem_u32(sKV);
#pragma unroll
        for (int x = 0; x < NX; ++x) {
            kb0[x] = kv_base + 2u * (unsigned)(k_row * D + ((k_c ^ (2 * x)) << 3));
            vb0[x] = kv_base + 2u * (unsigned)(a_row * D + ((a_c ^ (2 * x)) << 3));
        }
    }

    unsigned qf[DK][4];
#pragma unroll
    for (int ks = 0; ks < DK; ++ks) ldmatrix_x4(qf[ks], sQ + (warp * 16 + a_row) * D + ((a_c ^ (2 * ks)) << 3));

    const float sl2 = scale * 1.4426950408889634f;  // scores in log2 units: one FFMA per score
    float mu[2] = {ATTNLAB_NEG_INF, ATTNLAB_NEG_INF};  // subtracted max (log2 units), -inf: none yet
    float mus[2] = {0.0f, 0.0f};                       // the same, 0 while -inf (no -inf - -inf)
    float l_run[2] = {0.0f, 0.0f};                     // per-thread partial row sums
    float acc[DT][4];
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;

    for (int j = 0; j < n_tiles; ++j) {
        const int kv0 = j * BN;
        // Issue tile j+S-1 into the stage of tile j-1 (every warp finished it before the last barrier).
        if (j + STAGES - 1 < n_tiles) load_kv(j + STAGES - 1);
        cp_async_commit();

        // CAUSAL: a tile entirely above this warp's last row contributes nothing to it.
        if (!CAUSAL || kv0 <= wrow0 + 15) {
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
                        unsigned r[4];
                        ldmatrix_x4_at(r, kb[ks % NX], 2 * (np * 16 * D) + 32 * NX * (ks / NX));
                        const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
                        mma16816<BF16>(s[2 * np], qf[ks], b0);
                        mma16816<BF16>(s[2 * np + 1], qf[ks], b1);
                    }
                }
            };
            // Mask: CAUSAL: key col > row (element (nt, r) has col - row = nt*8 + (r&1) - 8*(r>>1) -
            // diff); else key col >= n.
            auto mask = [&]() {
                const int diff = CAUSAL ? (wrow0 + g) - (kv0 + 2 * t) : n - (kv0 + 2 * t);
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
            if (CAUSAL ? (kv0 + BN - 1 > wrow0) : (kv0 + BN > n)) {
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

    // Epilogue: full row sums over the quad, normalise, stage the warp's 16 rows in its own Q rows
    // (only this warp ever read them), then 16-byte coalesced stores of the rows < n.
    unsigned short* sO = sQ + warp * 16 * D;
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

// Dynamic shared memory in bytes for attn_fixed_offsets<D, BM, BN, WARPS, BF16, CAUSAL, STAGES>.
constexpr __host__ __device__ unsigned long long attn_fixed_offsets_smem_bytes(int D, int BM, int BN, int STAGES) {
    return (unsigned long long)(BM + 2 * STAGES * BN) * D * 2;
}

// Tiles per head dim: see the registry (lib/attnlab/attention/kernels.py).
