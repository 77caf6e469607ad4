// 09 — flash attention for fp32 inputs and outputs on the tensor cores: mma.sync.m16n8k8 with TF32
// operands and fp32 accumulators for both S = Q K^T and O += P V, FlashAttention-2 scheme.
//
//   O[b,h,i,:] = sum_j softmax_j(scale * Q[b,h,i,:] . K[b,h,j,:]) * V[b,h,j,:]
//
// What changed from the fp32 SIMT ladder (01-05, best ~7 TFLOP/s): both products run on the
// tensor cores. Each warp owns 16 query rows (one m16 tile); per K/V tile of BN keys it computes
// S = Q K^T as (BN/8) x (D/8) k8-steps and O += P V as (D/8) x (BN/8) more, into fp32
// accumulator fragments. A TF32 operand keeps 10 mantissa bits, hence PASSES:
//  * PASSES = 1: plain TF32, one MMA per k8-step (~4e-4 relative error here, ~1e-3 typical).
//    Q, P (and, with KV_PREP = 1, K and V) are rounded to TF32; with KV_PREP = 0 K and V go to the
//    MMA raw (the tensor core ignores their low 13 bits: truncation, ~2x the error).
//  * PASSES = 3: "3xTF32". Every operand x = big + small, big = x rounded to TF32, small = x - big
//    (exact in fp32; the MMA reads its top 10 bits); a b ~= a_s b_b + a_b b_s + a_b b_b, three
//    MMAs a k8-step. The neglected a_s b_s and small's truncation are ~2^-21 relative: fp32-level
//    results (target <= 2e-6 vs float64 at any N; torch SDPA's fp32 path, CUTLASS 3xTF32, gets
//    ~7e-7), provided the accumulation is done with care (see "Accumulation").
//
// Fragment layouts (g = lane / 4, t = lane % 4; see mma.cuh). The order of the 8 k-slots inside
// one MMA is free as long as A and B use the same permutation; this kernel uses that twice, and
// the freedom to choose which head dim each O column holds once:
//  * S = Q K^T, d chunk c of 16 (k8-steps st = 0, 1): k-slot t <-> d = 16c + 4t + 2st and slot
//    t+4 <-> d + 1. So one 16-byte read K[key][16c + 4t .. +3] gives a lane its B fragments
//    (B[k = d][n = key] = K[key][d]) of both steps, and Q's A fragments are float4 loads from
//    global memory, done once (Q then stays in registers, or in shared memory with Q_SMEM).
//  * P = softmax(S) needs no shuffles: the S accumulator of key block j holds P[g][8j+2t],
//    P[g][8j+2t+1] (and rows g+8); the TF32 A fragment wants A[g][t], A[g][t+4]. Map P V's k-slot
//    t to key 8j+2t and slot t+4 to key 8j+2t+1: the thread's own accumulators ARE its A fragment
//    (a = s[0], s[2], s[1], s[3]), provided V's B fragment takes the same keys:
//    b0 = V[8j+2t][d], b1 = V[8j+2t+1][d] (verified in the CPU model, which implements the PTX
//    fragment layouts lane by lane).
//  * O's columns. KV_PREP = 1: V is stored with key pairs interleaved (below), and n-tile 2p + r,
//    column n holds d = 16p + 2n + r: one 16-byte read gives {V[8j+2t][d], V[8j+2t+1][d]} for
//    d = 16p + 2g and d + 1, the B fragments of n-tiles 2p, 2p+1 already in register order (no
//    moves), and a lane's outputs of those two tiles are O[row][16p + 4t .. +3]: one float4.
//    KV_PREP = 0: V row-major, n-tile 4c + e, column n holds d = 32c + 4n + e: one 16-byte read of
//    row 8j+2t and one of row 8j+2t+1 at d = 32c + 4g give 4 n-tiles' B values (paired by moves).
// Shared-memory strides (floats) make every fragment read bank-conflict free. A 16-byte read is
// served a quarter-warp at a time (8 lanes: g in {2q, 2q+1}, t = 0..3); it is conflict-free when
// the 8 lanes hit the 8 distinct 4-bank groups, group = (word address / 4) mod 8:
//  * K [key][SK], SK = D + 16 (== 16 mod 32): lane reads row 8j+g at column 16c + 4t -> group
//    4g + t + const: t spans 4 consecutive groups, the two g's are 4 groups apart.
//  * V interleaved [key pair][SVI], Vi[r][2d + e] = V[2r + e][d], SVI = 2D + 8 (== 8 mod 32): lane
//    reads pair row 4j+t at word 32p + 4g -> group 2t + g + const: all 8 distinct.
//  * V row-major [key][SV] (KV_PREP = 0), SV = D + 4 (== 4 mod 32): lane reads row 8j+2t+r at
//    column 32c + 4g -> group 2t + r + g + const: all 8 distinct.
//  (tests/test_emu_09_tf32_mma.py checks these with attnlab.banks.) The prep pass's interleaved V
//  stores are 2-way conflicted (a quarter-warp hits only the 4 even or odd groups); they happen
//  once per tile per block, not per warp.
//
// Online softmax on the accumulator fragments: row max over the thread's columns, then across the
// 4 lanes of a quad (__shfl_xor_sync 1 and 2); p = fast_exp2(s * c - m * c), c = scale * log2(e)
// folded into one FFMA per score (scores stay unscaled in the MMA). The running max is kept as
// m * c, so an unchanged max rescales O and l by exactly 2^0 = 1: computed from raw maxima as
// m_old * c - m_new * c, nvcc fuses it into one FFMA and alpha becomes 1 + (rounding error of
// m_new * c) ~ 1 + 1e-7 on every tile, the same every tile for a row. O and l both take it, so it
// looks harmless, but a key of tile j ends up weighted (1 + 1e-7)^(tiles - j): a relative error
// growing as N / BN (H200, D = 128, BN = 32: 2.7e-6 at N = 4096, 1.0e-5 at N = 16384; unchanged
// by D, warps or K/V path; BN = 16 / 32 / 64 gave 2.1e-5 / 1.0e-5 / 5.2e-6 at N = 16384). The row sum l is a per-thread
// partial (the quad shares one alpha), quad-reduced once at the end.
// Rows whose running max is still -inf subtract 0 (no -inf - -inf); a NaN in a query row makes its
// scores NaN (fmaxf skips them, so m stays finite or -inf), hence its p, l and output NaN, and
// nothing else: rows never mix (a quad owns a row; MMA rows are independent). Keys >= n get -inf
// (tail tile only) and are zero-filled in shared memory (0 * garbage could be NaN); query rows
// >= n run on zero-filled Q and are never stored; warps whose 16 rows all lie past n skip the maths.
//
// Accumulation (PASSES = 3). The tensor core adds its products to the fp32 accumulator after
// aligning them, and the bits it shifts out are dropped (round toward zero), so every MMA biases
// the accumulator by up to an ulp of its own size, always toward zero. Summed over a whole row of
// keys inside the MMA (3 MMAs per 8 keys), O drifted by a relative 2.9e-5 at N = 4097 on an H200,
// growing linearly with N (SDPA: 7e-7). The CPU model (exact sum, then round toward zero) shows
// the same: 1.0e-6 / 5.2e-6 / 1.9e-5 at N = 64 / 512 / 2048 (D = 64). So no accumulator sees a
// long chain of MMAs:
//  * P V: per 4 k8-steps (32 keys) and per group of up to 8 O n-tiles (64 head dims), a zeroed
//    partial takes the 12 MMAs and is added to O by an fp32 FFMA (first 32 keys of the tile: it
//    also applies the softmax rescale, O = O * alpha + partial, so costs no extra instruction) or
//    FADD (the next 32 keys of a BN = 64 tile); with alternating signs, see below. Round to nearest: unbiased, and the partial's own
//    truncations are relative to a 32-key sum, not to all of O. P is split 4 steps at a time:
//    32 P registers live next to 32 partial ones.
//  * Q K^T over d: 3D/8 MMAs into each score (48 at D = 128: with only P V fixed, the model still
//    gives 1.6e-6 .. 1.8e-6 at D = 128; the original kernel on the GPU, N = 64: 1.3e-6 at D = 128
//    against 8.6e-7 at D = 64). The big x big products accumulate in s, the two small-term
//    products (2^-11 the size, so their truncations are negligible) in a second accumulator s2,
//    s += s2 once per tile: 4 FADDs and 4 registers per key block, and s's chain is one MMA per
//    k8-step.
//  * Sign alternation (P V). Even short partials drift together: the tensor core aligns C and the
//    products to the largest of them and cuts the bits below ~3 guard positions under its fp32
//    significand in two's complement, i.e. toward -inf whatever the addend's sign (a sign-symmetric
//    cut cannot explain what the H200 shows), then normalises toward zero. So every partial is
//    biased by a fraction of its ulp in one direction, and O, a sum of N/32 random-sign partials
//    (size ~sqrt(N/32)), picks up N/32 same-sign biases: relative ~u*sqrt(N/32). H200, before this
//    fix: 4.4e-7 -> 1.40e-6 (D = 64) and 5.9e-7 -> 2.67e-6 (D = 128) from N = 257 to 4097 (both
//    measured while the rescale error of "Online softmax" below was also in the kernel, so part of
//    that growth was its doing; the CPU model, which has both effects, puts them apart). Fix:
//    partial number i (keys 32i .. 32i+31) is formed from (-1)^i V (the prep pass negates V there:
//    one LOP per V value per tile, shared by the warps; KV_PREP = 0 negates the thread's P instead),
//    so consecutive biases cancel; the accumulator holds X = (-1)^i O, X = part - alpha * X (the
//    same FFMA / FADD with a negated operand), and the epilogue's 1/l takes the last sign.
// CPU model (tests/ladder_emu/ladder_emu.h, emu_mma: the alignment cut above, 3 guard bits, toward
// -inf; first 64 query rows of one head, rows as the shipped tiles compute them), relative error at
// N = 257 / 1024 / 4097: without the alternation 6.6e-7 / 9.3e-7 / 1.73e-6 (D = 64, BN = 64) and
// 8.6e-7 / 1.16e-6 / 1.68e-6 (D = 128, BN = 32); with it 5.6e-7 / 5.4e-7 / 6.6e-7 and
// 7.6e-7 / 8.3e-7 / 8.3e-7: flat in N. (The model with a sign-symmetric cut, or the older "exact sum,
// then toward zero", shows no growth either way, 5-8e-7; a cut toward -inf with only 2 guard bits
// gives 3.5e-6 / 3.3e-6 at N = 4097 without the alternation, 7.6e-7 / 1.0e-6 with it.)
// (Fresh partials per k8-step instead are hardly more accurate and cost 4 FADDs per 3 MMAs plus
// the registers ptxas spends keeping many of them live: spills at D = 128.) PASSES = 1 keeps
// accumulating in O and S: its 4e-4 error dwarfs the bias.
//
// K/V pipeline: cp.async 16-byte copies (cp_async16_zfill past n), two buffers, tile t+1 in
// flight while tile t is computed:
//  * KV_PREP = 1 (default): the tile lands raw in dense buffers [BN][D]; all threads then prepare
//    it once for all warps: split (PASSES = 3) or round (PASSES = 1) every value and store K big
//    [BN][SK] and V big interleaved [BN/2][SVI] (+ K small, V small for PASSES = 3). The warps
//    read fragments with no arithmetic and no moves. Per tile:
//        wait(own copies of tile t); barrier (1): raw tile t visible to all, and every warp has
//            finished tile t-1, so the prepared buffers may be overwritten
//        prepare (all loads of a thread first: the compiler cannot hoist a load of the raw
//            buffer above a store to the prepared ones, both being the one shared array)
//        barrier (2): the prepared tile is visible, and every raw read is done, so the raw
//            buffers may be refilled: cp.async tile t+1 -> raw (lands during compute of tile t)
//        compute tile t
//    Split/round work is done once per block instead of once per warp (with 4 warps that is
//    ~1.5 issue slots per MMA saved), at the price of the pass, 2x fragment reads for PASSES = 3
//    and a second barrier.
//  * KV_PREP = 0: two stages of K [BN][SK], V [BN][SV] filled by cp.async directly; one barrier
//    per tile (it publishes tile t and proves every warp finished tile t-1, whose stage is then
//    refilled with tile t+1). Each warp splits its own K/V fragments (PASSES = 3: 3 ops a value,
//    repeated by every warp) or feeds them raw (PASSES = 1). Kept for timing against KV_PREP = 1.
// Entry points: attn_tf32_mma<D, BM, BN, WARPS, PASSES, KV_PREP = 1> keeps Q in registers and
// lets ptxas choose the register count; attn_tf32_mma_q<D, BM, BN, WARPS, PASSES, KV_PREP, Q_SMEM,
// MIN_BLOCKS> is the same kernel with two more knobs (attn_tf32_mma_q<..., 0, 0> compiles to
// attn_tf32_mma), both for occupancy:
//  * Q_SMEM = 0: Q in registers. PASSES = 3 pre-splits it into big/small when D <= 64 (D
//    registers); at D = 128 keeps it raw (D/2 registers) and splits each chunk when used, once per
//    tile (amortised over BN/8 key blocks; an empty asm keeps the compiler from hoisting all of it
//    out of the loop and spilling); PASSES = 1 rounds it (D/2).
//    Q_SMEM = 1: the same raw (PASSES = 1: rounded) values in shared memory, 4*BM*D bytes, read
//    back with two 16-byte reads per chunk per tile (at D = 128, BN = 32: 16 more reads to the 128
//    of K and V) and, PASSES = 3, split per tile. Q_SMEM = 2 (PASSES = 3): big and small in shared
//    memory, 8*BM*D bytes, four reads, no split work. Each lane writes its own fragments,
//    [WARPS][D/16][2 k8-steps][Q_SMEM parts][32 lanes] float4, and only it reads them back: no
//    barrier, and every read is one contiguous 512-byte warp access (conflict-free).
//  * MIN_BLOCKS: __launch_bounds__' minimum blocks per SM (0: not given); N caps the registers so
//    that N blocks fit (64K / (32 * WARPS * N)).
//
// Template: D in {32, 64, 128}; BM = 16 * WARPS query rows per block (WARPS 1..16); BN keys per
// tile (multiple of 8); PASSES in {1, 3}; KV_PREP in {0, 1} (default 1); Q_SMEM in {0, 1, 2}
// (2 needs PASSES = 3); MIN_BLOCKS >= 0.
// Defaults (attn_tf32_mma; sm_90, 0 spill bytes, 0 stack; warps/SM by registers and shared
// memory; ipm = SASS instructions per MMA in the main loop, a rough issue-cost measure):
//   PASSES = 3: D = 32:  BM 128, BN 64, WARPS 8   (177 regs, 58 KB, 8 warps/SM, ipm 3.95)
//               D = 64:  BM 128, BN 64, WARPS 8   (255 regs, 106 KB, 8 warps/SM, ipm 2.96)
//               D = 128: BM 128, BN 32, WARPS 8   (255 regs, 101 KB, 8 warps/SM, ipm 3.11)
//     alternatives to time, attn_tf32_mma (D, BM, BN, WARPS, PASSES, KV_PREP):
//       (32, 64, 32, 4, 3, 1)   139 regs, 29 KB, 12 warps/SM (3 blocks), ipm 4.74
//       (32, 64, 64, 4, 3, 1)   178 regs, 58 KB, 8 warps/SM (2 blocks), ipm 4.44
//       (64, 64, 32, 4, 3, 0)   228 regs, 37 KB, 8 warps/SM (2 blocks), ipm 4.86
//       (128, 64, 32, 4, 3, 1)  255 regs, 101 KB, 8 warps/SM (2 blocks), ipm 3.63
//     and attn_tf32_mma_q (..., Q_SMEM, MIN_BLOCKS), more warps per SM:
//       (64, 64, 32, 4, 3, 1, 1, 3)   166 regs, 69 KB, 12 warps/SM (3 blocks), ipm 4.10
//       (64, 128, 32, 8, 3, 0, 2, 2)  128 regs, 101 KB, 16 warps/SM (2 blocks), ipm 4.82
//         (since the sign alternation: 16 bytes of spills at the 128-register cap)
//       (128, 96, 16, 6, 3, 1, 1, 2)  168 regs, 98.5 KB, 12 warps/SM (2 blocks), ipm 4.83
//     (BN = 64 at D = 128 spills: (128, 128, 64, 8, 3, 1) by ~300 bytes.)
//   PASSES = 1: D = 32:  BM 128, BN 64, WARPS 8   (103 regs, 37 KB, 16 warps/SM, ipm 7.4)
//               D = 64:  BM 128, BN 64, WARPS 8   (172 regs, 69 KB, 8 warps/SM, ipm 5.0)
//               D = 128: BM 128, BN 64, WARPS 8   (250 regs, 133 KB, 8 warps/SM, ipm 3.9);
//                        KV_PREP = 0: 252 regs, 138 KB, ipm 4.3
// Requirements: sm_80+ (TF32 mma.sync, cp.async); q, k, v, o 16-byte aligned (float4, cp.async).
// Layout: q, k, v, o contiguous [B, H, N, D] float32.
// Launch: grid = (ceil(n / BM), B*H), blockIdx.y = b*H + h; block = 32*WARPS threads;
//   dynamic shared memory bytes (= Attn09Layout<D, BM, BN, PASSES, KV_PREP, Q_SMEM>::BYTES):
//     KV_PREP = 1: 4 * BN * (2*D + NB * (2*D + 20)) + 4 * BM * D * Q_SMEM, NB = 2 for PASSES = 3,
//                  1 for PASSES = 1: raw K, raw V [BN][D]; then NB copies of (K [BN][D+16],
//                  V interleaved [BN/2][2D+8]); then the Q fragments
//     KV_PREP = 0: 8 * BN * (2*D + 20) + 4 * BM * D * Q_SMEM: stage s: K [BN][D+16], V [BN][D+4];
//                  then the Q fragments
//   (attn_tf32_mma: Q_SMEM = 0, the formula unchanged.)
//   Above 48 KB the launcher must raise cudaFuncAttributeMaxDynamicSharedMemorySize.
#include "mma.cuh"

