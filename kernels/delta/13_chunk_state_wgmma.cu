// 13 — chunked KDA, the recurrence on Hopper's warpgroup MMAs: one warpgroup runs a chunk's chain
// of products (X, V', the state update) as asynchronous wgmmas with the state in its accumulators;
// the other warpgroup builds the next chunk's element-wise operands, each element once per block.
//
// What changed from 10 (and 12), and why. Notebook 13's clock stamps and counters of 10 put a
// chunk at ~5400 cycles with both warp roles latency-bound: each of 8 consumer warps runs 16 x 16
// (or 16 x 8) tiles of every product through ldmatrix and mma.sync (S1 alone reads ~128 KB of
// shared memory per chunk: every warp re-reads the state and operand rows it shares with three
// others), and the producers repeat the exp2s of a row group behind three barriers. Here:
//  * The products are m64nBVk16 wgmmas issued by one warpgroup (WG_C, warps 0-3): the tensor core
//    reads each B tile (S^T, X^T, V'^T) once per warpgroup from shared memory, A either from
//    registers (P1's [Kbg; Qg] rows, P2's [T; A2] rows) or from shared memory (P4's Kd^T).
//  * The state S (K x BV, fp32) lives in WG_C's wgmma accumulators for the whole pass: P4 adds
//    Kd^T V' to it in place; it goes to shared memory only as P1's B operand (bf16 hi and lo).
//  * Each WG_C warp owns 8 tokens of the chunk: its 16 A rows are [Kbg; Qg] of those tokens in P1
//    and [T; A2] of them in P2 (A2 = Aqk T from 07<A2>), so X, Ob, V' and A2 X of a token land in
//    the same thread: o = Ob + A2 X needs no exchange, and P2 (V' = T X and A2 X) is one product.
//  * The other warpgroup (WG_E, warps 4-7) holds a channel per thread and all tokens of the chunk:
//    q, k and g stream into a staging tile by cp.async (coalesced token rows) a chunk ahead, the
//    gate's running sum is a serial add
//    in registers, e^G and e^(G_L - G) are computed once per element of the block (no row groups, no
//    gate-sum barrier), and it writes Kbg and Qg (fp32, for WG_C's A fragments), Kd^T (in the
//    wgmma's layout) and 2^G_L into one of two operand buffers, a chunk ahead.
//  * WG_C makes no global loads on its chain: its T / A2 rows and v columns of chunk n + 1 arrive
//    by cp.async during chunk n (coalesced 16-byte pieces), beta by one load a chunk ahead, and every
//    transposed tile it writes (X^T, V'^T, S^T) goes out with stmatrix.trans.
// Per chunk (C = 32), WG_C's chain is P1 (24 wgmmas at K = 128: X = beta v - Kbg S, Ob = Qg S) ->
// X^T -> P2 (6: V' = T X, A2 X) -> V'^T, o stored -> P4 (12: S = 2^G_L S + Kd^T V') -> S^T; the
// next chunk's P1 operands are built while P4 runs.
//
// Layout: the wgmma operand tiles are K-major with the 128-byte swizzle (kernels/hopper.cuh: rows
// of 128 bytes in 8-row atoms of 1024 bytes, 16-byte chunk c of row r at c ^ (r % 8), tiles 1024-
// byte aligned). S^T: [BV][K] in 64-wide chunks, hi and lo tiles. X^T and V'^T: [BV][32 tokens hi |
// 32 tokens lo] (one 128-byte row). Kd^T: [K][32 tokens hi | lo]. Tiles written by ordinary stores
// are fenced for the async proxy before the barrier that hands them to a wgmma. 3xBF16 products as
// everywhere in this family: al bh + ah bl + ah bh.
//
// With BF (issue 13's bf16-I/O path) q, k, v, g, beta are bf16 in memory, widened as used, and o
// is rounded to bf16; products, state and the initial and final states stay as on the fp32 path.
//
// Requires sm_90a (wgmma, stmatrix; built with attnlab.compile.load_kernel(..., arch="sm_90a")).
#include "delta_common.cuh"

#include "delta_io.cuh"
#include "hopper.cuh"

