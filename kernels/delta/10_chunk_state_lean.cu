// 10 — chunked KDA, 09's warp-specialised recurrence with a lean producer: the producers read
// q, k and g straight into registers and write Kd^T with conflict-free 16-byte stores.
//
// What changed from 09, and why. Notebook 13's Nsight Compute table shows the shared-memory pipe
// as 09's busiest unit, far busier than its tensor pipe, and bank conflicts on its stores. Two of
// the streams through that pipe are the producers' and add nothing:
//  * 09 copies q, k and g of the next chunk into a staging buffer (cp.async), then reads them back
//    into registers for P1: every element crosses shared memory twice. Here each producer thread
//    loads its own elements (8 rows x 2 channels of q, k, g at K = 128) from global memory into
//    registers one chunk ahead, right after P1 has used the previous ones. The staging buffer
//    shrinks to beta v's columns (C x BV floats).
//  * 09 stores Kd^T (rows = channels, a word per pair of tokens) one 4-byte word at a time from
//    lanes that hold consecutive channel pairs: with 20-word rows that is an 8-way bank conflict.
//    Here a thread first builds its 8 tokens of both channels (4 words per channel row, 16 bytes)
//    and stores them at once; the 16-byte chunks of a row are XOR-swizzled by (row / 8) % 4, so the
//    eight lanes of a quarter-warp hit eight different 4-bank groups and the consumers' ldmatrix
//    (8 consecutive rows, one chunk) stays conflict-free. (At K = 64 a thread holds 4 tokens:
//    8-byte stores, at most 2-way.)
//
// The arithmetic is 09's, operation for operation, so 10 reproduces 09 (and 08) bit for bit.
//
// With BF (issue 13's bf16-I/O path) q, k, v, g and beta are bf16 in memory, widened to fp32 as
// they are loaded (v is staged as bf16: half the bytes), and o is rounded to bf16 as it is stored;
// the products, the state and the initial and final states stay as on the fp32 path.
//
// Requires sm_80+ (bf16 mma.sync, ldmatrix, cp.async, named barriers).
#include "lean_producer.cuh"

template <int K, int V, int C, int BV>
struct KdaLeanLayout : KdaLeanBuffer<K, C, BV> {
    using P = KdaLeanBuffer<K, C, BV>;
    static constexpr int NWC = 8, NWP = 8;      // consumer and producer warps
    static constexpr int NCT = 32 * NWC, NPT = 32 * NWP, NTH = NCT + NPT;
    static constexpr int LK = P::LK, LC = P::LC;
    static constexpr int NQ = NPT / (K / 2);    // producer row groups
    // staging of the next chunk's v columns (fp32, cp.async); q, k, g travel in registers
    static constexpr int OFF_V = 0;
    static constexpr int OFF_PB = OFF_V + C * BV;            // two KdaLeanBuffers
    static constexpr int OFF_ST = OFF_PB + 2 * P::PB_WORDS;  // S^T [BV][LK] x2
    static constexpr int OFF_XT = OFF_ST + 2 * BV * LK;   // X^T [BV][LC] x2
    static constexpr int OFF_VT = OFF_XT + 2 * BV * LC;   // V'^T [BV][LC] x2
    static constexpr int OFF_TOT = OFF_VT + 2 * BV * LC;  // producers' group gate sums [NQ][K]
    static constexpr int OFF_BETA = OFF_TOT + NQ * K;     // beta [C]
    static constexpr int WORDS = OFF_BETA + C;
};

