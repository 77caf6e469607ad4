// 20 — chunked KDA: 19's recurrence with the element-wise warpgroup's work shared by a cluster: the
// head's value blocks, K / 32 of them, each compute 32 channels of every chunk's operands and store
// them into every block's tiles (distributed shared memory, 16-byte stores).
//
// What changed from 19, and why. Every value block of a head runs the same element-wise work: the
// chunk's gates, 2^G, Kd^T, Kg, Qg for all K channels (WG_E, one channel a thread), four times over
// at K = V = 128 and 32 value columns a block. A probe of 19 (scripts/probe_delta_recurrence.py, not
// recorded) has the chain alone (KDA_PROBE=5) well below the recurrence with WG_E at work, and WG_E's
// own stamps longer than the chain's: the two warpgroups share each SM sub-partition's issue slots,
// and WG_E's stream is the longer one. The operands depend on the channel, not on the value
// columns, so here block r of a cluster of K / 32 (the cluster spans K / 32 of the head's value
// blocks; grid x = V / BV must be a multiple of it):
//  * copies channels 32r .. 32r + 31 of the chunk's g, k, q (tensor copies of 32-channel boxes: a
//    quarter of 19's at K = 128);
//  * computes them with four threads a channel, eight tokens each: 2^g, the running products within
//    the eight, and across the four by shuffles (2^G = the product before this thread's tokens times its
//    running product; 2^(G_L - G) likewise from the end);
//  * stores each of its rows of Kd^T and of the [Kg; Qg]^T tiles (hi, and lo with three-term
//    products) as one 16-byte piece per tile into every block of the cluster (st.shared::cluster),
//    and 2^G_L likewise;
//  * hands a buffer over on mbarriers that span the cluster: FULLC (in each block, one arrival from
//    every block's WG_E after its stores and a cluster-scope release) and EMPTYC (one arrival from
//    every block's WG_C once P4 has read the buffer) in place of 19's named barriers.
// WG_C is 19's, operation for operation. 11 shared 10's element-wise work in a cluster too and ran
// far slower (4-byte generic stores, a cluster barrier a chunk); this shares 19's bf16 tiles, whose
// rows a thread holds as whole 16-byte pieces, and lets each block run on as soon as its own buffer is
// full. The products of running products are 19's to rounding, not bit for bit (the CPU model
// checks against float64).
//
// Launch: grid (V / BV, H, B) in clusters of K / 32 along x, 256 threads, 19's dynamic shared memory;
// tensor maps of g, k, q in boxes of 32 channels, of v and 07's output as for 15. Requires sm_90a.
#include "14_chunk_state_multicast.cu"

