// 10e — flash attention on tensor cores, 32 query rows per warp: FlashAttention-2's warp
// arrangement, so every K/V fragment read from shared memory feeds two MMAs per n8 tile.
//
//   O[b,h,i,:] = sum_j softmax_j(scale * Q[b,h,i,:] . K[b,h,j,:]) * V[b,h,j,:]   (j <= i if CAUSAL)
//
// What changed from 10d_tuned (same mma.sync m16n8k16, cp.async STAGES ring with one barrier per
// tile, speculative softmax, causal skipping, heaviest-first causal order, staged output):
//  1. Each warp owns 32 query rows (two m16 tiles, rows wrow0..wrow0+31; BM = 32 * WARPS, default
//     128 rows with 4 warps). One ldmatrix.x4 of K (two n8 key tiles x k16) now feeds 4 MMAs (both
//     m16 tiles) instead of 2, and one ldmatrix.x4.trans of V (k16 keys x two n8 head-dim tiles)
//     feeds 4 instead of 2. 10d moved 256 bytes of shared memory per HMMA.16816 (an ldmatrix.x4,
//     512 B, per 2 MMAs), which caps it near 83% of the mma.sync peak (128 B/clk/SM of shared
//     bandwidth); 10e moves 192 (Q included, see the counts below).
//  2. Q is no longer held in registers (at D = 128 two m16 tiles are 64 registers, on top of 128
//     for O): its two A fragments are read by ldmatrix at each k-step of S, and each feeds the
//     NTC = 4 MMAs of the chunk's n8 tiles.
//  3. S is computed and consumed in chunks of KC keys (template parameter, 32 or 64; BN / KC
//     chunks a tile). KC = 32: S of a chunk is 32 fp32 registers for both m16 tiles, so O (128
//     registers at D = 128), S, two chunks of packed P (16 each) and the fragments fit in 255
//     registers with chunk pipelining (4.). KC = 64 (the D = 128 default): S of a whole 64-key
//     tile (64 registers), no chunk pipelining; see 7. 2 blocks of 4 warps per SM at D = 128
//     (__launch_bounds__), 3 at D <= 64 (<= 168 registers).
//  4. Software pipelining inside a tile (KC = 32 and BN >= 64, except causal at D = 128, where
//     ptxas would spill): chunk c's straight-line block is S(c) = Q K_c^T, its exponentials, and
//     O += P(c-1) V(c-1), the MMAs of the previous chunk, which do not depend on the
//     exponentials, so the tensor pipe has work while this warp's MUFU runs (ptxas interleaves
//     ~30 of the block's 128 HMMAs with its 32 ex2). The last chunk's P V follows its vote.
//  5. Speculative softmax per chunk (10d's, per 32 keys): P = 2^(s*scale*log2e - mus) against the
//     current per-row reference mus, kept if every lane's partial row sums are <= 256 (a warp
//     vote); otherwise (and always for tile 0's chunk 0, where no mus exists yet) the exact path
//     recomputes S of the chunk (S is not kept alive across the vote: 32 registers), takes the
//     row maxima over the quad, raises mus, rescales O and l (which already include every
//     earlier chunk) and exponentiates again. A row's mus is only ever set to one of its scores,
//     so its maximum contributes >= 1 to l; 10d's running maximum register (mu) is gone: mus is
//     set for every row by tile 0's chunk 0, which holds key 0, visible to every row.
//  6. Fragment-major shared-memory layout instead of 10d's row-major XOR swizzle: a [ROWS][D]
//     tile is stored as 16 x 16 blocks of 512 contiguous bytes (block (cb, rb) = rows 16rb..,
//     columns 16cb.., as two 16 x 8 halves). Every 8 x 8 matrix an ldmatrix reads is 128
//     contiguous bytes (conflict-free), and every fragment address is a per-lane constant plus a
//     compile-time offset: no per-ldmatrix address arithmetic (10d: a LOP3/LEA pair each) and no
//     registers holding swizzled addresses. The tile copies move 8 rows x 64 bytes per warp and
//     pass (conflict-free 16-byte stores, each destination a per-thread constant + immediate).
//  7. (Revision, after the first H200 timings: 10e at KC = 32 ran at 223-254 TFLOP/s at D = 128,
//     0.65-0.75x FA2, with ncu (D = 64) showing the tensor pipe at 35% while issue slots were only
//     25% busy; top stalls wait 25%, short_scoreboard 21%, mio_throttle 20%.) Reading: few
//     instructions per MMA but the warp's own chain is latency-bound with only 2 warps per
//     sub-partition; the MIO queue (ldmatrix, MUFU) fills in bursts (SASS: 10-11 LDSM in a row at
//     each chunk start, then the MMAs wait on them (short_scoreboard), then a MUFU tail of ~30 ex2
//     with no MMA of this warp). Changes:
//     a. KC = 64 (S of the whole 64-key tile, FA2's granularity): Q's A fragments are read once per
//        64 keys instead of once per 32 (LDSM per tile and warp at D = 128: 80 instead of 96; MIO
//        queue pressure down by 1/6), each k-step has 16 independent accumulators instead of 8
//        (two m16 tiles x 8 n8 tiles: more MMAs in flight per warp, shorter 'wait'-bound chains),
//        one vote / branch per tile instead of two, and the code per tile is smaller (no pipelined
//        block variants: 640 HMMA in the SASS instead of 704). What is lost: 4.'s in-warp overlap
//        of P V with the exponentials (ptxas had pulled most of those MMAs into the S phase
//        anyway, leaving the MUFU tail exposed), so the overlap of MUFU with the tensor pipe now
//        comes from the other warp of the sub-partition, as in FA2.
//     b. Register diet for the S phase (O 128 + S 64 live): the K/V copies take a block-uniform
//        row-0 pointer (k + head + jt*BN*D: kernel parameter + uniform offset) plus this thread's
//        32-bit offset, instead of a 64-bit per-thread offset live across the loop; without this
//        KC = 64 spilled 8 bytes at 255 registers (and KC = 32 BN = 64 STAGES = 2 24 bytes).
//     Expected effect at D = 128: fewer MIO stalls and more MMAs in flight per warp, aiming at FA2's
//     345/357 TFLOP/s (FA2 uses the same 32 rows a warp, 8 warps per SM, 64-key S); unmeasured
//     here (no GPU): time the alternatives listed at the end of this file.
//  8. (Revision, found with scripts/ncu_source.py and NVRTC 13.0 here.) The ldmatrix addresses are
//     32-bit shared-space values (smem_u32 once, then ldmatrix_x4_at: 10f's helper) instead of
//     generic pointers converted at each load. The NVRTC that torch ships (13.0, what CuPy uses on
//     the GPU machine) kept those pointers 64-bit and spilled 280 bytes at D = 128; nvcc 13.0 did
//     not, so the static build had hidden it. After the fix 10e is still well behind SDPA's flash
//     kernel (notebook 10's ladder table); the rest is 10e's own (its counters there).
// Expected effect of 1.-6. (KC = 32) (SASS, D = 128, bf16, common path of one 64-key tile and one warp, copies and
// loop included): 10e 682 instructions for 256 HMMA.16816: 96 LDSM.x4 (Q 32, K 32, V 32: 192
// shared bytes per HMMA), 64 MUFU.EX2, 64 FFMA, 72 FADD, 32 F2FP, 16 LDGSTS, ~80 integer/branch:
// 1.66 other instructions per HMMA. 10d: 438 for 128 HMMA: 64 LDSM (256 B per HMMA), 32 MUFU,
// ~100 integer (swizzled addresses): 2.42 per HMMA. Per SM, at the measured mma.sync peak
// (645 TFLOP/s: ~0.6 HMMA.16816 per clock per SM, 6.6 clocks of tensor pipe per HMMA per
// sub-partition) 10e needs 192 B/HMMA x 0.6 = 115 of the 128 B/clk of shared memory (10d: 154,
// i.e. 10d cannot pass ~83% of peak), MUFU 8 clocks per 4 HMMA (30% of the tensor time, overlapped)
// and ~1.7 issue slots per 6.6 clocks. So no throughput limit binds below ~90% of peak; what is
// left is latency hiding with 2 warps per sub-partition (from 2 independent blocks), helped by the
// chunk pipelining (ptxas interleaves ~30 of a block's 128 HMMA with its 32 ex2). Target: >= SDPA
// flash (FlashAttention-2: the same warp arrangement and Q re-read from shared memory, but 2
// barriers per tile, a row max and an O rescale every tile) at D = 128. At D = 64 the softmax is
// twice as large per MMA and 10d keeps Q in registers with 4 blocks of 4 warps per SM (10e: 3):
// time both; the registry can pick per D.
//
// Masking: key columns >= n get -inf (tail chunks only); CAUSAL: row i sees keys j <= i (rows >= n
// are never stored). Chunks entirely past n (or, CAUSAL, above the warp's last row) are skipped,
// and so are whole tiles above the warp's rows (loads are skipped for tiles above the block's last
// row). A NaN in a query row makes that row's scores, p, l and output NaN and nothing else (rows
// never mix: quads share a row; its NaN sums only send its warp down the exact path). Rows >= n
// are computed on zero-filled Q rows and never stored; K/V rows >= n are zero-filled.
//
// Template: D in {32, 64, 128}; BM = 32 * WARPS query rows per block, WARPS even (2, 4 or 8);
// BN keys per tile, a multiple of KC, and (BN/8) * (D/32) a multiple of WARPS (whole copy passes:
// true for BN >= 32 with 4 warps); BF16 = true -> bf16, false -> fp16 (inputs and output, as
// 16-bit bit patterns in unsigned short); CAUSAL; STAGES in {2, 3}; KC in {32, 64} keys per S
// chunk (8th parameter, default 32, so 7-argument instantiations keep their old meaning).
// Layout: q, k, v, o contiguous [B, H, N, D] 16-bit, 16-byte aligned (cp.async of 16 bytes).
// Launch: grid = (ceil(n / BM), B*H), blockIdx.y = b*H + h; block = 32*WARPS threads;
//         dynamic shared memory = (BM + 2*STAGES*BN) * D * 2 bytes (attn_two_row_tiles_smem_bytes,
//         the same formula as 10d), which needs cudaFuncAttributeMaxDynamicSharedMemorySize above
//         48 KB: Q tile [BM][D] (reused for the output), then STAGES x {K tile [BN][D], V tile
//         [BN][D]}, each tile fragment-major (see 6).
// Defaults (also at the end of this file): D = 128: (BM, BN, WARPS, STAGES, KC) =
// (128, 64, 4, 2, 64), 96 KB, 2 blocks/SM; D = 64: (128, 64, 4, 3, 32), 64 KB, 3 blocks/SM;
// D = 32: (128, 64, 4, 3, 32).
// Barriers: one after the prologue (Q and tile 0 visible), one per tile (tile j+1 visible; stage
// of tile j free for the copies issued at the top of the next iteration); the epilogue needs only
// __syncwarp (a warp reads back its own rows).
#include "mma.cuh"