template <int K, int V, int C, int BV, bool BF = false>   // BF: q, k, v, g, beta and o in bf16
__global__ void __launch_bounds__(512, 1)
kda_chunk_state_lean(const typename KdaIn<BF>::T* __restrict__ q, const typename KdaIn<BF>::T* __restrict__ k,
                     const typename KdaIn<BF>::T* __restrict__ v, const typename KdaIn<BF>::T* __restrict__ g,
                     const typename KdaIn<BF>::T* __restrict__ beta,
                     const unsigned* __restrict__ TA,          // [B, H, NC, 4, C, C/2] from 07
                     const float* __restrict__ h0,             // [B,H,K,V] fp32, or nullptr
                     typename KdaIn<BF>::T* __restrict__ o,    // [B,T,H,V]
                     float* __restrict__ ht,                   // [B,H,K,V] fp32, or nullptr
                     int T, int H, float scale) {
    using L = KdaLeanLayout<K, V, C, BV>;
    static_assert(C == 32, "07 hands over T and Aqk for chunks of 32");
    static_assert((K == 64 || K == 128) && (BV == 16 || BV == 32) && V % BV == 0, "K in {64,128}, BV in {16,32}");
    constexpr int NWC = L::NWC, NCT = L::NCT, NTH = L::NTH, NQ = L::NQ, RPG = C / NQ;
    constexpr int LK = L::LK, LC = L::LC;
    constexpr int MT = C / 16, NT8 = BV / 8;
    constexpr int NS1 = 2 * MT * (NT8 / 2);
    constexpr int NSTILE = (K / 16) * NT8, SN = NSTILE / NWC;
    static_assert(NSTILE % NWC == 0 && NT8 % SN == 0 && (SN % 2 == 0 || SN == 1), "state tiles must split evenly");
    static_assert(NS1 <= NWC && RPG % 2 == 0, "one S1 job per consumer warp at most");
    constexpr int BAR_CONS = KdaLeanBars::CONS, BAR_FULL = KdaLeanBars::FULL, BAR_EMPTY = KdaLeanBars::EMPTY;

    KDA_DYNAMIC_SHARED(smem_f);
    if (kda_dynamic_smem_size() < (unsigned)(L::WORDS * 4)) __trap();
    unsigned* const words = reinterpret_cast<unsigned*>(smem_f);
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
    const long long TT = T;
    const long long bh = (long long)b * H + h;
    const int NC = (T + C - 1) / C;
#if KDA_PROBE == 3
    long long stamp0_;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(stamp0_));
#endif

    if (warp >= NWC) {
        // ================================================ producers: copies and P1, one chunk ahead
        kda_lean_produce<K, V, C, BV, BF, NTH, L>(q, k, v, g, beta, TA, smem_f, tid - NCT, T, H, scale, ht,
#if KDA_PROBE == 3
                                                  stamp0_);
#else
                                                  0);
#endif
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
        KDA_STAMP(0);
        named_bar_sync(BAR_FULL + (n & 1), NTH);   // chunk n's operands; S^T of chunk n complete
        if (KDA_PROBE == 1) {
            if (n + 2 < NC) named_bar_arrive(BAR_EMPTY + (n & 1), NTH);
            continue;
        }
        KDA_STAMP(1);
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
        KDA_STAMP(2);
        named_bar_sync(BAR_CONS, NCT);   // X^T complete

        KDA_STAMP(3);
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
        KDA_STAMP(4);
        named_bar_sync(BAR_CONS, NCT);   // V'^T complete

        KDA_STAMP(5);
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
                if (ta < TT) kda_st2<BF>(o + kda_bthd(b, ta, h, col, TT, H, V), oacc[j][0], oacc[j][1]);
                if (tb < TT) kda_st2<BF>(o + kda_bthd(b, tb, h, col, TT, H, V), oacc[j][2], oacc[j][3]);
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
        KDA_STAMP(6);
        if (n + 2 < NC) named_bar_arrive(BAR_EMPTY + (n & 1), NTH);   // buffer n & 1 is free
    }

    if (KDA_PROBE == 3) return;   // the stamps live where ht would be written
    if (ht) {
#pragma unroll
        for (int j = 0; j < SN; ++j) {
            const int row = 16 * sm + g8, col = v0 + (sn0 + j) * 8 + 2 * t4;
            *reinterpret_cast<float2*>(ht + (bh * K + row) * V + col) = make_float2(sacc[j][0], sacc[j][1]);
            *reinterpret_cast<float2*>(ht + (bh * K + row + 8) * V + col) = make_float2(sacc[j][2], sacc[j][3]);
        }
    }
}
