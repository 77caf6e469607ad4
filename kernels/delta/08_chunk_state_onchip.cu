// 08 — chunked KDA, the recurrence half of the two-kernel form: the state stays on chip, every
// operand but T and Aqk is rebuilt from q, k, g, v, beta in shared memory, products in 3xBF16.
//
// What changed from 06, and why. 06 did the whole chunk in one kernel, so each value-column block
// of a head repeated the pair products and the triangular inverse, and the seven other warps waited
// for the one-warp inverse every chunk. 07 now does that work once per (chunk, head), in parallel
// over the sequence; this kernel reads its result (T and Aqk, already split into bf16 pairs; 8 KB
// per chunk and head, double-buffered by cp.async) and keeps 06's state pass. What is left per
// chunk is element-wise work and three tensor-core phases, with five block barriers per chunk instead of 06's eight.
// Compared with the three-kernel form (02 -> 03 -> 05), the workspace is T and Aqk only (05 read
// W, U, Qg, Kd and Aqk back from DRAM: 4K + C floats per token and head against 2C words here).
//
// Per chunk of C = 32 rows (S the state at the chunk's start, G = cumsum(g) in base 2, L the last
// row, rows past T zero):
//   P1  e = 2^G;  Qg = scale q e,  Kbg = beta k e,  Kd = k 2^(G_L - G),  gL = 2^G_L,  beta v
//       (two exp2 per element, every exponent <= 0: nothing can overflow, whatever the gates)
//   S1  X = beta v - Kbg S,  O = Qg S                   [tensor cores]
//   S2  V' = T X                                        [tensor cores; T from 07]
//   S3  O += Aqk V' -> o;  S = diag(gL) S + Kd^T V'     [tensor cores; Aqk from 07]
// Work split (8 warps) as in 06: P1 thread (p, grp) owns channels 2p, 2p+1 of C / NQ rows; S1 job
// w is 16 rows of [Kbg; Qg] x 16 columns of S (warps holding Qg rows keep O in registers until
// S3); S2 one 16 x 8 tile of V' per warp; S3 each warp a fixed 16-row band of S in registers.
//
// Requires sm_80+ (bf16 mma.sync, ldmatrix, cp.async).
#include "delta_common.cuh"

#include "mma.cuh"

template <int K, int V, int C, int BV>
struct KdaOnchipLayout {
    static constexpr int NW = 8;
    static constexpr int NTH = 32 * NW;
    static constexpr int LK = K / 2 + 4;        // words per row of [.][K] bf16-pair arrays
    static constexpr int LC = C / 2 + 4;        // words per row of [.][C] bf16-pair arrays
    static constexpr int NQ = NTH / (K / 2);
    static constexpr int TA_WORDS = 4 * C * LC; // one stage of T hi, T lo, Aqk hi, Aqk lo
    // fp32 staging of the chunk's inputs (cp.async), then fp32 work arrays
    static constexpr int OFF_Q = 0;
    static constexpr int OFF_K = OFF_Q + C * K;
    static constexpr int OFF_G = OFF_K + C * K;
    static constexpr int OFF_V = OFF_G + C * K;
    static constexpr int OFF_TA = OFF_V + C * BV;        // two stages (words)
    static constexpr int OFF_BV = OFF_TA + 2 * TA_WORDS; // beta v [C][BV]
    static constexpr int OFF_GL = OFF_BV + C * BV;       // 2^G_L [K]
    static constexpr int OFF_TOT = OFF_GL + K;           // per-group gate sums [NQ][K]
    static constexpr int OFF_BETA = OFF_TOT + NQ * K;    // beta [C]
    // bf16 pairs, hi and lo arrays side by side
    static constexpr int OFF_QG = OFF_BETA + C;          // Qg [C][LK] x2
    static constexpr int OFF_KB = OFF_QG + 2 * C * LK;   // Kbg
    static constexpr int OFF_KDT = OFF_KB + 2 * C * LK;  // Kd^T [K][LC] x2
    static constexpr int OFF_ST = OFF_KDT + 2 * K * LC;  // S^T [BV][LK] x2
    static constexpr int OFF_XT = OFF_ST + 2 * BV * LK;  // X^T [BV][LC] x2
    static constexpr int OFF_VT = OFF_XT + 2 * BV * LC;  // V'^T [BV][LC] x2
    static constexpr int WORDS = OFF_VT + 2 * BV * LC;
};

