// 16 — chunked KDA, the wgmma chain turned around: the state stays in the chain warpgroup's
// accumulators as S^T and every product takes its A operand from registers.
//
// What changed from 15, and why. Notebook 13's recorded stamps of 15 put about a third of WG_C's
// chunk period outside its products: S^T, X^T and V'^T go from accumulators to shared memory
// (stmatrix, a proxy fence, a warpgroup barrier) so that the next product can read them as its B
// operand, and P1's A fragments are rebuilt from fp32 Kbg / Qg rows each chunk. Written the other way
// round (12's transposed products, on warpgroup MMAs), each product's result is the next one's A
// operand in registers, as flash attention keeps P:
//   P1^T = S^T [Kg^T | Qg^T]            (BV x 2C; A = S^T split hi / lo, B MN-major: WG_E's rows)
//   X^T  = beta (v^T - (Kg S)^T)         (in registers; v and beta loaded from global a chunk ahead)
//   P2^T = X^T [T^T | A2^T]              (BV x 2C; B K-major: 07's rows of T and A2 as they are)
//   o^T  = (Qg S)^T + (A2 X)^T           (stored from registers)
//   S^T  = S^T 2^G_L + V'^T Kd           (BV x K; A = V'^T, B K-major: WG_E's Kd^T rows)
// with V' = T X. Nothing of the chain goes through shared memory and WG_C needs one barrier per chunk
// (its copy slot). The accumulator's rows are value columns, so the block holds BV = 64 of them (the
// wgmma's M): V / 64 blocks per head, half as many as 15's, each doing the element-wise work (WG_E)
// once for twice the columns. 3xBF16 as before: three wgmmas per product and k step.
// WG_E is 15's arithmetic (one exp2 per element, running products, no beta) writing each thread's
// channel as rows of 16-byte stores: Kg^T and Qg^T side by side (a row of 2C tokens, hi and lo tiles),
// Kd^T as 15 writes it, 2^G_L.
// 07's T / A2 words land by four tensor copies per chunk (boxes of C rows, the 64-byte swizzle), in
// the order T hi, A2 hi, T lo, A2 lo, so that [T; A2] is one B operand of 2C rows per half.
// The price: each chunk's products are twice as wide per block (N = 2C and K instead of 15's BV = 32
// columns) on half as many SMs, so the trade pays only if the chain's time is its latency rather than
// the tensor pipe's throughput. Notebook 13 times it beside 15; its stamps (WG_C 0-4 below) say how long
// each product takes.
//
// Launch: grid (V / 64, H, B), 256 threads (warps 0-3 WG_C, 4-7 WG_E), KdaRsLayout::SMEM_BYTES of
// dynamic shared memory; tensor maps of g, k, q (as 14's) and of 07's output as rows of C/2 words in
// boxes of C rows with the 64-byte swizzle. Requires sm_90a. KDA_PROBE=3: clock stamps; KDA_PROBE=5:
// WG_E's arithmetic idle (the chain alone).
#include "wgmma_recurrence.cuh"

#ifndef KDA_RS_VPIN
#define KDA_RS_VPIN 0   // probe builds of WG_C's v and beta loads (scripts/ncu_source.py put 16's largest stall on a copy
#endif                  // of them before P2, waiting for the loads issued during P1): 1, the copies pinned after P4's
                        // issue (results 16's; no faster); 2, no loads after chunk 0 (results meaningless; far faster:
                        // the chain waits on the loads themselves, a cost a copy through shared memory would not have)
static_assert(KDA_RS_VPIN >= 0 && KDA_RS_VPIN <= 2, "KDA_RS_VPIN: 0 (as built), 1 or 2 (probes)");