template <int K, int V, int C, int BV, bool BF = false>
struct KdaWgLayout {
    static constexpr int NTH = 256;                     // WG_C (chain), WG_E (element-wise)
    static constexpr int MT = K / 64;                   // m64 tiles of the state (rows = channels)
    static constexpr int LE = K + 8;                    // floats per Kbg / Qg row
    static constexpr int LC = C / 2 + 4;                // words per T / A2 row (ldmatrix conflict-free)
    static constexpr int LV = BV + 8;                   // elements per v row
    static constexpr int TPC = 128 / K;                 // WG_E threads per channel (1 or 2)
    static constexpr int ESZ = BF ? 2 : 4;              // bytes per input element
    // byte offsets from the 1024-aligned base
    static constexpr int ST_BYTES = K * BV * 2;         // one S^T tile (hi or lo): K/64 chunks of BV rows
    static constexpr int OFF_STH = 0;
    static constexpr int OFF_STL = OFF_STH + ST_BYTES;
    static constexpr int OFF_X = OFF_STL + ST_BYTES;    // X^T [BV][hi | lo]
    static constexpr int OFF_VP = OFF_X + BV * 128;     // V'^T [BV][hi | lo]
    // WG_E's operand buffers (two): Kd^T [K][hi | lo], then Kbg, Qg [C][LE] fp32, 2^G_L [K]
    static constexpr int KD_BYTES = K * 128;
    static constexpr int OPB_BYTES = ((KD_BYTES + 2 * C * LE * 4 + K * 4 + 1023) / 1024) * 1024;
    static constexpr int OFF_OPB = OFF_VP + BV * 128;
    // WG_C's copy slots (two): T hi, T lo, A2 hi, A2 lo [C][LC] words, v [C][LV]
    static constexpr int TA_BYTES = 4 * C * LC * 4;
    static constexpr int SLOT_BYTES = TA_BYTES + C * LV * ESZ;
    static constexpr int OFF_SLOT = OFF_OPB + 2 * OPB_BYTES;
    static constexpr int OFF_TOT = OFF_SLOT + 2 * SLOT_BYTES;   // WG_E's half sums [2][K] (K = 64)
    static constexpr int OFF_STG = OFF_TOT + 2 * K * 4;         // WG_E's staging: g, k, q [C][K] as stored
    static constexpr int BYTES = OFF_STG + 3 * C * K * ESZ;
    static constexpr int SMEM_BYTES = BYTES + 1024;             // launch size: room to align the base
    static_assert(ST_BYTES % 1024 == 0 && (BV * 128) % 1024 == 0 && KD_BYTES % 1024 == 0 && SLOT_BYTES % 16 == 0,
                  "tiles must stay aligned");
};

// Probe builds (scripts/probe_delta_recurrence.py; results meaningless): KDA_PROBE=4 copies no
// inputs after chunk 0 (both warpgroups reuse chunk 0's staged q, k, g, T, A2 and v): the period
// without global input traffic; KDA_PROBE=5 idles WG_E's arithmetic (it only hands buffers over):
// WG_C's chain alone. KDA_PROBE=3: clock stamps (delta_common.cuh).
// Named barriers (0 is __syncthreads): WG_C's own, WG_E's own, FULL + buffer (WG_E arrives, WG_C
// syncs) and EMPTY + buffer (WG_C arrives, WG_E syncs).
struct KdaWgBars { static constexpr int CONS = 1, PROD = 2, FULL = 3, EMPTY = 5; };

// Shared-space address of (row r, 16-byte chunk ch) of a K-major 128-byte-swizzle tile at `tile`.
static __device__ __forceinline__ unsigned kda_sw128(unsigned tile, int r, int ch) {
    return tile + (r / 8) * 1024 + (r % 8) * 128 + ((ch ^ (r % 8)) * 16);
}

