// 12 — chunked KDA, 10's recurrence with the state in the consumers' registers: each consumer warp
// owns 16 value columns of the state for all K channels and runs every product of a chunk on its
// own, as MMAs whose A operand is built from registers; no consumer barrier is left in the chain.
//
// What changed from 10, and why. Notebook 13's clock stamps put 10's chunk period (about 5.4k
// cycles) in its consumers' chain S1 -> barrier -> S2 -> barrier -> S3, each phase short of work
// and long of latency: the state S travels through shared memory twice per chunk (stored split
// after S3, read back by every S1 warp), X and V' once each, and two block-wide barriers separate
// the phases. The shared-memory pipe is the busiest unit, and S1 alone reads about 128 KB per
// chunk with ldmatrix.
// Here the products are transposed so that the state is the A operand: with M = a warp's 16 value
// columns,
//   P^T  = S^T [Kbg; Qg]^T          (16 x 2C, K = 128 deep)   X^T = (beta v)^T - P^T[:, :C]
//   V'^T = X^T T^T                  (T lower triangular)
//   O^T  = P^T[:, C:] + V'^T Aqk^T  -> o
//   S'^T = S^T diag(2^{G_L}) + V'^T Kd   (the new state, in the same registers)
// An m16n8 accumulator tile pair is exactly an m16n8k16 A fragment (the FA2 trick), so S^T, X^T
// and V'^T go from accumulators to split bf16 A operands without leaving the thread; only the B
// operands (Kbg, Qg, T, Aqk, Kd^T: the producers' buffer, as in 10) come from shared memory.
// A warp's chain has no barrier; the consumers meet the producers only at the FULL/EMPTY
// hand-over. Two consumer warps (BV = 32) instead of eight leave the SM's issue slots and its
// shared-memory pipe to the producers, which are 10's, unchanged (lean_producer.cuh).
//
// ROLES = 2 gives each 16-column slice two consumer warps with one copy of the state each: role 0
// computes X and V' (S^T Kbg^T, then T), hands V' to role 1 through shared memory (a named barrier
// per slice) and updates its state; role 1 computes S^T Qg^T, waits for V', finishes O, stores o and
// updates its own copy of the state with the same fragments (the copies stay bit-identical). Each
// warp's chain shrinks from about 336 to 210 MMAs per chunk, for one hand-over.
//
// The products are 3xBF16 as in 06-10 (fp32-class accuracy); the summation order differs from
// 10's, so 12 agrees with 10 to rounding, not bit for bit.
//
// Requires sm_80+ (bf16 mma.sync, ldmatrix, cp.async, named barriers).
#include "lean_producer.cuh"

template <int K, int V, int C, int BV, int ROLES = 1>
struct KdaRegsLayout : KdaLeanBuffer<K, C, BV> {
    using P = KdaLeanBuffer<K, C, BV>;
    static constexpr int NWC = ROLES * BV / 16, NWP = 8;   // consumer warps (ROLES per 16 columns), producers
    static constexpr int NCT = 32 * NWC, NPT = 32 * NWP, NTH = NCT + NPT;
    static constexpr int LK = P::LK, LC = P::LC;
    static constexpr int NQ = NPT / (K / 2);       // producer row groups
    static constexpr int OFF_V = 0;                          // the next chunk's v columns
    static constexpr int OFF_PB = OFF_V + C * BV;            // two KdaLeanBuffers
    static constexpr int OFF_TOT = OFF_PB + 2 * P::PB_WORDS; // producers' group gate sums [NQ][K]
    static constexpr int OFF_BETA = OFF_TOT + NQ * K;        // beta [C]
    // ROLES = 2: V'^T's split A fragments from role 0 to role 1, [chunk parity][slice][16 words][lane]
    static constexpr int OFF_VX = OFF_BETA + C;
    static constexpr int WORDS = OFF_VX + (ROLES == 2 ? 2 * (BV / 16) * 16 * 32 : 0);
};