template <int K_, int V_, int C_, bool BF_>
struct KdaRsLayout {
    static constexpr int K = K_, V = V_, C = C_, BV = 64;
    static constexpr bool BF = BF_;
    static constexpr int NTH = 256;
    static constexpr int TPC = 128 / K;                  // WG_E threads per channel (1 or 2)
    static constexpr int ESZ = BF ? 2 : 4;
    static constexpr int B1_BYTES = K * 128;             // [Kg^T | Qg^T], hi or lo: K rows of 2C tokens
    static constexpr int KD_BYTES = K * 128;             // Kd^T [K][hi | lo]
    static constexpr int OFF_B1 = 0;                     // two buffers of (hi, lo)
    static constexpr int OFF_KD = OFF_B1 + 4 * B1_BYTES; // two buffers
    static constexpr int OFF_GL = OFF_KD + 2 * KD_BYTES; // 2^G_L [2][K]
    static constexpr int OFF_TOT = OFF_GL + 2 * K * 4;   // WG_E's half products [2][K] (K = 64)
    static constexpr int SLOT_BYTES = 4 * C * (C / 2) * 4;   // T hi, A2 hi, T lo, A2 lo: C rows of C/2 words each
    static constexpr int OFF_SLOT = ((OFF_TOT + 2 * K * 4 + 1023) / 1024) * 1024;
    static constexpr int OFF_STG = OFF_SLOT + 2 * SLOT_BYTES;   // WG_E's tile: g, k, q [C][K] as stored
    static constexpr int STG_BYTES = 3 * C * K * ESZ;
    static constexpr int OFF_MBAR = OFF_STG + STG_BYTES;        // the tile's and the two slots' mbarriers
    static constexpr int BYTES = OFF_MBAR + 24;
    static constexpr int SMEM_BYTES = BYTES + 1024;
    static_assert(C == 32, "07 hands over T and Aqk T for chunks of 32");
    static_assert((K == 64 || K == 128) && V % BV == 0, "K in {64, 128}, V a multiple of 64");
    static_assert(SMEM_BYTES <= 227 * 1024, "the block's shared memory");
};