template <int K, int V, int C, int BV, bool BF = false>   // BF: q, k, v, g, beta and o in bf16
__global__ void __launch_bounds__(256, 1)
kda_chunk_state_wgmma(const typename KdaIn<BF>::T* __restrict__ q, const typename KdaIn<BF>::T* __restrict__ k,
                      const typename KdaIn<BF>::T* __restrict__ v, const typename KdaIn<BF>::T* __restrict__ g,
                      const typename KdaIn<BF>::T* __restrict__ beta,
                      const unsigned* __restrict__ TA,          // [B, H, NC, 4, C, C/2] from 07<A2>: T, A2 = Aqk T
                      const float* __restrict__ h0,             // [B,H,K,V] fp32, or nullptr
                      typename KdaIn<BF>::T* __restrict__ o,    // [B,T,H,V]
                      float* __restrict__ ht,                   // [B,H,K,V] fp32, or nullptr
                      int T, int H, float scale) {
    using L = KdaWgLayout<K, V, C, BV, BF>;
    using TIn = typename KdaIn<BF>::T;
    static_assert(C == 32, "07 hands over T and Aqk T for chunks of 32");
    static_assert((K == 64 || K == 128) && (BV == 16 || BV == 32) && V % BV == 0, "K in {64,128}, BV in {16,32}");
    constexpr int MT = L::MT, NJ = BV / 8, KS = K / 16, LE = L::LE, LC = L::LC, LV = L::LV;
    constexpr int BAR_CONS = KdaWgBars::CONS, BAR_PROD = KdaWgBars::PROD, BAR_FULL = KdaWgBars::FULL,
                  BAR_EMPTY = KdaWgBars::EMPTY;

    KDA_DYNAMIC_SHARED(smem_f);
    if (kda_dynamic_smem_size() < (unsigned)L::SMEM_BYTES) __trap();
    const unsigned raw_base = smem_u32(smem_f);
    const unsigned base = (raw_base + 1023u) & ~1023u;     // the swizzle needs 1024-aligned tiles
    unsigned char* const sm = reinterpret_cast<unsigned char*>(smem_f) + (base - raw_base);
    auto opb = [&](int n) { return L::OFF_OPB + (n & 1) * L::OPB_BYTES; };      // byte offset of buffer n & 1
    auto kb_of = [&](int n) { return reinterpret_cast<float*>(sm + opb(n) + L::KD_BYTES); };
    auto qg_of = [&](int n) { return kb_of(n) + C * LE; };
    auto gl_of = [&](int n) { return qg_of(n) + C * LE; };

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int g8 = lane / 4, t4 = lane % 4;
    const int v0 = blockIdx.x * BV, h = blockIdx.y, b = blockIdx.z;
    const long long TT = T, bh = (long long)b * H + h;
    const int NC = (T + C - 1) / C;
#if KDA_PROBE == 3
    long long stamp0_;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(stamp0_));