namespace attn09 {
template <int D, int BM, int BN, int PASSES, int KV_PREP, int Q_SMEM = 0>
struct Attn09Layout {
    static constexpr bool PREP = KV_PREP != 0;
    static constexpr int NB = PASSES == 3 ? 2 : 1;   // prepared copies: big (and small)
    static constexpr int SK = D + 16;      // == 16 (mod 32): K fragment reads conflict-free
    static constexpr int SV = D + 4;       // == 4 (mod 32): direct V fragment reads conflict-free
    static constexpr int SVI = 2 * D + 8;  // == 8 (mod 32): interleaved V rows (one per key pair)
    // PREP:   raw K [BN][D], raw V [BN][D]; K big [BN][SK], V big [BN/2][SVI]; (PASSES = 3) K small, V small
    // direct: stage s at s * BN * (SK + SV): K [BN][SK], then V [BN][SV]
    static constexpr int PREP_COPY = BN * SK + (BN / 2) * SVI;   // floats of one prepared K+V copy
    static constexpr int FLOATS = PREP ? 2 * BN * D + NB * PREP_COPY : 2 * BN * (SK + SV);
    static constexpr int Q_FLOATS = BM * D * Q_SMEM;   // Q fragments (Q_SMEM = 1: one copy, 2: big + small)
    static constexpr int BYTES = 4 * (FLOATS + Q_FLOATS);
};

// Issue the cp.async copies of the K and V tile starting at key kv0 (rows >= n zero-filled) into
// kd / vd with row strides KS / VS floats. A tile is BN*D contiguous floats in global memory.
template <int D, int BN, int THREADS, int KS, int VS>
static __device__ __forceinline__ void issue_kv(float* kd, float* vd, const float* kh, const float* vh, int kv0,
                                                int n) {
    constexpr int CPR = D / 4;          // 16-byte chunks per row
    constexpr int CHUNKS = BN * CPR;
    const float* ks = kh + (long long)kv0 * D;
    const float* vs = vh + (long long)kv0 * D;
#pragma unroll
    for (int i = 0; i < (CHUNKS + THREADS - 1) / THREADS; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        if (CHUNKS % THREADS == 0 || idx < CHUNKS) {
            const int r = idx / CPR, col = (idx % CPR) * 4;
            const bool valid = kv0 + r < n;
            const int off = valid ? idx * 4 : 0;   // a zero-filled copy reads nothing; point in bounds
            cp_async16_zfill(kd + r * KS + col, ks + off, valid);
            cp_async16_zfill(vd + r * VS + col, vs + off, valid);
        }
    }
}

// x as a TF32 operand pair: PASSES = 3 -> (big, small); PASSES = 1 -> (rounded, unused).
template <int PASSES>
static __device__ __forceinline__ void to_tf32(float x, unsigned& big, unsigned& small) {
    if constexpr (PASSES == 3) split_tf32(x, big, small);
    else { big = tf32_round(x); small = 0u; }
}
static __device__ __forceinline__ float4 f4(unsigned a, unsigned b, unsigned c, unsigned d) {
    return make_float4(__uint_as_float(a), __uint_as_float(b), __uint_as_float(c), __uint_as_float(d));
}

// The K/V prep pass (KV_PREP = 1), shared by all threads: the raw dense [BN][D] tiles become
//   K big/small [BN][SK] (row-major) and V big/small [BN/2][SVI] with key pairs interleaved,
//   Vi[r][2d + e] = V[2r + e][d], so that one 16-byte read gives the B fragments {V[2r][d],
//   V[2r+1][d]} and {V[2r][d+1], V[2r+1][d+1]} of two O n-tiles in register order.
// A work unit is a key pair x 4 columns. All loads come first: the compiler cannot move a load
// of the raw buffer above a store to the prepared ones (same shared array).
// FLIP > 0 (PASSES = 3): V of key kv0 + key is stored negated when (kv0 + key) / FLIP is odd
// (see "Accumulation": alternate P V partials carry opposite signs).
template <int D, int BN, int THREADS, int PASSES, int SK, int SVI, int FLIP>
static __device__ __forceinline__ void prepare_kv(const float* raw_k, const float* raw_v, float* kb, float* ks,
                                                  float* vb, float* vs, int kv0) {
    constexpr int CPR = D / 4;
    constexpr int UNITS = (BN / 2) * CPR;
    constexpr int PER = (UNITS + THREADS - 1) / THREADS;
    float4 xk[PER][2], xv[PER][2];
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        const int u = threadIdx.x + i * THREADS;
        if (UNITS % THREADS == 0 || u < UNITS) {
            const int at = (u / CPR) * 2 * D + (u % CPR) * 4;   // row 2 * pair, column 4c
            xk[i][0] = *reinterpret_cast<const float4*>(raw_k + at);
            xk[i][1] = *reinterpret_cast<const float4*>(raw_k + at + D);
            xv[i][0] = *reinterpret_cast<const float4*>(raw_v + at);
            xv[i][1] = *reinterpret_cast<const float4*>(raw_v + at + D);
        }
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        const int u = threadIdx.x + i * THREADS;
        if (UNITS % THREADS == 0 || u < UNITS) {
            const int pr = u / CPR, c = u % CPR;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                unsigned b[4], sm[4];
                to_tf32<PASSES>(xk[i][h].x, b[0], sm[0]);
                to_tf32<PASSES>(xk[i][h].y, b[1], sm[1]);
                to_tf32<PASSES>(xk[i][h].z, b[2], sm[2]);
                to_tf32<PASSES>(xk[i][h].w, b[3], sm[3]);
                const int at = (2 * pr + h) * SK + 4 * c;
                *reinterpret_cast<float4*>(kb + at) = f4(b[0], b[1], b[2], b[3]);
                if constexpr (PASSES == 3) *reinterpret_cast<float4*>(ks + at) = f4(sm[0], sm[1], sm[2], sm[3]);
            }
            unsigned b[8], sm[8];   // V[2pr][4c+e], V[2pr+1][4c+e] interleaved: (e, key) -> 2e + key
            const float x[8] = {xv[i][0].x, xv[i][1].x, xv[i][0].y, xv[i][1].y,
                                xv[i][0].z, xv[i][1].z, xv[i][0].w, xv[i][1].w};
            // Sign of this key pair's partial (FLIP is even: both keys of a pair share it). The
            // split commutes with negation (tf32_round acts on the magnitude bits).
            const unsigned neg = FLIP > 0 ? (((unsigned)(kv0 + 2 * pr) / (FLIP > 0 ? FLIP : 1)) & 1u) << 31 : 0u;
#pragma unroll
            for (int e = 0; e < 8; ++e) to_tf32<PASSES>(__uint_as_float(__float_as_uint(x[e]) ^ neg), b[e], sm[e]);
            // The two 16-byte halves go to chunks 2c and 2c+1 of interleaved row pr. (Each store
            // instruction is 2-way bank-conflicted: its 8 lanes of a quarter-warp hit only the 4
            // even or odd 4-bank groups. Alternating the order by lane would need selects; this is
            // once per tile, not per warp.)
            const int at = pr * SVI + 8 * c;
            *reinterpret_cast<float4*>(vb + at) = f4(b[0], b[1], b[2], b[3]);
            *reinterpret_cast<float4*>(vb + at + 4) = f4(b[4], b[5], b[6], b[7]);
            if constexpr (PASSES == 3) {
                *reinterpret_cast<float4*>(vs + at) = f4(sm[0], sm[1], sm[2], sm[3]);
                *reinterpret_cast<float4*>(vs + at + 4) = f4(sm[4], sm[5], sm[6], sm[7]);
            }
        }
    }
}

