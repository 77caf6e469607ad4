// The producer warp group of the warp-specialised delta recurrences (kernels/delta/10 and 12):
// eight warps that, one chunk ahead of the consumers, copy 07's T and Aqk words and the block's v
// columns into a free operand buffer (cp.async), read q, k and g straight into registers, and build
// the element-wise operands of the chunk as split bf16 pairs (hi, lo) for 3xBF16 products:
//   Qg = scale q e^G,  Kbg = beta k e^G  ([C][LK] words, a pair of channels per word),
//   Kd^T = (k e^{G_L - G})^T  ([K][LC] words, a pair of tokens per word, 16-byte chunks swizzled),
//   beta v ([C][BV] fp32) and 2^{G_L} ([K] fp32),
// G being the running sum of g over the chunk (in log2 units) and G_L its last value. It then
// arrives on the buffer's FULL barrier; the consumers arrive on EMPTY when they are done with it.
// Moved here from 10 unchanged, so that 10 and 12 share one producer; 10's header says why it
// loads into registers and how the Kd^T stores avoid bank conflicts.
#pragma once

#include "delta_common.cuh"

#include "delta_io.cuh"

// Named barriers of the producer/consumer hand-over (0 is __syncthreads'): the consumer group's
// own, the producer group's own, FULL + buffer (producers arrive, consumers sync) and EMPTY +
// buffer (consumers arrive, producers sync), two buffers each.
struct KdaLeanBars { static constexpr int CONS = 1, PROD = 2, FULL = 3, EMPTY = 5; };

// One operand buffer (the kernels keep two): bf16 pairs hi/lo, then 07's words, then fp32.
template <int K, int C, int BV>
struct KdaLeanBuffer {
    static constexpr int LK = K / 2 + 4;        // words per row of [.][K] bf16-pair arrays
    static constexpr int LC = C / 2 + 4;        // words per row of [.][C] bf16-pair arrays
    static constexpr int PB_QG = 0;                       // Qg [C][LK] x2
    static constexpr int PB_KB = PB_QG + 2 * C * LK;      // Kbg
    static constexpr int PB_KDT = PB_KB + 2 * C * LK;     // Kd^T [K][LC] x2, 16-byte chunks swizzled
    static constexpr int PB_TA = PB_KDT + 2 * K * LC;     // T hi, T lo, Aqk hi, Aqk lo [C][LC]
    static constexpr int PB_BV = PB_TA + 4 * C * LC;      // beta v [C][BV] (fp32)
    static constexpr int PB_GL = PB_BV + C * BV;          // 2^G_L [K] (fp32)
    static constexpr int PB_WORDS = PB_GL + K;
};

