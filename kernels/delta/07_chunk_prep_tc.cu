// 07 — chunked KDA, token-parallel half of the two-kernel form: per chunk, the pair products and
// the triangular inverse on tensor cores; writes only T = (I + Akk)^-1 and Aqk (C x C each).
//
// What changed from 06, and why. 06 builds every chunk's operands inside the state pass, so each of
// a head's V / BV value-column blocks repeats the pair products Akk, Aqk and the inverse, and the
// other warps wait for the one-warp inverse (notebook 13's Nsight Compute table: barrier stalls).
// Here one block per (chunk, head) does it once, with no dependence on the state, so every chunk
// of every head runs at once; 08 then reads T and Aqk (8 KB per chunk and head: half the bytes of
// that chunk's q) and rebuilds only the cheap element-wise operands (Qg, Kbg, Kd) itself.
//
// Per chunk of C = 32 rows (as in 06; G = cumsum(g) in base 2, rows past T zero):
//   e_i = 2^G_i, r_i = 2^-G_i;  Qg = scale q e,  Kbg = beta k e,  Kr = k r
//   Akk = strict_lower(Kbg Kr^T),  Aqk = lower(Qg Kr^T)        [3xBF16 tensor cores; exact path when
//                                                               a channel decays by more than 2^-100]
//   T = (I + Akk)^-1                                          [two 16 x 16 blocks, fp32 substitution]
// Output (32-bit words, each a bf16 pair along the row, ready for 08's fragment loads):
//   TA [B, H, NC, 4, C, C/2]: T hi, T lo, Aqk hi, Aqk lo.
// With BF (the bf16-I/O path) q, k, g and beta are bf16 in memory and widened to fp32 on load;
// nothing else changes.
// With A2 (for 13, whose recurrence multiplies X by T and by Aqk T in one warpgroup MMA) the third
// and fourth arrays hold A2 = Aqk T instead of Aqk (O = Qg S + Aqk V' = Qg S + (Aqk T) X): a 3xBF16
// product of the two from their hi/lo words, split like the others.
// Every row's q, k, g loads are issued before the gates' running sums use any of them: the same
// arithmetic, bit for bit. (A probe's Nsight Compute counters, not recorded, had the bf16 form of the
// earlier order, which widened each row's g inside that row's branch, stalled on its loads 3.5x as
// often per issued instruction as the fp32 form; notebook 13 times 07 alone at both.)
// q, k and g are read straight from global memory into registers (each thread two adjacent
// channels of C / NQ rows), so shared memory holds only the products' operands; Akk, T and the four
// output arrays live in the same space once the pair products have read it (their results wait in
// registers across one more barrier): ~54 KB a block, four blocks per SM (on the bf16 path, whose 07 waited on
// its loads with three: Nsight Compute counted barrier and long-scoreboard stalls with 36 % of the warps active).
// The fp32 path first kept the late arrays in their own space, three blocks per SM (64 registers a thread
// spilled a few bytes there); since step 24 it takes the bf16 path's aliased layout too: nvcc 13 fits it in 64
// registers with no spill, so four blocks per SM, and the probe that compared the two (scripts/probe_delta_lda.py,
// before 24) found 07 faster aliased, its outputs bit for bit the same. KDA_PREP_ALIAS=0 is the earlier fp32
// layout, a probe build now. 21 on fp32 inputs keeps the earlier layout and its three blocks per SM (its own
// __launch_bounds__, kernels.prep_ops_blocks_per_sm).
#pragma once   // 21 includes this file for kda_prep_body

#include "delta_common.cuh"

#include "delta_io.cuh"
#include "ops_image.cuh"

#ifndef KDA_PREP_ALIAS
#define KDA_PREP_ALIAS 1   // 07 on fp32 inputs: the bf16 path's shared-memory aliasing and four blocks per SM (1, as
#endif                     // built), or (probe build; results valid) the late arrays in their own space and three (0)
static_assert(KDA_PREP_ALIAS == 0 || KDA_PREP_ALIAS == 1, "KDA_PREP_ALIAS: 1 (as built) or 0 (probe)");