template <int K, int V, int C, int BV>
__global__ void __launch_bounds__(256, 1)
kda_chunk_state_onchip(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                       const float* __restrict__ g, const float* __restrict__ beta,
                       const unsigned* __restrict__ TA,   // [B, H, NC, 4, C, C/2] from 07
                       const float* __restrict__ h0,      // [B,H,K,V] or nullptr
                       float* __restrict__ o,             // [B,T,H,V]
                       float* __restrict__ ht,            // [B,H,K,V] or nullptr
                       int T, int H, float scale) {
    using L = KdaOnchipLayout<K, V, C, BV>;
    static_assert(C == 32, "07 hands over T and Aqk for chunks of 32");
    static_assert((K == 64 || K == 128) && (BV == 16 || BV == 32) && V % BV == 0, "K in {64,128}, BV in {16,32}");
    constexpr int NW = L::NW, NTH = L::NTH, NQ = L::NQ, RPG = C / NQ;
    constexpr int LK = L::LK, LC = L::LC;
    constexpr int MT = C / 16;                       // 16-row tiles of a chunk
    constexpr int NT8 = BV / 8;                      // 8-column tiles of the value block
    constexpr int NS1 = 2 * MT * (NT8 / 2);          // S1 jobs: 16 rows of [Kbg; Qg] x 16 columns
    constexpr int NSTILE = (K / 16) * NT8;           // 16 x 8 tiles of the state block
    constexpr int SN = NSTILE / NW;                  // ... per warp (all in one 16-row band)
    static_assert(NSTILE % NW == 0 && NT8 % SN == 0 && (SN % 2 == 0 || SN == 1), "state tiles must split evenly");
    static_assert(NS1 <= NW && RPG % 2 == 0, "one S1 job per warp at most");

    KDA_DYNAMIC_SHARED(smem_f);
    if (kda_dynamic_smem_size() < (unsigned)(L::WORDS * 4)) __trap();
    float* sq = smem_f + L::OFF_Q;
    float* sk = smem_f + L::OFF_K;
    float* sg = smem_f + L::OFF_G;
    float* sv = smem_f + L::OFF_V;
    float* sBV = smem_f + L::OFF_BV;
    float* sGL = smem_f + L::OFF_GL;
    float* sTot = smem_f + L::OFF_TOT;
    float* sBeta = smem_f + L::OFF_BETA;
    unsigned* const words = reinterpret_cast<unsigned*>(smem_f);
    unsigned* sTA = words + L::OFF_TA;
    unsigned* QgH = words + L::OFF_QG;  unsigned* QgL = QgH + C * LK;
    unsigned* KbH = words + L::OFF_KB;  unsigned* KbL = KbH + C * LK;
    unsigned* KdH = words + L::OFF_KDT; unsigned* KdL = KdH + K * LC;
    unsigned* StH = words + L::OFF_ST;  unsigned* StL = StH + BV * LK;
    unsigned* XtH = words + L::OFF_XT;  unsigned* XtL = XtH + BV * LC;
    unsigned* VtH = words + L::OFF_VT;  unsigned* VtL = VtH + BV * LC;

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int g8 = lane / 4, t4 = lane % 4;
    const int v0 = blockIdx.x * BV;
    const int h = blockIdx.y;
    const int b = blockIdx.z;
    const long long TT = T;
    const long long bh = (long long)b * H + h;
    const int NC = (T + C - 1) / C;

    // Stage chunk n: q, k, g rows and v columns (rows past T: zeros), and 07's T / Aqk words into
    // stage n % 2. Each thread owns fixed 16-byte slots, so a chunk costs one offset per row.
    constexpr int QPR = K / 4, QROWS = NTH / QPR, QPASS = C / QROWS;
    constexpr int VPR = BV / 4, VROWS = NTH / VPR, VPASS = (C + VROWS - 1) / VROWS;
    constexpr int TAQ = 4 * C * (C / 8);             // 16-byte quads of one chunk's T / Aqk
    static_assert(C % QROWS == 0 && TAQ % NTH == 0, "copy slots must tile the chunk");
    const int qi0 = tid / QPR, qc = (tid % QPR) * 4;
    const int vi0 = tid / VPR, vc = (tid % VPR) * 4;
    const long long qk_row = (long long)H * K, v_row = (long long)H * V;
    const long long qk_base = kda_bthd(b, 0, h, qc, TT, H, K);
    const long long v_base = kda_bthd(b, 0, h, v0 + vc, TT, H, V);
    const unsigned* ta_head = TA + bh * NC * (4LL * C * (C / 2));
    auto load_chunk = [&](int n) {
        const long long tfirst = (long long)n * C;
#pragma unroll
        for (int p2 = 0; p2 < QPASS; ++p2) {
            const int i = qi0 + p2 * QROWS;
            const long long tt = tfirst + i;
            const int so = i * K + qc;
            if (tt < TT) {
                const long long go = qk_base + tt * qk_row;
                cp_async16(sq + so, q + go);
                cp_async16(sk + so, k + go);
                cp_async16(sg + so, g + go);
            } else {
                kda_st4(sq + so, make_float4(0.f, 0.f, 0.f, 0.f));
                kda_st4(sk + so, make_float4(0.f, 0.f, 0.f, 0.f));
                kda_st4(sg + so, make_float4(0.f, 0.f, 0.f, 0.f));
            }
        }
#pragma unroll
        for (int p2 = 0; p2 < VPASS; ++p2) {
            const int i = vi0 + p2 * VROWS;
            if (i < C) {
                const long long tt = tfirst + i;
                if (tt < TT) cp_async16(sv + i * BV + vc, v + v_base + tt * v_row);
                else kda_st4(sv + i * BV + vc, make_float4(0.f, 0.f, 0.f, 0.f));
            }
        }
        const unsigned* src = ta_head + (long long)n * (4 * C * (C / 2));
        unsigned* dst = sTA + (n % 2) * L::TA_WORDS;
#pragma unroll
        for (int idx = tid; idx < TAQ; idx += NTH) {
            const int row = idx / (C / 8), qd = idx % (C / 8);   // row of the 4C stacked rows
            cp_async16(dst + row * LC + 4 * qd, src + row * (C / 2) + 4 * qd);
        }
        cp_async_commit();
    };

    // ---- once: S from h0 (registers and S^T in shared memory)
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
    load_chunk(0);
    cp_async_wait<0>();
    __syncthreads();

    const int pp = tid % (K / 2), grp = tid / (K / 2);
    const int c0 = 2 * pp, r0 = grp * RPG;
    for (int n = 0; n < NC; ++n) {
        const long long t0 = (long long)n * C;
        const unsigned* TH = sTA + (n % 2) * L::TA_WORDS;
        const unsigned* TL = TH + C * LC;
        const unsigned* AqH = TL + C * LC;
        const unsigned* AqL = AqH + C * LC;
        // ------------------------------------------------ P1: gates, scaled operands
        if (tid < C) sBeta[tid] = (t0 + tid < TT) ? beta[(b * TT + t0 + tid) * H + h] : 0.0f;
        float G[RPG][2];
        {
            float run0 = 0.f, run1 = 0.f;
#pragma unroll
            for (int ii = 0; ii < RPG; ++ii) {
                const float2 gg = *reinterpret_cast<const float2*>(sg + (r0 + ii) * K + c0);
                run0 += gg.x * KDA_LOG2E;
                run1 += gg.y * KDA_LOG2E;
                G[ii][0] = run0; G[ii][1] = run1;
            }
            sTot[grp * K + c0] = run0;
            sTot[grp * K + c0 + 1] = run1;
        }
        __syncthreads();   // group sums and beta visible
        float off0 = 0.f, off1 = 0.f, gl0 = 0.f, gl1 = 0.f;
#pragma unroll
        for (int q2 = 0; q2 < NQ; ++q2) {
            if (q2 == grp) { off0 = gl0; off1 = gl1; }
            gl0 += sTot[q2 * K + c0];
            gl1 += sTot[q2 * K + c0 + 1];
        }
        const float eL0 = fast_exp2(gl0), eL1 = fast_exp2(gl1);
        if (grp == 0) { sGL[c0] = eL0; sGL[c0 + 1] = eL1; }
#pragma unroll
        for (int ii = 0; ii < RPG; ii += 2) {
            float kd[2][2];   // [row][channel]
#pragma unroll
            for (int d = 0; d < 2; ++d) {
                const int i = r0 + ii + d;
                const float G0 = G[ii + d][0] + off0, G1 = G[ii + d][1] + off1;
                const float e0 = fast_exp2(G0), e1 = fast_exp2(G1);
                const float2 qq = *reinterpret_cast<const float2*>(sq + i * K + c0);
                const float2 kk = *reinterpret_cast<const float2*>(sk + i * K + c0);
                const float se0 = scale * e0, se1 = scale * e1, bi = sBeta[i];
                unsigned hw, lw;
                split_bf16x2(qq.x * se0, qq.y * se1, hw, lw);
                QgH[i * LK + pp] = hw; QgL[i * LK + pp] = lw;
                split_bf16x2(bi * kk.x * e0, bi * kk.y * e1, hw, lw);
                KbH[i * LK + pp] = hw; KbL[i * LK + pp] = lw;
                kd[d][0] = kk.x * fast_exp2(gl0 - G0);   // exponent <= 0: never overflows
                kd[d][1] = kk.y * fast_exp2(gl1 - G1);
            }
            unsigned hw, lw;
            const int i = r0 + ii;
            split_bf16x2(kd[0][0], kd[1][0], hw, lw);
            KdH[c0 * LC + i / 2] = hw; KdL[c0 * LC + i / 2] = lw;
            split_bf16x2(kd[0][1], kd[1][1], hw, lw);
            KdH[(c0 + 1) * LC + i / 2] = hw; KdL[(c0 + 1) * LC + i / 2] = lw;
        }
        for (int idx = tid; idx < C * BV; idx += NTH) sBV[idx] = sBeta[idx / BV] * sv[idx];
        __syncthreads();   // P1 outputs visible; the staging buffers are free
        if (n + 1 < NC) load_chunk(n + 1);

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
        __syncthreads();   // X^T complete

        // ------------------------------------------------ S2: V' = T X
        for (int job = warp; job < MT * NT8; job += NW) {
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
        __syncthreads();   // V'^T complete

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
                ldm_a16(KdH + sm * 16 * LC + kk * 8, LC, lane, ah);
                ldm_a16(KdL + sm * 16 * LC + kk * 8, LC, lane, al);
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
        cp_async_wait<0>();
        __syncthreads();   // new S^T and chunk n+1's inputs visible
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