// Four TF32 operand values from shared memory as (big, small). PREP: prepared copies, one 16-byte
// read each (small only for PASSES = 3). Direct: one read of raw values, split here (PASSES = 3)
// or passed raw (PASSES = 1: the tensor core truncates them).
template <int PASSES, bool PREP>
static __device__ __forceinline__ void load4(const float* big, const float* small, int at, unsigned (&b)[4],
                                             unsigned (&s)[4]) {
    const float4 x = *reinterpret_cast<const float4*>(big + at);
    if constexpr (PREP || PASSES == 1) {
        b[0] = __float_as_uint(x.x); b[1] = __float_as_uint(x.y); b[2] = __float_as_uint(x.z); b[3] = __float_as_uint(x.w);
        if constexpr (PASSES == 3) {
            const float4 y = *reinterpret_cast<const float4*>(small + at);
            s[0] = __float_as_uint(y.x); s[1] = __float_as_uint(y.y); s[2] = __float_as_uint(y.z); s[3] = __float_as_uint(y.w);
        } else {
            s[0] = s[1] = s[2] = s[3] = 0u;
        }
    } else {
        split_tf32(x.x, b[0], s[0]);
        split_tf32(x.y, b[1], s[1]);
        split_tf32(x.z, b[2], s[2]);
        split_tf32(x.w, b[3], s[3]);
    }
}