template <int K, int V, int C, int BV, bool BF = false>
__global__ void __launch_bounds__(256, 1)
kda_chunk_state_wgrs(const typename KdaIn<BF>::T* __restrict__ q, const typename KdaIn<BF>::T* __restrict__ k,
                     const typename KdaIn<BF>::T* __restrict__ v, const typename KdaIn<BF>::T* __restrict__ g,
                     const typename KdaIn<BF>::T* __restrict__ beta,
                     const unsigned* __restrict__ TA,          // [B, H, NC, 4, C, C/2] from 07<A2>: T, A2 = Aqk T
                     const float* __restrict__ h0, typename KdaIn<BF>::T* __restrict__ o, float* __restrict__ ht,
                     int T, int H, float scale,
                     const __grid_constant__ TmaMap tg, const __grid_constant__ TmaMap tk,
                     const __grid_constant__ TmaMap tq,      // g, k, q as (K, H, T, B), boxes of (K, 1, C, 1)
                     const __grid_constant__ TmaMap tta) {   // 07's output as rows of C/2 words, boxes of C rows
    static_assert(BV == 64, "the chain's accumulator rows are the block's 64 value columns");
    using L = KdaRsLayout<K, V, C, BF>;
    using TIn = typename KdaIn<BF>::T;
    constexpr int BAR_CONS = KdaWgBars::CONS, BAR_PROD = KdaWgBars::PROD, BAR_FULL = KdaWgBars::FULL,
                  BAR_EMPTY = KdaWgBars::EMPTY;
    KDA_DYNAMIC_SHARED(smem_f);
    if (kda_dynamic_smem_size() < (unsigned)L::SMEM_BYTES) __trap();
    const unsigned raw_base = smem_u32(smem_f), base = (raw_base + 1023u) & ~1023u;
    unsigned char* const sm = reinterpret_cast<unsigned char*>(smem_f) + (base - raw_base);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int v0 = blockIdx.x * BV, h = blockIdx.y, b = blockIdx.z;
    const long long TT = T, bh = (long long)b * H + h;
    const int NC = (T + C - 1) / C;
    long long stamp0_ = 0;
#if KDA_PROBE == 3
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(stamp0_));
#endif
    (void)stamp0_;
    const unsigned full_t = base + L::OFF_MBAR, slot_bar = full_t + 8;
    float* const glb = reinterpret_cast<float*>(sm + L::OFF_GL);
    if (tid == 0) {
        mbar_init(full_t, 1);
        mbar_init(slot_bar, 1);
        mbar_init(slot_bar + 8, 1);
        mbar_init_fence();
    }
    __syncthreads();

    if (warp >= 4) {
        // ====================================================== WG_E: 15's arithmetic, rows for the chain's B operands
        constexpr int TPT = C / L::TPC;
        const int e = tid - 128, c = e % K, part = e / K, tok0 = part * TPT;
        const TIn* const stg = reinterpret_cast<const TIn*>(sm + L::OFF_STG);
        float* const sTot = reinterpret_cast<float*>(sm + L::OFF_TOT);
        constexpr unsigned ROW = K * sizeof(TIn), TILE = 3 * C * ROW;
        const TmaMap* maps[3] = {&tg, &tk, &tq};
        auto copy_in = [&](int n) {   // one thread: chunk n's g, k, q as three tensor copies
            if (e != 0) return;
            mbar_arrive_expect_tx(full_t, TILE);
            for (int ar = 0; ar < 3; ++ar) tma_load_4d(base + L::OFF_STG + ar * C * ROW, maps[ar], 0, h, n * C, b, full_t);
        };
        copy_in(0);
        for (int n = 0; n < NC; ++n) {
            KDA_STAMP(0);
            mbar_wait(full_t, n & 1);
            float xg[TPT], xk[TPT], xq[TPT];
#pragma unroll
            for (int u = 0; u < TPT; ++u) {   // rows past T landed as zeros
                xg[u] = kda_widen1<BF>(stg[(0 * C + tok0 + u) * K + c]);
                xk[u] = kda_widen1<BF>(stg[(1 * C + tok0 + u) * K + c]);
                xq[u] = kda_widen1<BF>(stg[(2 * C + tok0 + u) * K + c]);
            }
            fence_proxy_async();             // the loads above before the copy engine refills the tile (14's
            named_bar_sync(BAR_PROD, 128);   // kda_mc_body says why); everyone here has read the tile
            if (n + 1 < NC) copy_in(n + 1);
            if (n >= 2) named_bar_sync(BAR_EMPTY + (n & 1), L::NTH);   // WG_C is done with chunk n - 2
            KDA_STAMP(1);
            if (KDA_PROBE == 5) {   // probe: WG_E's arithmetic idle, its hand-over kept
                named_bar_arrive(BAR_FULL + (n & 1), L::NTH);
                continue;
            }
            // one exp2 per element; 2^G and 2^(G_L - G) as running products forward and backward
            float xe[TPT], e1[TPT], ed[TPT];
#pragma unroll
            for (int u = 0; u < TPT; ++u) xe[u] = fast_exp2(xg[u] * KDA_LOG2E);
            float run = 1.f;
#pragma unroll
            for (int u = 0; u < TPT; ++u) { run *= xe[u]; e1[u] = run; }
            float pre = 1.f, suf = 1.f, gl2 = run;
            if constexpr (L::TPC == 2) {   // K = 64: two threads per channel, 16 tokens each
                sTot[part * K + c] = run;
                named_bar_sync(BAR_PROD, 128);
                pre = part ? sTot[c] : 1.f;
                suf = part ? 1.f : sTot[K + c];
                gl2 = sTot[c] * sTot[K + c];
                named_bar_sync(BAR_PROD, 128);
            }
#pragma unroll
            for (int u = TPT - 1; u >= 0; --u) { ed[u] = suf; suf *= xe[u]; }
            unsigned kgh[TPT / 2], kgl[TPT / 2], qgh[TPT / 2], qgl[TPT / 2], kdh[TPT / 2], kdl[TPT / 2];
#pragma unroll
            for (int u = 0; u < TPT; u += 2) {
                const float a0 = e1[u] * pre, a1 = e1[u + 1] * pre;
                split_bf16x2(xk[u] * a0, xk[u + 1] * a1, kgh[u / 2], kgl[u / 2]);
                split_bf16x2(scale * xq[u] * a0, scale * xq[u + 1] * a1, qgh[u / 2], qgl[u / 2]);
                split_bf16x2(xk[u] * ed[u], xk[u + 1] * ed[u + 1], kdh[u / 2], kdl[u / 2]);
            }
            // row c of [Kg^T | Qg^T] (MN-major B: 2C tokens, Kg in 16-byte chunks 0-3, Qg in 4-7) and of Kd^T
            // (K-major B: hi in chunks 0-3, lo in 4-7), both in the 128-byte swizzle
            const unsigned b1h = base + L::OFF_B1 + (n & 1) * 2 * L::B1_BYTES, b1l = b1h + L::B1_BYTES;
            const unsigned kd = base + L::OFF_KD + (n & 1) * L::KD_BYTES;
            auto st_shared_v4 = [&](unsigned addr, unsigned x0, unsigned x1, unsigned x2, unsigned x3) {
                *reinterpret_cast<U4*>(sm + (addr - base)) = U4{x0, x1, x2, x3};
            };
#pragma unroll
            for (int qd = 0; qd < TPT / 8; ++qd) {
                const int ch = tok0 / 8 + qd;
                st_shared_v4(kda_sw128(b1h, c, ch), kgh[4 * qd], kgh[4 * qd + 1], kgh[4 * qd + 2], kgh[4 * qd + 3]);
                st_shared_v4(kda_sw128(b1l, c, ch), kgl[4 * qd], kgl[4 * qd + 1], kgl[4 * qd + 2], kgl[4 * qd + 3]);
                st_shared_v4(kda_sw128(b1h, c, 4 + ch), qgh[4 * qd], qgh[4 * qd + 1], qgh[4 * qd + 2], qgh[4 * qd + 3]);
                st_shared_v4(kda_sw128(b1l, c, 4 + ch), qgl[4 * qd], qgl[4 * qd + 1], qgl[4 * qd + 2], qgl[4 * qd + 3]);
                st_shared_v4(kda_sw128(kd, c, ch), kdh[4 * qd], kdh[4 * qd + 1], kdh[4 * qd + 2], kdh[4 * qd + 3]);
                st_shared_v4(kda_sw128(kd, c, 4 + ch), kdl[4 * qd], kdl[4 * qd + 1], kdl[4 * qd + 2], kdl[4 * qd + 3]);
            }
            if (part == 0) glb[(n & 1) * K + c] = gl2;
            KDA_STAMP(2);
            fence_proxy_async();                               // the rows are read by wgmma
            named_bar_arrive(BAR_FULL + (n & 1), L::NTH);      // buffer n & 1 holds chunk n
            KDA_STAMP(3);
        }
        return;
    }

    // ====================================================== WG_C: the chain, S^T in the accumulators
    constexpr int NJ = K / 8, KS = K / 16;
    const int g8 = lane / 4, t4 = lane % 4;
    // sacc[4j + r]: S^T row (value column) 16 warp + g8 + 8 (r / 2), column (channel) 8j + 2 t4 + r % 2
    float sacc[K / 2];
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r)
            sacc[4 * j + r] = h0 ? h0[(bh * K + 8 * j + 2 * t4 + r % 2) * V + v0 + 16 * warp + g8 + 8 * (r / 2)] : 0.f;
    // chunk n + 1's T / A2 rows into slot (n + 1) & 1: T hi, A2 hi, T lo, A2 lo (07 stores T hi, T lo, A2 hi, A2 lo)
    auto slot = [&](int n) { return base + L::OFF_SLOT + (n & 1) * L::SLOT_BYTES; };
    auto copy_slot = [&](int n) {
        if (tid != 0) return;
        const unsigned bar = slot_bar + 8 * (n & 1);
        mbar_arrive_expect_tx(bar, L::SLOT_BYTES);
        const int row0 = (int)((bh * NC + n) * 4 * C);
#pragma unroll
        for (int a = 0; a < 4; ++a)
            tma_load_4d(slot(n) + ((a & 1) * 2 + (a >> 1)) * (C * (C / 2) * 4), &tta, 0, 0, row0 + a * C, 0, bar);
    };
    // this thread's v (token 8j + 2 t4 + r % 2, value column 16 warp + g8 + 8 (r / 2)) and beta of a chunk
    float vc[16], bc[8], vn[16] = {}, bn[8] = {};
    auto load_vb = [&](int n, float (&vv)[16], float (&bb)[8]) {
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const long long t = (long long)n * C + 8 * j + 2 * t4 + r % 2;
                vv[4 * j + r] = t < TT ? kda_ld1<BF>(v + kda_bthd(b, t, h, v0 + 16 * warp + g8 + 8 * (r / 2), TT, H, V)) : 0.f;
                if (r < 2) bb[2 * j + r] = t < TT ? kda_widen1<BF>(beta[(b * TT + t) * H + h]) : 0.f;
            }
    };
    auto dmn = [](unsigned addr) { return wgmma_desc_sw128(addr, 8192, 1024); };   // MN-major B (one 64-wide N chunk)
    auto dk128 = [](unsigned addr) { return wgmma_desc_sw128(addr, 16, 1024); };   // K-major B, 128-byte swizzle
    auto dk64 = [](unsigned addr) { return wgmma_desc_sw64(addr, 512); };          // K-major B, 64-byte swizzle
    copy_slot(0);
    load_vb(0, vc, bc);
    for (int n = 0; n < NC; ++n) {
        KDA_STAMP(0);
        named_bar_sync(BAR_CONS, 128);   // every warp here is past chunk n - 1's P2: slot (n + 1) & 1 is free
        if (n + 1 < NC) copy_slot(n + 1);
        named_bar_sync(BAR_FULL + (n & 1), L::NTH);   // WG_E's rows of chunk n
        KDA_STAMP(1);
        // ------------------------------------------------ P1^T = S^T [Kg^T | Qg^T]
        unsigned ah[KS][4], al[KS][4];
#pragma unroll
        for (int s = 0; s < KS; ++s)
#pragma unroll
            for (int i = 0; i < 4; ++i) split_bf16x2(sacc[8 * s + 2 * i], sacc[8 * s + 2 * i + 1], ah[s][i], al[s][i]);
        const unsigned b1h = base + L::OFF_B1 + (n & 1) * 2 * L::B1_BYTES, b1l = b1h + L::B1_BYTES;
        float p1[32];
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < KS; ++s) {
            wgmma_rs<64, true>(p1, al[s], dmn(b1h + s * 2048), s > 0);
            wgmma_rs<64, true>(p1, ah[s], dmn(b1l + s * 2048), 1);
            wgmma_rs<64, true>(p1, ah[s], dmn(b1h + s * 2048), 1);
        }
        wgmma_commit();
        {   // while P1 runs: the state's decay for this chunk's update, S^T 2^G_L
            const float* gl = glb + (n & 1) * K;
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                const float2 d = *reinterpret_cast<const float2*>(gl + 8 * j + 2 * t4);
                sacc[4 * j] *= d.x; sacc[4 * j + 1] *= d.y; sacc[4 * j + 2] *= d.x; sacc[4 * j + 3] *= d.y;
            }
        }
        if (n + 1 < NC && KDA_RS_VPIN != 2) load_vb(n + 1, vn, bn);   // (probe 2: chunk 0's v and beta throughout)
        wgmma_wait<0>();
        fence_regs(p1);
        KDA_STAMP(2);
        // ------------------------------------------------ X^T = beta (v^T - (Kg S)^T); P2^T = X^T [T^T | A2^T]
        unsigned xh[2][4], xl[2][4];