#ifndef KDA_PREP_LEAN
#define KDA_PREP_LEAN 0   // probe build (07 and 21; the same arithmetic): each row's loads from one offset stepped a row at
#endif                    // a time, with no branch; the zero blocks written as zeros by the copy out; on 07 without A2
                          // (08-12, 25), Aqk's words stored while warp 0 inverts (1); or as recorded (0). Its results are
                          // 07's bit for bit on the CPU model; on an H100 (scripts/probe_delta_prep.py, not recorded)
                          // the fp32 build's differed from 07's at rounding level (ptxas fuses products and sums as the
                          // code around them lets it), the bf16 build's did not, and 07 ran a few per cent faster alone
                          // on fp32 inputs, no faster on bf16, the call 07 -> 24 within 1 %: not made the build
static_assert(KDA_PREP_LEAN == 0 || KDA_PREP_LEAN == 1, "KDA_PREP_LEAN: 0 (as built) or 1 (probe)");

#ifndef KDA_PREP_INV
#define KDA_PREP_INV 0   // probe build (07 and 21; the same arithmetic): the two diagonal 16 x 16 inverses on every warp,
#endif                   // as step 29 builds them (1; kda_prep_body's INV); or on warp 0 alone (0, as built)
static_assert(KDA_PREP_INV == 0 || KDA_PREP_INV == 1, "KDA_PREP_INV: 0 (as built) or 1 (probe)");

template <int K, int C, bool ALIAS = false>   // ALIAS: the late arrays share the operands' space (07; 21 on bf16)
struct KdaPrepLayout {
    static constexpr bool AL = ALIAS;
    static constexpr int NW = 8;
    static constexpr int NTH = 32 * NW;
    static constexpr int LK = K / 2 + 4;        // words per row of [.][K] bf16-pair arrays
    static constexpr int LC = C / 2 + 4;        // words per row of [.][C] bf16-pair arrays
    static constexpr int LA = C + 2;            // floats per row of Akk / T (fp32)
    static constexpr int NQ = NTH / (K / 2);
    // Qg, Kbg, Kr as hi/lo pairs; on the exact path the same space holds G2, q, k in fp32. The late
    // arrays (Akk, T, Y and the output arrays) follow it, or (ALIAS) take its place once the pair
    // products have read it.
    static constexpr int OFF_OPS = 0;
    static constexpr int OPS_WORDS = (6 * C * LK > 3 * C * K) ? 6 * C * LK : 3 * C * K;
    static constexpr int LATE_WORDS = 2 * C * LA + 16 * 17 + 4 * C * LC;
    static constexpr int OFF_AKK = ALIAS ? OFF_OPS : OFF_OPS + OPS_WORDS;   // Akk [C][LA]
    static constexpr int OFF_TF = OFF_AKK + C * LA;       // T [C][LA]
    static constexpr int OFF_Y = OFF_TF + C * LA;         // A10 T00 [16][17]
    static constexpr int OFF_TA = OFF_Y + 16 * 17;        // T hi, T lo, Aqk hi, Aqk lo [C][LC] each
    static_assert((!ALIAS || LATE_WORDS <= OPS_WORDS) && OFF_TA % 4 == 0, "the late arrays fit the operands' space");
    static constexpr int OFF_TOT = OPS_WORDS + (ALIAS ? 0 : LATE_WORDS);   // per-group gate sums [NQ][K]
    static constexpr int OFF_BETA = OFF_TOT + NQ * K;     // beta [C]
    static constexpr int OFF_FLAG = OFF_BETA + C;         // strong-decay flag (int)
    static constexpr int WORDS = OFF_FLAG + 4;
};