// The producers' loop over every chunk of block (v block, h, b). L is the kernel's shared-memory
// layout (a KdaLeanBuffer plus OFF_V: the v staging, OFF_PB: the two buffers, OFF_TOT: group gate
// sums [NQ][K], OFF_BETA: beta [C]; NPT producer threads, NQ = NPT / (K / 2) row groups); NTH is
// the block size (the FULL/EMPTY barriers' thread count); ptid this thread's index among the
// producers. ht and stamp0_ serve KDA_PROBE=3's clock stamps only.
template <int K, int V, int C, int BV, bool BF, int NTH, class L>
static __device__ __forceinline__ void kda_lean_produce(
        const typename KdaIn<BF>::T* __restrict__ q, const typename KdaIn<BF>::T* __restrict__ k,
        const typename KdaIn<BF>::T* __restrict__ v, const typename KdaIn<BF>::T* __restrict__ g,
        const typename KdaIn<BF>::T* __restrict__ beta, const unsigned* __restrict__ TA, float* smem_f,
        int ptid, int T, int H, float scale, float* ht, long long stamp0_) {
    using TIn = typename KdaIn<BF>::T;
    constexpr int NPT = L::NPT, NQ = L::NQ, RPG = C / NQ, LK = L::LK, LC = L::LC;
    constexpr int BAR_PROD = KdaLeanBars::PROD, BAR_FULL = KdaLeanBars::FULL, BAR_EMPTY = KdaLeanBars::EMPTY;
    static_assert(RPG % 2 == 0, "each producer thread takes an even number of rows");
    unsigned* const words = reinterpret_cast<unsigned*>(smem_f);
    TIn* sv = reinterpret_cast<TIn*>(smem_f + L::OFF_V);   // the next chunk's v columns, as stored
    float* sTot = smem_f + L::OFF_TOT;
    float* sBeta = smem_f + L::OFF_BETA;
    auto pbuf = [&](int n) { return words + L::OFF_PB + (n & 1) * L::PB_WORDS; };
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int v0 = blockIdx.x * BV, h = blockIdx.y, b = blockIdx.z;
    const long long TT = T, bh = (long long)b * H + h;
    const int NC = (T + C - 1) / C;
    (void)ht; (void)stamp0_; (void)lane; (void)warp;
    constexpr int VE = 16 / sizeof(TIn);   // elements per 16-byte copy
    constexpr int VPR = BV / VE, VROWS = NPT / VPR, VPASS = (C + VROWS - 1) / VROWS;
    constexpr int TAQ = 4 * C * (C / 8);
    constexpr int KW = RPG / 2;                  // Kd^T words per channel row from one thread
    static_assert(TAQ % NPT == 0 && (KW == 2 || KW == 4), "copy slots must tile the chunk");
    const int vi0 = ptid / VPR, vc = (ptid % VPR) * VE;
    const int pp = ptid % (K / 2), grp = ptid / (K / 2);
    const int c0 = 2 * pp, r0 = grp * RPG;
    const long long qk_row = (long long)H * K, v_row = (long long)H * V;
    // this thread's channels (c0, c0 + 1) of rows r0 .. r0 + RPG - 1, in registers a chunk ahead
    const long long base = kda_bthd(b, 0, h, c0, TT, H, K);
    // (as loaded: widened to fp32 only in P1, so the loads stay in flight across the consumers' work)
    using Raw = typename KdaRaw2<BF>::T;
    Raw xq[RPG], xk[RPG], xg[RPG];
    auto load_regs = [&](int n) {
#pragma unroll
        for (int ii = 0; ii < RPG; ++ii) {
            const long long tt = (long long)n * C + r0 + ii;
            if (tt < TT) {
                const long long off = base + tt * qk_row;
                xq[ii] = kda_raw2<BF>(q + off);
                xk[ii] = kda_raw2<BF>(k + off);
                xg[ii] = kda_raw2<BF>(g + off);
            } else {
                xq[ii] = xk[ii] = xg[ii] = kda_raw2_zero<BF>();
            }
        }
    };
    const TIn* vp = v + kda_bthd(b, 0, h, v0 + vc, TT, H, V);
    auto load_v = [&](int n) {
        const long long tfirst = (long long)n * C;
#pragma unroll
        for (int p2 = 0; p2 < VPASS; ++p2) {
            const int i = vi0 + p2 * VROWS;
            if (i < C) {
                const long long tt = tfirst + i;
                if (tt < TT) cp_async16(sv + i * BV + vc, vp + tt * v_row);
                else *reinterpret_cast<U4*>(sv + i * BV + vc) = U4{0u, 0u, 0u, 0u};
            }
        }
        cp_async_commit();
    };
    const unsigned* ta_head = TA + bh * NC * (4LL * C * (C / 2));
    auto load_ta = [&](int n) {
        const unsigned* src = ta_head + (long long)n * (4 * C * (C / 2));
        unsigned* dst = pbuf(n) + L::PB_TA;
#pragma unroll
        for (int idx = ptid; idx < TAQ; idx += NPT) {
            const int row = idx / (C / 8), qd = idx % (C / 8);
            cp_async16(dst + row * LC + 4 * qd, src + row * (C / 2) + 4 * qd);
        }
        cp_async_commit();
    };
    load_regs(0);
    load_v(0);
    // beta of the next chunk is loaded a chunk ahead (a global load's latency would otherwise
    // stall the producers at every chunk)
    auto beta_of = [&](int n) {
        const long long tt = (long long)n * C + ptid;
        return (ptid < C && tt < TT) ? beta[(b * TT + tt) * H + h] : TIn(0);
    };
    TIn beta_next = beta_of(0);   // as loaded, widened when stored
    for (int n = 0; n < NC; ++n) {
        unsigned* pb = pbuf(n);
        unsigned* QgH = pb + L::PB_QG;  unsigned* QgL = QgH + C * LK;
        unsigned* KbH = pb + L::PB_KB;  unsigned* KbL = KbH + C * LK;
        unsigned* KdH = pb + L::PB_KDT; unsigned* KdL = KdH + K * LC;
        float* sBV = reinterpret_cast<float*>(pb + L::PB_BV);
        float* sGL = reinterpret_cast<float*>(pb + L::PB_GL);
        KDA_STAMP(0);
        if (n >= 2) named_bar_sync(BAR_EMPTY + (n & 1), NTH);   // consumers are done with chunk n-2
        KDA_STAMP(1);
        load_ta(n);
        if (ptid < C) sBeta[ptid] = kda_widen1<BF>(beta_next);
        if (n + 1 < NC) beta_next = beta_of(n + 1);
        cp_async_wait<1>();                                      // this thread's v copies
        named_bar_sync(BAR_PROD, NPT);                           // everyone's, and beta
        KDA_STAMP(2);
        float2 rq[RPG], rk[RPG], rg[RPG];
#pragma unroll
        for (int ii = 0; ii < RPG; ++ii) {
            rq[ii] = kda_widen2<BF>(xq[ii]); rk[ii] = kda_widen2<BF>(xk[ii]); rg[ii] = kda_widen2<BF>(xg[ii]);
        }
        if (KDA_PROBE != 2) {
            float run0 = 0.f, run1 = 0.f;
#pragma unroll
            for (int ii = 0; ii < RPG; ++ii) {   // rg becomes the running sums G
                run0 += rg[ii].x * KDA_LOG2E;
                run1 += rg[ii].y * KDA_LOG2E;
                rg[ii].x = run0; rg[ii].y = run1;
            }
            sTot[grp * K + c0] = run0;
            sTot[grp * K + c0 + 1] = run1;
        }
        named_bar_sync(BAR_PROD, NPT);                           // group sums visible
        KDA_STAMP(3);
        if (KDA_PROBE != 2) {
            float off0 = 0.f, off1 = 0.f, gl0 = 0.f, gl1 = 0.f;
#pragma unroll
            for (int q2 = 0; q2 < NQ; ++q2) {
                if (q2 == grp) { off0 = gl0; off1 = gl1; }
                gl0 += sTot[q2 * K + c0];
                gl1 += sTot[q2 * K + c0 + 1];
            }
            if (grp == 0) { sGL[c0] = fast_exp2(gl0); sGL[c0 + 1] = fast_exp2(gl1); }
            unsigned kdh[2][KW], kdl[2][KW];   // [channel][token pair]: this thread's Kd^T words
#pragma unroll
            for (int ii = 0; ii < RPG; ii += 2) {
                float kd[2][2];   // [row][channel]
#pragma unroll
                for (int d = 0; d < 2; ++d) {
                    const int i = r0 + ii + d;
                    const float G0 = rg[ii + d].x + off0, G1 = rg[ii + d].y + off1;
                    const float e0 = fast_exp2(G0), e1 = fast_exp2(G1);
                    const float2 qq = rq[ii + d], kk = rk[ii + d];
                    const float se0 = scale * e0, se1 = scale * e1, bi = sBeta[i];
                    unsigned hw, lw;
                    split_bf16x2(qq.x * se0, qq.y * se1, hw, lw);
                    QgH[i * LK + pp] = hw; QgL[i * LK + pp] = lw;
                    split_bf16x2(bi * kk.x * e0, bi * kk.y * e1, hw, lw);
                    KbH[i * LK + pp] = hw; KbL[i * LK + pp] = lw;
                    kd[d][0] = kk.x * fast_exp2(gl0 - G0);   // exponent <= 0: never overflows
                    kd[d][1] = kk.y * fast_exp2(gl1 - G1);
                }
                split_bf16x2(kd[0][0], kd[1][0], kdh[0][ii / 2], kdl[0][ii / 2]);
                split_bf16x2(kd[0][1], kd[1][1], kdh[1][ii / 2], kdl[1][ii / 2]);
            }
#pragma unroll
            for (int ch = 0; ch < 2; ++ch) {   // one 16-byte (K = 128) or 8-byte (K = 64) store per array
                const int w = kdt_word<LC>(c0 + ch, r0 / 2);
                if constexpr (KW == 4) {
                    *reinterpret_cast<U4*>(KdH + w) = U4{kdh[ch][0], kdh[ch][1], kdh[ch][2], kdh[ch][3]};
                    *reinterpret_cast<U4*>(KdL + w) = U4{kdl[ch][0], kdl[ch][1], kdl[ch][2], kdl[ch][3]};
                } else {
                    *reinterpret_cast<U2*>(KdH + w) = U2{kdh[ch][0], kdh[ch][1]};
                    *reinterpret_cast<U2*>(KdL + w) = U2{kdl[ch][0], kdl[ch][1]};
                }
            }
        }
        KDA_STAMP(4);
        if (n + 1 < NC) load_regs(n + 1);                        // lands while the consumers work
        for (int idx = ptid; idx < C * BV; idx += NPT) sBV[idx] = sBeta[idx / BV] * kda_ld1<BF>(sv + idx);
        KDA_STAMP(5);
        named_bar_sync(BAR_PROD, NPT);                           // staging, sTot and beta read
        if (n + 1 < NC) {
            load_v(n + 1);
            cp_async_wait<1>();                                  // 07's words of chunk n
        } else {
            cp_async_wait<0>();
        }
        KDA_STAMP(6);
        named_bar_arrive(BAR_FULL + (n & 1), NTH);              // buffer n & 1 holds chunk n
    }
}
