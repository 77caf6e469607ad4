// 14 — chunked KDA, 13's recurrence with each chunk's q, k, g fetched once per cluster: the value
// blocks of a head form a thread-block cluster, and every row of the chunk's inputs reaches all of
// their staging tiles from one bulk copy, multicast, completing on an mbarrier.
//
// What changed from 13, and why. Notebook 13's probe builds of 13 put its largest single cost in
// the input traffic: with no input copies after chunk 0 (KDA_PROBE=4) the recurrence ran in 0.84 ms
// against 1.49 ms at T = 16384, and its clock stamps had the element-wise warpgroup (WG_E) waiting
// for its staged q, k, g about two thirds of each chunk, although the cp.async copies were issued a
// whole chunk ahead. Each of a head's V / BV value blocks fetched the same 3 x C x K inputs through
// its own load/store unit: at BV = 32 four copies of every q, k, g row cross from L2 to the SMs, in
// 16-byte pieces issued by 128 threads. Here:
//  * A head's CL value blocks (CL divides V / BV; the launcher's default is the whole head) are one
//    cluster. Block `rank` of the cluster fetches rows rank, rank + CL, ... of the chunk's 3C token
//    rows (g, k, q; K elements each, contiguous in memory) with one `cp.async.bulk ... .multicast::
//    cluster` each, issued by one lane of WG_E's first warp: the row lands at the same offset in the
//    staging tile of every block of the cluster, and L2 serves each row once per cluster instead of
//    once per block.
//  * The copies complete on an mbarrier per block (FULL_T: one local arrival that announces the tile's
//    bytes, plus the bytes themselves); WG_E waits on it instead of cp.async.wait + a barrier.
//  * The tile is overwritten by the next chunk's copies only once every block of the cluster has
//    read it: after reading, one thread of each block arrives on the EMPTY_T mbarrier of every block
//    (remote arrivals, release at cluster scope), and the issuing warp of each block waits for all
//    CL arrivals before it fetches chunk n + 1 into everyone's tile.
//  * With CL = 1 (impl "bulk": no cluster) the rows are plain bulk copies into the block's own tile,
//    and the tile is free again as soon as WG_E has read it (its barrier): 13's schedule with 96
//    copy instructions a chunk in place of 3072 16-byte cp.async (the probe runs at B = 1 and 2 put
//    13 at the same time on half of the SMs as on all of them, so what the copies cost 13 is not
//    L2 bandwidth but the issue of thousands of small copies beside the chain's wgmmas).
//  * Rows past T are fetched as a repeat of row T - 1 (every block then expects the same byte count)
//    and read as zeros, as 13's zero-filled cp.async gave.
// With BSLOT (impl "bulk2"), WG_C's own copies (07's T and A2 rows, v rows) are bulk copies too,
// issued by its first warp and waited for on a slot mbarrier.
// WG_C (the chain of products) and WG_E's arithmetic are 13's, unchanged (wgmma_recurrence.cuh);
// the results are bit-identical to 13's on the CPU model.
//
// What the H200 said (notebook 13's recording at 9a43a76): every form is slower than 13, correct
// everywhere. At T = 16384 the recurrence takes 2.38 ms with plain bulk copies, 3.55 with WG_C's
// copies as bulk copies too and 3.49 multicast, against 13's 1.49. The clock stamps place it: the
// warp that issues the 96 row copies spends ~6600 cycles a chunk between reading its tile and the
// hand-over, the other three WG_E warps ~1100 and then wait for it (in 13 all four take ~3600,
// mostly waiting for their copies to land), and with WG_C's 160 row copies WG_C's first phase grows
// from ~2000 to ~9900 cycles. So issuing a row's bulk copy costs its warp ~55 cycles, one after
// another (inferred from the stamps, not timed per instruction), where 13's 16-byte cp.async pieces
// go out from 128 threads at once. The multicast
// forms add a cluster-wide release per chunk and, with ~207 KB of shared memory per block, clusters
// of four that do not all fit on the GPU at once (probe: the multicast recurrence at B = 1 takes about
// half its time at B = 2, 13 the same at both). The lever left is fewer, larger copies: one TMA
// tensor copy per array and chunk (a box of C rows x K channels, rows past T zero-filled by the
// copy engine) in place of 3C row copies.
//
// kda_chunk_state_tma is that form, in three steps (impls; each bit-identical to 13 on the CPU model,
// and on the H200 in the probe runs' quick check):
//  * "tma": no cluster; the tile of chunk n is three TMA tensor copies (g, k, q described as
//    (K, H, T, B) tensors by the launcher, boxes of K x 1 x C x 1) issued by one thread, the tile's
//    mbarrier told the three boxes' bytes. WG_C still copies its T / A2 and v by cp.async.
//  * "tma2" (TSLOT): WG_C's copies too, as two tensor copies issued by one thread: 07's T / A2 words
//    of the chunk (its output seen as rows of C/2 words, a box of 4C rows) and the chunk's v box
//    (BV x 1 x C x 1). Their rows land unpadded, so both maps ask the copy engine for a swizzle (64
//    bytes; one v row's bytes) and WG_C reads through it (kda_slot_sw): unswizzled, the slot's ldmatrix
//    and v reads met 4- and 8-way bank conflicts (a first probe without the swizzle: Nsight Compute's
//    shared-load bank conflicts ~30x 14 tma's, and no gain).
//  * "tma3" (NKD = 3): the clock stamps of "tma2" show both warpgroups waiting on each other: WG_E
//    may start chunk n only when P4 of chunk n - 2 has freed its operand buffer, which leaves it
//    about one chain's length for its arithmetic, less than that arithmetic takes beside the chain.
//    The buffer is two things with different lives: Kbg and Qg are done with once WG_C has built
//    chunk n's P1 operands (during P4 of chunk n - 1), Kd^T and 2^G_L only when P4 of chunk n
//    completes. So Kbg / Qg keep two buffers, freed right after the build (EMPTY), and Kd^T / 2^G_L
//    get a ring of three (EMPTY_KD, freed after P4): WG_E may run a chunk further ahead, for 17 KB
//    more shared memory (~217 KB at K = V = 128, fp32). Probe runs (not recorded) found no gain: the
//    chunk period stayed where it was, so what WG_E waits for before its arithmetic is not its buffer.
//    "tma3" stays a launcher impl, out of notebook 13.
// Notebook 13's recording (at 75abcbe) times "tma" and "tma2" in the ladder, their clock stamps, and
// "tma2"'s probe builds 4 (no input copies after chunk 0) and 5 (the chain alone): with the copies
// gone the recurrence gains little, with WG_E's arithmetic idle it gains much more, so what sets the
// chunk period now is the chain itself and the element-wise warpgroup working beside it.
// Probe builds (scripts/probe_delta_recurrence.py, notebook 13's probe table; results meaningless), as
// in 13: KDA_PROBE=4 copies no inputs after chunk 0 (WG_E reuses chunk 0's tile, WG_C its slots),
// KDA_PROBE=5 idles WG_E's arithmetic (the chain alone); KDA_PROBE=3: clock stamps.
//
// Launch: grid (V / BV, H, B), 256 threads, clusters of CL blocks along x (compile-time
// __cluster_dims__; none for the TMA form), 13's dynamic shared memory plus four mbarriers.
// Requires sm_90a (wgmma, stmatrix, multicast bulk copies).
#pragma once   // 15 includes this file for kda_mc_body