// 21 (kernels/delta/21_chunk_prep_ops.cu) runs this body with OPS: each chunk's element-wise operands of
// the recurrence, stored to `ops` as the recurrence's shared-memory image (kda_ops_image, ops_image.cuh).
// SIDE (21, and 07 beside 27: kda_chunk_prep_side): 21's grid order and ready flags without (unless OPS) the images.
// INV (29, and the probe build KDA_PREP_INV of 07 and 21): the inverse's two diagonal blocks on every warp.
template <int K, int C, bool BF, bool A2, bool OPS, bool SIDE = OPS, bool INV = (KDA_PREP_INV != 0)>
static __device__ __forceinline__ void
kda_prep_body(const typename KdaIn<BF>::T* __restrict__ q, const typename KdaIn<BF>::T* __restrict__ k,
              const typename KdaIn<BF>::T* __restrict__ g, const typename KdaIn<BF>::T* __restrict__ beta,
              unsigned* __restrict__ TA, unsigned char* __restrict__ ops, int* __restrict__ ready, int epoch, int T,
              int H, float scale) {
    // 07 (KDA_PREP_ALIAS; 21 on bf16 inputs only): four blocks per SM, the late arrays in the operands' space
    using L = KdaPrepLayout<K, C, BF || (KDA_PREP_ALIAS && !OPS)>;
    static_assert(C == 32, "the inverse works on two 16 x 16 blocks: chunks of 32");
    static_assert(K == 64 || K == 128, "K in {64, 128}");
    constexpr int NTH = L::NTH, NQ = L::NQ, RPG = C / NQ;
    constexpr int LK = L::LK, LC = L::LC, LA = L::LA;
    constexpr int MT = C / 16;
    constexpr float FAST_MIN_G = -100.0f;        // chunk decay bound of the factored path (base 2)
    static_assert(RPG % 2 == 0 && MT * (MT + 1) <= L::NW, "one P2 job per warp");

    KDA_DYNAMIC_SHARED(smem_f);
    if (kda_dynamic_smem_size() < (unsigned)(L::WORDS * 4)) __trap();
    unsigned* const words = reinterpret_cast<unsigned*>(smem_f);
    unsigned* QgH = words + L::OFF_OPS;  unsigned* QgL = QgH + C * LK;
    unsigned* KbH = QgL + C * LK;        unsigned* KbL = KbH + C * LK;
    unsigned* KrH = KbL + C * LK;        unsigned* KrL = KrH + C * LK;
    float* sG2 = smem_f + L::OFF_OPS;     // exact path only: [C][K] each
    float* sQx = sG2 + C * K;
    float* sKx = sQx + C * K;
    float* sAkk = smem_f + L::OFF_AKK;
    float* sTf = smem_f + L::OFF_TF;
    float* sY = smem_f + L::OFF_Y;
    float* sTot = smem_f + L::OFF_TOT;
    float* sBeta = smem_f + L::OFF_BETA;
    int* sFlag = reinterpret_cast<int*>(smem_f + L::OFF_FLAG);
    unsigned* TH = words + L::OFF_TA;     unsigned* TL = TH + C * LC;
    unsigned* AqH = TL + C * LC;          unsigned* AqL = AqH + C * LC;

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int g8 = lane / 4, t4 = lane % 4;
    // 21 (OPS) and 07 beside 27 (SIDE): grid (B H, NC), every head's chunk n dispatched before any head's chunk n + 1,
    // the order in which 22 (27) reads them when the two run side by side
    const int n = SIDE ? blockIdx.y : blockIdx.x, h = SIDE ? blockIdx.x % H : blockIdx.y, b = SIDE ? blockIdx.x / H : blockIdx.z;
    const long long TT = T;
    const int NC = (T + C - 1) / C;
    const long long t0 = (long long)n * C;
    KDA_TL(const unsigned long long tl_start = kda_gtime();)
    KDA_PH(0);

    // zero T and Aqk (their upper blocks are never written; ALIAS: zeroed once the pair products are
    // done), the flag; beta
    if constexpr (!L::AL)
        for (int idx = tid; idx < 4 * C * LC; idx += NTH) TH[idx] = 0u;
    if (tid == 0) *sFlag = 0;
    if (tid < C) sBeta[tid] = (t0 + tid < TT) ? kda_ld1<BF>(beta + (b * TT + t0 + tid) * H + h) : 0.0f;

    // ---- gates: thread (pp, grp) owns channels c0, c0+1 of rows r0 .. r0 + RPG - 1
    const int pp = tid % (K / 2), grp = tid / (K / 2);
    const int c0 = 2 * pp, r0 = grp * RPG;
    float G[RPG][2];
    typename KdaRaw2<BF>::T xq[RPG], xk[RPG];   // as loaded: widened after the barrier (delta_io.cuh)
    {
        // every row's loads first, the running sums after: a sum that widens row ii's g before row
        // ii + 1 is loaded makes each row wait for the last (on the bf16 path the widening sat inside
        // each row's branch: Nsight Compute counted 3.5x fp32's long-scoreboard stalls per issue)
        typename KdaRaw2<BF>::T xg[RPG];
        if constexpr (KDA_PREP_LEAN) {
            // one offset stepped a row (H K elements) at a time, no branch: rows past T re-read the last row (a group
            // with none in range, row 0 of the chunk) and are zeroed after their loads
            const long long left = TT - (t0 + r0), rs = (long long)H * K;
            long long o = kda_bthd(b, left > 0 ? t0 + r0 : t0, h, c0, TT, H, K);
#pragma unroll
            for (int ii = 0; ii < RPG; ++ii) {
                xg[ii] = kda_raw2<BF>(g + o); xq[ii] = kda_raw2<BF>(q + o); xk[ii] = kda_raw2<BF>(k + o);
                if (ii + 1 < left) o += rs;
            }
#pragma unroll
            for (int ii = 0; ii < RPG; ++ii)
                if (ii >= left) xg[ii] = xq[ii] = xk[ii] = kda_raw2_zero<BF>();
        } else {
#pragma unroll
            for (int ii = 0; ii < RPG; ++ii) {
                const long long tt = t0 + r0 + ii;
                xg[ii] = xq[ii] = xk[ii] = kda_raw2_zero<BF>();
                if (tt < TT) {
                    const long long o = kda_bthd(b, tt, h, c0, TT, H, K);
                    xg[ii] = kda_raw2<BF>(g + o);
                    xq[ii] = kda_raw2<BF>(q + o);
                    xk[ii] = kda_raw2<BF>(k + o);
                }
            }
        }
        float run0 = 0.f, run1 = 0.f;
#pragma unroll
        for (int ii = 0; ii < RPG; ++ii) {
            const float2 gg = kda_widen2<BF>(xg[ii]);
            run0 += gg.x * KDA_LOG2E;
            run1 += gg.y * KDA_LOG2E;
            G[ii][0] = run0; G[ii][1] = run1;
        }
        sTot[grp * K + c0] = run0;
        sTot[grp * K + c0 + 1] = run1;
    }
    __syncthreads();   // group sums, beta, zeroed T / Aqk visible
    KDA_PH(1);
    float off0 = 0.f, off1 = 0.f, gl0 = 0.f, gl1 = 0.f;
#pragma unroll
    for (int q2 = 0; q2 < NQ; ++q2) {
        if (q2 == grp) { off0 = gl0; off1 = gl1; }
        gl0 += sTot[q2 * K + c0];
        gl1 += sTot[q2 * K + c0 + 1];
    }
    if (!(gl0 >= FAST_MIN_G && gl1 >= FAST_MIN_G)) *sFlag = 1;
    __syncthreads();   // the chunk's path is decided
    KDA_PH(2);
    const bool slow = *sFlag != 0;

    // ---- operands
#pragma unroll
    for (int ii = 0; ii < RPG; ++ii) {
        const int i = r0 + ii;
        const float2 qv = kda_widen2<BF>(xq[ii]), kv = kda_widen2<BF>(xk[ii]);
        const float G0 = G[ii][0] + off0, G1 = G[ii][1] + off1;
        if (!slow) {
            const float e0 = fast_exp2(G0), e1 = fast_exp2(G1), rr0 = fast_exp2(-G0), rr1 = fast_exp2(-G1);
            const float bi = sBeta[i];
            unsigned hw, lw;
            split_bf16x2(scale * qv.x * e0, scale * qv.y * e1, hw, lw);
            QgH[i * LK + pp] = hw; QgL[i * LK + pp] = lw;
            split_bf16x2(bi * kv.x * e0, bi * kv.y * e1, hw, lw);
            KbH[i * LK + pp] = hw; KbL[i * LK + pp] = lw;
            split_bf16x2(kv.x * rr0, kv.y * rr1, hw, lw);
            KrH[i * LK + pp] = hw; KrL[i * LK + pp] = lw;
        } else {
            *reinterpret_cast<float2*>(sG2 + i * K + c0) = make_float2(G0, G1);
            *reinterpret_cast<float2*>(sQx + i * K + c0) = qv;
            *reinterpret_cast<float2*>(sKx + i * K + c0) = kv;
        }
    }
    if constexpr (OPS)   // 21: this thread's share of the recurrence's operand image
        kda_ops_image<K, RPG, BF>(ops + (((long long)b * H + h) * NC + n) * kda_ops_image_bytes(K, !BF), c0, r0, G, xq, xk,
                                  off0, off1, gl0, gl1, scale);
    __syncthreads();
    KDA_PH(3);

    // ---- Akk and Aqk, into registers: their arrays share the operands' space
    static_assert(C * C / NTH == 4, "the exact path keeps four pairs a thread, the fast path 2 x 4 values");
    float keep[8];   // fast path: this warp's 16 x 16 block, n-tile jj at 4 jj (rows g8, g8 + 8);
                     // exact path: Akk, then Aqk, of pairs tid, tid + NTH, ... at u and 4 + u
    auto store_exact = [&](int idx, float ak, float aq) {   // exact path: pair idx's Akk and Aqk (hi / lo halves)
        const int i = idx / C, j = idx % C;
        sAkk[i * LA + j] = ak;
        unsigned hw, lw;
        split_bf16x2(aq, 0.0f, hw, lw);
        reinterpret_cast<unsigned short*>(AqH + i * LC)[j] = (unsigned short)(hw & 0xffffu);
        reinterpret_cast<unsigned short*>(AqL + i * LC)[j] = (unsigned short)(lw & 0xffffu);
    };
    auto store_fast = [&](int prod, int mt, int nb) {   // fast path: the warp's block of Akk (fp32) or Aqk (hi / lo)
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
            float d[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = mt * 16 + g8 + 8 * (e / 2), j = nb * 16 + jj * 8 + 2 * t4 + e % 2;
                if (prod == 0) sAkk[i * LA + j] = (j < i) ? keep[4 * jj + e] : 0.0f;
                d[e] = (j <= i) ? keep[4 * jj + e] : 0.0f;
            }
            if (prod == 1) store_acc_split(AqH, AqL, LC, mt * 16, nb * 16 + jj * 8, d, g8, t4);
        }
    };
    // warp's block: (mt, nb) of Akk (prod = 0) or Aqk (prod = 1), nb <= mt
    auto block_of = [&](int& mt_, int& nb_) { mt_ = 0; nb_ = warp / 2; while (mt_ < MT && nb_ > mt_) { nb_ -= mt_ + 1; ++mt_; } };
    if (!slow) {
        if (warp < MT * (MT + 1)) {
            const int prod = warp % 2;
            int mt, nb;
            block_of(mt, nb);
            // 16 x 16 block (mt, nb) of Akk (prod = 0: Kbg Kr^T) or Aqk (prod = 1: Qg Kr^T)
            const unsigned* AH = (prod ? QgH : KbH) + mt * 16 * LK;
            const unsigned* AL = (prod ? QgL : KbL) + mt * 16 * LK;
            float acc[2][2][4] = {};   // [n-tile][k parity]
#pragma unroll
            for (int kk = 0; kk < K / 16; ++kk) {
                unsigned ah[4], al[4], bh[4], bl[4];
                ldm_a16(AH + kk * 8, LK, lane, ah);
                ldm_a16(AL + kk * 8, LK, lane, al);
                ldm_b16x2(KrH + nb * 16 * LK + kk * 8, LK, lane, bh);
                ldm_b16x2(KrL + nb * 16 * LK + kk * 8, LK, lane, bl);
                mma_3xbf16_half(acc[0][kk & 1], ah, al, bh, bl, 0);
                mma_3xbf16_half(acc[1][kk & 1], ah, al, bh, bl, 1);
            }
#pragma unroll
            for (int jj = 0; jj < 2; ++jj)
#pragma unroll
                for (int e = 0; e < 4; ++e) keep[4 * jj + e] = acc[jj][0][e] + acc[jj][1][e];
            if constexpr (!L::AL) store_fast(prod, mt, nb);   // its own space: stored at once (fewer registers)
        }
    } else {
        // Exact path: every (i, j <= i) pair with one exp2 per channel; no factor can overflow.
        auto pair = [&](int idx, float& ak, float& aq) {
            const int i = idx / C, j = idx % C;
            float sk2 = 0.f, sq2 = 0.f;
            if (j <= i) {
                for (int c = 0; c < K; ++c) {
                    const float dec = fast_exp2(sG2[i * K + c] - sG2[j * K + c]) * sKx[j * K + c];
                    sk2 += sKx[i * K + c] * dec;
                    sq2 += sQx[i * K + c] * dec;
                }
            }
            ak = (j < i) ? sBeta[i] * sk2 : 0.0f;
            aq = (j <= i) ? scale * sq2 : 0.0f;
        };
        if constexpr (L::AL) {   // kept until the operands are read
#pragma unroll
            for (int u = 0; u < C * C / NTH; ++u) pair(tid + u * NTH, keep[u], keep[4 + u]);
        } else {              // their own space: stored at once (fewer registers)
            for (int idx = tid; idx < C * C; idx += NTH) {
                pair(idx, keep[0], keep[4]);
                store_exact(idx, keep[0], keep[4]);
            }
        }
    }
    if constexpr (L::AL) __syncthreads();   // every operand read: the space is Akk, T, Y and the output arrays from here
    KDA_PH(4);
    if (!slow) {
        if (L::AL && warp < MT * (MT + 1)) {
            int mt, nb;
            block_of(mt, nb);
            store_fast(warp % 2, mt, nb);
        }
    } else if constexpr (L::AL) {
#pragma unroll
        for (int u = 0; u < C * C / NTH; ++u) store_exact(tid + u * NTH, keep[u], keep[4 + u]);
    }
    __syncthreads();
    KDA_PH(5);

    // ---- T = (I + Akk)^-1: warp 0 inverts both diagonal blocks (lane = column j of block bb;
    // right-looking substitution, a 16-FMA dependent chain), then all threads form T10 = -T11 A10 T00.
    // LEAN: quad idx of arrays a0, a0 + 1, ... to global memory, the upper-right 16 x 16 block (rows < 16, quads
    // >= 2) as zeros, not read from shared memory (never written there)
    auto copy_out = [&](int a0, int idx) {
        constexpr int QW = C / 8;   // 16-byte quads per row of an output array
        unsigned* out = TA + (((long long)b * H + h) * NC + n) * (4LL * C * (C / 2));
        const int arr = a0 + idx / (C * QW), r = (idx / QW) % C, qd = idx % QW;
        U4 w = {0u, 0u, 0u, 0u};
        if (r >= 16 || qd < QW / 2) w = *reinterpret_cast<const U4*>(TH + arr * C * LC + r * LC + 4 * qd);
        *reinterpret_cast<U4*>(out + (arr * C + r) * (C / 2) + 4 * qd) = w;
    };
    if (KDA_PREP_LEAN && !A2) {   // meanwhile: Aqk's hi and lo words are final; warps 1.. store them
        if (warp != 0)
            for (int idx = tid - 32; idx < 2 * C * (C / 8); idx += NTH - 32) copy_out(2, idx);
    } else if constexpr (L::AL && INV) {   // 29 (ALIAS): the same zeros first, a 16-byte store from each of 128 threads
        static_assert(NTH >= 4 * 16 * 2 && LC % 4 == 0 && L::OFF_TA % 4 == 0, "a quad per thread, 16-byte aligned");
        if (tid < 4 * 16 * 2) *reinterpret_cast<U4*>(TH + (tid / 32) * C * LC + ((tid / 2) % 16) * LC + 8 + 4 * (tid % 2)) =
            U4{0u, 0u, 0u, 0u};
    } else if (L::AL && warp != 0) {   // meanwhile (ALIAS): the upper-right 16 x 16 block of each output array (read by the copy out only)
        for (int idx = tid - 32; idx < 4 * 16 * 8; idx += NTH - 32) {
            const int arr = idx / 128, r = (idx / 8) % 16, w = idx % 8;
            TH[arr * C * LC + r * LC + 8 + w] = 0u;
        }
    }
    if constexpr (INV) {   // 29: every warp
        // warp w: block bb = w / 4, columns j = 4 (w % 4) + lane / 8; lane % 8 = rg holds rows rg and rg + 8 of column j.
        // Column j's step m as warp 0's: x_i -= A_im x_m for i > m, m ascending; x_m (final after step m - 1) from
        // lane (lane & ~7) | (m & 7), slot m / 8; A_im from the thread's two rows of the block in shared memory.
        static_assert(L::NW == 8 && C == 32, "two blocks x 16 columns x 8 row pairs: 256 threads");
        const int bb = warp / 4, j = 4 * (warp % 4) + lane / 8, rg = lane % 8, base = 16 * bb;
        const float* const a0 = sAkk + (base + rg) * LA + base;
        const float* const a1 = a0 + 8 * LA;
        float x0 = (rg == j) ? 1.0f : 0.0f, x1 = (rg + 8 == j) ? 1.0f : 0.0f;
#pragma unroll
        for (int m = 0; m < 15; ++m) {
            const float xm = __shfl_sync(ATTNLAB_FULL_MASK, m < 8 ? x0 : x1, (lane & ~7) | (m & 7));
            if (rg > m) x0 -= a0[m] * xm;
            if (rg + 8 > m) x1 -= a1[m] * xm;
        }
        sTf[(base + rg) * LA + base + j] = x0;
        sTf[(base + rg + 8) * LA + base + j] = x1;
        const float n0 = __shfl_xor_sync(ATTNLAB_FULL_MASK, x0, 8), n1 = __shfl_xor_sync(ATTNLAB_FULL_MASK, x1, 8);
        if ((j & 1) == 0) {   // lane + 8 holds column j + 1
            unsigned hw, lw;
            split_bf16x2(x0, n0, hw, lw);
            TH[(base + rg) * LC + (base + j) / 2] = hw;
            TL[(base + rg) * LC + (base + j) / 2] = lw;
            split_bf16x2(x1, n1, hw, lw);
            TH[(base + rg + 8) * LC + (base + j) / 2] = hw;
            TL[(base + rg + 8) * LC + (base + j) / 2] = lw;
        }
    } else if (warp == 0) {
        const int bb = lane / 16, j = lane % 16, base = 16 * bb;
        float col[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) col[i] = (i == j) ? 1.0f : 0.0f;
#pragma unroll
        for (int m = 0; m < 16; ++m) {
#pragma unroll
            for (int i = m + 1; i < 16; ++i) col[i] -= sAkk[(base + i) * LA + base + m] * col[m];
        }
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            sTf[(base + i) * LA + base + j] = col[i];
            const float nb = __shfl_xor_sync(ATTNLAB_FULL_MASK, col[i], 1);
            if ((j & 1) == 0) {
                unsigned hw, lw;
                split_bf16x2(col[i], nb, hw, lw);
                TH[(base + i) * LC + (base + j) / 2] = hw;
                TL[(base + i) * LC + (base + j) / 2] = lw;
            }
        }
    }
    __syncthreads();
    KDA_PH(6);
    {   // Y = A10 T00
        const int i = tid / 16, j = tid % 16;
        float s = 0.f;
#pragma unroll
        for (int m = 0; m < 16; ++m) s += sAkk[(16 + i) * LA + m] * sTf[m * LA + j];
        sY[i * 17 + j] = s;
    }
    __syncthreads();
    KDA_PH(7);
    if (tid < 128) {   // T10 = -T11 Y, two adjacent columns per thread, split and stored
        const int i = tid / 8, j = 2 * (tid % 8);
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int m = 0; m < 16; ++m) {
            const float tm = (m <= i) ? sTf[(16 + i) * LA + 16 + m] : 0.0f;
            s0 -= tm * sY[m * 17 + j];
            s1 -= tm * sY[m * 17 + j + 1];
        }
        unsigned hw, lw;
        split_bf16x2(s0, s1, hw, lw);
        TH[(16 + i) * LC + j / 2] = hw;
        TL[(16 + i) * LC + j / 2] = lw;
    }
    __syncthreads();
    KDA_PH(8);
    if constexpr (A2) {
        // A2 = Aqk T on the tensor cores (3xBF16 from the hi/lo words already here): 16 x 8 output
        // tiles (mt, nt) on or below the diagonal, one per warp (6 at C = 32); k steps where neither
        // factor is zero (Aqk[i][m] = 0 for m > i, T[m][j] = 0 for m < j). T's rows are [m][j/2]
        // words, so its B fragments come from ldmatrix.trans.
        constexpr int NT8 = C / 8;
        int job = warp, mt = 0;
        while (mt < MT && job >= 2 * (mt + 1)) { job -= 2 * (mt + 1); ++mt; }
        const int nt = job;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        if (mt < MT) {
            for (int kk = nt / 2; kk <= mt; ++kk) {
                unsigned ah[4], al[4], bh[2], bl[2];
                ldm_a16(AqH + mt * 16 * LC + kk * 8, LC, lane, ah);
                ldm_a16(AqL + mt * 16 * LC + kk * 8, LC, lane, al);
                ldmatrix_x2_trans(bh, TH + (kk * 16 + (lane & 15)) * LC + nt * 4);
                ldmatrix_x2_trans(bl, TL + (kk * 16 + (lane & 15)) * LC + nt * 4);
                mma_3xbf16(acc, ah, al, bh, bl);
            }
        }
        static_assert(MT * (MT + 1) <= L::NW && NT8 == 2 * MT, "one A2 tile per warp");
        __syncthreads();   // every warp has read Aqk before it is overwritten
        KDA_PH(9);
        if (mt < MT) store_acc_split(AqH, AqL, LC, mt * 16, nt * 8, acc, g8, t4);
        __syncthreads();
        KDA_PH(10);
    }
    // ---- out: the four C x C/2 word arrays, 16 bytes per thread and step
    if constexpr (KDA_PREP_LEAN) {   // without A2 T's two: Aqk's went out during the inverse
#pragma unroll
        for (int idx = tid; idx < (A2 ? 4 : 2) * C * (C / 8); idx += NTH) copy_out(0, idx);
    } else {
        unsigned* out = TA + (((long long)b * H + h) * NC + n) * (4LL * C * (C / 2));
        constexpr int QW = C / 8;   // 16-byte quads per row
        for (int idx = tid; idx < 4 * C * QW; idx += NTH) {
            const int arr = idx / (C * QW), r = (idx / QW) % C, qd = idx % QW;
            const unsigned* src = TH + arr * C * LC + r * LC + 4 * qd;
            *reinterpret_cast<U4*>(out + (arr * C + r) * (C / 2) + 4 * qd) = *reinterpret_cast<const U4*>(src);
        }
    }
    KDA_PH(11);
    if constexpr (SIDE) {   // 21 beside 22, 07 beside 27 (epoch > 0): the chunk is published (ops_image.cuh)
        // Every thread's stores come before the barrier, and thread 0's release at GPU scope after it is cumulative
        // over them (a grid barrier publishes a block's writes the same way). A fence in every thread first held each
        // block about 1700 cycles longer (scripts/probe_delta_timeline.py).
        if (epoch > 0) {
            __syncthreads();
            KDA_PH(12);
            if (tid == 0) kda_flag_release(ready + ((long long)b * H + h) * NC + n, epoch);
        }
        KDA_TL(if (tid == 0) {
            unsigned long long* w = kda_tl_prep_words(ready, NC, n);
            w[0] = tl_start; w[1] = kda_gtime(); w[2] = kda_smid(); w[3] = 0;
        })
    }
}