template <int K, int V, int C, int BV, bool BF>
static __device__ __forceinline__ void
kda_share_body(const typename KdaIn<BF>::T* __restrict__ q, const typename KdaIn<BF>::T* __restrict__ k,
               const typename KdaIn<BF>::T* __restrict__ v, const typename KdaIn<BF>::T* __restrict__ g,
               const typename KdaIn<BF>::T* __restrict__ beta, const unsigned* __restrict__ TA,
               const float* __restrict__ h0, typename KdaIn<BF>::T* __restrict__ o, float* __restrict__ ht,
               int T, int H, float scale, const TmaMap* const* maps) {
    constexpr int CL = K / 32;
    using L = KdaWgLayout<K, V, C, BV, BF, 8, 1, true, 2, true, BF, false, true, true>;
    using TIn = typename KdaIn<BF>::T;
    static_assert(C == 32, "07 hands over T and Aqk T for chunks of 32: eight tokens a thread, four threads a channel");
    static_assert((K == 64 || K == 128) && (BV == 16 || BV == 32) && (V / BV) % CL == 0,
                  "K in {64, 128}, BV in {16, 32}, the head's value blocks a multiple of the cluster (K / 32)");
    constexpr int BAR_PROD = KdaWgBars::PROD;

    KDA_DYNAMIC_SHARED(smem_f);
    const KdaWgCtx<L> cx = kda_wg_ctx<L>(smem_f, T, H);
    const int warp = cx.warp, lane = cx.lane, h = cx.h, b = cx.b, NC = cx.NC;
    const long long TT = cx.TT, stamp0_ = cx.stamp0_;
    (void)stamp0_;
    const unsigned full_t = cx.base + L::OFF_MBAR;
    if (cx.tid == 0) {
        mbar_init(full_t, 1);          // the staging tile's copies
        mbar_init(full_t + 16, 1);     // WG_C's copy slots
        mbar_init(full_t + 24, 1);
        for (int j = 0; j < 2; ++j) {
            mbar_init(cx.base + L::OFF_FULLC + 8 * j, CL);    // one arrival from each block's WG_E
            mbar_init(cx.base + L::OFF_EMPTYC + 8 * j, CL);   // one from each block's WG_C
        }
        mbar_init_fence();
    }
    cluster_sync();   // every block's barriers exist before any remote arrival or store

    if (warp >= 4) {
        // ====================================================== WG_E: 32 channels of the operands, for the cluster
        const int e = cx.tid - 128, cl = e / 4, p = e % 4, tok0 = 8 * p;   // channel cl of this block's 32, tokens tok0 ..
        const unsigned rank = cluster_ctarank();
        const int c = 32 * (int)rank + cl;                                   // the channel
        const TIn* const stg = reinterpret_cast<const TIn*>(cx.sm + L::OFF_STG);
        constexpr unsigned ROW = 32 * sizeof(TIn), TILE = 3 * C * ROW;      // a token row of the box, the box
        auto copy_in = [&](int n) {   // thread 0: chunk n's boxes of 32 channels x C tokens of g, k, q
            mbar_arrive_expect_tx(full_t, TILE);
            for (int ar = 0; ar < 3; ++ar) tma_load_4d(cx.base + L::OFF_STG + ar * C * ROW, maps[ar], 32 * (int)rank, h, n * C, b, full_t);
        };
        TIn xb = TIn(0);
        (void)xb; (void)beta;
        if (e == 0) copy_in(0);
        for (int n = 0; n < NC; ++n) {
            KDA_STAMP(0);
            if (KDA_PROBE != 4 || n == 0) mbar_wait(full_t, n & 1);
            TIn xg[8], xk[8], xq[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const bool in = (long long)n * C + tok0 + u < TT;
                xg[u] = in ? stg[(0 * C + tok0 + u) * 32 + cl] : TIn(0);
                xk[u] = in ? stg[(1 * C + tok0 + u) * 32 + cl] : TIn(0);
                xq[u] = in ? stg[(2 * C + tok0 + u) * 32 + cl] : TIn(0);
            }
            named_bar_sync(BAR_PROD, 128);   // everyone here has read the tile
            if (n + 1 < NC && e == 0 && KDA_PROBE != 4) copy_in(n + 1);
            if (n >= 2) mbar_wait_cluster(cx.base + L::OFF_EMPTYC + 8 * (n & 1), ((n >> 1) - 1) & 1);   // chunk n - 2 read everywhere
            KDA_STAMP(1);
            if (KDA_PROBE != 5) {   // probe 5: WG_E's arithmetic idle, its hand-over kept
                // 2^g_u, the running products within the thread's eight tokens, then across the four threads
                float xe[8], e1[8], ed[8];
#pragma unroll
                for (int u = 0; u < 8; ++u) xe[u] = fast_exp2(kda_widen1<BF>(xg[u]) * KDA_LOG2E);
                float run = 1.f;
#pragma unroll
                for (int u = 0; u < 8; ++u) { run *= xe[u]; e1[u] = run; }
                float suf = 1.f;
#pragma unroll
                for (int u = 7; u >= 0; --u) { ed[u] = suf; suf *= xe[u]; }
                // inclusive products over the channel's four threads (lanes 4 cl' .. 4 cl' + 3), forward and backward
                float fw = run, bw = run;   // (every lane shuffles; each keeps what its position needs)
                const int l0 = lane & ~3;   // the channel's first lane
                float y = __shfl_sync(ATTNLAB_FULL_MASK, fw, p >= 1 ? lane - 1 : lane);
                if (p >= 1) fw *= y;
                y = __shfl_sync(ATTNLAB_FULL_MASK, fw, p >= 2 ? lane - 2 : lane);
                if (p >= 2) fw *= y;
                y = __shfl_sync(ATTNLAB_FULL_MASK, bw, p <= 2 ? lane + 1 : lane);
                if (p <= 2) bw *= y;
                y = __shfl_sync(ATTNLAB_FULL_MASK, bw, p <= 1 ? lane + 2 : lane);
                if (p <= 1) bw *= y;
                float pre = __shfl_sync(ATTNLAB_FULL_MASK, fw, p >= 1 ? lane - 1 : lane);    // the product before these tokens
                float post = __shfl_sync(ATTNLAB_FULL_MASK, bw, p <= 2 ? lane + 1 : lane);   // and after them
                if (p == 0) pre = 1.f;
                if (p == 3) post = 1.f;
                const float gl2 = __shfl_sync(ATTNLAB_FULL_MASK, fw, l0 + 3);   // 2^G_L: the channel's whole product
                unsigned kdh[4], kdl[4], kh[4], kl[4], qh[4], ql[4];
#pragma unroll
                for (int w = 0; w < 4; ++w) {
                    const int u = 2 * w;
                    const float k0 = kda_widen1<BF>(xk[u]), k1 = kda_widen1<BF>(xk[u + 1]);
                    const float a0 = e1[u] * pre, a1 = e1[u + 1] * pre;
                    const float d0 = k0 * (ed[u] * post), d1 = k1 * (ed[u + 1] * post);
                    const float g0 = k0 * a0, g1 = k1 * a1;
                    const float q0 = scale * kda_widen1<BF>(xq[u]) * a0, q1 = scale * kda_widen1<BF>(xq[u + 1]) * a1;
                    if constexpr (BF) {   // 17's one-term products: hi words only
                        kdh[w] = pack_bf16x2(d0, d1); kh[w] = pack_bf16x2(g0, g1); qh[w] = pack_bf16x2(q0, q1);
                        kdl[w] = kl[w] = ql[w] = 0u;
                    } else {
                        split_bf16x2(d0, d1, kdh[w], kdl[w]);
                        split_bf16x2(g0, g1, kh[w], kl[w]);
                        split_bf16x2(q0, q1, qh[w], ql[w]);
                    }
                }
                // into every block of the cluster: row c of Kd^T (16-byte piece p hi, 4 + p lo) and of the
                // [Kg; Qg]^T tiles (piece 2p Kg, 2p + 1 Qg: 19's layout), the pieces swizzled by c % 8
                const unsigned row = (c / 8) * 1024 + (c % 8) * 128, sw = c % 8;
                const unsigned kd_a = cx.base + cx.opb(n) + row, kq_a = cx.base + cx.kq_of(n) + row;
                const unsigned gl_a = smem_u32(cx.gl_of(n) + c);
#pragma unroll
                for (int r = 0; r < CL; ++r) {
                    st_cluster_v4(kd_a + ((p ^ sw) * 16), r, kdh[0], kdh[1], kdh[2], kdh[3]);
                    st_cluster_v4(kq_a + (((2 * p) ^ sw) * 16), r, kh[0], kh[1], kh[2], kh[3]);
                    st_cluster_v4(kq_a + (((2 * p + 1) ^ sw) * 16), r, qh[0], qh[1], qh[2], qh[3]);
                    if constexpr (!BF) {
                        st_cluster_v4(kd_a + (((4 + p) ^ sw) * 16), r, kdl[0], kdl[1], kdl[2], kdl[3]);
                        st_cluster_v4(kq_a + K * 128 + (((2 * p) ^ sw) * 16), r, kl[0], kl[1], kl[2], kl[3]);
                        st_cluster_v4(kq_a + K * 128 + (((2 * p + 1) ^ sw) * 16), r, ql[0], ql[1], ql[2], ql[3]);
                    }
                    if (p == 0) st_cluster_f32(gl_a, r, gl2);
                }
                fence_proxy_async_cluster();   // the wgmmas of every block read them
                fence_acq_rel_cluster();       // performed, cluster-wide, before this thread reaches the barrier
            }
            KDA_STAMP(2);
            named_bar_sync(BAR_PROD, 128);   // every thread's stores are out
            if (e < CL) mbar_arrive_cluster(cx.base + L::OFF_FULLC + 8 * (n & 1), (unsigned)e);   // block e: chunk n is in
            KDA_STAMP(3);
        }
    } else {
        // ====================================================== WG_C: 19's chain
        kda_wg_chain<L, 2>(cx, v, beta, TA, h0, o, ht, maps[3], maps[4]);
    }
    cluster_sync();   // no block leaves while a store or an arrival of its cluster may reach it
}

template <int K, int V, int C, int BV, bool BF = false>
__global__ void __cluster_dims__(K / 32, 1, 1) __launch_bounds__(256, 1)
kda_chunk_state_share(KDA_TMA_STATE_PARAMS) {
    KDA_TMA_MAPS;
    kda_share_body<K, V, C, BV, BF>(q, k, v, g, beta, TA, h0, o, ht, T, H, scale, maps);
}