// A fragments (hi, lo) of the m16n8k16 step over columns 16 kk .. 16 kk + 15 of a 16-row matrix
// held as m16n8 accumulator tiles acc[2 kk], acc[2 kk + 1].
static __device__ __forceinline__ void acc_to_a_split(const float (&t0)[4], const float (&t1)[4],
                                                      unsigned (&ah)[4], unsigned (&al)[4]) {
    split_bf16x2(t0[0], t0[1], ah[0], al[0]);
    split_bf16x2(t0[2], t0[3], ah[1], al[1]);
    split_bf16x2(t1[0], t1[1], ah[2], al[2]);
    split_bf16x2(t1[2], t1[3], ah[3], al[3]);
}

// P^T = S^T [Kbg; Qg]^T for one warp: px += S^T Kbg^T (DX), po += S^T Qg^T (DO), two accumulators per
// tile (k-step parity) to halve the MMA dependency chains. B fragments: two n8 token tiles per ldmatrix.
template <bool DX, bool DO, int K, int C, int LK, int NPAR = 2>
static __device__ __forceinline__ void regs_p_product(const float (&st)[K / 8][4], const unsigned* KbH,
                                                      const unsigned* KbL, const unsigned* QgH, const unsigned* QgL,
                                                      float (&px)[2][C / 8][4], float (&po)[2][C / 8][4], int lane) {
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) {
        unsigned ah[4], al[4];
        acc_to_a_split(st[2 * kk], st[2 * kk + 1], ah, al);
#pragma unroll
        for (int p = 0; p < C / 16; ++p) {   // 16 tokens of Kbg and of Qg: two n8 tiles each
            unsigned bh[4], bl[4];
            if constexpr (DX) {
                ldm_b16x2(KbH + p * 16 * LK + kk * 8, LK, lane, bh);
                ldm_b16x2(KbL + p * 16 * LK + kk * 8, LK, lane, bl);
                mma_3xbf16_half(px[kk % NPAR][2 * p], ah, al, bh, bl, 0);
                mma_3xbf16_half(px[kk % NPAR][2 * p + 1], ah, al, bh, bl, 1);
            }
            if constexpr (DO) {
                ldm_b16x2(QgH + p * 16 * LK + kk * 8, LK, lane, bh);
                ldm_b16x2(QgL + p * 16 * LK + kk * 8, LK, lane, bl);
                mma_3xbf16_half(po[kk % NPAR][2 * p], ah, al, bh, bl, 0);
                mma_3xbf16_half(po[kk % NPAR][2 * p + 1], ah, al, bh, bl, 1);
            }
        }
    }
}

// S'^T = S^T diag(2^G_L) + V'^T Kd for one warp's 16 value columns: Kd^T's rows (channels, 16-byte
// chunks swizzled by kdt_word) are the B operand, two n8 channel tiles per ldmatrix.
template <int K, int C, int LC>
static __device__ __forceinline__ void regs_update_state(float (&st)[K / 8][4], const unsigned (&vah)[C / 16][4],
                                                         const unsigned (&val)[C / 16][4], const unsigned* KdH,
                                                         const unsigned* KdL, const float* sGL, int lane) {
    const int t4 = lane % 4;
#pragma unroll
    for (int j = 0; j < K / 8; ++j) {
        const float d0 = sGL[8 * j + 2 * t4], d1 = sGL[8 * j + 2 * t4 + 1];
        st[j][0] *= d0; st[j][1] *= d1;
        st[j][2] *= d0; st[j][3] *= d1;
    }
#pragma unroll
    for (int kk = 0; kk < C / 16; ++kk) {
#pragma unroll
        for (int p = 0; p < K / 16; ++p) {
            unsigned bh[4], bl[4];
            const int r = p * 16 + (lane >> 4) * 8 + (lane & 7);
            const int w = kdt_word<LC>(r, kk * 8 + ((lane >> 3) & 1) * 4);
            ldmatrix_x4(bh, KdH + w);
            ldmatrix_x4(bl, KdL + w);
            mma_3xbf16_half(st[2 * p], vah[kk], val[kk], bh, bl, 0);
            mma_3xbf16_half(st[2 * p + 1], vah[kk], val[kk], bh, bl, 1);
        }
    }
}