#include "wgmma_recurrence.cuh"

#ifndef KDA_STAGE_RELEASE
#define KDA_STAGE_RELEASE 1   // WG_E's staging tile released behind a proxy fence (kda_mc_body; 0: probe, without)
#endif

#ifndef KDA_SHARE_SLOTS
#define KDA_SHARE_SLOTS 8   // 26: images in each head's ring (a slot takes chunk n + KDA_SHARE_SLOTS once every block
#endif                      // of the head has copied chunk n). A probe on an H100 (not recorded) timed 26 at 4 to 32
                            // slots: fastest at 6 and 8, slower with fewer (the makers wait for acknowledgements) and
                            // much slower with more (at B H = 32 the rings outgrow what L2 keeps beside the streams)
static_assert(KDA_SHARE_SLOTS >= 4, "26's ring: at least four slots");

// 26's maker warpgroup (the block's threads 160 .. 287): block r of a head makes the chunks n = r, r + V / BV, ...
// of the head's operand images, 19's element-wise arithmetic (kda_wg_operands, MAKE) from a staging tile that one
// tensor copy per array lands, into the same tile once it has been read (the image is 19's operand buffer: its
// stores are 19's, free of bank conflicts), and sends each image to the head's ring in global memory by one bulk
// store: into slot n % KDA_SHARE_SLOTS once every block of the head has acknowledged chunk n - KDA_SHARE_SLOTS there,
// then published by the chunk's made flag (the call's epoch, a release at GPU scope once the store has completed).
// The next chunk's copies land in the tile after the store has read it. (Each thread storing its rows of the image
// to global memory itself, every 16-byte store of a warp a line of its own, ran the recurrence at two thirds of
// 24's speed on an H100: scripts/probe_delta_share.py, not recorded.) Every block's producer warp lands every chunk
// from the ring (22's loop).
template <class L, int K, int V, int C, int BV>
static __device__ __forceinline__ void kda_share_maker(const KdaWgCtx<L>& cx, float* smem_f, unsigned full_t,
                                                       const TmaMap* const* maps, unsigned char* ring, int* made,
                                                       int* acks, int epoch, int T, int H, float scale, float* ht) {
    // 19's layout, one element-wise warpgroup: the same offsets as 26's for everything the maker touches
    using LM = KdaWgLayout<K, V, C, BV, false, 6, 1, true, 2, true, false, false, true, 128>;
    static_assert(LM::OFF_TOT == L::OFF_TOT && LM::OFF_STG == L::OFF_STG && L::STG_BYTES == L::IMG_BYTES &&
                  LM::KD_BYTES == L::KD_BYTES && LM::KQ_BYTES == L::KQ_BYTES && LM::IMG_BYTES == L::IMG_BYTES &&
                  LM::SMEM_BYTES <= L::SMEM_BYTES && L::OFF_STG % 16 == 0, "26's maker works in 19's layout");
    const KdaWgCtx<LM> cm = kda_wg_ctx<LM>(smem_f, T, H);
    constexpr int NB = V / BV, TPT = C / LM::TPC;
    constexpr unsigned ROW = K * 4, TILE = 3 * C * ROW;
    const int e = cx.tid - 160, c = e % K, tok0 = (e / K) * TPT, h = cx.h, b = cx.b, NC = cx.NC;
    const long long TT = cx.TT, bh = cx.bh;
    const float* const stg = reinterpret_cast<const float*>(cx.sm + L::OFF_STG);
    auto copy_in = [&](int m) {   // chunk m's g, k, q: one box of K channels x C tokens per array
        if (e != 0) return;
        mbar_arrive_expect_tx(full_t, TILE);
        for (int ar = 0; ar < 3; ++ar) tma_load_4d(cx.base + L::OFF_STG + ar * C * ROW, maps[ar], 0, h, m * C, b, full_t);
    };
    const int r = blockIdx.x;
    if (r < NC) copy_in(r);
    int phase = 0;
    for (int m = r; m < NC; m += NB, phase ^= 1) {
        mbar_wait(full_t, phase);
        float xg[TPT], xk[TPT], xq[TPT];
#pragma unroll
        for (int u = 0; u < TPT; ++u) {
            const bool in = (long long)m * C + tok0 + u < TT;
            xg[u] = in ? stg[(0 * C + tok0 + u) * K + c] : 0.f;
            xk[u] = in ? stg[(1 * C + tok0 + u) * K + c] : 0.f;
            xq[u] = in ? stg[(2 * C + tok0 + u) * K + c] : 0.f;
        }
        named_bar_sync(KdaWgBars::PROD, 128);   // the tile read: the image goes in its place
        kda_wg_operands<LM, TPT, true>(cm, m, xg, xk, xq, 0.f, scale, ht, cx.sm + L::OFF_STG);
        fence_proxy_async();   // the image's generic stores, read next by the bulk store (the async proxy)
        if (m >= KDA_SHARE_SLOTS && e < NB)   // every block of the head is done with the slot's last chunk
            kda_wait_flag(acks + (bh * NC + m - KDA_SHARE_SLOTS) * NB + e, epoch);
        named_bar_sync(KdaWgBars::PROD, 128);
        if (e == 0) {
            bulk_store(ring + (bh * KDA_SHARE_SLOTS + m % KDA_SHARE_SLOTS) * (long long)L::IMG_BYTES, cx.base + L::OFF_STG,
                       L::IMG_BYTES);
            bulk_store_commit();
            bulk_store_wait_all();   // written (and the tile read): published, and free for the next chunk's copies
            kda_flag_release(made + bh * NC + m, epoch);
            if (m + NB < NC) copy_in(m + NB);
        }
    }
}