namespace attn10e {

// Blocks per SM the register budget is sized for (__launch_bounds__' second argument): <= 255
// registers at D = 128 (2 blocks of 4 warps per SM; O alone is 128 registers), <= 168 at D <= 64
// (3 blocks of 4 warps; 128 for 4 blocks would spill: O 64, S 32, P 32, fragments).
__host__ __device__ constexpr int min_blocks(int D, int threads) {
    return 65536 / (threads * (D <= 64 ? 168 : 255)) > 0 ? 65536 / (threads * (D <= 64 ? 168 : 255)) : 1;
}

// Fragment-major shared layout of a ROWS x D 16-bit tile: 16 x 16 blocks (ROWS/16 of them per
// 16 columns), block (cb, rb) at element (cb * ROWS/16 + rb) * 256 holding rows 16rb..16rb+15 and
// columns 16cb..16cb+15 as two 16 x 8 halves (columns 16cb..+7, then 16cb+8..+15), 16 bytes a
// row. So every 8 x 8 matrix an ldmatrix reads is 128 contiguous bytes (conflict-free), and an
// MMA fragment's address is a per-lane constant plus a compile-time offset (no swizzle).
template <int ROWS>
static __device__ __forceinline__ int frag_off(int row, int col) {
    return ((col >> 4) * (ROWS / 16) + (row >> 4)) * 256 + ((col >> 3) & 1) * 128 + (row & 15) * 8 + (col & 7);
}

// ROWS x D tile copies by cp.async from one [n][D] global matrix into the fragment-major layout.
// A warp copies 8 rows x 4 16-byte chunks a pass (lane: row lane % 8, chunk lane / 8): the 32
// destinations cover every bank 4 times (conflict-free), the sources are 8 rows x 64 contiguous
// bytes. Warp w's pass i takes unit u = w + i*WARPS of the (ROWS/8) x (D/32) units, so a thread's
// row and chunk per pass are its pass-0 values plus compile-time steps (16-row multiples): the
// per-thread offsets are computed once and every pass is an immediate.
template <int D, int ROWS, int WARPS>
struct TileCopy {
    static constexpr int R8 = ROWS / 8;          // 8-row unit rows
    static constexpr int C4 = D / 32;            // 4-chunk unit columns
    static constexpr int PASSES = R8 * C4 / WARPS;
    static_assert(D % 32 == 0 && (R8 * C4) % WARPS == 0, "tile copy: the units must split evenly over the warps");
    static_assert(R8 % WARPS == 0 || WARPS % R8 == 0, "tile copy: rows per warp must be regular");
    // Unit row / column of warp w's pass i: (w-dependent part) + compile-time step.
    static constexpr __host__ __device__ int row_step(int i) { return R8 % WARPS == 0 ? 8 * ((i * WARPS) % R8) : 0; }
    static constexpr __host__ __device__ int col_step(int i) { return 4 * ((i * WARPS) / R8); }  // in 16-byte chunks
    static_assert(WARPS % 2 == 0 || WARPS % R8 == 0, "tile copy: row steps must be multiples of 16");
    static __device__ __forceinline__ int row() {  // this thread's pass-0 row
        const int w = threadIdx.x / 32;
        return (R8 % WARPS == 0 ? w : w % R8) * 8 + (threadIdx.x & 7);
    }
    static __device__ __forceinline__ int chunk() {  // this thread's pass-0 16-byte chunk
        const int w = threadIdx.x / 32;
        return (R8 % WARPS == 0 ? 0 : (w / R8) * 4) + ((threadIdx.x >> 3) & 3);
    }
    static __device__ __forceinline__ int s_off() { return frag_off<ROWS>(row(), chunk() * 8); }
    static __device__ __forceinline__ int thread_off() { return row() * D + chunk() * 8; }  // in a [.][D] matrix
    // Element offset of pass i relative to pass 0 (chunk steps are multiples of 4, row steps of 16).
    static constexpr __host__ __device__ int dst_step(int i) { return ((col_step(i) / 2) * (ROWS / 16) + row_step(i) / 16) * 256; }
    static constexpr __host__ __device__ int src_step(int i) { return row_step(i) * D + col_step(i) * 8; }
    // Copy a tile whose rows all exist; `tile` is row 0 of the tile in global memory (block-
    // uniform), `off` this thread's thread_off() (32-bit: no 64-bit per-thread pointer stays live
    // across the main loop), dst the tile + this thread's s_off().
    static __device__ __forceinline__ void full(unsigned short* dst, const unsigned short* tile, int off) {
#pragma unroll
        for (int i = 0; i < PASSES; ++i) cp_async16(dst + dst_step(i), tile + (off + src_step(i)));
    }
    // Only rows < rows_valid of the tile exist (rows_left = rows_valid - row()); the others are
    // zero-filled, their source clamped to `tile` (row 0 of the tile, valid since rows_valid >= 1).
    static __device__ __forceinline__ void guarded(unsigned short* dst, const unsigned short* tile, int off, int rows_left) {
#pragma unroll
        for (int i = 0; i < PASSES; ++i) {
            const bool valid = row_step(i) < rows_left;
            cp_async16_zfill(dst + dst_step(i), valid ? tile + (off + src_step(i)) : tile, valid);
        }
    }
};

}  // namespace attn10e