#pragma unroll
        for (int s = 0; s < 2; ++s)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int e0 = 8 * s + 2 * i;   // elements e0, e0 + 1: tokens of column group e0 / 4
                split_bf16x2(bc[2 * (e0 / 4)] * (vc[e0] - p1[e0]), bc[2 * (e0 / 4) + 1] * (vc[e0 + 1] - p1[e0 + 1]),
                             xh[s][i], xl[s][i]);
            }
        mbar_wait(slot_bar + 8 * (n & 1), (n >> 1) & 1);   // chunk n's T / A2 rows have landed
        const unsigned sl = slot(n);                         // [T; A2] hi at +0, lo at + SLOT_BYTES / 2
        float p2[32];
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            wgmma_rs_kb<64, true>(p2, xl[s], dk64(sl + 32 * s), s > 0);
            wgmma_rs_kb<64, true>(p2, xh[s], dk64(sl + L::SLOT_BYTES / 2 + 32 * s), 1);
            wgmma_rs_kb<64, true>(p2, xh[s], dk64(sl + 32 * s), 1);
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(p2);
        KDA_STAMP(3);
        // ------------------------------------------------ S^T = S^T 2^G_L + V'^T Kd
        unsigned vh[2][4], vl[2][4];
#pragma unroll
        for (int s = 0; s < 2; ++s)