// O^T = (Qg S)^T + V'^T Aqk^T for one warp (Aqk is lower triangular, its diagonal included).
template <int C, int LC>
static __device__ __forceinline__ void regs_output(float (&ot)[C / 8][4], const float (&po)[2][C / 8][4],
                                                   const unsigned (&vah)[C / 16][4], const unsigned (&val)[C / 16][4],
                                                   const unsigned* AqH, const unsigned* AqL, int lane) {
#pragma unroll
    for (int j = 0; j < C / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) ot[j][e] = po[0][j][e] + po[1][j][e];
#pragma unroll
    for (int kk = 0; kk < C / 16; ++kk) {
#pragma unroll
        for (int p = kk; p < C / 16; ++p) {
            unsigned bh[4], bl[4];
            ldm_b16x2(AqH + p * 16 * LC + kk * 8, LC, lane, bh);
            ldm_b16x2(AqL + p * 16 * LC + kk * 8, LC, lane, bl);
            mma_3xbf16_half(ot[2 * p], vah[kk], val[kk], bh, bl, 0);
            mma_3xbf16_half(ot[2 * p + 1], vah[kk], val[kk], bh, bl, 1);
        }
    }
}

// BF: q, k, v, g, beta and o in bf16; ROLES: consumer warps per 16 value columns (1 or 2)
template <int K, int V, int C, int BV, bool BF = false, int ROLES = 1>
__global__ void __launch_bounds__(KdaRegsLayout<K, V, C, BV, ROLES>::NTH, 1)
kda_chunk_state_regs(const typename KdaIn<BF>::T* __restrict__ q, const typename KdaIn<BF>::T* __restrict__ k,
                     const typename KdaIn<BF>::T* __restrict__ v, const typename KdaIn<BF>::T* __restrict__ g,
                     const typename KdaIn<BF>::T* __restrict__ beta,
                     const unsigned* __restrict__ TA,          // [B, H, NC, 4, C, C/2] from 07
                     const float* __restrict__ h0,             // [B,H,K,V] fp32, or nullptr
                     typename KdaIn<BF>::T* __restrict__ o,    // [B,T,H,V]
                     float* __restrict__ ht,                   // [B,H,K,V] fp32, or nullptr
                     int T, int H, float scale) {
    using L = KdaRegsLayout<K, V, C, BV, ROLES>;
    static_assert(C == 32, "07 hands over T and Aqk for chunks of 32");
    static_assert(ROLES == 1 || ROLES == 2, "one or two consumer warps per 16 value columns");
    static_assert((K == 64 || K == 128) && (BV == 16 || BV == 32) && V % BV == 0, "K in {64,128}, BV in {16,32}");
    constexpr int NCT = L::NCT, NTH = L::NTH, LK = L::LK, LC = L::LC;
    constexpr int NKT = K / 8;        // the state's n8 tiles (channels) per warp
    constexpr int NCT8 = C / 8;       // n8 tiles over a chunk's tokens
    constexpr int BAR_FULL = KdaLeanBars::FULL, BAR_EMPTY = KdaLeanBars::EMPTY;
    // ROLES = 2, role 0 -> role 1 of a slice: + 2 slice + chunk parity (role 0 can run a chunk ahead
    // of role 1, never two: chunk n + 2's FULL needs role 1's EMPTY arrival for chunk n)
    constexpr int BAR_PAIR = KdaLeanBars::EMPTY + 2;

    KDA_DYNAMIC_SHARED(smem_f);
    if (kda_dynamic_smem_size() < (unsigned)(L::WORDS * 4)) __trap();
    const unsigned* const words = reinterpret_cast<const unsigned*>(smem_f);
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

    if (tid >= NCT) {
        // ================================================ producers: 10's, one chunk ahead
        kda_lean_produce<K, V, C, BV, BF, NTH, L>(q, k, v, g, beta, TA, smem_f, tid - NCT, T, H, scale, ht,
#if KDA_PROBE == 3
                                                  stamp0_);
#else
                                                  0);
#endif
        return;
    }

    // ==================================================== consumers: ROLES warps per 16 value columns
    const int slice = warp / ROLES, role = warp % ROLES;
    const bool x_path = ROLES == 1 || role == 0;
    unsigned* const vx = reinterpret_cast<unsigned*>(smem_f) + L::OFF_VX + slice * 16 * 32 + lane;
    const int vw = 16 * slice;                // this warp's first column within the block
    const int col_a = v0 + vw + g8, col_b = col_a + 8;   // the two value columns of this lane's rows
    // st[j] = S^T rows (g8, g8 + 8) x channels 8 j + 2 t4, + 1: the state, fp32, for the whole pass
    float st[NKT][4];