// 28's publication of chunk n (kda_mc_body's WG_E, thread e of it): once every WG_E thread has stored chunk n's half
// of the operands here (each behind its proxy fence: the copy engine reads it), thread 0 copies that half into the
// other block's buffer n & 1, once that block's WG_C is done with it (PEMPTY here), by four bulk copies completing on
// its PFULL n & 1: the [Kg; Qg]^T rows of this block's channels (hi, lo), their Kd^T rows (KdaWgLayout: a channel's
// rows are whole 128-byte rows) and their 2^G_L. pfull, pempty: this block's two mbarriers of each kind.
template <class L>
static __device__ __forceinline__ void kda_pair_publish(const KdaWgCtx<L>& cx, int n, int e, unsigned rank, unsigned pfull,
                                                        unsigned pempty) {
    constexpr int K = L::K, KE = L::KE;
    named_bar_sync(KdaWgBars::PROD, L::NE);
    if (e == 0 && !(KDA_PAIR_DIAG & 4)) {
        if (n >= 2) mbar_wait_cluster(pempty + 8 * (n & 1), ((n >> 1) - 1) & 1);
        constexpr unsigned HALF = KE * 128;
        const unsigned bar = pfull + 8 * (n & 1), to = rank ^ 1u;
        const unsigned kq = cx.base + cx.kq_of(n) + rank * HALF, kd = cx.base + cx.opb(n) + rank * HALF;
        const unsigned gl = cx.base + (unsigned)(reinterpret_cast<unsigned char*>(cx.gl_of(n)) - cx.sm) + rank * KE * 4;
        bulk_copy_to_peer(kq, kq, HALF, bar, to);
        bulk_copy_to_peer(kq + K * 128, kq + K * 128, HALF, bar, to);
        bulk_copy_to_peer(kd, kd, HALF, bar, to);
        bulk_copy_to_peer(gl, gl, KE * 4, bar, to);
    }
}

// The kernel body of every form: CL blocks per cluster, WG_C's copies as cp.async pieces, row bulk
// copies or one bulk and one tensor copy (SLOT 0, 1, 2: kda_wg_chain), the tile as three tensor copies
// (TMA; maps: g, k, q, and v and 07's output for SLOT 2; CL = 1), three Kd^T buffers (NKD = 3),
// WG_E's operands with fewer instructions (DIET: step 15), P1 and P4 as one bf16 term (ONE: step 17),
// each chunk's P1 a chunk early (AHEAD: step 18), P1's A from shared memory (SMA: step 19), WG_E's threads
// (NE: 256 in step 20), the operands from 21's images, WG_E one warp issuing their bulk copies (PRE: 22), and
// WG_C's chain turned around in registers, each value column's hi and lo terms an accumulator row pair (HILO: 23),
// and P4's A operand loaded into registers while P2 runs (P4R: 24), each chunk's o stored behind the next chunk's P1
// issue (LATE: 30).
template <int K, int V, int C, int BV, bool BF, int CL, int SLOT, bool TMA, int NKD = 2, bool DIET = false,
          bool ONE = false, bool AHEAD = false, bool SMA = false, int NE = 128, bool PRE = false, bool HILO = false,
          bool P4R = false, bool WY = false, bool SHR = false, bool PAIR = false, bool LATE = false>