#pragma unroll
            for (int i = 0; i < 4; ++i) split_bf16x2(p2[8 * s + 2 * i], p2[8 * s + 2 * i + 1], vh[s][i], vl[s][i]);
        const unsigned kd = base + L::OFF_KD + (n & 1) * L::KD_BYTES;
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            wgmma_rs_kb<K, true>(sacc, vl[s], dk128(kd + 32 * s), 1);
            wgmma_rs_kb<K, true>(sacc, vh[s], dk128(kd + 64 + 32 * s), 1);
            wgmma_rs_kb<K, true>(sacc, vh[s], dk128(kd + 32 * s), 1);
        }
        wgmma_commit();
        // while P4 runs: o = Qg S + A2 X (columns 32.. of P1^T and P2^T), the next chunk's v and beta
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const long long t = (long long)n * C + 8 * j + 2 * t4 + r % 2;
                if (t < TT) kda_st1<BF>(o + kda_bthd(b, t, h, v0 + 16 * warp + g8 + 8 * (r / 2), TT, H, V),
                                        p1[16 + 4 * j + r] + p2[16 + 4 * j + r]);
            }
#if KDA_RS_VPIN == 1   // probe: the next chunk's v and beta become this chunk's here, after P4's issue, not earlier
        fence_regs(vn);
        fence_regs(bn);
#endif
#pragma unroll
        for (int x = 0; x < 16; ++x) vc[x] = vn[x];
#pragma unroll
        for (int x = 0; x < 8; ++x) bc[x] = bn[x];
        wgmma_wait<0>();
        fence_regs(sacc);
        KDA_STAMP(4);
        if (n + 2 < NC) named_bar_arrive(BAR_EMPTY + (n & 1), L::NTH);   // buffer n & 1 is free
    }
    if (KDA_PROBE == 3) return;   // the stamps live where ht would be written
    if (ht) {
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r)
                ht[(bh * K + 8 * j + 2 * t4 + r % 2) * V + v0 + 16 * warp + g8 + 8 * (r / 2)] = sacc[4 * j + r];
    }
}
