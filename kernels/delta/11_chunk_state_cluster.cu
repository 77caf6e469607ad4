// 11 — chunked KDA, 10's recurrence with the element-wise phase shared by a cluster: the V / BV
// value blocks of a head run as one thread-block cluster, and each builds P1 for its own quarter
// (1 / cluster size) of the key channels, storing it into every block's shared memory.
//
// What changed from 10, and why. 10's clock stamps (notebook 13) show its producers setting the
// pace: every one of a head's V / BV blocks loads the chunk's q, k, g (all K channels) and runs the
// whole element-wise phase P1 (cumulative gates, two exp2 and three bf16 splits per element), the
// same work in each block. P1 is independent per channel (each channel's gate sum runs down its own
// column), so here block r of the cluster loads and processes channels [r K/NB, (r+1) K/NB) only and
// writes its Qg and Kbg columns and Kd^T rows (and 2^G_L) into all NB blocks' operand buffers
// through distributed shared memory: per block, a quarter of the loads, the exp2 and the splits at
// K = 128, BV = 32. Each block still copies 07's words and its own v columns for itself.
//
// The hand-over of a buffer now spans the cluster, so 10's FULL / EMPTY named barriers become one
// cluster barrier phase per chunk, arrived at by every thread of the cluster:
//   phase p completes when every producer has written chunk p (into buffer p & 1 of every block)
//   and every consumer has finished chunk p - 1;
//   producers wait for phase p - 1 (chunk p - 2 is done everywhere: buffer p & 1 is free) before
//   writing chunk p, then arrive; consumers arrive, then wait for phase p before reading chunk p.
// Consumers are 10's, operation for operation, and P1's arithmetic is 10's per element; only the
// gate sums are added in groups of two rows (sixteen groups) instead of 10's eight-row groups, so
// 11 matches 10 to rounding, not bit for bit.
//
// Measured (notebook 13's latency and Nsight Compute tables): far slower than 10, so 10 stays the
// default and this step stays in the ladder as the measured negative result. Its counters show why:
// MIO-throttle stalls lead and the issue slots sit mostly idle. Every P1 word now leaves the block
// NB times, as a 4-byte store through a generic address into another SM's shared memory (10 stores
// it once, locally), and the per-chunk cluster barrier (release / acquire) ties every block's
// producers and consumers together. Sharing P1 this way costs more than the P1 work it saves;
// 16-byte st.shared::cluster stores, or a TMA multicast of the raw q, k, g tiles with P1 kept
// local, are what remain untried.
//
// Requires sm_90 (thread-block clusters, distributed shared memory) and V / BV <= 8.
#include "delta_common.cuh"

#include "mma.cuh"

template <int K, int V, int C, int BV>
struct KdaClusterLayout {
    static constexpr int NWC = 8, NWP = 8;      // consumer and producer warps
    static constexpr int NCT = 32 * NWC, NPT = 32 * NWP, NTH = NCT + NPT;
    static constexpr int NB = V / BV;           // blocks in the cluster: a head's value blocks
    static constexpr int KC = K / NB;           // this block's channels
    static constexpr int LK = K / 2 + 4;        // words per row of [.][K] bf16-pair arrays
    static constexpr int LC = C / 2 + 4;        // words per row of [.][C] bf16-pair arrays
    static constexpr int NQ = C / 2;            // producer row groups (two rows each)
    // staging of the next chunk's v columns (fp32, cp.async); q, k, g travel in registers
    static constexpr int OFF_V = 0;
    // one operand buffer (two of them): bf16 pairs hi/lo, then 07's words, then fp32
    static constexpr int PB_QG = 0;                       // Qg [C][LK] x2
    static constexpr int PB_KB = PB_QG + 2 * C * LK;      // Kbg
    static constexpr int PB_KDT = PB_KB + 2 * C * LK;     // Kd^T [K][LC] x2, 16-byte chunks swizzled
    static constexpr int PB_TA = PB_KDT + 2 * K * LC;     // T hi, T lo, Aqk hi, Aqk lo [C][LC]
    static constexpr int PB_BV = PB_TA + 4 * C * LC;      // beta v [C][BV] (fp32)
    static constexpr int PB_GL = PB_BV + C * BV;          // 2^G_L [K] (fp32)
    static constexpr int PB_WORDS = PB_GL + K;
    static constexpr int OFF_PB = OFF_V + C * BV;
    static constexpr int OFF_ST = OFF_PB + 2 * PB_WORDS;  // S^T [BV][LK] x2
    static constexpr int OFF_XT = OFF_ST + 2 * BV * LK;   // X^T [BV][LC] x2
    static constexpr int OFF_VT = OFF_XT + 2 * BV * LC;   // V'^T [BV][LC] x2
    static constexpr int OFF_TOT = OFF_VT + 2 * BV * LC;  // producers' group gate sums [NQ][KC]
    static constexpr int OFF_BETA = OFF_TOT + NQ * KC;    // beta [C]
    static constexpr int WORDS = OFF_BETA + C;
};