template <int D, int BM, int BN, int WARPS, bool BF16, bool CAUSAL, int STAGES, int KC = 32>
__global__ void __launch_bounds__(WARPS * 32, attn10e::min_blocks(D, WARPS * 32))
attn_two_row_tiles(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
                   const unsigned short* __restrict__ v, unsigned short* __restrict__ o, int n, float scale) {
    using namespace attn10e;
    static_assert(D == 32 || D == 64 || D == 128, "head dim 32, 64 or 128");
    static_assert(BM == 32 * WARPS, "each warp owns 32 query rows (two m16 tiles)");
    static_assert(KC == 32 || KC == 64, "S chunks of 32 or 64 keys");
    static_assert(BN % KC == 0, "a K/V tile is a whole number of S chunks");
    static_assert(STAGES == 2 || STAGES == 3, "2 or 3 K/V stages");
    constexpr int DK = D / 16;     // k16 steps of S = Q K^T
    constexpr int DT = D / 8;      // n8 tiles of O (head dims)
    constexpr int KT = BN / 16;    // k16 steps of O += P V over a whole tile
    constexpr int NC = BN / KC;    // S chunks (KC keys) per tile
    constexpr int NTC = KC / 8;    // n8 tiles of S per chunk
    constexpr int KTC = KC / 16;   // k16 steps of P V per chunk
    constexpr int STAGE = 2 * BN * D;          // elements per stage: K tile then V tile
    constexpr float P_BOUND = 256.0f;          // largest p accepted without a rescale (fp16-safe)
    // O += P V of chunk c-1 inside chunk c's block (see the header): except causal at D = 128,
    // where the register budget is exceeded (ptxas spills).
    constexpr bool PIPE = NC > 1 && KC == 32 && (!CAUSAL || D <= 64);

    extern __shared__ __align__(16) float smem[];
    unsigned short* sQ = reinterpret_cast<unsigned short*>(smem);  // [BM][D], later the output
    unsigned short* sKV = sQ + BM * D;                             // [STAGES][K [BN][D], V [BN][D]]

    // Causal blocks do more work the further they are from the first row: run those first.
    const int mblk = CAUSAL ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int m0 = mblk * BM;
    const long long head = head_offset(blockIdx.y, n, D);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int wrow0 = m0 + warp * 32;  // the warp's first row; this thread's rows: wrow0 + 16*mi + 8*h + g

    int n_tiles = (n + BN - 1) / BN;
    if (CAUSAL) n_tiles = min(n_tiles, (m0 + BM + BN - 1) / BN);  // tiles with a key <= the last row

    // Prologue: groups [Q + tile 0], [tile 1], ..., [tile S-2] (empty past the last tile).
    using KVCopy = TileCopy<D, BN, WARPS>;
    using QCopy = TileCopy<D, BM, WARPS>;
    // Copy sources: the head's row 0 (k + head, v + head: kernel parameters plus a block-uniform
    // offset, which ptxas keeps out of the per-thread registers) plus this thread's 32-bit offset
    // within a tile. One register live across the loop instead of two 64-bit pointers: at D = 128
    // the S phase (O 128 + S 64 registers) is where ptxas would otherwise spill.
    const int kv_t = KVCopy::thread_off();
    unsigned short* kv_dst = sKV + KVCopy::s_off();
    auto load_kv = [&](int jt) {  // K and V of tile jt into stage jt % STAGES
        unsigned short* st = kv_dst + (jt % STAGES) * STAGE;
        if ((jt + 1) * BN <= n) {
            KVCopy::full(st, k + head + (long long)jt * BN * D, kv_t);
            KVCopy::full(st + BN * D, v + head + (long long)jt * BN * D, kv_t);
        } else {
            const int rows_left = n - jt * BN - KVCopy::row();
            KVCopy::guarded(st, k + head + (long long)jt * BN * D, kv_t, rows_left);
            KVCopy::guarded(st + BN * D, v + head + (long long)jt * BN * D, kv_t, rows_left);
        }
    };
    QCopy::guarded(sQ + QCopy::s_off(), q + head + (long long)m0 * D, QCopy::thread_off(), n - m0 - QCopy::row());
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
        if (st < n_tiles) load_kv(st);
        cp_async_commit();
    }
    // Tile 0 and Q have landed (newer groups: tiles 1..S-2); barrier: for every thread's copies.
    cp_async_wait<STAGES - 2>();
    __syncthreads();

    // Per-lane ldmatrix offsets (elements) in the fragment-major layout. Lanes 8i..8i+7 address
    // the rows of 8x8 matrix i. A pattern (Q, and V through .trans): matrix i = rows 8*(i%2)..,
    // column half i/2 of a block; K pattern (B fragments of two n8 tiles): matrix i = keys
    // 8*(i/2).., column half i%2. Block (cb, rb) adds (cb * ROWS/16 + rb) * 256: compile-time.
    const int lr = lane & 7, li = lane >> 3;
    const int a_lane = (li >> 1) * 128 + (lr + 8 * (li & 1)) * 8;
    const int k_lane = (li & 1) * 128 + (lr + 8 * (li >> 1)) * 8;
    const unsigned qb = smem_u32(sQ + warp * 2 * 256 + a_lane);  // this warp's two m16 row blocks
    const unsigned kv_base = smem_u32(sKV);
    constexpr int QB = BM / 16, KB = BN / 16;                   // row blocks per 16 columns

    const float sl2 = scale * 1.4426950408889634f;  // scores in log2 units: one FFMA per score
    float mus[2][2];    // subtracted max (log2 units) of rows (mi, h); 0 until the first chunk sets it
    float l_run[2][2];  // per-thread partial row sums
    float acc[2][DT][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) mus[mi][h] = l_run[mi][h] = 0.0f;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) acc[mi][dt][0] = acc[mi][dt][1] = acc[mi][dt][2] = acc[mi][dt][3] = 0.0f;
    }

    // Mask reference: (this thread's row g) - (its column 2t), or n - 2t.
    const int row_minus_col = (CAUSAL ? wrow0 + g : n) - 2 * t;
    for (int j = 0; j < n_tiles; ++j) {
        const int kv0 = j * BN;
        // Issue tile j+S-1 into the stage of tile j-1 (every warp finished it before the last barrier).
        if (j + STAGES - 1 < n_tiles) load_kv(j + STAGES - 1);
        cp_async_commit();

        // CAUSAL: a tile entirely above this warp's last row contributes nothing to it.
        if (!CAUSAL || kv0 <= wrow0 + 31) {
            const unsigned kb = kv_base + 2 * ((j % STAGES) * STAGE + k_lane);
            const unsigned vb = kv_base + 2 * ((j % STAGES) * STAGE + BN * D + a_lane);

            float s[2][NTC][4];   // S = Q K^T of one 32-key chunk, both m16 tiles
            unsigned pf[2][KT][4];  // P packed to 16-bit pairs (only two chunks' worth are ever live)
            float rs[2][2];         // this thread's partial row sums of P for one chunk

            // S of chunk c: one ldmatrix.x4 of K gives the B fragments of two n8 tiles for k-step
            // ks, and feeds 4 MMAs (both m16 tiles); Q's two A fragments feed NTC MMAs each.
            auto qk = [&](int c) {
#pragma unroll
                for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                    for (int nt = 0; nt < NTC; ++nt) s[mi][nt][0] = s[mi][nt][1] = s[mi][nt][2] = s[mi][nt][3] = 0.0f;
#pragma unroll
                for (int ks = 0; ks < DK; ++ks) {
                    unsigned qa[2][4];
                    ldmatrix_x4_at(qa[0], qb, 2 * (ks * QB) * 256);
                    ldmatrix_x4_at(qa[1], qb, 2 * (ks * QB + 1) * 256);
#pragma unroll
                    for (int np = 0; np < NTC / 2; ++np) {
                        unsigned r[4];
                        ldmatrix_x4_at(r, kb, 2 * (ks * KB + c * (KC / 16) + np) * 256);
                        const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
                        mma16816<BF16>(s[0][2 * np], qa[0], b0);
                        mma16816<BF16>(s[0][2 * np + 1], qa[0], b1);
                        mma16816<BF16>(s[1][2 * np], qa[1], b0);
                        mma16816<BF16>(s[1][2 * np + 1], qa[1], b1);
                    }
                }
            };
            // O += P V for chunk c: one ldmatrix.x4.trans of V gives the B fragments of d-tiles
            // 2dp, 2dp+1 and feeds 4 MMAs (both m16 tiles).
            auto pv = [&](int c) {
#pragma unroll
                for (int kk = 0; kk < KTC; ++kk) {
#pragma unroll
                    for (int dp = 0; dp < DT / 2; ++dp) {
                        unsigned r[4];
                        ldmatrix_x4_trans_at(r, vb, 2 * (dp * KB + c * KTC + kk) * 256);
                        const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
                        mma16816<BF16>(acc[0][2 * dp], pf[0][c * KTC + kk], b0);
                        mma16816<BF16>(acc[0][2 * dp + 1], pf[0][c * KTC + kk], b1);
                        mma16816<BF16>(acc[1][2 * dp], pf[1][c * KTC + kk], b0);
                        mma16816<BF16>(acc[1][2 * dp + 1], pf[1][c * KTC + kk], b1);
                    }
                }
            };
            // Whether chunk c holds a key this warp may see / a key to mask for some row of the warp.
            auto active = [&](int c) { return CAUSAL ? kv0 + c * KC <= wrow0 + 31 : kv0 + c * KC < n; };
            auto needs_mask = [&](int c) { return CAUSAL ? kv0 + c * KC + KC - 1 > wrow0 : kv0 + c * KC + KC > n; };
            // Mask: CAUSAL: key col > row (element (mi, nt, r) has col - row = nt*8 + (r&1) - 8*(r>>1)
            // - 16*mi - diff); else key col >= n.
            auto mask = [&](int c) {
                const int diff = row_minus_col - (kv0 + c * KC);
#pragma unroll
                for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                    for (int nt = 0; nt < NTC; ++nt)
#pragma unroll
                        for (int r = 0; r < 4; ++r) {
                            const bool masked = CAUSAL ? (nt * 8 + (r & 1) - 8 * (r >> 1) - 16 * mi > diff)
                                                       : (nt * 8 + (r & 1) >= diff);
                            if (masked) s[mi][nt][r] = ATTNLAB_NEG_INF;
                        }
            };
            // P = 2^(s*sl2 - mus) of chunk c with the current reference points, packed; row sums.
            auto exponentiate = [&](int c) {
#pragma unroll
                for (int mi = 0; mi < 2; ++mi) {
                    rs[mi][0] = rs[mi][1] = 0.0f;
#pragma unroll
                    for (int nt = 0; nt < NTC; ++nt) {
                        const float p0 = fast_exp2(s[mi][nt][0] * sl2 - mus[mi][0]);
                        const float p1 = fast_exp2(s[mi][nt][1] * sl2 - mus[mi][0]);
                        const float p2 = fast_exp2(s[mi][nt][2] * sl2 - mus[mi][1]);
                        const float p3 = fast_exp2(s[mi][nt][3] * sl2 - mus[mi][1]);
                        rs[mi][0] += p0 + p1;
                        rs[mi][1] += p2 + p3;
                        pf[mi][c * KTC + nt / 2][2 * (nt % 2)] = pack2<BF16>(p0, p1);
                        pf[mi][c * KTC + nt / 2][2 * (nt % 2) + 1] = pack2<BF16>(p2, p3);
                    }
                }
            };
            // Exact path for chunk c: S again, row maxima over the quad, raise mus, rescale O and l
            // (which already hold every earlier chunk, P V included), exponentiate. `first`: no
            // reference point yet (tile 0, chunk 0): O and l are zero, alpha = 0.
            auto exact = [&](int c, bool first) {
                qk(c);
                if (needs_mask(c)) mask(c);
#pragma unroll
                for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        float m = fmaxf(s[mi][0][2 * h], s[mi][0][2 * h + 1]);
#pragma unroll
                        for (int nt = 1; nt < NTC; ++nt) m = fmaxf(m, fmaxf(s[mi][nt][2 * h], s[mi][nt][2 * h + 1]));
                        m = fmaxf(m, __shfl_xor_sync(ATTNLAB_FULL_MASK, m, 1));
                        m = fmaxf(m, __shfl_xor_sync(ATTNLAB_FULL_MASK, m, 2));
                        const float mu_old = first ? ATTNLAB_NEG_INF : mus[mi][h];
                        const float mu_new = fmaxf(mu_old, m * sl2);  // a NaN row keeps mu_old
                        const float mus_new = mu_new == ATTNLAB_NEG_INF ? 0.0f : mu_new;
                        const float alpha = fast_exp2(mu_old - mus_new);  // 0 when first; <= 1
                        mus[mi][h] = mus_new;
                        l_run[mi][h] *= alpha;
#pragma unroll
                        for (int dt = 0; dt < DT; ++dt) {
                            acc[mi][dt][2 * h] *= alpha;
                            acc[mi][dt][2 * h + 1] *= alpha;
                        }
                    }
                }
                exponentiate(c);
            };
            // Speculative chunk c: S of chunk c and P of chunk c against the current mus, then
            // (PIPE) O += P V of chunk c-1: MMAs independent of the exponentials, which ptxas
            // interleaves with them. One straight-line block per (c, mask or not).
            auto speculative = [&](int c, bool with_mask) {
                qk(c);
                if (with_mask) mask(c);
                exponentiate(c);
                if (PIPE && c > 0) pv(c - 1);
            };