// d += A B with PASSES TF32 products: 3 -> a_s b_b + a_b b_s + a_b b_b (small terms first).
template <int PASSES>
static __device__ __forceinline__ void mma_tf32x(float (&d)[4], const unsigned (&ab)[4], const unsigned (&as)[4],
                                                 const unsigned (&bb)[2], const unsigned (&bs)[2]) {
    if constexpr (PASSES == 3) {
        mma_m16n8k8_tf32(d, as, bb);
        mma_m16n8k8_tf32(d, ab, bs);
    }
    mma_m16n8k8_tf32(d, ab, bb);
}

}  // namespace attn09

// The whole kernel; the __global__ entry points below only set __launch_bounds__. (Outside the
// namespace: the emulator's `extern float smem[]` is a global.)
template <int D, int BM, int BN, int WARPS, int PASSES, int KV_PREP, int Q_SMEM, int MIN_BLOCKS>
static __device__ __forceinline__ void attn09_block(const float* __restrict__ q, const float* __restrict__ k,
                                                    const float* __restrict__ v, float* __restrict__ o, int n,
                                                    float scale) {
    using namespace attn09;
    using L = Attn09Layout<D, BM, BN, PASSES, KV_PREP, Q_SMEM>;
    static_assert(D == 32 || D == 64 || D == 128, "head dim 32, 64 or 128");
    static_assert(BM == 16 * WARPS && WARPS >= 1 && WARPS <= 16, "each warp owns 16 query rows");
    static_assert(BN % 8 == 0 && BN >= 8, "a K/V tile is a whole number of 8-key blocks");
    static_assert(PASSES == 1 || PASSES == 3, "PASSES is 1 (TF32) or 3 (3xTF32)");
    static_assert(Q_SMEM == 0 || Q_SMEM == 1 || (Q_SMEM == 2 && PASSES == 3),
                  "Q_SMEM: 0 (registers), 1 (shared, raw / TF32), 2 (shared, split; PASSES = 3)");
    static_assert(MIN_BLOCKS >= 0, "MIN_BLOCKS: blocks per SM asked of ptxas (0: ptxas chooses)");
    constexpr bool PREP = L::PREP;
    constexpr bool QPRE = PASSES == 3 && D <= 64 && Q_SMEM == 0;   // Q pre-split in registers
    constexpr bool QSPLIT = PASSES == 3 && Q_SMEM != 2 && !QPRE;   // Q split per chunk, per tile
    constexpr int QP = Q_SMEM == 2 ? 2 : 1;                        // Q parts in shared memory
    constexpr int THREADS = 32 * WARPS;
    constexpr int SK = L::SK, SV = L::SV, SVI = L::SVI;
    constexpr int NCQ = D / 16;   // d chunks of S = Q K^T (two k8-steps each)
    constexpr int NJ = BN / 8;    // key blocks: n-tiles of S, k8-steps of P V
    constexpr int NI = D / 8;     // n-tiles of O
    // 3xTF32 P V (see "Accumulation"): a fresh partial per PV_STEPS k8-steps (32 keys) and per
    // group of PV_GROUP n-tiles (one O column block of 64 dims).
    constexpr int PV_STEPS = NJ % 4 == 0 ? 4 : NJ % 2 == 0 ? 2 : 1;   // divides NJ
    constexpr int PV_GROUP = NI < 8 ? NI : 8;
    constexpr int UNIT = PREP ? 2 : 4;   // n-tiles served by one V read pattern
    // Sign alternation (see "Accumulation"): partial number i (keys 8 * PV_STEPS * i ..) is formed
    // from (-1)^i V (PREP: negated in the prep pass) or (-1)^i P (direct path: negated by this
    // warp), and the accumulator holds X = (-1)^i O: X = part - X * alpha. 0 for PASSES = 1.
    constexpr int FLIP = PASSES == 3 ? 8 * PV_STEPS : 0;

    extern __shared__ __align__(16) float smem[];
    // PREP:   raw K, raw V [BN][D]; K big [BN][SK]; V big [BN/2][SVI]; then K small, V small (PASSES = 3).
    // direct: stage s at smem + s * BN * (SK + SV): K [BN][SK], then V [BN][SV].
    // Q_SMEM: then Q fragments, [WARPS][NCQ][2 k8-steps][QP][32 lanes] float4.
    float* const raw_k = smem;
    float* const raw_v = smem + BN * D;
    float* const kbig = smem + 2 * BN * D;
    float* const vbig = kbig + BN * SK;
    float* const ksmall = kbig + L::PREP_COPY;   // only for PASSES = 3
    float* const vsmall = vbig + L::PREP_COPY;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int wrow = blockIdx.x * BM + warp * 16;   // this warp's first query row
    const int row_a = wrow + g;                      // this thread's rows: row_a, row_a + 8
    const long long head = head_offset(blockIdx.y, n, D);
    const float* kh = k + head;
    const float* vh = v + head;
    // This lane's Q fragments in shared memory (Q_SMEM): float4 (c, st, part) at qf[((c * 2 + st) * QP + part) * 32].
    float4* const qf = reinterpret_cast<float4*>(smem + L::FLOATS) + warp * (NCQ * 2 * QP * 32) + lane;
    // Warps whose 16 rows all lie past n (tail block) skip the maths (warp-uniform) but still load,
    // prepare and reach every barrier.
    const bool active = wrow < n;

    // Start tile 0's copies first: they overlap the Q loads below.
    if constexpr (PREP) issue_kv<D, BN, THREADS, D, D>(raw_k, raw_v, kh, vh, 0, n);
    else issue_kv<D, BN, THREADS, SK, SV>(smem, smem + BN * SK, kh, vh, 0, n);
    cp_async_commit();

    // Q A fragments straight from global memory (float4 loads of Q[row][16c + 4t .. +3], rows g and
    // g + 8), in register order: qa[c][st] = {A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]} of
    // k8-step st of chunk c (slot t <-> d = 16c + 4t + 2st, slot t+4 <-> d + 1). PASSES = 1:
    // rounded to TF32; PASSES = 3: big in qa, small in qs when QPRE, else qa holds the raw bits.
    // Q_SMEM: the same fragments go to this lane's own slots in shared memory (raw / rounded, or
    // big and small for Q_SMEM = 2); only this thread reads them back, so no barrier is needed.
    unsigned qa[Q_SMEM ? 1 : NCQ][2][4];
    unsigned qs[QPRE ? NCQ : 1][2][4];
    if constexpr (Q_SMEM == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row_a + 8 * h;
#pragma unroll
            for (int c = 0; c < NCQ; ++c) {
                float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (row < n) x = *reinterpret_cast<const float4*>(q + head + (long long)row * D + 16 * c + 4 * t);
                const float xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int st = e / 2, slot = h + 2 * (e % 2);   // d = 16c + 4t + e
                    unsigned& dst = qa[Q_SMEM ? 0 : c][st][slot];
                    if constexpr (PASSES == 1) dst = tf32_round(xs[e]);
                    else if constexpr (QPRE) split_tf32(xs[e], dst, qs[QPRE ? c : 0][st][slot]);
                    else dst = __float_as_uint(xs[e]);
                }
            }
        }
    } else {
#pragma unroll
        for (int c = 0; c < NCQ; ++c) {
            float xs[2][4];   // [h][e]: Q[row_a + 8h][16c + 4t + e]
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row_a + 8 * h;
                float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (row < n) x = *reinterpret_cast<const float4*>(q + head + (long long)row * D + 16 * c + 4 * t);
                xs[h][0] = x.x; xs[h][1] = x.y; xs[h][2] = x.z; xs[h][3] = x.w;
            }
#pragma unroll
            for (int st = 0; st < 2; ++st) {
                unsigned fb[4], fs[4];   // slot = h + 2 * (e % 2) holds Q[row_a + 8h][16c + 4t + 2st + e % 2]
#pragma unroll
                for (int slot = 0; slot < 4; ++slot) {
                    const float x = xs[slot % 2][2 * st + slot / 2];
                    if constexpr (PASSES == 1) { fb[slot] = tf32_round(x); fs[slot] = 0u; }
                    else if constexpr (Q_SMEM == 2) split_tf32(x, fb[slot], fs[slot]);
                    else { fb[slot] = __float_as_uint(x); fs[slot] = 0u; }
                }
                qf[(c * 2 + st) * QP * 32] = f4(fb[0], fb[1], fb[2], fb[3]);
                if constexpr (Q_SMEM == 2) qf[(c * 2 + st) * QP * 32 + 32] = f4(fs[0], fs[1], fs[2], fs[3]);
            }
        }
    }

    const float sl2 = scale * 1.4426950408889634f;   // scores in log2 units: one FFMA per score
    float m_run[2] = {ATTNLAB_NEG_INF, ATTNLAB_NEG_INF};   // running max * scale * log2(e), rows g and g+8
    float l_run[2] = {0.0f, 0.0f};                         // per-thread partial row sums
    float acc[NI][4];
