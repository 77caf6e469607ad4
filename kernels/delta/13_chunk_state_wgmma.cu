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
// NST = 2 (impl "wgmma2", the bf16-I/O path only: two fp32 tiles do not fit beside the rest) stages
// chunk n + 2 while chunk n is read, so a copy has two chunk periods to land instead of one (notebook
// 13's clock stamps of 13 have WG_E waiting ~2/3 of each period for a copy issued a period earlier).
//
// With BF (issue 13's bf16-I/O path) q, k, v, g, beta are bf16 in memory, widened as used, and o
// is rounded to bf16; products, state and the initial and final states stay as on the fp32 path.
//
// Requires sm_90a (wgmma, stmatrix; built with attnlab.compile.load_kernel(..., arch="sm_90a")).
#include "wgmma_recurrence.cuh"   // KdaWgLayout, the chain (WG_C) and WG_E's arithmetic, shared with 14

// Probe builds (scripts/probe_delta_recurrence.py; results meaningless): KDA_PROBE=4 copies no
// inputs after chunk 0 (both warpgroups reuse chunk 0's staged q, k, g, T, A2 and v): the period
// without global input traffic; KDA_PROBE=5 idles WG_E's arithmetic (it only hands buffers over):
// WG_C's chain alone. KDA_PROBE=3: clock stamps (delta_common.cuh).
// Named barriers: KdaWgBars (wgmma_recurrence.cuh).

template <int K, int V, int C, int BV, bool BF = false, int NST = 1>   // BF: q, k, v, g, beta and o in bf16
__global__ void __launch_bounds__(256, 1)                               // NST: staging tiles
kda_chunk_state_wgmma(const typename KdaIn<BF>::T* __restrict__ q, const typename KdaIn<BF>::T* __restrict__ k,
                      const typename KdaIn<BF>::T* __restrict__ v, const typename KdaIn<BF>::T* __restrict__ g,
                      const typename KdaIn<BF>::T* __restrict__ beta,
                      const unsigned* __restrict__ TA,          // [B, H, NC, 4, C, C/2] from 07<A2>: T, A2 = Aqk T
                      const float* __restrict__ h0,             // [B,H,K,V] fp32, or nullptr
                      typename KdaIn<BF>::T* __restrict__ o,    // [B,T,H,V]
                      float* __restrict__ ht,                   // [B,H,K,V] fp32, or nullptr
                      int T, int H, float scale) {
    using L = KdaWgLayout<K, V, C, BV, BF, 0, NST>;
    using TIn = typename KdaIn<BF>::T;
    static_assert(C == 32, "07 hands over T and Aqk T for chunks of 32");
    static_assert(NST == 1 || NST == 2, "one or two staging tiles");
    static_assert((K == 64 || K == 128) && (BV == 16 || BV == 32) && V % BV == 0, "K in {64,128}, BV in {16,32}");
    constexpr int BAR_PROD = KdaWgBars::PROD, BAR_FULL = KdaWgBars::FULL, BAR_EMPTY = KdaWgBars::EMPTY;

    KDA_DYNAMIC_SHARED(smem_f);
    const KdaWgCtx<L> cx = kda_wg_ctx<L>(smem_f, T, H);
    const int warp = cx.warp, lane = cx.lane, h = cx.h, b = cx.b, NC = cx.NC;
    const long long TT = cx.TT, stamp0_ = cx.stamp0_;
    (void)stamp0_;

    if (warp >= 4) {
        // ====================================================== WG_E: element-wise operands, a chunk ahead
        constexpr int TPT = C / L::TPC;                  // tokens per thread
        const int e = cx.tid - 128, c = e % K, part = e / K, tok0 = part * TPT;
        // g, k, q of the next chunk stream into the staging tile by cp.async (coalesced 16-byte pieces of
        // token rows) while this chunk is computed: no registers wait on global memory
        TIn* const stg0 = reinterpret_cast<TIn*>(cx.sm + L::OFF_STG);
        auto stage = [&](int n) { return stg0 + (n % NST) * (3 * C * K); };   // the tile of chunk n
        constexpr int PR = K * (int)sizeof(TIn) / 16;               // 16-byte pieces per token row
        auto copy_in = [&](int n) {
            TIn* const stg = stage(n);
            for (int idx = e; idx < 3 * C * PR; idx += 128) {
                const int ar = idx / (C * PR), r = (idx / PR) % C, pc = idx % PR;
                const long long t = (long long)n * C + r;
                const TIn* src = (ar == 0 ? g : ar == 1 ? k : q) + kda_bthd(b, t < TT ? t : 0, h, 0, TT, H, K);
                cp_async16_zfill(stg + (ar * C + r) * K + pc * (16 / (int)sizeof(TIn)),
                                 src + pc * (16 / (int)sizeof(TIn)), t < TT);
            }
            cp_async_commit();
        };
        auto beta_of = [&](int n) {   // beta of token `lane` of chunk n
            const long long t = (long long)n * C + lane;
            return t < TT ? beta[(b * TT + t) * H + h] : TIn(0);
        };
        TIn xb = TIn(0), xb_next = TIn(0);   // of the chunk read next (and, with NST = 2, of the one after)
        copy_in(0);
        xb = beta_of(0);
        if (NST == 2 && NC > 1) { copy_in(1); xb_next = beta_of(1); }
        for (int n = 0; n < NC; ++n) {
            KDA_STAMP(0);
            if (NST == 2 && n + 1 < NC) cp_async_wait<1>();          // chunk n landed (n + 1 may be in flight)
            else cp_async_wait<0>();
            named_bar_sync(BAR_PROD, 128);                            // chunk n staged by all of WG_E
            const TIn* const stg = stage(n);
            TIn xg[TPT], xk[TPT], xq[TPT];
#pragma unroll
            for (int u = 0; u < TPT; ++u) {
                xg[u] = stg[(0 * C + tok0 + u) * K + c];
                xk[u] = stg[(1 * C + tok0 + u) * K + c];
                xq[u] = stg[(2 * C + tok0 + u) * K + c];
            }
            const float bl = kda_widen1<BF>(xb);
            named_bar_sync(BAR_PROD, 128);                            // everyone has read the tile
            if (NST == 1 && n + 1 < NC && KDA_PROBE != 4) { copy_in(n + 1); xb = beta_of(n + 1); }
            if (NST == 2 && KDA_PROBE != 4) {
                xb = xb_next;
                if (n + 2 < NC) { copy_in(n + 2); xb_next = beta_of(n + 2); }
            }
            if (n >= 2) named_bar_sync(BAR_EMPTY + (n & 1), L::NTH);   // WG_C is done with chunk n - 2
            KDA_STAMP(1);
            if (KDA_PROBE == 5) {   // probe: WG_E's arithmetic idle, its hand-over kept
                named_bar_arrive(BAR_FULL + (n & 1), L::NTH);
                continue;
            }
            kda_wg_operands<L, TPT>(cx, n, xg, xk, xq, bl, scale, ht);
        }
        return;
    }
    // ========================================================== WG_C: the chain of products
    kda_wg_chain<L>(cx, v, beta, TA, h0, o, ht);
}