template <int K, int V, int C, int BV>
__global__ void __cluster_dims__(V / BV, 1, 1) __launch_bounds__(512, 1)
kda_chunk_state_cluster(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                        const float* __restrict__ g, const float* __restrict__ beta,
                        const unsigned* __restrict__ TA,   // [B, H, NC, 4, C, C/2] from 07
                        const float* __restrict__ h0,      // [B,H,K,V] or nullptr
                        float* __restrict__ o,             // [B,T,H,V]
                        float* __restrict__ ht,            // [B,H,K,V] or nullptr
                        int T, int H, float scale) {
    using L = KdaClusterLayout<K, V, C, BV>;
    static_assert(C == 32, "07 hands over T and Aqk for chunks of 32");
    static_assert((K == 64 || K == 128) && (BV == 16 || BV == 32) && V % BV == 0, "K in {64,128}, BV in {16,32}");
    constexpr int NWC = L::NWC, NCT = L::NCT, NPT = L::NPT, NB = L::NB, KC = L::KC, NQ = L::NQ;
    constexpr int LK = L::LK, LC = L::LC;
    constexpr int MT = C / 16, NT8 = BV / 8;
    constexpr int NS1 = 2 * MT * (NT8 / 2);
    constexpr int NSTILE = (K / 16) * NT8, SN = NSTILE / NWC;
    static_assert(NB >= 2 && NB <= 8 && KC % 2 == 0 && (KC / 2) * NQ <= NPT, "2-8 blocks per cluster");
    static_assert(NSTILE % NWC == 0 && NT8 % SN == 0 && (SN % 2 == 0 || SN == 1), "state tiles must split evenly");
    static_assert(NS1 <= NWC, "one S1 job per consumer warp at most");
    constexpr int BAR_CONS = 1, BAR_PROD = 2;

    KDA_DYNAMIC_SHARED(smem_f);
    if (kda_dynamic_smem_size() < (unsigned)(L::WORDS * 4)) __trap();
    unsigned* const words = reinterpret_cast<unsigned*>(smem_f);
    float* sv = smem_f + L::OFF_V;
    float* sTot = smem_f + L::OFF_TOT;
    float* sBeta = smem_f + L::OFF_BETA;
    unsigned* StH = words + L::OFF_ST;  unsigned* StL = StH + BV * LK;
    unsigned* XtH = words + L::OFF_XT;  unsigned* XtL = XtH + BV * LC;
    unsigned* VtH = words + L::OFF_VT;  unsigned* VtL = VtH + BV * LC;
    auto pbuf = [&](int n) { return words + L::OFF_PB + (n & 1) * L::PB_WORDS; };

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int g8 = lane / 4, t4 = lane % 4;
    const int v0 = blockIdx.x * BV;
    const int h = blockIdx.y;
    const int b = blockIdx.z;
    const unsigned rank = cluster_ctarank();   // == blockIdx.x: the cluster is a head's value blocks
    const long long TT = T;
    const long long bh = (long long)b * H + h;
    const int NC = (T + C - 1) / C;
    // No block may write into another's shared memory before that block has started: one whole
    // cluster barrier phase first (compute-sanitizer flagged the writes without it).
    cluster_arrive();
    cluster_wait();

    if (warp >= NWC) {
        // ================================================ producers: copies and P1 (this block's channels)
        const int ptid = tid - NCT;
        constexpr int VPR = BV / 4, VROWS = NPT / VPR, VPASS = (C + VROWS - 1) / VROWS;
        constexpr int TAQ = 4 * C * (C / 8);
        static_assert(TAQ % NPT == 0, "copy slots must tile the chunk");
        const int vi0 = ptid / VPR, vc = (ptid % VPR) * 4;
        // P1 thread: channel pair pp of this block's KC channels, rows r0, r0 + 1 (NQ groups of two)
        const int pp = ptid % (KC / 2), grp = ptid / (KC / 2);
        const bool p1 = grp < NQ;                  // at K / NB = 16, half the producers idle in P1
        const int cl0 = 2 * pp, c0 = (int)rank * KC + cl0, r0 = 2 * grp;
        const long long qk_row = (long long)H * K, v_row = (long long)H * V;
        const long long base = kda_bthd(b, 0, h, c0, TT, H, K);
        float2 rq[2], rk[2], rg[2];
        auto load_regs = [&](int n) {
#pragma unroll
            for (int ii = 0; ii < 2; ++ii) {
                const long long tt = (long long)n * C + r0 + ii;
                if (p1 && tt < TT) {
                    const long long off = base + tt * qk_row;
                    rq[ii] = *reinterpret_cast<const float2*>(q + off);
                    rk[ii] = *reinterpret_cast<const float2*>(k + off);
                    rg[ii] = *reinterpret_cast<const float2*>(g + off);
                } else {
                    rq[ii] = rk[ii] = rg[ii] = make_float2(0.f, 0.f);
                }
            }
        };
        const float* vp = v + kda_bthd(b, 0, h, v0 + vc, TT, H, V);
        auto load_v = [&](int n) {
            const long long tfirst = (long long)n * C;
#pragma unroll
            for (int p2 = 0; p2 < VPASS; ++p2) {
                const int i = vi0 + p2 * VROWS;
                if (i < C) {
                    const long long tt = tfirst + i;
                    if (tt < TT) cp_async16(sv + i * BV + vc, vp + tt * v_row);
                    else kda_st4(sv + i * BV + vc, make_float4(0.f, 0.f, 0.f, 0.f));
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
        auto beta_of = [&](int n) {
            const long long tt = (long long)n * C + ptid;
            return (ptid < C && tt < TT) ? beta[(b * TT + tt) * H + h] : 0.0f;
        };
        float beta_next = beta_of(0);
        for (int n = 0; n < NC; ++n) {
            unsigned* pb = pbuf(n);
            float* sBV = reinterpret_cast<float*>(pb + L::PB_BV);
            if (n >= 1) cluster_wait();                              // phase n-1: chunk n-2 done everywhere
            load_ta(n);
            if (ptid < C) sBeta[ptid] = beta_next;
            if (n + 1 < NC) beta_next = beta_of(n + 1);
            cp_async_wait<1>();                                      // this thread's v copies
            named_bar_sync(BAR_PROD, NPT);                           // everyone's, and beta
            float run0 = 0.f, run1 = 0.f;
            if (p1) {
#pragma unroll
                for (int ii = 0; ii < 2; ++ii) {   // rg becomes the running sums G
                    run0 += rg[ii].x * KDA_LOG2E;
                    run1 += rg[ii].y * KDA_LOG2E;
                    rg[ii].x = run0; rg[ii].y = run1;
                }
                sTot[grp * KC + cl0] = run0;
                sTot[grp * KC + cl0 + 1] = run1;
            }
            named_bar_sync(BAR_PROD, NPT);                           // group sums visible
            if (p1) {
                float off0 = 0.f, off1 = 0.f, gl0 = 0.f, gl1 = 0.f;
                for (int q2 = 0; q2 < NQ; ++q2) {
                    if (q2 == grp) { off0 = gl0; off1 = gl1; }
                    gl0 += sTot[q2 * KC + cl0];
                    gl1 += sTot[q2 * KC + cl0 + 1];
                }
                unsigned qh[2], ql[2], kh[2], kl[2];   // [row]
                float kd[2][2];                        // [row][channel]
#pragma unroll
                for (int d = 0; d < 2; ++d) {
                    const int i = r0 + d;
                    const float G0 = rg[d].x + off0, G1 = rg[d].y + off1;
                    const float e0 = fast_exp2(G0), e1 = fast_exp2(G1);
                    const float2 qq = rq[d], kk = rk[d];
                    const float se0 = scale * e0, se1 = scale * e1, bi = sBeta[i];
                    split_bf16x2(qq.x * se0, qq.y * se1, qh[d], ql[d]);
                    split_bf16x2(bi * kk.x * e0, bi * kk.y * e1, kh[d], kl[d]);
                    kd[d][0] = kk.x * fast_exp2(gl0 - G0);   // exponent <= 0: never overflows
                    kd[d][1] = kk.y * fast_exp2(gl1 - G1);
                }
                unsigned dh[2], dl[2];                 // [channel]: Kd^T words of token pair r0 / 2
                split_bf16x2(kd[0][0], kd[1][0], dh[0], dl[0]);
                split_bf16x2(kd[0][1], kd[1][1], dh[1], dl[1]);
                const float eg0 = fast_exp2(gl0), eg1 = fast_exp2(gl1);
                const int wq = c0 / 2;
                // into every block of the cluster (this one included): distributed shared memory
                for (int dst = 0; dst < NB; ++dst) {
                    unsigned* rpb = cluster_map_shared(pb, (unsigned)dst);
                    unsigned* QgH = rpb + L::PB_QG;  unsigned* QgL = QgH + C * LK;
                    unsigned* KbH = rpb + L::PB_KB;  unsigned* KbL = KbH + C * LK;
                    unsigned* KdH = rpb + L::PB_KDT; unsigned* KdL = KdH + K * LC;
#pragma unroll
                    for (int d = 0; d < 2; ++d) {
                        QgH[(r0 + d) * LK + wq] = qh[d]; QgL[(r0 + d) * LK + wq] = ql[d];
                        KbH[(r0 + d) * LK + wq] = kh[d]; KbL[(r0 + d) * LK + wq] = kl[d];
                    }
#pragma unroll
                    for (int ch = 0; ch < 2; ++ch) {
                        const int w = kdt_word<LC>(c0 + ch, r0 / 2);
                        KdH[w] = dh[ch]; KdL[w] = dl[ch];
                    }
                    if (grp == 0) {
                        float* rGL = reinterpret_cast<float*>(rpb + L::PB_GL);
                        rGL[c0] = eg0; rGL[c0 + 1] = eg1;
                    }
                }
            }
            if (n + 1 < NC) load_regs(n + 1);                        // lands while the consumers work
            for (int idx = ptid; idx < C * BV; idx += NPT) sBV[idx] = sBeta[idx / BV] * sv[idx];
            named_bar_sync(BAR_PROD, NPT);                           // staging, sTot and beta read
            if (n + 1 < NC) {
                load_v(n + 1);
                cp_async_wait<1>();                                  // 07's words of chunk n
            } else {
                cp_async_wait<0>();
            }
            cluster_arrive();                                        // phase n: chunk n written here
        }
        cluster_wait();   // the last phase: no block's shared memory is written after this
        return;
    }

    // ==================================================== consumers: the state pass
    const bool has_s1 = warp < NS1;
    const int s1_mt = warp / (NT8 / 2), s1_ng = warp % (NT8 / 2);
    const bool s1_is_o = has_s1 && s1_mt >= MT;
    const int sm = warp / (NT8 / SN), sn0 = (warp % (NT8 / SN)) * SN;
    float sacc[SN][4];
#pragma unroll
    for (int j = 0; j < SN; ++j) {
        const int row = 16 * sm + g8, col = v0 + (sn0 + j) * 8 + 2 * t4;
        float2 x0 = make_float2(0.f, 0.f), x1 = x0;
        if (h0) {
            x0 = *reinterpret_cast<const float2*>(h0 + (bh * K + row) * V + col);
            x1 = *reinterpret_cast<const float2*>(h0 + (bh * K + row + 8) * V + col);
        }
        sacc[j][0] = x0.x; sacc[j][1] = x0.y; sacc[j][2] = x1.x; sacc[j][3] = x1.y;
        store_acc_split_t(StH, StL, LK, 16 * sm, (sn0 + j) * 8, sacc[j], g8, t4);
    }
    for (int n = 0; n < NC; ++n) {
        const long long t0 = (long long)n * C;
        const unsigned* pb = pbuf(n);
        const unsigned* QgH = pb + L::PB_QG;  const unsigned* QgL = QgH + C * LK;
        const unsigned* KbH = pb + L::PB_KB;  const unsigned* KbL = KbH + C * LK;
        const unsigned* KdH = pb + L::PB_KDT; const unsigned* KdL = KdH + K * LC;
        const unsigned* TH = pb + L::PB_TA;   const unsigned* TL = TH + C * LC;
        const unsigned* AqH = TL + C * LC;    const unsigned* AqL = AqH + C * LC;
        const float* sBV = reinterpret_cast<const float*>(pb + L::PB_BV);
        const float* sGL = reinterpret_cast<const float*>(pb + L::PB_GL);
        cluster_arrive();   // phase n: chunk n - 1 finished here (S^T of chunk n complete)
        cluster_wait();     // ... and everywhere; chunk n's operands are in every block
        // ------------------------------------------------ S1: X = beta v - Kbg S,  O = Qg S
        float oacc[2][4] = {};
        if (has_s1) {
            const unsigned* AH = (s1_mt < MT ? KbH + s1_mt * 16 * LK : QgH + (s1_mt - MT) * 16 * LK);
            const unsigned* AL = (s1_mt < MT ? KbL + s1_mt * 16 * LK : QgL + (s1_mt - MT) * 16 * LK);
            float acc[2][2][4] = {};   // [n-tile][k parity]
#pragma unroll
            for (int kk = 0; kk < K / 16; ++kk) {
                unsigned ah[4], al[4], bh2[4], bl2[4];
                ldm_a16(AH + kk * 8, LK, lane, ah);
                ldm_a16(AL + kk * 8, LK, lane, al);
                ldm_b16x2(StH + s1_ng * 16 * LK + kk * 8, LK, lane, bh2);
                ldm_b16x2(StL + s1_ng * 16 * LK + kk * 8, LK, lane, bl2);
                mma_3xbf16_half(acc[0][kk & 1], ah, al, bh2, bl2, 0);
                mma_3xbf16_half(acc[1][kk & 1], ah, al, bh2, bl2, 1);
            }
#pragma unroll
            for (int j = 0; j < 2; ++j) {
#pragma unroll
                for (int e = 0; e < 4; ++e) oacc[j][e] = acc[j][0][e] + acc[j][1][e];
                if (!s1_is_o) {   // X, stored transposed for S2
                    float x[4];
                    const int n0 = s1_ng * 16 + 8 * j;
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int i = s1_mt * 16 + g8 + 8 * (e / 2), c = n0 + 2 * t4 + e % 2;
                        x[e] = sBV[i * BV + c] - oacc[j][e];
                    }
                    store_acc_split_t(XtH, XtL, LC, s1_mt * 16, n0, x, g8, t4);
                }
            }
        }
        named_bar_sync(BAR_CONS, NCT);   // X^T complete

        // ------------------------------------------------ S2: V' = T X
        for (int job = warp; job < MT * NT8; job += NWC) {
            const int mt = job / NT8, nt = job % NT8;
            float acc[4] = {};
            for (int kk = 0; kk <= mt; ++kk) {
                unsigned ah[4], al[4], bh2[2], bl2[2];
                ldm_a16(TH + mt * 16 * LC + kk * 8, LC, lane, ah);
                ldm_a16(TL + mt * 16 * LC + kk * 8, LC, lane, al);
                ldm_b16x1(XtH + nt * 8 * LC + kk * 8, LC, lane, bh2);
                ldm_b16x1(XtL + nt * 8 * LC + kk * 8, LC, lane, bl2);
                mma_3xbf16(acc, ah, al, bh2, bl2);
            }
            store_acc_split_t(VtH, VtL, LC, mt * 16, nt * 8, acc, g8, t4);
        }
        named_bar_sync(BAR_CONS, NCT);   // V'^T complete

        // ------------------------------------------------ S3: O += Aqk V' -> o;  S = gL S + Kd^T V'
        if (s1_is_o) {
            const int mt = s1_mt - MT;
            for (int kk = 0; kk <= mt; ++kk) {
                unsigned ah[4], al[4], bh2[4], bl2[4];
                ldm_a16(AqH + mt * 16 * LC + kk * 8, LC, lane, ah);
                ldm_a16(AqL + mt * 16 * LC + kk * 8, LC, lane, al);
                ldm_b16x2(VtH + s1_ng * 16 * LC + kk * 8, LC, lane, bh2);
                ldm_b16x2(VtL + s1_ng * 16 * LC + kk * 8, LC, lane, bl2);
                mma_3xbf16_half(oacc[0], ah, al, bh2, bl2, 0);
                mma_3xbf16_half(oacc[1], ah, al, bh2, bl2, 1);
            }
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const long long ta = t0 + mt * 16 + g8, tb = ta + 8;
                const int col = v0 + s1_ng * 16 + 8 * j + 2 * t4;
                if (ta < TT) *reinterpret_cast<float2*>(o + kda_bthd(b, ta, h, col, TT, H, V)) = make_float2(oacc[j][0], oacc[j][1]);
                if (tb < TT) *reinterpret_cast<float2*>(o + kda_bthd(b, tb, h, col, TT, H, V)) = make_float2(oacc[j][2], oacc[j][3]);
            }
        }
        {
            const float d0 = sGL[16 * sm + g8], d1 = sGL[16 * sm + g8 + 8];
#pragma unroll
            for (int j = 0; j < SN; ++j) {
                sacc[j][0] *= d0; sacc[j][1] *= d0;
                sacc[j][2] *= d1; sacc[j][3] *= d1;
            }
#pragma unroll
            for (int kk = 0; kk < MT; ++kk) {
                unsigned ah[4], al[4];
                {   // ldm_a16 on the swizzled rows: lane's row and 16-byte chunk
                    const int r = sm * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
                    const int w = kdt_word<LC>(r, kk * 8 + (lane >> 4) * 4);
                    ldmatrix_x4(ah, KdH + w);
                    ldmatrix_x4(al, KdL + w);
                }
                if constexpr (SN == 1) {
                    unsigned bh2[2], bl2[2];
                    ldm_b16x1(VtH + sn0 * 8 * LC + kk * 8, LC, lane, bh2);
                    ldm_b16x1(VtL + sn0 * 8 * LC + kk * 8, LC, lane, bl2);
                    mma_3xbf16(sacc[0], ah, al, bh2, bl2);
                } else {
#pragma unroll
                    for (int j = 0; j < SN; j += 2) {
                        unsigned bh2[4], bl2[4];
                        ldm_b16x2(VtH + (sn0 + j) * 8 * LC + kk * 8, LC, lane, bh2);
                        ldm_b16x2(VtL + (sn0 + j) * 8 * LC + kk * 8, LC, lane, bl2);
                        mma_3xbf16_half(sacc[j], ah, al, bh2, bl2, 0);
                        mma_3xbf16_half(sacc[j + 1], ah, al, bh2, bl2, 1);
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < SN; ++j) store_acc_split_t(StH, StL, LK, 16 * sm, (sn0 + j) * 8, sacc[j], g8, t4);
        }
    }

    if (ht) {
#pragma unroll
        for (int j = 0; j < SN; ++j) {
            const int row = 16 * sm + g8, col = v0 + (sn0 + j) * 8 + 2 * t4;
            *reinterpret_cast<float2*>(ht + (bh * K + row) * V + col) = make_float2(sacc[j][0], sacc[j][1]);
            *reinterpret_cast<float2*>(ht + (bh * K + row + 8) * V + col) = make_float2(sacc[j][2], sacc[j][3]);
        }
    }
}