#pragma unroll
    for (int j = 0; j < NKT; ++j) {
        const int c0 = 8 * j + 2 * t4;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int ch = c0 + (e & 1), col = (e < 2) ? col_a : col_b;
            st[j][e] = h0 ? h0[(bh * K + ch) * V + col] : 0.f;
        }
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
        named_bar_sync(BAR_FULL + (n & 1), NTH);   // chunk n's operands
        if (KDA_PROBE == 1) {
            if (n + 2 < NC) named_bar_arrive(BAR_EMPTY + (n & 1), NTH);
            continue;
        }
        KDA_STAMP(1);
        // ------------------------------------------------ P^T = S^T [Kbg; Qg]^T
        float px[2][NCT8][4] = {}, po[2][NCT8][4] = {};
        if constexpr (ROLES == 1) {
            regs_p_product<true, true, K, C, LK>(st, KbH, KbL, QgH, QgL, px, po, lane);
        } else if (role == 0) {   // branch outside the unrolled loop: one set of accumulators live
            regs_p_product<true, false, K, C, LK>(st, KbH, KbL, QgH, QgL, px, po, lane);
        } else {                  // role 1 accumulates Qg S in px's registers (one array per warp)
            regs_p_product<false, true, K, C, LK>(st, KbH, KbL, QgH, QgL, px, px, lane);
        }
        float (&pq)[2][NCT8][4] = ROLES == 1 ? po : px;   // Qg S, wherever this warp accumulated it
        KDA_STAMP(2);
        // ------------------------------------------------ X^T = (beta v)^T - (Kbg S)^T;  V'^T = X^T T^T
        unsigned vah[C / 16][4], val[C / 16][4];   // V'^T as A fragments, for O and the state
        unsigned* const vxn = vx + (n & 1) * (BV / 16) * 16 * 32;
        if (x_path) {
        float x[NCT8][4];
#pragma unroll
        for (int j = 0; j < NCT8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = 8 * j + 2 * t4 + (e & 1), c = vw + g8 + 8 * (e >> 1);
                x[j][e] = sBV[i * BV + c] - (px[0][j][e] + px[1][j][e]);
            }
        }
        // T is lower triangular: token tiles 16 p .. 16 p + 15 of V' need X's tokens 0 .. 16 p + 15
        float vp[NCT8][4] = {};
#pragma unroll
        for (int kk = 0; kk < C / 16; ++kk) {
            unsigned ah[4], al[4];
            acc_to_a_split(x[2 * kk], x[2 * kk + 1], ah, al);
#pragma unroll
            for (int p = kk; p < NCT8 / 2; ++p) {
                unsigned bh[4], bl[4];
                ldm_b16x2(TH + p * 16 * LC + kk * 8, LC, lane, bh);
                ldm_b16x2(TL + p * 16 * LC + kk * 8, LC, lane, bl);
                mma_3xbf16_half(vp[2 * p], ah, al, bh, bl, 0);
                mma_3xbf16_half(vp[2 * p + 1], ah, al, bh, bl, 1);
            }
        }