#endif

    if (warp >= 4) {
        // ====================================================== WG_E: element-wise operands, a chunk ahead
        constexpr int TPT = C / L::TPC;                  // tokens per thread
        const int e = tid - 128, c = e % K, part = e / K, tok0 = part * TPT;
        const long long off_c = kda_bthd(b, 0, h, c, TT, H, K), row = (long long)H * K;
        float* const sTot = reinterpret_cast<float*>(sm + L::OFF_TOT);
        // g, k, q of the next chunk stream into the staging tile by cp.async (coalesced 16-byte pieces of
        // token rows) while this chunk is computed: no registers wait on global memory
        TIn* const stg = reinterpret_cast<TIn*>(sm + L::OFF_STG);
        constexpr int PR = K * (int)sizeof(TIn) / 16;               // 16-byte pieces per token row
        auto copy_in = [&](int n) {
            for (int idx = e; idx < 3 * C * PR; idx += 128) {
                const int ar = idx / (C * PR), r = (idx / PR) % C, pc = idx % PR;
                const long long t = (long long)n * C + r;
                const TIn* src = (ar == 0 ? g : ar == 1 ? k : q) + kda_bthd(b, t < TT ? t : 0, h, 0, TT, H, K);
                cp_async16_zfill(stg + (ar * C + r) * K + pc * (16 / (int)sizeof(TIn)),
                                 src + pc * (16 / (int)sizeof(TIn)), t < TT);
            }
            cp_async_commit();
        };
        TIn xb = TIn(0);   // beta of token `lane` of the chunk being staged
        auto load_beta = [&](int n) {
            const long long t = (long long)n * C + lane;
            xb = t < TT ? beta[(b * TT + t) * H + h] : TIn(0);
        };
        copy_in(0);
        load_beta(0);
        for (int n = 0; n < NC; ++n) {
            KDA_STAMP(0);
            cp_async_wait<0>();
            named_bar_sync(BAR_PROD, 128);                            // chunk n staged by all of WG_E
            TIn xg[TPT], xk[TPT], xq[TPT];
#pragma unroll
            for (int u = 0; u < TPT; ++u) {
                xg[u] = stg[(0 * C + tok0 + u) * K + c];
                xk[u] = stg[(1 * C + tok0 + u) * K + c];
                xq[u] = stg[(2 * C + tok0 + u) * K + c];
            }
            const float bl = kda_widen1<BF>(xb);
            named_bar_sync(BAR_PROD, 128);                            // everyone has read the tile
            if (n + 1 < NC && KDA_PROBE != 4) { copy_in(n + 1); load_beta(n + 1); }
            if (n >= 2) named_bar_sync(BAR_EMPTY + (n & 1), L::NTH);   // WG_C is done with chunk n - 2
            KDA_STAMP(1);
            if (KDA_PROBE == 5) {   // probe: WG_E's arithmetic idle, its hand-over kept
                named_bar_arrive(BAR_FULL + (n & 1), L::NTH);
                continue;
            }
            float G[TPT];
            float run = 0.f;
#pragma unroll
            for (int u = 0; u < TPT; ++u) { run += kda_widen1<BF>(xg[u]) * KDA_LOG2E; G[u] = run; }
            float off = 0.f, gl = run;
            if constexpr (L::TPC == 2) {   // K = 64: two threads per channel, 16 tokens each
                sTot[part * K + c] = run;
                named_bar_sync(BAR_PROD, 128);
                off = part ? sTot[c] : 0.f;
                gl = sTot[c] + sTot[K + c];
                named_bar_sync(BAR_PROD, 128);   // both read before the next chunk's sums overwrite
            }
            float* const kb = kb_of(n);
            float* const qgp = qg_of(n);
            float e1[TPT];
            unsigned kdh[TPT / 2], kdl[TPT / 2];
#pragma unroll
            for (int u = 0; u < TPT; u += 2) {
                const float G0 = G[u] + off, G1 = G[u + 1] + off;
                e1[u] = fast_exp2(G0);
                e1[u + 1] = fast_exp2(G1);
                const float kd0 = kda_widen1<BF>(xk[u]) * fast_exp2(gl - G0);   // exponent <= 0
                const float kd1 = kda_widen1<BF>(xk[u + 1]) * fast_exp2(gl - G1);
                split_bf16x2(kd0, kd1, kdh[u / 2], kdl[u / 2]);
            }
#pragma unroll
            for (int u = 0; u < TPT; ++u) {
                const float bt = __shfl_sync(ATTNLAB_FULL_MASK, bl, tok0 + u);   // beta of token tok0 + u
                kb[(tok0 + u) * LE + c] = bt * kda_widen1<BF>(xk[u]) * e1[u];
                qgp[(tok0 + u) * LE + c] = scale * kda_widen1<BF>(xq[u]) * e1[u];
            }
            // Kd^T row c: tokens tok0 .. tok0 + TPT - 1 are 16-byte chunks tok0/8 .. (hi), 4 + that (lo)
            unsigned char* kd = sm + opb(n) + (c / 8) * 1024 + (c % 8) * 128;
#pragma unroll
            for (int qd = 0; qd < TPT / 8; ++qd) {
                const int ch = tok0 / 8 + qd;
                *reinterpret_cast<U4*>(kd + ((ch ^ (c % 8)) * 16)) =
                    U4{kdh[4 * qd], kdh[4 * qd + 1], kdh[4 * qd + 2], kdh[4 * qd + 3]};
                *reinterpret_cast<U4*>(kd + (((4 + ch) ^ (c % 8)) * 16)) =
                    U4{kdl[4 * qd], kdl[4 * qd + 1], kdl[4 * qd + 2], kdl[4 * qd + 3]};
            }
            if (part == 0) gl_of(n)[c] = fast_exp2(gl);
            KDA_STAMP(2);
            fence_proxy_async();                                      // Kd^T is read by wgmma
            named_bar_arrive(BAR_FULL + (n & 1), L::NTH);            // buffer n & 1 holds chunk n
            KDA_STAMP(3);
        }
        return;
    }

    // ========================================================== WG_C: the chain of products
    const int i = 8 * warp + g8;                      // this thread's token of the chunk
    float sacc[MT][BV / 2];                            // the state: rows 64 mt + 16 warp + g8 (+8)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            const int r0 = 64 * mt + 16 * warp + g8, col = v0 + 8 * j + 2 * t4;
            float2 x0 = make_float2(0.f, 0.f), x1 = x0;
            if (h0) {
                x0 = *reinterpret_cast<const float2*>(h0 + (bh * K + r0) * V + col);
                x1 = *reinterpret_cast<const float2*>(h0 + (bh * K + r0 + 8) * V + col);
            }
            sacc[mt][4 * j] = x0.x; sacc[mt][4 * j + 1] = x0.y; sacc[mt][4 * j + 2] = x1.x; sacc[mt][4 * j + 3] = x1.y;
        }
    const unsigned sth_a = base + L::OFF_STH, stl_a = base + L::OFF_STL;
    const unsigned sx_a = base + L::OFF_X, svp_a = base + L::OFF_VP;
    auto desc = [](unsigned addr) { return wgmma_desc_sw128(addr, 16, 1024); };
    // S^T (hi, lo tiles) from the accumulators, by stmatrix.trans: matrices (hi, rows 16 warp + g8),
    // (hi, + 8), (lo, ..), (lo, + 8) of columns 8j..; lane 8i + r stores column r (= S^T row 8j + r),
    // channels 16 warp + 8 (i % 2) .. + 7 (16-byte chunk 2 warp + i % 2 of the 64-wide chunk mt)
    auto write_st = [&]() {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                unsigned m[4];
                split_bf16x2(sacc[mt][4 * j], sacc[mt][4 * j + 1], m[0], m[2]);
                split_bf16x2(sacc[mt][4 * j + 2], sacc[mt][4 * j + 3], m[1], m[3]);
                const int mi = lane / 8, r = lane % 8;
                const unsigned tile = (mi < 2 ? sth_a : stl_a) + mt * (BV * 128);
                stmatrix_x4_trans(kda_sw128(tile, 8 * j + r, 2 * warp + (mi & 1)), m);
            }
    };
    // X^T or V'^T ([BV][32 tokens hi | lo]) from rows g8 of a P1 / P2 accumulator (token i, columns
    // 8j + 2t4, +1), two column groups per stmatrix: (hi, j), (lo, j), (hi, j + 1), (lo, j + 1)
    auto write_tok_t = [&](unsigned tile, const float (&x)[BV / 4]) {
#pragma unroll
        for (int j = 0; j < NJ; j += 2) {
            unsigned m[4];
            split_bf16x2(x[2 * j], x[2 * j + 1], m[0], m[1]);
            split_bf16x2(x[2 * j + 2], x[2 * j + 3], m[2], m[3]);
            const int mi = lane / 8, r = lane % 8;
            stmatrix_x4_trans(kda_sw128(tile, 8 * (j + mi / 2) + r, (mi & 1) * 4 + warp), m);
        }
    };
    static_assert(NJ % 2 == 0, "two 8-column groups per stmatrix");
    write_st();
    fence_proxy_async();

    // chunk n + 1's T / A2 words and v columns into slot (n + 1) & 1 (cp.async: 16-byte pieces)
    const unsigned* ta_head = TA + bh * NC * (4LL * C * (C / 2));
    auto slot = [&](int n) { return sm + L::OFF_SLOT + (n & 1) * L::SLOT_BYTES; };
    auto copy_slot = [&](int n) {
        unsigned* dta = reinterpret_cast<unsigned*>(slot(n));
        const unsigned* src = ta_head + (long long)n * (4 * C * (C / 2));
        for (int idx = tid; idx < 4 * C * (C / 8); idx += 128) {      // (array, row) x 4 quads
            const int ar = idx / (C / 8), qd = idx % (C / 8);
            cp_async16(dta + ar * LC + 4 * qd, src + ar * (C / 2) + 4 * qd);
        }
        TIn* dv = reinterpret_cast<TIn*>(slot(n) + L::TA_BYTES);
        constexpr int VE = 16 / sizeof(TIn), VQ = BV / VE;            // elements and pieces per v row
        for (int idx = tid; idx < C * VQ; idx += 128) {
            const int r = idx / VQ, qd = idx % VQ;
            const long long t = (long long)n * C + r;
            const TIn* src_v = v + kda_bthd(b, t < TT ? t : 0, h, v0 + qd * VE, TT, H, V);
            cp_async16_zfill(dv + r * LV + qd * VE, src_v, t < TT);
        }
        cp_async_commit();
    };
    TIn rbeta = TIn(0);
    auto load_beta = [&](int n) {
        const long long t = (long long)n * C + i;
        rbeta = t < TT ? beta[(b * TT + t) * H + h] : TIn(0);
    };
    copy_slot(0);
    cp_async_wait<0>();
    load_beta(0);
    named_bar_sync(BAR_CONS, 128);   // S^T and slot 0 complete

    // P1's A fragments: rows g8 = Kbg of token i, g8 + 8 = Qg of token i; k step s = channels 16s ..
    unsigned ah[KS][4], al[KS][4];
    auto build = [&](int n) {
        const float* kb = kb_of(n) + i * LE;
        const float* qg = qg_of(n) + i * LE;
#pragma unroll
        for (int s = 0; s < KS; ++s)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int cc = 16 * s + 8 * hf + 2 * t4;
                const float2 kk = *reinterpret_cast<const float2*>(kb + cc);
                const float2 qq = *reinterpret_cast<const float2*>(qg + cc);
                split_bf16x2(kk.x, kk.y, ah[s][2 * hf], al[s][2 * hf]);
                split_bf16x2(qq.x, qq.y, ah[s][2 * hf + 1], al[s][2 * hf + 1]);
            }
    };
    named_bar_sync(BAR_FULL + 0, L::NTH);
    build(0);
    for (int n = 0; n < NC; ++n) {
        const long long t0 = (long long)n * C;
        KDA_STAMP(0);
        if (n + 1 < NC && KDA_PROBE != 4) copy_slot(n + 1);   // lands during this chunk; waited before its last barrier
        const float beta_i = kda_widen1<BF>(rbeta);
        if (n + 1 < NC) load_beta(n + 1);
        {   // the state's decay for this chunk's update (S went to S^T before it)
            const float* dd = gl_of(n);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const float d0 = dd[64 * mt + 16 * warp + g8], d1 = dd[64 * mt + 16 * warp + g8 + 8];
#pragma unroll
                for (int j = 0; j < NJ; ++j) {
                    sacc[mt][4 * j] *= d0; sacc[mt][4 * j + 1] *= d0;
                    sacc[mt][4 * j + 2] *= d1; sacc[mt][4 * j + 3] *= d1;
                }
            }
        }
        // ------------------------------------------------ P1: [Kbg S; Ob] = [Kbg; Qg] S
        float p1[BV / 2];
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < KS; ++s) {
            const unsigned off = (s / 4) * (BV * 128) + 32 * (s % 4);
            wgmma_rs_kb<BV, true>(p1, al[s], desc(sth_a + off), s > 0);
            wgmma_rs_kb<BV, true>(p1, ah[s], desc(stl_a + off), 1);
            wgmma_rs_kb<BV, true>(p1, ah[s], desc(sth_a + off), 1);
        }
        wgmma_commit();
        // while P1 runs: this chunk's P2 A rows (warp's tokens: T rows at g8, A2 rows at g8 + 8)
        unsigned ta[2][2][4];   // [hi/lo][k step][a0..a3]
        {
            const unsigned* sta = reinterpret_cast<const unsigned*>(slot(n));
            const int mi = lane / 8, r = lane % 8;      // matrix mi: T (even) or A2 (odd), words 0-3 or 4-7
#pragma unroll
            for (int hl = 0; hl < 2; ++hl)
#pragma unroll
                for (int s = 0; s < 2; ++s)
                    ldmatrix_x4(ta[hl][s], sta + ((mi & 1) * 2 + hl) * C * LC + (8 * warp + r) * LC + 8 * s + (mi / 2) * 4);
        }
        wgmma_wait<0>();
        fence_regs(p1);
        KDA_STAMP(1);
        // X = beta v - Kbg S (rows g8: token i), Ob = Qg S (rows g8 + 8)
        float x[BV / 4], ob[BV / 4];
        {
            const TIn* sv = reinterpret_cast<const TIn*>(slot(n) + L::TA_BYTES) + i * LV;
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                const float2 vv = kda_ld2<BF>(sv + 8 * j + 2 * t4);
                x[2 * j] = beta_i * vv.x - p1[4 * j];
                x[2 * j + 1] = beta_i * vv.y - p1[4 * j + 1];
                ob[2 * j] = p1[4 * j + 2];
                ob[2 * j + 1] = p1[4 * j + 3];
            }
        }
        write_tok_t(sx_a, x);
        fence_proxy_async();
        named_bar_sync(BAR_CONS, 128);
        KDA_STAMP(2);
        // ------------------------------------------------ P2: [V'; A2 X] = [T; A2] X
        float p2[BV / 2];
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            wgmma_rs_kb<BV, true>(p2, ta[1][s], desc(sx_a + 32 * s), s > 0);
            wgmma_rs_kb<BV, true>(p2, ta[0][s], desc(sx_a + 64 + 32 * s), 1);
            wgmma_rs_kb<BV, true>(p2, ta[0][s], desc(sx_a + 32 * s), 1);
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(p2);
        KDA_STAMP(3);
        // o = Ob + A2 X (rows g8 + 8); V' (rows g8) to V'^T
        float vp[BV / 4];
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            const long long t = t0 + i;
            if (t < TT)
                kda_st2<BF>(o + kda_bthd(b, t, h, v0 + 8 * j + 2 * t4, TT, H, V), ob[2 * j] + p2[4 * j + 2],
                            ob[2 * j + 1] + p2[4 * j + 3]);
            vp[2 * j] = p2[4 * j];
            vp[2 * j + 1] = p2[4 * j + 1];
        }
        write_tok_t(svp_a, vp);
        fence_proxy_async();
        named_bar_sync(BAR_CONS, 128);
        KDA_STAMP(4);
        // ------------------------------------------------ P4: S = 2^G_L S + Kd^T V'
        const unsigned kd_a = base + opb(n);
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < 2; ++s)
#pragma unroll
            for (int term = 0; term < 3; ++term)
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {   // the m64 tiles' chains interleaved
                    const unsigned a = kd_a + mt * 8192 + 32 * s + (term == 0 ? 64 : 0);
                    const unsigned bb = svp_a + 32 * s + (term == 1 ? 64 : 0);
                    wgmma_ss<BV, true>(sacc[mt], desc(a), desc(bb), 1);
                }
        wgmma_commit();
        // while P4 runs: the next chunk's P1 operands (its buffer)
        if (n + 1 < NC) {
            named_bar_sync(BAR_FULL + ((n + 1) & 1), L::NTH);
            build(n + 1);
        }
        KDA_STAMP(5);
        wgmma_wait<0>();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) fence_regs(sacc[mt]);
        KDA_STAMP(6);
        if (n + 2 < NC) named_bar_arrive(BAR_EMPTY + (n & 1), L::NTH);   // buffer n & 1 is free
        if (n + 1 < NC) {
            write_st();
            fence_proxy_async();
            cp_async_wait<0>();              // slot (n + 1) & 1
            named_bar_sync(BAR_CONS, 128);
        }
        KDA_STAMP(7);
    }
    if (KDA_PROBE == 3) return;   // the stamps live where ht would be written
    if (ht) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                const int r0 = 64 * mt + 16 * warp + g8, col = v0 + 8 * j + 2 * t4;
                *reinterpret_cast<float2*>(ht + (bh * K + r0) * V + col) = make_float2(sacc[mt][4 * j], sacc[mt][4 * j + 1]);
                *reinterpret_cast<float2*>(ht + (bh * K + r0 + 8) * V + col) =
                    make_float2(sacc[mt][4 * j + 2], sacc[mt][4 * j + 3]);
            }
    }
}