static __device__ __forceinline__ void
kda_mc_body(const typename KdaIn<BF>::T* __restrict__ q, const typename KdaIn<BF>::T* __restrict__ k,
            const typename KdaIn<BF>::T* __restrict__ v, const typename KdaIn<BF>::T* __restrict__ g,
            const typename KdaIn<BF>::T* __restrict__ beta, const unsigned* __restrict__ TA,
            const float* __restrict__ h0, typename KdaIn<BF>::T* __restrict__ o, float* __restrict__ ht,
            int T, int H, float scale, const TmaMap* const* maps,
            const unsigned char* __restrict__ ops = nullptr,   // PRE: 21's images [B, H, NC, image bytes],
            const int* __restrict__ ready = nullptr, int epoch = 0,     // its ready flags, the call's epoch (0: none)
            unsigned char* __restrict__ ring = nullptr,   // SHR (26): the head's ring of KDA_SHARE_SLOTS images,
            int* __restrict__ made = nullptr,             // each chunk's made flag [B, H, NC] and its blocks'
            int* __restrict__ acks = nullptr) {           // acknowledgements [B, H, NC, V / BV] (the call's epoch)
    static_assert(!TMA || CL == 1, "the tensor-copy form runs without a cluster");
    static_assert(SLOT != 2 || TMA, "WG_C's tensor copies come with the tensor-copy form");
    static_assert(KDA_PROBE != 5 || NKD == 2, "probe 5 hands buffers over as NKD = 2 does");
    static_assert(KDA_PROBE != 4 || CL == 1, "probe 4 reuses the block's own tile");
    static_assert(!AHEAD || (NKD == 2 && SLOT == 2), "18's hand-overs are written for two buffers and tensor-copied slots");
    // 13's layout; mbarriers FULL_T, EMPTY_T, WG_C's two slots (PRE: no staging tile, and the operand buffers' two;
    // the ring: the second staging tile's)
    // staging tiles: one, or (23's probe build KDA_STAGE_RING=1) two, each chunk's copy issued two chunks ahead
    constexpr int NST = PRE ? (SHR ? 1 : 0) : (HILO && KDA_STAGE_RING) ? 2 : 1;
    using L = KdaWgLayout<K, V, C, BV, BF, PRE ? 6 : NST == 2 ? 5 : PAIR ? 8 : 4, NST, SLOT == 2, NKD, DIET, ONE, AHEAD, SMA, NE,
                          PRE, HILO, P4R, WY, SHR, PAIR, LATE>;
    static_assert(!PAIR || (TMA && CL == 1 && NST == 1 && !KDA_E_LDG && KDA_E_SHARE == 1 && !KDA_NO_P2 &&
                            (KDA_PROBE == 0 || KDA_PROBE == 3 || KDA_PROBE == 5)),
                  "28: 24's tensor-copy form in pairs (its own cluster of two, not 14's), the probes 3 and 5 only");
    static_assert(!SHR || (TMA && CL == 1 && SMA && DIET && KDA_PROBE == 0), "26: 22's tensor-copy form");
    static_assert(!KDA_O_WARP || !P4R || (!PAIR && BV != 64),
                  "KDA_O_WARP: a probe of 24 only (its launcher adds the ninth warp; 27's and 28's do not)");
    static_assert(!WY || (TMA && CL == 1 && NST == 1 && KDA_PROBE != 4), "25: 24's tensor-copy form, one staging tile");
    static_assert(NST < 2 || (TMA && CL == 1 && KDA_PROBE != 4), "the staging ring: tensor copies, no cluster, copies on");
    static_assert(!PRE || (KDA_PROBE == 0 || KDA_PROBE == 3), "22 has no element-wise warpgroup to probe");
    using TIn = typename KdaIn<BF>::T;
    static_assert(C == 32, "07 hands over T and Aqk T for chunks of 32");
    static_assert((K == 64 || K == 128) && (BV == 16 || BV == 32 || (BV == 64 && P4R && SLOT == 2 && !WY && !BF)) && V % BV == 0,
                  "K in {64,128}, BV in {16,32} (27: 24's loop at 64, fp32 inputs)");
    static_assert(CL >= 1 && CL <= 8 && (V / BV) % CL == 0, "a cluster is 1-8 of a head's value blocks");
    constexpr int BAR_PROD = KdaWgBars::PROD, BAR_EMPTY = KdaWgBars::EMPTY;

    KDA_DYNAMIC_SHARED(smem_f);
    const KdaWgCtx<L> cx = kda_wg_ctx<L>(smem_f, T, H);
    const int warp = cx.warp, lane = cx.lane, h = cx.h, b = cx.b, NC = cx.NC;
    const long long TT = cx.TT, stamp0_ = cx.stamp0_;
    (void)stamp0_;
    const unsigned full_t = cx.base + L::OFF_MBAR, empty_t = full_t + 8;
    if (cx.tid == 0) {
        mbar_init(full_t, 1);      // the local arrival that announces the tile's bytes
        mbar_init(empty_t, CL);    // one arrival from each block of the cluster: it has read the tile
        mbar_init(full_t + 16, 1);   // WG_C's copy slots (BSLOT): the arrival that announces the bytes
        mbar_init(full_t + 24, 1);
        if constexpr (PRE) {
            mbar_init(full_t + 32, 1);   // the operand buffers (22): the arrival that announces the image's bytes
            mbar_init(full_t + 40, 1);
        }
        if constexpr (NST == 2) mbar_init(full_t + 32, 1);   // the second staging tile's (KDA_STAGE_RING)
        if constexpr (PAIR) {   // 28: the other block's half of buffer n & 1 has landed here (PFULL: WG_E's arrival with
            mbar_init(full_t + 32, 1);   // the bytes to expect, then that block's copies), and that block's WG_C is done
                                         // with its buffer n & 1 (PEMPTY: one remote arrival of that block's WG_E)
            mbar_init(full_t + 40, 1);
            mbar_init(full_t + 48, 1);
            mbar_init(full_t + 56, 1);
        }
        mbar_init_fence();
    }
    if constexpr (CL > 1 || PAIR) cluster_sync();   // every block's barriers exist before any copy or remote arrival
    else __syncthreads();

    if (P4R && KDA_O_WARP && warp == 8) {
        // ====================================================== probe KDA_O_WARP (24): the store warp
        if constexpr (P4R) kda_o_warp<L>(cx, o);
    } else if (SHR && warp >= 5) {
        // ====================================================== 26: the maker, a share of the head's chunks
        if constexpr (SHR) kda_share_maker<L, K, V, C, BV>(cx, smem_f, full_t, maps, ring, made, acks, epoch, T, H, scale, ht);
    } else if (warp >= 4) {
      if constexpr (PRE) {
        // ====================================================== 22: one warp lands 21's output, two chunks ahead
        // Buffer and slot n & 1 take chunk n once WG_C is done with chunk n - 2 (its EMPTY arrival after P4, when
        // its slot reads are long done): the image by one bulk copy on the buffer's mbarrier, which WG_C waits on
        // (kda_wg_chain's full_wait), T / A2 and v by the slot's tensor copies (kda_slot_tma). WG_C's reads of
        // the buffer (wgmma, and its 2^G_L loads, whose values the decay has used) are complete by then.
        // Beside 21 (epoch > 0) it first waits for the chunk's ready flag, before it waits for the buffer: the
        // flag's acquire and proxy fence then overlap WG_C's work on chunks n - 2 and n - 1 (waited after EMPTY,
        // they held each chunk's copy back about half a microsecond beside 21's blocks,
        // scripts/probe_delta_timeline.py).
        const unsigned opbar = full_t + 32;
        const unsigned char* const img = SHR ? nullptr : ops + cx.bh * NC * (long long)L::IMG_BYTES;
        KDA_TL(unsigned long long* const tlw = kda_tl_state_words(ready, H, NC);
               unsigned long long tl_wait = 0, tl_nwait = 0;
               if (lane == 0) { tlw[0] = kda_gtime(); tlw[2] = kda_smid(); })
        for (int n = 0; n < NC; ++n) {
            if constexpr (SHR) {   // 26: chunk n's maker (block n % (V / BV) of the head) has published it
                if (lane == 0) kda_wait_flag(made + cx.bh * NC + n, epoch);
            } else if (lane == 0 && epoch > 0) {
                KDA_TL(const unsigned long long tl_a = kda_gtime();
                       if (n % 64 == 0 && n / 64 < KDA_TL_W - 7) tlw[5 + n / 64] = tl_a;
                       if (((volatile const int*)ready)[cx.bh * NC + n] != epoch) ++tl_nwait;)
                kda_wait_ready(ready + cx.bh * NC + n, epoch);   // 21 has written chunk n
                KDA_TL(tl_wait += kda_gtime() - tl_a;)
            }
            __syncwarp();
            if (n >= 2) named_bar_sync(BAR_EMPTY + (n & 1), L::NTH);
            if (SHR && n >= 2 && lane == 0)   // 26: chunk n - 2 is copied and read here: its ring slot may take another
                kda_flag_release(acks + (cx.bh * NC + n - 2) * (V / BV) + blockIdx.x, epoch);
            if (lane == 0) {
                KDA_TL(if (epoch == 0 && n % 64 == 0 && n / 64 < KDA_TL_W - 7) tlw[5 + n / 64] = kda_gtime();)
                mbar_arrive_expect_tx(opbar + 8 * (n & 1), L::IMG_BYTES);
                bulk_copy(cx.base + cx.opb(n),   // 26: from the ring slot of chunk n
                          SHR ? ring + (cx.bh * KDA_SHARE_SLOTS + n % KDA_SHARE_SLOTS) * (long long)L::IMG_BYTES
                              : img + n * (long long)L::IMG_BYTES, L::IMG_BYTES, opbar + 8 * (n & 1));
                kda_slot_tma<L>(cx, n, maps[3], maps[4]);
            }
        }
        KDA_TL(if (lane == 0) { tlw[3] = tl_wait; tlw[4] = tl_nwait; })
      } else {
        // ====================================================== WG_E: element-wise operands, a chunk ahead
        constexpr int TPT = C / L::TPC / (KDA_PROBE == 6 ? 2 : 1) / KDA_E_SHARE;   // tokens per thread (probe 6: half of
                                                         // them, KDA_E_SHARE: a share of them; results meaningless)
        static_assert(KDA_E_SHARE == 1 || (K == 128 && !BF && !WY && TPT % 8 == 0),
                      "KDA_E_SHARE: a probe of 19-24 on fp32 inputs at K = 128");
        const int e = cx.tid - 128, c = e % L::KE, part = e / L::KE, tok0 = part * TPT;
        const unsigned rank = cluster_ctarank();
        constexpr int KE = L::KE;   // channels staged here (28: this block's half, from channel rank KE)
        constexpr unsigned PFULL = 32, PEMPTY = 48;   // 28's mbarriers (two each), after full_t
        const TIn* const stg1 = reinterpret_cast<const TIn*>(cx.sm + L::OFF_STG);
        // chunk n's staging tile (n % NST) and its mbarrier
        auto tile_of = [&](int n) { return L::OFF_STG + (NST == 2 ? (n & 1) : 0) * L::STG_BYTES; };
        auto tile_bar = [&](int n) { return NST == 2 && (n & 1) ? full_t + 32 : full_t; };
        constexpr unsigned ROW = KE * sizeof(TIn), TILE = 3 * C * ROW;   // bytes per token row, per tile
        // KDA_E_LDG: q, k, g from global memory, no staging tile; copy_in(n) only prefetches chunk n's boxes into L2
        constexpr bool LDG = KDA_E_LDG != 0, AHD = KDA_E_LDG == 3;
        static_assert(!LDG || (TMA && !WY && NST == 1 && KDA_PROBE != 4), "KDA_E_LDG: 19-24's tensor-copy forms");
        static_assert(KDA_E_LDG != 2 || !BF, "KDA_E_LDG=2: fp32 inputs");
        static_assert(!AHD || (SMA && DIET && !PAIR && KDA_PROBE != 5 && KDA_E_SHARE == 1),
                      "KDA_E_LDG=3: 19's operands (kda_wg_operands' hooks), every token, the arithmetic on");
        auto copy_in = [&](int n) {   // warp 4: this block's share of chunk n's rows, to every block
            if constexpr (LDG) {
                if (e == 0)
                    for (int ar = 0; ar < 3; ++ar) tma_prefetch_4d(maps[ar], 0, h, n * C, b);
                return;
            }
            if (e == 0) mbar_arrive_expect_tx(tile_bar(n), TILE + L::TW_BYTES);   // each block receives the whole tile
            if constexpr (TMA) {   // one box per array: K channels x C tokens of head h, batch b
                if (e == 0) {
                    if constexpr (PAIR) {   // 28: a box of this block's KE channels
                        for (int ar = 0; ar < 3; ++ar)
                            tma_load_4d(cx.base + tile_of(n) + ar * C * ROW, maps[ar], (int)rank * KE, h, n * C, b, tile_bar(n));
                    } else {
                        for (int ar = 0; ar < 3; ++ar)
                            tma_load_4d(cx.base + tile_of(n) + ar * C * ROW, maps[ar], 0, h, n * C, b, tile_bar(n));
                    }
                    if constexpr (WY)   // 25: and 07's T hi, T lo words of the chunk (its first two arrays), one bulk copy
                        bulk_copy(cx.base + tile_of(n) + TILE, TA + (cx.bh * NC + n) * (4LL * C * (C / 2)), L::TW_BYTES,
                                  tile_bar(n));
                }
                return;
            }
            for (int idx = (int)rank + CL * e; idx < 3 * C; idx += CL * 32) {
                const int ar = idx / C, r = idx % C;
                const long long t0 = (long long)n * C + r, t = t0 < TT ? t0 : TT - 1;   // past T: a repeat, read as 0
                const TIn* src = (ar == 0 ? g : ar == 1 ? k : q) + kda_bthd(b, t, h, 0, TT, H, K);
                if constexpr (CL == 1) bulk_copy(cx.base + L::OFF_STG + idx * ROW, src, ROW, full_t);
                else bulk_copy_multicast(cx.base + L::OFF_STG + idx * ROW, src, ROW, full_t, (unsigned short)((1u << CL) - 1));
            }
        };
        TIn xb = TIn(0);   // beta of token `lane` of the chunk being staged
        auto load_beta = [&](int n) {
            const long long t = (long long)n * C + lane;
            xb = t < TT ? beta[(b * TT + t) * H + h] : TIn(0);
        };
        if constexpr (NST == 2) {   // the ring: chunks 0 and 1 at once
            if (e < 32) {
                copy_in(0);
                if (1 < NC) copy_in(1);
            }
        } else {
            if (e < 32) copy_in(0);
            if (LDG && e < 32 && 1 < NC) copy_in(1);   // the prefetch runs a chunk ahead from the start (below: n + 2)
        }
        load_beta(0);
        // probe KDA_E_LDG=3: this thread's g, k, q of the chunk in hand, loaded during the chunk before (chunk 0's here)
        auto ld_tok = [&](const TIn* src, int m, int u) -> TIn {
            const long long t = (long long)m * C + tok0 + u;
            return t < TT ? src[kda_bthd(b, t, h, c, TT, H, K)] : TIn(0);
        };
        TIn ag[AHD ? TPT : 1], ak[AHD ? TPT : 1], aq[AHD ? TPT : 1];
        if constexpr (AHD) {
#pragma unroll
            for (int u = 0; u < TPT; ++u) { ag[u] = ld_tok(g, 0, u); ak[u] = ld_tok(k, 0, u); aq[u] = ld_tok(q, 0, u); }
        }
        for (int n = 0; n < NC; ++n) {
            KDA_STAMP(0);
            // chunk n's tile has landed here (probe 4: chunk 0's, reused)
            if (!LDG && (KDA_PROBE != 4 || n == 0)) mbar_wait(tile_bar(n), (n / NST) & 1);
            const TIn* const stg = NST == 2 ? reinterpret_cast<const TIn*>(cx.sm + tile_of(n)) : stg1;
            TIn xg[TPT], xk[TPT], xq[TPT];
#pragma unroll
            for (int u = 0; u < (AHD ? 0 : TPT); ++u) {   // (KDA_E_LDG=3: loaded a chunk ago)
                const long long t = (long long)n * C + tok0 + u;
                const bool in = t < TT;
                if constexpr (LDG) {   // issued here, first used after the EMPTY wait below: their latency hides there
                    const long long at = kda_bthd(b, in ? t : 0, h, c, TT, H, K);
                    if constexpr (KDA_E_LDG == 2) {   // fp32 only (above): no L1 allocation
                        xg[u] = in ? kda_ldg_na(reinterpret_cast<const float*>(g) + at) : TIn(0);
                        xk[u] = in ? kda_ldg_na(reinterpret_cast<const float*>(k) + at) : TIn(0);
                        xq[u] = in ? kda_ldg_na(reinterpret_cast<const float*>(q) + at) : TIn(0);
                    } else {
                        xg[u] = in ? g[at] : TIn(0);
                        xk[u] = in ? k[at] : TIn(0);
                        xq[u] = in ? q[at] : TIn(0);
                    }
                } else {
                    xg[u] = in ? stg[(0 * C + tok0 + u) * KE + c] : TIn(0);
                    xk[u] = in ? stg[(1 * C + tok0 + u) * KE + c] : TIn(0);
                    xq[u] = in ? stg[(2 * C + tok0 + u) * KE + c] : TIn(0);
                }
            }
            const float bl = kda_widen1<BF>(xb);
            if constexpr (WY) {
                // 25: T' = T diag(beta) of chunk n, fp32, into WG_E's buffer n & 1 (kda_wg_operands makes W = T' Kg from
                // it after the barrier below): thread e takes row e / 4, columns 8 (e % 4) .. + 7, each T hi + lo
                const unsigned* tw = reinterpret_cast<const unsigned*>(cx.sm + L::OFF_STG + TILE);
                float* wt = reinterpret_cast<float*>(cx.sm + L::OFF_WT + (n & 1) * (C * L::LW * 4));
                const int r = e / 4, j0 = 8 * (e % 4);
                const U4 h4 = *reinterpret_cast<const U4*>(tw + r * (C / 2) + j0 / 2);   // words j0 / 2 .. + 3
                const U4 l4 = *reinterpret_cast<const U4*>(tw + C * (C / 2) + r * (C / 2) + j0 / 2);
                const unsigned hw[4] = {h4.x, h4.y, h4.z, h4.w}, lw[4] = {l4.x, l4.y, l4.z, l4.w};
                float t8[8];
#pragma unroll
                for (int w = 0; w < 4; ++w) {
                    t8[2 * w] = __uint_as_float(hw[w] << 16) + __uint_as_float(lw[w] << 16);
                    t8[2 * w + 1] = __uint_as_float(hw[w] & 0xffff0000u) + __uint_as_float(lw[w] & 0xffff0000u);
                }
#pragma unroll
                for (int u = 0; u < 8; ++u) t8[u] *= __shfl_sync(ATTNLAB_FULL_MASK, bl, j0 + u);   // beta of token j0 + u
                if constexpr (KDA_WY_WLOOP == 2) {   // T' transposed: row j, column r (kda_wg_operands' token loop)
#pragma unroll
                    for (int u = 0; u < 8; ++u) wt[(j0 + u) * L::LW + r] = t8[u];
                } else {
                    *reinterpret_cast<float4*>(wt + r * L::LW + j0) = make_float4(t8[0], t8[1], t8[2], t8[3]);
                    *reinterpret_cast<float4*>(wt + r * L::LW + j0 + 4) = make_float4(t8[4], t8[5], t8[6], t8[7]);
                }
            }
            // Everyone here has read the tile: after this barrier, chunk n + 1's copy overwrites it. The
            // copy engine writes through the async proxy, which the barrier does not order behind this
            // thread's shared-memory loads (they may still be in flight, their registers not yet read):
            // without a proxy fence, the copy could land before the last loads of the chunk had read it
            // (scripts/stress_delta.py caught 19's fp32 form so: a channel's last tokens read from chunk
            // n + 1; 16 fences its own tile alike). KDA_STAGE_RELEASE=0 (probe build): no fence, the race.
            // KDA_E_LDG stages nothing, and takes no fence here: its membar would wait for the chunk's global loads
            // just issued above (scripts/ncu_source.py: a fence's long-scoreboard stalls behind outstanding memory ops)
#if KDA_STAGE_RELEASE
            if constexpr (!LDG) fence_proxy_async();
#endif
            named_bar_sync(BAR_PROD, L::NE);
            if (n + 1 < NC) {
                if constexpr (CL > 1) {
                    if (e == 0)
                        for (int r = 0; r < CL; ++r) mbar_arrive_cluster(empty_t, (unsigned)r);   // ... tell every block
                    if (e < 32) mbar_wait_cluster(empty_t, n & 1);    // every block has read its tile
                }
                if constexpr (NST == 2) {   // the ring: chunk n + 2 into the tile just read
                    if (e < 32 && n + 2 < NC) copy_in(n + 2);
                } else {
                    if (LDG) {   // chunk n + 1 is in L2 by now (prefetched a chunk ago): chunk n + 2's prefetch
                        if (e < 32 && n + 2 < NC) copy_in(n + 2);
                    } else if (e < 32 && KDA_PROBE != 4) {
                        copy_in(n + 1);
                    }
                }
                if constexpr (!PAIR) load_beta(n + 1);   // (28: after the release below, which would wait for the load)
            }
            if (n >= 2) named_bar_sync(BAR_EMPTY + (n & 1), L::NTH);   // WG_C is done with chunk n - 2 (NKD = 3: its Kbg, Qg)
            // 28: buffer n & 1 is free here: its PFULL is told the other block's half of chunk n (the local arrival of
            // the phase), and that block may copy it in (PEMPTY n & 1 there, release at cluster scope: this block's
            // reads of the buffer, behind the barrier just passed, come first)
            if constexpr (PAIR) {
                if (e == 0) {
                    mbar_arrive_expect_tx(full_t + PFULL + 8 * (n & 1), (KDA_PAIR_DIAG & 4) ? 0u : (unsigned)L::PAIR_BYTES);
                    if (n >= 2) mbar_arrive_cluster(full_t + PEMPTY + 8 * (n & 1), rank ^ 1u);
                }
                if (n + 1 < NC) load_beta(n + 1);
            }
            KDA_STAMP(1);
            if (KDA_PROBE == 5) {   // probe: WG_E's arithmetic idle, its hand-over kept
                if constexpr (PAIR) kda_pair_publish<L>(cx, n, e, rank, full_t + PFULL, full_t + PEMPTY);
                named_bar_arrive(KdaWgBars::FULL + (n & 1), L::NTH);
                if constexpr (AHEAD) {   // 18: and the buffer's Kd^T half
                    if (n >= 2) named_bar_sync(KdaWgBars::EMPTY_KD + (n & 1), L::NTH);
                    named_bar_arrive(KdaWgBars::FULL_KD + (n & 1), L::NTH);
                }
                continue;
            }
            if constexpr (AHD) {   // chunk n + 1's loads into the registers that chunk n's arithmetic has finished with
                const int m = n + 1;
                auto g_done = [&]() {
                    if (m < NC) {
#pragma unroll
                        for (int u = 0; u < TPT; ++u) ag[u] = ld_tok(g, m, u);
                    }
                };
                auto kq_done = [&](int qd) {
                    if (m < NC) {
#pragma unroll
                        for (int u = 8 * qd; u < 8 * qd + 8; ++u) { ak[u] = ld_tok(k, m, u); aq[u] = ld_tok(q, m, u); }
                    }
                };
                kda_wg_operands<L, TPT>(cx, n, ag, ak, aq, bl, scale, ht, nullptr, g_done, kq_done);
            } else {
                kda_wg_operands<L, TPT>(cx, n, xg, xk, xq, bl, scale, ht);
            }
            if constexpr (PAIR) kda_pair_publish<L>(cx, n, e, rank, full_t + PFULL, full_t + PEMPTY);
        }
      }
    } else {
        // ====================================================== WG_C: the chain of products (13's)
        KDA_TL(if (cx.tid == 0) kda_tl_full_wait = 0;)
        if constexpr (HILO) kda_wg_chain_hilo<L>(cx, beta, h0, o, ht, maps[3], maps[4]);   // 23
        else if constexpr (L::W64) kda_wg_chain<L, SLOT>(cx, v, beta, TA, h0, o, ht, maps[3], maps[4], ready, epoch);   // 27
        else kda_wg_chain<L, SLOT>(cx, v, beta, TA, h0, o, ht, SLOT == 2 ? maps[3] : nullptr, SLOT == 2 ? maps[4] : nullptr);
        KDA_TL(if (PRE && cx.tid == 0) {
            unsigned long long* w = kda_tl_state_words(ready, H, NC);
            w[1] = w[KDA_TL_W - 1] = kda_gtime();
            w[KDA_TL_W - 2] = kda_tl_full_wait;
        })
    }
    if constexpr (CL > 1 || PAIR) cluster_sync();   // no block leaves while a copy or an arrival of its cluster may reach it
}