#pragma unroll
        for (int kk = 0; kk < C / 16; ++kk) acc_to_a_split(vp[2 * kk], vp[2 * kk + 1], vah[kk], val[kk]);
        if constexpr (ROLES == 2) {   // to role 1: this lane's 16 fragment words, lane-contiguous
#pragma unroll
            for (int kk = 0; kk < C / 16; ++kk)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    vxn[(8 * kk + e) * 32] = vah[kk][e];
                    vxn[(8 * kk + 4 + e) * 32] = val[kk][e];
                }
            named_bar_arrive(BAR_PAIR + 2 * slice + (n & 1), 64);
        }
        } else {   // role 1 of ROLES = 2: V' from role 0 (buffer n & 1 is rewritten only after this
                   // warp's EMPTY arrival for chunk n, which the producers wait for before chunk n + 2)
            named_bar_sync(BAR_PAIR + 2 * slice + (n & 1), 64);
#pragma unroll
            for (int kk = 0; kk < C / 16; ++kk)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    vah[kk][e] = vxn[(8 * kk + e) * 32];
                    val[kk][e] = vxn[(8 * kk + 4 + e) * 32];
                }
        }
        KDA_STAMP(3);
        // ------------------------------------------------ S'^T = S^T diag(2^G_L) + V'^T Kd
        float ot[NCT8][4];
        if constexpr (ROLES == 1) {   // the state first: it is what the next chunk waits for
            regs_update_state<K, C, LC>(st, vah, val, KdH, KdL, sGL, lane);
            KDA_STAMP(4);
            regs_output<C, LC>(ot, pq, vah, val, AqH, AqL, lane);
        } else if (role == 0) {
            regs_update_state<K, C, LC>(st, vah, val, KdH, KdL, sGL, lane);
            KDA_STAMP(4);
            if (n + 2 < NC) named_bar_arrive(BAR_EMPTY + (n & 1), NTH);   // buffer n & 1 is free
            KDA_STAMP(5);
            continue;
        } else {                      // role 1: O first, so that Qg S's accumulators die before the update
            regs_output<C, LC>(ot, pq, vah, val, AqH, AqL, lane);
            KDA_STAMP(4);
            regs_update_state<K, C, LC>(st, vah, val, KdH, KdL, sGL, lane);
        }
        if (n + 2 < NC) named_bar_arrive(BAR_EMPTY + (n & 1), NTH);   // buffer n & 1 is free
        // o[t][v]: a lane holds tokens (2 t4, 2 t4 + 1) of value columns g8 and g8 + 8; swapping
        // with lane ^ 4 (column g8 ^ 1) gives each lane two adjacent columns of one token
#pragma unroll
        for (int j = 0; j < NCT8; ++j) {
            float pr[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) pr[e] = __shfl_xor_sync(ATTNLAB_FULL_MASK, ot[j][e], 4);
            const bool even = (g8 & 1) == 0;
            // even lanes: columns (g8, g8 + 1) of both tokens; odd lanes: columns (g8 + 7, g8 + 8)
            const int col = even ? v0 + vw + g8 : v0 + vw + g8 + 7;
            const float a0 = even ? ot[j][0] : pr[2], b0 = even ? pr[0] : ot[j][2];   // token 2 t4
            const float a1 = even ? ot[j][1] : pr[3], b1 = even ? pr[1] : ot[j][3];   // token 2 t4 + 1
            const long long ta = t0 + 8 * j + 2 * t4, tb = ta + 1;
            if (ta < TT) kda_st2<BF>(o + kda_bthd(b, ta, h, col, TT, H, V), a0, b0);
            if (tb < TT) kda_st2<BF>(o + kda_bthd(b, tb, h, col, TT, H, V), a1, b1);
        }
        KDA_STAMP(5);
    }

    if (KDA_PROBE == 3) return;   // the stamps live where ht would be written
    if (ht && x_path) {   // (ROLES = 2: role 1's copy of the state is the same)
#pragma unroll
        for (int j = 0; j < NKT; ++j) {
            const int c0 = 8 * j + 2 * t4;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int ch = c0 + (e & 1), col = (e < 2) ? col_a : col_b;
                ht[(bh * K + ch) * V + col] = st[j][e];
            }
        }
    }
}