#pragma unroll
            for (int c = 0; c < NC; ++c) {
                if (c > 0 && !active(c)) {  // CAUSAL / tail: this chunk and the later ones are empty
                    if (PIPE) pv(c - 1);
                    break;
                }
                if (c == 0 && j == 0) {
                    exact(0, true);
                } else {
                    if (needs_mask(c)) speculative(c, true); else speculative(c, false);
                    // Keep P when every lane's partial row sums are <= P_BOUND (so every p is, and
                    // NaN rows fail). mus is set for every row after tile 0's chunk 0 (it holds key
                    // 0, visible to every row), so no p can have underflowed against an unset mus.
                    if (__any_sync(ATTNLAB_FULL_MASK, !(rs[0][0] <= P_BOUND && rs[0][1] <= P_BOUND && rs[1][0] <= P_BOUND && rs[1][1] <= P_BOUND)))
                        exact(c, false);
                }
#pragma unroll
                for (int mi = 0; mi < 2; ++mi) {
                    l_run[mi][0] += rs[mi][0];
                    l_run[mi][1] += rs[mi][1];
                }
                if (!PIPE || c == NC - 1) pv(c);
            }
        }

        // Tile j+1 has landed (newer groups: tiles j+2..j+S-1). Barrier: every thread's copies are
        // visible, and every warp is done with tile j, whose stage the next iteration refills.
        cp_async_wait<STAGES - 2>();
        __syncthreads();
    }
    cp_async_wait<0>();  // only empty groups are left; retire them

    // Epilogue: full row sums over the quad, normalise, stage the warp's 32 rows in its own Q
    // blocks (only this warp ever read them; 32-bit stores, conflict-free), then copy each 16 x 16
    // block out with one 16-byte load per lane (contiguous) and 16-byte stores of the rows < n.
    unsigned short* sO = sQ + warp * 2 * 256;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float l = l_run[mi][h];
            l += __shfl_xor_sync(ATTNLAB_FULL_MASK, l, 1);
            l += __shfl_xor_sync(ATTNLAB_FULL_MASK, l, 2);
            const float inv = 1.0f / l;  // l >= 1 for a valid row (its max key contributes ~2^0)
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
                *reinterpret_cast<unsigned*>(sO + ((dt / 2) * QB + mi) * 256 + (dt % 2) * 128 + (8 * h + g) * 8 + 2 * t) =
                    pack2<BF16>(acc[mi][dt][2 * h] * inv, acc[mi][dt][2 * h + 1] * inv);
        }
    }
    __syncwarp();
    unsigned short* og = o + head + (long long)(wrow0 + (lane & 15)) * D + (lane >> 4) * 8;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
        if (wrow0 + 16 * mi + (lane & 15) < n) {
#pragma unroll
            for (int cb = 0; cb < DK; ++cb)
                *reinterpret_cast<U4*>(og + 16 * mi * D + cb * 16) = *reinterpret_cast<const U4*>(sO + (cb * QB + mi) * 256 + lane * 8);
        }
    }
}

// Dynamic shared memory in bytes for attn_two_row_tiles<D, BM, BN, WARPS, BF16, CAUSAL, STAGES>.
constexpr __host__ __device__ unsigned long long attn_two_row_tiles_smem_bytes(int D, int BM, int BN, int STAGES) {
    return (unsigned long long)(BM + 2 * STAGES * BN) * D * 2;
}

// Default tiles per head dim (D, BM, BN, WARPS, STAGES, KC), as the lead's launcher should use them:
//   D = 32:  (32, 128, 64, 4, 3, 32)    D = 64: (64, 128, 64, 4, 3, 32)    D = 128: (128, 128, 64, 4, 2, 64)
// Alternatives worth timing at D = 128 (all static-clean, no spills):
//   (128, 128, 64, 4, 2, 32)   the previous default (KC = 32, chunk-pipelined), for the A/B;
//   (128, 256, 64, 8, 2, 64)   8 warps, 128 KB, 1 block/SM: half the K/V L2 traffic per FLOP;
//   (128, 128, 32, 4, 3, 32)   32-key tiles, 80 KB, 2 blocks/SM.
// At D = 64 also (64, 128, 64, 4, 3, 64) (168 registers, 3 blocks/SM).