template <int K, int V, int C, int BV, bool BF = false, int CL = V / BV, bool BSLOT = false>   // CL: blocks per cluster
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(256, 1)
kda_chunk_state_mc(const typename KdaIn<BF>::T* __restrict__ q, const typename KdaIn<BF>::T* __restrict__ k,
                   const typename KdaIn<BF>::T* __restrict__ v, const typename KdaIn<BF>::T* __restrict__ g,
                   const typename KdaIn<BF>::T* __restrict__ beta,
                   const unsigned* __restrict__ TA,          // [B, H, NC, 4, C, C/2] from 07<A2>: T, A2 = Aqk T
                   const float* __restrict__ h0,             // [B,H,K,V] fp32, or nullptr
                   typename KdaIn<BF>::T* __restrict__ o,    // [B,T,H,V]
                   float* __restrict__ ht,                   // [B,H,K,V] fp32, or nullptr
                   int T, int H, float scale) {
    kda_mc_body<K, V, C, BV, BF, CL, BSLOT ? 1 : 0, false>(q, k, v, g, beta, TA, h0, o, ht, T, H, scale, nullptr);
}

// The parameters of the tensor-copy recurrences (14's "tma" forms, 15, 17, 18; BF in scope): the inputs,
// 07's output (TA), the initial and final state, o, and the tensor maps of g, k, q as (K, H, T, B) in
// boxes of (K, 1, C, 1), of v as (V, H, T, B) in boxes of (BV, 1, C, 1), swizzled, and of 07's output
// as rows of C/2 words in boxes of 4C rows, swizzled; KDA_TMA_MAPS: the maps as kda_mc_body takes them.
#define KDA_TMA_STATE_PARAMS                                                                                  \
    const typename KdaIn<BF>::T* __restrict__ q, const typename KdaIn<BF>::T* __restrict__ k,                 \
        const typename KdaIn<BF>::T* __restrict__ v, const typename KdaIn<BF>::T* __restrict__ g,             \
        const typename KdaIn<BF>::T* __restrict__ beta, const unsigned* __restrict__ TA,                      \
        const float* __restrict__ h0, typename KdaIn<BF>::T* __restrict__ o, float* __restrict__ ht, int T,   \
        int H, float scale, const __grid_constant__ TmaMap tg, const __grid_constant__ TmaMap tk,             \
        const __grid_constant__ TmaMap tq, const __grid_constant__ TmaMap tv, const __grid_constant__ TmaMap tta
#define KDA_TMA_MAPS const TmaMap* maps[5] = {&tg, &tk, &tq, &tv, &tta}

template <int K, int V, int C, int BV, bool BF = false, bool TSLOT = false,   // TSLOT: WG_C's copies as tensor copies too
          int NKD = 2>                                                         // NKD: Kd^T buffers (3: a ring of their own)
__global__ void __launch_bounds__(256, 1)
kda_chunk_state_tma(KDA_TMA_STATE_PARAMS) {   // TSLOT = false: tv and tta unused (WG_C copies by cp.async)
    KDA_TMA_MAPS;
    kda_mc_body<K, V, C, BV, BF, 1, TSLOT ? 2 : 0, true, NKD>(q, k, v, g, beta, TA, h0, o, ht, T, H, scale, maps);
}