#pragma unroll
    for (int i = 0; i < NI; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

    for (int kv0 = 0, it = 0; kv0 < n; kv0 += BN, ++it) {
        const float* kb_s;   // K big (or raw) [BN][SK]
        const float* ks_s;   // K small
        const float* vb_s;   // V big: [BN/2][SVI] interleaved (PREP) or raw [BN][SV]
        const float* vs_s;   // V small
        cp_async_wait<0>();
        if constexpr (PREP) {
            // Barrier (1): the raw tile is visible to every thread; every warp has finished the
            // previous tile, so the prepared buffers may be overwritten.
            __syncthreads();
            prepare_kv<D, BN, THREADS, PASSES, SK, SVI, FLIP>(raw_k, raw_v, kbig, ksmall, vbig, vsmall, kv0);
            // Barrier (2): the prepared tile is visible; every raw read is done, so the raw
            // buffer may be refilled.
            __syncthreads();
            if (kv0 + BN < n) {
                issue_kv<D, BN, THREADS, D, D>(raw_k, raw_v, kh, vh, kv0 + BN, n);
                cp_async_commit();
            }
            kb_s = kbig; ks_s = ksmall; vb_s = vbig; vs_s = vsmall;
        } else {
            // Barrier: tile `it` is visible to every thread, and every warp has finished tile
            // it-1, so its stage (the other one) may be refilled.
            __syncthreads();
            if (kv0 + BN < n) {
                float* nxt = smem + ((it + 1) & 1) * BN * (SK + SV);
                issue_kv<D, BN, THREADS, SK, SV>(nxt, nxt + BN * SK, kh, vh, kv0 + BN, n);
                cp_async_commit();
            }
            kb_s = smem + (it & 1) * BN * (SK + SV);
            vb_s = kb_s + BN * SK;
            ks_s = kb_s;   // unused: the warps split raw values themselves
            vs_s = vb_s;
        }
        if (!active) continue;
#ifndef ATTNLAB_HOST_EMULATION
        if constexpr (QSPLIT && Q_SMEM == 0) {
            // Hide Q from the optimiser once per tile: otherwise it hoists the per-chunk split out
            // of the loop (Q is loop-invariant), holding big and small of all of Q (D regs) and spilling.
#pragma unroll
            for (int c = 0; c < NCQ; ++c)
#pragma unroll
                for (int e = 0; e < 8; ++e) asm volatile("" : "+r"(qa[Q_SMEM ? 0 : c][e / 4][e % 4]));
        }
#endif

        // ---- S = Q K^T (unscaled); d chunk c outer, so a Q chunk is fetched and split once per
        // tile. 3xTF32: the big x big products accumulate in s, the two small-term products in s2
        // (see "Accumulation"), s += s2 at the end.
        float s[NJ][4];
#pragma unroll
        for (int j = 0; j < NJ; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
        float s2[PASSES == 3 ? NJ : 1][4];
#pragma unroll
        for (int j = 0; j < (PASSES == 3 ? NJ : 1); ++j) s2[j][0] = s2[j][1] = s2[j][2] = s2[j][3] = 0.0f;
#pragma unroll
        for (int c = 0; c < NCQ; ++c) {
            unsigned ab[2][4], as[2][4];   // A fragments (big, small) of k8-steps 0 and 1
#pragma unroll
            for (int st = 0; st < 2; ++st) {
                if constexpr (Q_SMEM != 0) {
                    const float4 u = qf[(c * 2 + st) * QP * 32];
                    const float x[4] = {u.x, u.y, u.z, u.w};
                    float4 w = u;
                    if constexpr (Q_SMEM == 2) w = qf[(c * 2 + st) * QP * 32 + 32];
                    const float y[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        if constexpr (QSPLIT) split_tf32(x[e], ab[st][e], as[st][e]);
                        else { ab[st][e] = __float_as_uint(x[e]); as[st][e] = Q_SMEM == 2 ? __float_as_uint(y[e]) : 0u; }
                    }
                } else {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        if constexpr (QSPLIT) {
                            split_tf32(__uint_as_float(qa[Q_SMEM ? 0 : c][st][e]), ab[st][e], as[st][e]);
                        } else {
                            ab[st][e] = qa[Q_SMEM ? 0 : c][st][e];
                            as[st][e] = QPRE ? qs[QPRE ? c : 0][st][e] : 0u;
                        }
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                unsigned kb[4], ksm[4];   // K[8j + g][16c + 4t .. +3]: B fragments of both k8-steps
                load4<PASSES, PREP>(kb_s, ks_s, (8 * j + g) * SK + 16 * c + 4 * t, kb, ksm);
#pragma unroll
                for (int st = 0; st < 2; ++st) {
                    const unsigned bb[2] = {kb[2 * st], kb[2 * st + 1]};
                    if constexpr (PASSES == 3) {
                        const unsigned bs[2] = {ksm[2 * st], ksm[2 * st + 1]};
                        mma_m16n8k8_tf32(s2[PASSES == 3 ? j : 0], as[st], bb);
                        mma_m16n8k8_tf32(s2[PASSES == 3 ? j : 0], ab[st], bs);
                    }
                    mma_m16n8k8_tf32(s[j], ab[st], bb);
                }
            }
        }
        if constexpr (PASSES == 3) {
#pragma unroll
            for (int j = 0; j < NJ; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) s[j][r] += s2[PASSES == 3 ? j : 0][r];
        }

        // Keys >= n: -inf (tail tile only).
        if (kv0 + BN > n) {
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
#pragma unroll
                for (int r = 0; r < 4; ++r)
                    if (kv0 + 8 * j + 2 * t + (r & 1) >= n) s[j][r] = ATTNLAB_NEG_INF;
            }
        }

        // ---- online softmax, rows g (h = 0) and g + 8 (h = 1)
        float alpha[2];   // rescale of this row's O and l (PASSES = 3: folded into the P V update)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = ATTNLAB_NEG_INF;   // this tile's raw row max
#pragma unroll
            for (int j = 0; j < NJ; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(ATTNLAB_FULL_MASK, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(ATTNLAB_FULL_MASK, mx, 2));
            // The running max is kept scaled (units of the exponent), so an unchanged max gives
            // alpha = 2^0 = 1 exactly. (Recomputing m_old * sl2 - m_new * sl2 from raw maxima lets
            // the compiler fuse it into one FFMA, which leaves the rounding error of m_new * sl2:
            // alpha = 1 + ~1e-7 on every tile, the same for a row on every tile. O and l both take
            // it, but early keys end up weighted (1 + 1e-7)^tiles more than late ones: a relative
            // error growing as N / BN, 1e-5 at N = 16384, BN = 32 on the H200. tests: the CPU model
            // built with FMA contraction, test_3xtf32_long_sequence.)
            const float m_new = fmaxf(m_run[h], mx * sl2);   // fmaxf skips NaN scores
            // A row whose every score so far is -inf (or NaN) keeps m = -inf: subtract 0.
            const float m_sub = m_new == ATTNLAB_NEG_INF ? 0.0f : m_new;
            alpha[h] = fast_exp2(m_run[h] - m_sub);   // 2^-inf = 0 on a row's first valid tile
            m_run[h] = m_new;
            float rs = 0.0f;
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                s[j][2 * h] = fast_exp2(fmaf(s[j][2 * h], sl2, -m_sub));
                s[j][2 * h + 1] = fast_exp2(fmaf(s[j][2 * h + 1], sl2, -m_sub));
                rs += s[j][2 * h] + s[j][2 * h + 1];
            }
            l_run[h] = l_run[h] * alpha[h] + rs;
            if constexpr (PASSES == 1) {
#pragma unroll
                for (int i = 0; i < NI; ++i) {
                    acc[i][2 * h] *= alpha[h];
                    acc[i][2 * h + 1] *= alpha[h];
                }
            }
        }

        // ---- O += P V: k8-step j takes keys 8j + 2t (slot t) and 8j + 2t + 1 (slot t+4); the
        // thread's P accumulators are its A fragment (a = s[0], s[2], s[1], s[3]).
        // V's B fragments. PREP: n-tile 2p + r, column n <-> d = 16p + 2n + r; one read of
        // interleaved row 4j + t at column pair 16p + 2g gives {V[8j+2t][d], V[8j+2t+1][d]} for
        // d and d + 1. Direct: n-tile 4cv + e, column n <-> d = 32cv + 4n + e; reads of rows
        // 8j + 2t and 8j + 2t + 1 at columns 32cv + 4g .. +3.
        if constexpr (PASSES == 3) {
            // Per PV_STEPS k8-steps: P split (those steps only), then per group of PV_GROUP n-tiles
            // a zeroed partial takes the 3 MMAs of each step and is added to O by fp32 operations
            // (the first addition of the tile also applies alpha: one FFMA).
#pragma unroll
            for (int j0 = 0; j0 < NJ; j0 += PV_STEPS) {
                unsigned pb[PV_STEPS][4], ps[PV_STEPS][4];
                // Direct path: this partial's sign goes on P (PREP: on V, in the prep pass).
                const unsigned neg = PREP ? 0u : (((unsigned)(kv0 + 8 * j0) / FLIP) & 1u) << 31;
#pragma unroll
                for (int jj = 0; jj < PV_STEPS; ++jj) {
                    const int j = j0 + jj;
                    const float p[4] = {s[j][0], s[j][2], s[j][1], s[j][3]};
#pragma unroll
                    for (int e = 0; e < 4; ++e) split_tf32(__uint_as_float(__float_as_uint(p[e]) ^ neg), pb[jj][e], ps[jj][e]);
                }
#pragma unroll
                for (int grp = 0; grp < NI / PV_GROUP; ++grp) {
                    float part[PV_GROUP][4];
#pragma unroll
                    for (int r = 0; r < PV_GROUP; ++r) part[r][0] = part[r][1] = part[r][2] = part[r][3] = 0.0f;
#pragma unroll
                    for (int jj = 0; jj < PV_STEPS; ++jj) {
                        const int j = j0 + jj;
#pragma unroll
                        for (int u = 0; u < PV_GROUP / UNIT; ++u) {
                            const int un = grp * (PV_GROUP / UNIT) + u;   // p (PREP) or cv (direct)
                            unsigned bb[UNIT][2], bs[UNIT][2];
                            if constexpr (PREP) {
                                unsigned vb4[4], vs4[4];
                                load4<PASSES, true>(vb_s, vs_s, (4 * j + t) * SVI + 32 * un + 4 * g, vb4, vs4);
#pragma unroll
                                for (int r = 0; r < UNIT; ++r) {
                                    bb[r][0] = vb4[2 * r]; bb[r][1] = vb4[2 * r + 1];
                                    bs[r][0] = vs4[2 * r]; bs[r][1] = vs4[2 * r + 1];
                                }
                            } else {
                                unsigned v0b[4], v0s[4], v1b[4], v1s[4];
                                const int at = (8 * j + 2 * t) * SV + 32 * un + 4 * g;
                                load4<PASSES, false>(vb_s, vs_s, at, v0b, v0s);
                                load4<PASSES, false>(vb_s, vs_s, at + SV, v1b, v1s);
#pragma unroll
                                for (int r = 0; r < UNIT; ++r) {
                                    bb[r][0] = v0b[r]; bb[r][1] = v1b[r];
                                    bs[r][0] = v0s[r]; bs[r][1] = v1s[r];
                                }
                            }
#pragma unroll
                            for (int r = 0; r < UNIT; ++r) mma_tf32x<PASSES>(part[u * UNIT + r], pb[jj], ps[jj], bb[r], bs[r]);
                        }
                    }
#pragma unroll
                    for (int r = 0; r < PV_GROUP; ++r) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            float& a = acc[grp * PV_GROUP + r][e];
                            a = j0 == 0 ? fmaf(-a, alpha[e / 2], part[r][e]) : part[r][e] - a;
                        }
                    }
                }
            }
        } else {
            // TF32: straight into O (its 4e-4 error dwarfs the accumulation's bias).
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                const float p[4] = {s[j][0], s[j][2], s[j][1], s[j][3]};   // A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]
                unsigned pb[4], ps[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) to_tf32<PASSES>(p[e], pb[e], ps[e]);
                if constexpr (PREP) {
#pragma unroll
                    for (int pp = 0; pp < D / 16; ++pp) {
                        unsigned vb4[4], vs4[4];
                        load4<PASSES, true>(vb_s, vs_s, (4 * j + t) * SVI + 32 * pp + 4 * g, vb4, vs4);
#pragma unroll
                        for (int r = 0; r < 2; ++r) {
                            const unsigned bb[2] = {vb4[2 * r], vb4[2 * r + 1]};
                            const unsigned bs[2] = {vs4[2 * r], vs4[2 * r + 1]};
                            mma_tf32x<PASSES>(acc[2 * pp + r], pb, ps, bb, bs);
                        }
                    }
                } else {
#pragma unroll
                    for (int cv = 0; cv < D / 32; ++cv) {
                        unsigned v0b[4], v0s[4], v1b[4], v1s[4];
                        const int at = (8 * j + 2 * t) * SV + 32 * cv + 4 * g;
                        load4<PASSES, false>(vb_s, vs_s, at, v0b, v0s);
                        load4<PASSES, false>(vb_s, vs_s, at + SV, v1b, v1s);
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const unsigned bb[2] = {v0b[e], v1b[e]};
                            const unsigned bs[2] = {v0s[e], v1s[e]};
                            mma_tf32x<PASSES>(acc[4 * cv + e], pb, ps, bb, bs);
                        }
                    }
                }
            }
        }
    }

    // ---- epilogue: full row sums across the quad, normalise, store rows < n. A lane's values of
    // row `row` are 4 (PREP: d = 16p + 4t .. +3 from acc[2p], acc[2p+1]) or 8 (direct: d = 32cv +
    // 8t .. +7 from acc[4cv .. 4cv+3]) contiguous floats.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float l = l_run[h];
        l += __shfl_xor_sync(ATTNLAB_FULL_MASK, l, 1);
        l += __shfl_xor_sync(ATTNLAB_FULL_MASK, l, 2);
        // l >= 1 for a valid row (its max key contributes 2^0). PASSES = 3: the accumulators hold
        // (-1)^i O after partial i; the last one is i = (tiles * NJ / PV_STEPS) - 1.
        const bool odd_last = PASSES == 3 && ((((n + BN - 1) / BN) * (NJ / PV_STEPS) - 1) & 1);
        const float inv = (odd_last ? -1.0f : 1.0f) / l;
        const int row = row_a + 8 * h;
        if (active && row < n) {
            float* orow = o + head + (long long)row * D;
            if constexpr (PREP) {
#pragma unroll
                for (int pp = 0; pp < D / 16; ++pp)
                    *reinterpret_cast<float4*>(orow + 16 * pp + 4 * t) =
                        make_float4(acc[2 * pp][2 * h] * inv, acc[2 * pp + 1][2 * h] * inv,
                                    acc[2 * pp][2 * h + 1] * inv, acc[2 * pp + 1][2 * h + 1] * inv);
            } else {
#pragma unroll
                for (int cv = 0; cv < D / 32; ++cv) {
                    *reinterpret_cast<float4*>(orow + 32 * cv + 8 * t) =
                        make_float4(acc[4 * cv][2 * h] * inv, acc[4 * cv + 1][2 * h] * inv,
                                    acc[4 * cv + 2][2 * h] * inv, acc[4 * cv + 3][2 * h] * inv);
                    *reinterpret_cast<float4*>(orow + 32 * cv + 8 * t + 4) =
                        make_float4(acc[4 * cv][2 * h + 1] * inv, acc[4 * cv + 1][2 * h + 1] * inv,
                                    acc[4 * cv + 2][2 * h + 1] * inv, acc[4 * cv + 3][2 * h + 1] * inv);
                }
            }
        }
    }
}

// Q in registers, ptxas picks the register count: the registry's kernel (Q_SMEM = 0, MIN_BLOCKS = 0).
template <int D, int BM, int BN, int WARPS, int PASSES, int KV_PREP = 1>
__global__ void __launch_bounds__(WARPS * 32)
attn_tf32_mma(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
              float* __restrict__ o, int n, float scale) {
    attn09_block<D, BM, BN, WARPS, PASSES, KV_PREP, 0, 0>(q, k, v, o, n, scale);
}

// The same with Q's fragments in shared memory (Q_SMEM = 1, 2) and/or a register cap for
// MIN_BLOCKS blocks per SM (0: none); attn_tf32_mma_q<..., 0, 0> is attn_tf32_mma.
template <int D, int BM, int BN, int WARPS, int PASSES, int KV_PREP, int Q_SMEM, int MIN_BLOCKS>
__global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS)
attn_tf32_mma_q(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                float* __restrict__ o, int n, float scale) {
    attn09_block<D, BM, BN, WARPS, PASSES, KV_PREP, Q_SMEM, MIN_BLOCKS>(q, k, v, o, n, scale);
}