template <int K, int C, bool BF = false,   // BF: q, k, g, beta in bf16 (notebook 13's bf16-I/O path)
          bool A2 = false>                 // A2: write Aqk T in place of Aqk (kernel 13)
__global__ void __launch_bounds__(256, BF || KDA_PREP_ALIAS ? 4 : 3)   // blocks per SM: kernels.prep_blocks_per_sm
kda_chunk_prep(const typename KdaIn<BF>::T* __restrict__ q, const typename KdaIn<BF>::T* __restrict__ k,
               const typename KdaIn<BF>::T* __restrict__ g, const typename KdaIn<BF>::T* __restrict__ beta,
               unsigned* __restrict__ TA,        // [B, H, NC, 4, C, C/2]
               int T, int H, float scale) {
    kda_prep_body<K, C, BF, A2, false>(q, k, g, beta, TA, nullptr, nullptr, 0, T, H, scale);
}

// 07 beside 27 (kernels/delta/27_chunk_state_side.cu): 07 with A2, in 21's grid order (B H, NC), each block setting its
// chunk's ready flag to the call's epoch once its words are written (epoch 0: one kernel after the other, no flags).
// The same arithmetic and words as kda_chunk_prep<K, C, false, true>.
template <int K, int C>
__global__ void __launch_bounds__(256, KDA_PREP_ALIAS ? 4 : 3)
kda_chunk_prep_side(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ g,
                    const float* __restrict__ beta, unsigned* __restrict__ TA,   // [B, H, NC, 4, C, C/2]
                    int* __restrict__ ready, int epoch,                          // [B, H, NC]
                    int T, int H, float scale) {
    kda_prep_body<K, C, false, true, false, true>(q, k, g, beta, TA, nullptr, ready, epoch, T, H, scale);
}
