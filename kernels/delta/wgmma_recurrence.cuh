// The recurrence of delta steps 13 and 14 on Hopper's warpgroup MMAs: the block layout, the chain
// warpgroup (WG_C: each chunk's products as wgmmas, the state in their accumulators) and the
// element-wise arithmetic of the other warpgroup (WG_E: a chunk's Kbg, Qg, Kd^T and 2^G_L from its
// q, k, g, beta). 13 and 14 differ only in how WG_E's q, k, g reach shared memory (13: cp.async;
// 14: bulk copies multicast to a cluster); kernels/delta/13_chunk_state_wgmma.cu says what the
// chain and the operands are and why.
#pragma once

#include "delta_common.cuh"

#include "delta_io.cuh"
#include "hopper.cuh"
#include "ops_image.cuh"

template <int K_, int V_, int C_, int BV_, bool BF_ = false, int NMBAR = 0, int NST_ = 1, bool DENSE_ = false,
          int NKD_ = 2, bool DIET_ = false, bool ONE_ = false, bool AHEAD_ = false, bool SMA_ = false, int NE_ = 128,
          bool PRE_ = false, bool HILO_ = false, bool P4R_ = false, bool WY_ = false, bool SHR_ = false,
          bool PAIR_ = false, bool LATE_ = false>
struct KdaWgLayout {   // DENSE_: WG_C's slot rows unpadded, as tensor copies land them (14's "tma2", "tma3");
                       // NKD_ = 3: WG_E's operands in two rings, Kbg / Qg (two) and Kd^T, 2^G_L (three; "tma3")
                       // DIET_: WG_E's operands from one exp2 per element and no beta (15)
                       // NE_: WG_E's threads (256: two element-wise warpgroups, 20)
                       // PRE_: the operands made by 21 (ops_image.cuh), landed by one bulk copy a chunk; WG_E
                       // is one producer warp (NE_ = 32, 22)
                       // HILO_: the chain turned around in registers, hi and lo terms as accumulator row pairs
                       // (23): no S^T, X^T or V'^T tiles
                       // P4R_: P4's A, Kd^T, from registers, loaded by ldmatrix while P2 runs (24)
                       // WY_: the WY form's chain (25): WG_E makes W = T Kbg into P1's A tile, WG_C's P1 also
                       // adds U = T beta v from a beta v^T tile, and no P2 stands between P1 and P4
                       // SHR_: 22's chain and producer warp, the images made in the kernel (26): a maker warpgroup
                       // after the producer warp (not counted in NE / NTH, the hand-overs' threads) makes a share
                       // of the head's chunks from a staging tile (NST = 1)
                       // PAIR_: 24's loop, a cluster of two value blocks whose WG_Es each make half of the channels'
                       // operands into both blocks' buffers (28): the staging tile holds K / 2 channels
                       // LATE_: 24's loop with each chunk's o stored behind the next chunk's P1 issue (30)
    static constexpr int K = K_, V = V_, C = C_, BV = BV_;
    static constexpr bool BF = BF_;
    static constexpr int NE = NE_;                      // WG_E's threads: one warpgroup (13-19), two (20), a warp (22)
    static constexpr int NTH = 128 + NE;                // WG_C (chain), WG_E (element-wise)
    static constexpr int MT = K / 64;                   // m64 tiles of the state (rows = channels)
    static constexpr int LE = K + 8;                    // floats per Kbg / Qg row
    static constexpr bool DENSE = DENSE_;
    static constexpr bool DIET = DIET_;                   // 15: WG_E's operands with fewer instructions
    static constexpr bool ONE = ONE_;                     // 17: P1 and P4 as one bf16 term (no lo operands)
    static constexpr bool AHEAD = AHEAD_;                 // 18: each chunk's P1 from the state a chunk earlier
    static_assert(!AHEAD || ONE, "18 takes 17's one-term products (its three-term form spilled and ran slower)");
    static constexpr bool SMA = SMA_;                     // 19: P1's A, [Kg; Qg], from shared memory (WG_E's bf16 tiles)
    static_assert(!SMA || (DIET_ && NKD_ == 2 && !AHEAD_), "19 is 15's / 17's loop with P1's A in shared memory");
    static constexpr int LC = DENSE ? C / 2 : C / 2 + 4;   // words per T / A2 row (padded: ldmatrix conflict-free)
    static constexpr int LV = DENSE ? BV : BV + 8;         // elements per v row
    static constexpr bool PRE = PRE_;                     // 22: the operand buffers are 21's images
    static constexpr bool SHR = SHR_;                     // 26: ... made by the head's blocks in turn
    static_assert(!PRE || (SMA && NKD_ == 2 && DENSE && NE_ == 32),
                  "22: 19's loop on tensor-copied slots, two operand buffers, one producer warp");
    static constexpr bool FOLD = PRE && ONE;              // 22 on bf16 inputs: Kd^T hi only, K = 128's two m64 tiles folded
    static constexpr bool PAIR = PAIR_;                 // 28: WG_E makes channels [rank KE, rank KE + KE) of the operands
    static constexpr int KE = PAIR ? K / 2 : K;         // WG_E's channels (28: half of them, the other block the rest)
    static constexpr int TPC = NE / KE;                 // WG_E threads per channel (1, 2; 20 at K = 64: 4; 28: 2)
    static_assert(PRE || ((NE == 128 || NE == 256) && (TPC == 1 || TPC == 2 || (TPC == 4 && DIET_))),
                  "WG_E: one or two warpgroups; four threads a channel only with the running products of 15");
    static constexpr int ESZ = BF ? 2 : 4;              // bytes per input element
    static constexpr bool HILO = HILO_;                 // 23: the chain's operands stay in registers
    static_assert(!HILO || (SMA && !ONE && !PRE && NE_ == 128 && BV == 32 && DENSE),
                  "23: 19's fp32 operand buffers and tensor-copied slots, one element-wise warpgroup, 32 value columns");
    static constexpr bool P4R = P4R_;                   // 24: P4's A fragments loaded once a chunk, off the chain
    static_assert(!P4R || (SMA && !PRE && !HILO && NE_ == 128), "24: 19's loop (one element-wise warpgroup) with P4's A "
                                                               "from registers");
    static constexpr bool WY = WY_;                     // 25: W made by WG_E, P1 then P4
    static constexpr bool LATE = LATE_;                 // 30: o stored behind the next chunk's P1 issue
    static_assert(!LATE || (P4R_ && !WY_ && !PAIR_ && BV_ != 64), "30: 24's loop (one value block of 32 or 16 columns)");
    static_assert(!WY || (P4R && DIET_ && !ONE && NE_ == 128),
                  "25: 24's loop (P4's A from registers) on fp32 inputs, one element-wise warpgroup");
    // byte offsets from the 1024-aligned base
    static constexpr int ST_BYTES = HILO ? 0 : K * BV * 2;   // one S^T tile (hi or lo): K/64 chunks of BV rows
    static constexpr int OFF_STH = 0;
    static constexpr int OFF_STL = OFF_STH + ST_BYTES;
    static constexpr int OFF_X = OFF_STL + ST_BYTES;    // X^T [BV][hi | lo]
    // 27 (24's loop at 64 value columns, W64): X^T and V'^T share one tile (24's chain writes V'^T once P2, X^T's only
    // reader, has completed, and the next X^T once P4, V'^T's last reader, has), so that the layout fits 227 KB; and
    // WG_C waits for 07's ready flag of each chunk before it copies the chunk's T / A2 words (07 beside it)
    static constexpr bool W64 = P4R_ && BV == 64;
    static constexpr int OFF_VP = OFF_X + (HILO || W64 ? 0 : BV * 128);   // V'^T [BV][hi | lo]
    // WG_E's operand buffers. NKD = 2: two, each Kd^T [K][hi | lo], then Kbg, Qg [C][LE] fp32, 2^G_L [K].
    // NKD = 3: two Kbg, Qg buffers (KQ), then three of Kd^T and 2^G_L (KD)
    static constexpr int NKD = NKD_;
    static_assert(NKD == 2 || NKD == 3, "Kd^T buffers: two (with Kbg, Qg) or three (a ring of their own)");
    static constexpr int KD_BYTES = FOLD ? KDA_OPS_KD_BYTES : K * 128;   // 22 (bf16): hi only, two m64 tiles folded
    // Kbg and Qg: fp32 rows [C][LE] each, or (SMA) [Kg; Qg]^T as the wgmma's MN-major A: K rows of 64 bf16
    // (P1's rows: Kg of 8 tokens, Qg of the same 8, and so on), 128-byte swizzle, a hi tile and (three-term
    // products) a lo tile
    static constexpr int KQ_BYTES = SMA ? (ONE ? 1 : 2) * K * 128 : 2 * C * LE * 4;
    static constexpr int OPB_BYTES = ((KD_BYTES + KQ_BYTES + K * 4 + 1023) / 1024) * 1024;
    static constexpr int KQB_BYTES = ((2 * C * LE * 4 + 1023) / 1024) * 1024;
    static constexpr int KDB_BYTES = ((KD_BYTES + K * 4 + 1023) / 1024) * 1024;
    static constexpr int OFF_OPB = OFF_VP + (HILO ? 0 : BV * 128);
    // v's rows in the slot as tensor copies land them: one box (BV * ESZ <= 128 bytes), or (27 on fp32 inputs) boxes
    // of 32 columns, 128-byte rows each, one after the other (a copy's swizzle spans 128 bytes at most)
    static constexpr int VBOX = BV * ESZ > 128 ? 128 / ESZ : BV;
    static constexpr int OFF_KDR = OFF_OPB + 2 * KQB_BYTES;   // NKD = 3: the Kd^T ring after the two KQ buffers
    static constexpr int OPS_BYTES = NKD == 2 ? 2 * OPB_BYTES : 2 * KQB_BYTES + 3 * KDB_BYTES;
    // WG_C's copy slots (two): T hi, T lo, A2 hi, A2 lo [C][LC] words, v [C][LV]
    static constexpr int TA_BYTES = 4 * C * LC * 4;
    static constexpr int SLOT_BYTES = TA_BYTES + C * LV * ESZ;
    static constexpr int OFF_SLOT = OFF_OPB + OPS_BYTES;
    static constexpr int OFF_TOT = OFF_SLOT + 2 * SLOT_BYTES;   // WG_E's part sums [TPC][K] (K = 64; 20)
    static constexpr int TOT_BYTES = (2 * K > NE ? 2 * K : NE) * 4;
    static constexpr int NST = NST_;                            // staging tiles (a ring of chunks)
    static constexpr int TW_BYTES = WY ? 2 * C * (C / 2) * 4 : 0;   // 25: 07's T hi and lo words of the chunk
    // one staging tile: g, k, q [C][K] as stored (26: then the maker's image of the chunk, K * 4 bytes more)
    static constexpr int STG_BYTES = SHR_ ? 3 * K * 128 + K * 4 : 3 * C * KE * ESZ + TW_BYTES;
    static constexpr int OFF_STG = OFF_TOT + TOT_BYTES;
    static constexpr int LW = C + 4;                            // 25: floats per row of WG_E's T (beta folded in)
    static constexpr int OFF_WT = OFF_STG + NST * STG_BYTES;    // 25: two of them, [C][LW] fp32 (chunks n & 1)
    static constexpr int WT_BYTES = WY ? 2 * C * LW * 4 : 0;
    static constexpr int OFF_XK = OFF_WT + WT_BYTES;            // 25 at K = 64 (two threads a channel): every token's
    static constexpr int XK_BYTES = (WY && TPC == 2) ? K * LW * 4 : 0;   // Kg of each channel, [K][LW] fp32 (padded:
                                                                         // a warp's float4s over 32 channels spread)
    static constexpr int OFF_MBAR = OFF_XK + XK_BYTES;          // NMBAR mbarriers (14: the staging tile's)
    static constexpr int BYTES = OFF_MBAR + 8 * NMBAR;
    // probes KDA_O_BULK / KDA_O_WARP (24): o's tile past the layout, C rows of OT_LD words, in the room 24's launch leaves
    static constexpr int OT_LD = BV + 8, OT_OFF = (BYTES + 127) / 128 * 128, OT_END = OT_OFF + C * OT_LD * 4;
    static constexpr int IMG_BYTES = KD_BYTES + KQ_BYTES + K * 4;   // 22: one chunk's image (ops_image.cuh)
    // 28: what the other block of the pair copies in a chunk: its channels' [Kg; Qg]^T rows (hi, lo), Kd^T rows, 2^G_L
    static constexpr int PAIR_BYTES = PAIR ? 3 * KE * 128 + KE * 4 : 0;
    static_assert(!PRE || (NMBAR >= 6 && NST == (SHR ? 1 : 0) && IMG_BYTES == kda_ops_image_bytes(K, !ONE)),
                  "22: no staging tile (26: its maker's), the operand buffers' mbarriers after the slots', 21's image");
    static_assert(!SHR || (PRE && !ONE && !BF), "26: 22's loop on fp32 inputs");
    static_assert(!PAIR || (P4R && !WY && !W64 && !BF && K == 128 && NE == 128 && DENSE && NMBAR >= 8),
                  "28: 24's loop on fp32 inputs at K = 128 (two threads a channel), its pair's four mbarriers");
    static constexpr int SMEM_BYTES = BYTES + 1024;             // launch size: room to align the base
    static_assert(ST_BYTES % 1024 == 0 && (BV * 128) % 1024 == 0 && KD_BYTES % 1024 == 0 && SLOT_BYTES % 16 == 0,
                  "tiles must stay aligned");
};

#ifndef KDA_P1_TERMS
#define KDA_P1_TERMS 3   // probe build: P1's products at fp32 inputs (1: hi x hi only, results meaningless): what its
#endif                   // two lo terms cost the chunk (scripts/probe_delta_recurrence.py --build IMPL KDA_P1_TERMS=1)
static_assert(KDA_P1_TERMS == 1 || KDA_P1_TERMS == 3, "KDA_P1_TERMS: 3 (recorded builds) or 1 (probe)");

#ifndef KDA_P1_CHAINS
#define KDA_P1_CHAINS 1   // probe build (19-24's main loop at fp32 inputs; results valid, summed in another order): P1's three
#endif                    // terms each into an accumulator of its own (3), summed once the product completes, so that the
                          // tensor pipe need not wait for one wgmma's sums before the next (kernels/bench/04_wgmma_rate.cu
                          // measures narrow chains); or all 24 wgmmas into one accumulator (1, as built)
static_assert(KDA_P1_CHAINS == 1 || KDA_P1_CHAINS == 3, "KDA_P1_CHAINS: 1 (as built) or 3 (probe)");
#ifndef KDA_P2_CHAINS
#define KDA_P2_CHAINS 1   // probe build, as KDA_P1_CHAINS for P2's three terms (3), or one accumulator (1, as built)
#endif
static_assert(KDA_P2_CHAINS == 1 || KDA_P2_CHAINS == 3, "KDA_P2_CHAINS: 1 (as built) or 3 (probe)");
#ifndef KDA_P4_CHAINS
#define KDA_P4_CHAINS 1   // probe build (24; results valid): P4's two lo terms into a second accumulator of each state
#endif                    // tile, added to the state once P4 completes (2), or every term onto the state (1, as built)
static_assert(KDA_P4_CHAINS == 1 || KDA_P4_CHAINS == 2, "KDA_P4_CHAINS: 1 (as built) or 2 (probe)");

#ifndef KDA_O_LATE
#define KDA_O_LATE 0   // probe build (19-24's main loop; results valid, the same words): chunk n's o stored behind chunk
#endif                 // n + 1's P1 issue (1), not before V'^T's proxy fence (0, as built), whose membar waits for the
                       // thread's outstanding global stores (scripts/ncu_source.py: that fence's long-scoreboard stalls)
                       // 2: o never stored (results meaningless: the bound on taking o's stores off the chain)
static_assert(KDA_O_LATE == 0 || KDA_O_LATE == 1 || KDA_O_LATE == 2, "KDA_O_LATE: 0 (as built), 1 or 2 (probes)");

#ifndef KDA_O_BULK
#define KDA_O_BULK 0   // probe build (24's loop at fp32 inputs; results valid, the same words): each chunk's o
#endif                 // written to a shared-memory tile beside V'^T and stored by bulk copies (warp 0, a token row a
                       // lane), whose completion no proxy fence's membar waits for (1); or by st.global (0, as built).
                       // The tile (C rows of BV + 8 words) lies past the layout, in the room the launcher's mirror
                       // leaves (kernels.tile_smem_words; the kernel traps where there is none)
static_assert(KDA_O_BULK == 0 || KDA_O_BULK == 1, "KDA_O_BULK: 0 (as built) or 1 (probe)");

#ifndef KDA_O_WARP
#define KDA_O_WARP 0   // probe build (24; results valid, the same words): each chunk's o written to a shared-memory tile
#endif                 // beside V'^T and stored by a ninth warp (block of 288 threads), whose global stores no fence of
                       // WG_C waits for (1); or stored by WG_C itself (0, as built). The tile lies where KDA_O_BULK's does
static_assert(KDA_O_WARP == 0 || KDA_O_WARP == 1, "KDA_O_WARP: 0 (as built) or 1 (probe)");

#ifndef KDA_P1_LDA
#define KDA_P1_LDA 0   // probe build (19, 20, 22, 24; results valid): P1's A, [Kg; Qg], from registers, loaded by
#endif                 // ldmatrix.trans from the buffer's MN-major tile while the chunk before runs P4 (1), or
                       // read by each wgmma from shared memory (0, as recorded): scripts/probe_delta_lda.py
static_assert(KDA_P1_LDA == 0 || KDA_P1_LDA == 1, "KDA_P1_LDA: 0 (recorded builds) or 1 (probe)");
#ifndef KDA_P4_LDA
#define KDA_P4_LDA 0   // probe build (13-17, 19, 20, 22; results valid): P4's A, Kd^T, from registers, loaded by
#endif                 // ldmatrix while P2 runs (1), or read by each wgmma from shared memory (0, as recorded);
                       // step 24 is 19 built that way (KdaWgLayout's P4R)
static_assert(KDA_P4_LDA == 0 || KDA_P4_LDA == 1, "KDA_P4_LDA: 0 (recorded builds) or 1 (probe)");

#ifndef KDA_KD_EARLY
#define KDA_KD_EARLY 0   // probe build (24 only; results valid): WG_C hands buffer n & 1 back to WG_E as soon as P4's A
#endif                   // fragments are loaded (1: P1 and the decay have read it before), or once P4 completes (0, as built)
static_assert(KDA_KD_EARLY == 0 || KDA_KD_EARLY == 1, "KDA_KD_EARLY: 0 (as built) or 1 (probe)");

#ifndef KDA_NO_P2
#define KDA_NO_P2 0   // probe build (19, 20, 22, 24; results meaningless): the chain as the WY form would run it (1): P1's
#endif                // X goes to the V'^T tile as V' would (V' = U - W S, U = T beta v and W = T Kbg made off the chain),
                      // no X^T tile, barrier or P2 between P1 and P4; P2's wgmmas (the product o needs, Aqk V') are issued
                      // behind P4 on the V'^T tile and o stored after P4: what one product stage less saves the chunk
static_assert(KDA_NO_P2 == 0 || KDA_NO_P2 == 1, "KDA_NO_P2: 0 (as built) or 1 (probe)");

#ifndef KDA_WY_NO_W
#define KDA_WY_NO_W 0   // probe build (25 only; results meaningless): WG_E stores Kg where -W goes, its W = T' Kg product
#endif                  // skipped (1): what that product costs 25's chunk, or -W (0, as built)
static_assert(KDA_WY_NO_W == 0 || KDA_WY_NO_W == 1, "KDA_WY_NO_W: 0 (as built) or 1 (probe)");

#ifndef KDA_WY_WLOOP
#define KDA_WY_WLOOP 1   // 25's W = T' Kg in WG_E (results 25's either way): 8 rows of W at a time, each row a sum over
#endif                   // its tokens from row-major T' (1), or a token at a time into all of the thread's rows from
                         // T'^T (2: every FMA of a step independent, T'^T's column of the token read as float4s)
static_assert(KDA_WY_WLOOP == 1 || KDA_WY_WLOOP == 2, "KDA_WY_WLOOP: 1 or 2");

#ifndef KDA_E_SHARE
#define KDA_E_SHARE 1   // probe build (fp32 inputs at K = 128; results meaningless): each WG_E thread takes 1 / KDA_E_SHARE
#endif                  // of its tokens (2 or 4): what WG_E's chunk would cost if a cluster of that many value blocks
                        // shared its element-wise work, each block making its share of the operands for all of them
                        // (a bound: no cluster-wide stores or hand-overs are made), or all of them (1, as built)
static_assert(KDA_E_SHARE == 1 || KDA_E_SHARE == 2 || KDA_E_SHARE == 4, "KDA_E_SHARE: 1 (as built), 2 or 4 (probe)");

#ifndef KDA_E_LDG
#define KDA_E_LDG 0   // build variant (19-24's tensor-copy forms, one staging tile; results the same): WG_E loads its
#endif                // q, k, g from global memory into registers, each chunk's box prefetched into L2 by the copy
                      // engine a chunk ahead, with no staging tile (1; 2: fp32 inputs, loads that allocate no L1
                      // line): the tile's landing and reads leave shared memory; or lands them in the staging tile
                      // by tensor copies and reads them there (0, as built). 3 (probe of 24): 1's loads a chunk
                      // ahead, into the registers they replace: chunk n + 1's g once chunk n's 2^g is made, its k and q
                      // 8 tokens at a time once chunk n's operands of those tokens are stored (kda_wg_operands' hooks),
                      // so that their latency hides behind chunk n's arithmetic, not only behind the wait for EMPTY;
                      // it ran slower still than 1 on an H100 (scripts/probe_delta_ahead.py, not recorded): its stamps
                      // put the time in WG_E's arithmetic, now interleaved with the loads
static_assert(KDA_E_LDG >= 0 && KDA_E_LDG <= 3, "KDA_E_LDG: 0 (as built), 1, 2 or 3");

// kda_wg_operands' hooks (KDA_E_LDG=3): nothing to do
struct KdaNoHook {
    __device__ __forceinline__ void operator()() const {}
    __device__ __forceinline__ void operator()(int) const {}
};

#ifndef KDA_PAIR_DIAG
#define KDA_PAIR_DIAG 0   // probe build (28 only; results meaningless but for 0): what its pairing costs. 1: WG_C does not
#endif                    // wait for the other block's half (PFULL); 4: WG_E copies nothing to the other block (its PFULL
                          // told no bytes); 5: both; 0: as built
static_assert(KDA_PAIR_DIAG == 0 || KDA_PAIR_DIAG == 1 || KDA_PAIR_DIAG == 4 || KDA_PAIR_DIAG == 5,
              "KDA_PAIR_DIAG: 0 (as built), 1, 4 or 5 (probes)");

#ifndef KDA_STAGE_RING
#define KDA_STAGE_RING 0   // probe build (23 only; results valid): WG_E's q, k, g in two staging tiles, each chunk's
#endif                     // copies issued two chunks ahead (1), or one tile, a chunk ahead (0, as built)
static_assert(KDA_STAGE_RING == 0 || KDA_STAGE_RING == 1, "KDA_STAGE_RING: 0 (as built) or 1 (probe)");

#ifndef KDA_LATE_SIDE
#define KDA_LATE_SIDE 0   // probe build: 13-17's side work issued behind P1 (1) or before it (0, as recorded)
#endif

// Probe builds (scripts/probe_delta_recurrence.py; results meaningless): KDA_PROBE=4 copies no
// inputs after chunk 0 (both warpgroups reuse chunk 0's staged q, k, g, T, A2 and v): the period
// without global input traffic; KDA_PROBE=5 idles WG_E's arithmetic (it only hands buffers over):
// WG_C's chain alone; KDA_PROBE=6 has each WG_E thread take half of its tokens (what WG_E's chunk
// would cost at half the length per thread). KDA_PROBE=3: clock stamps (delta_common.cuh).
// Named barriers (0 is __syncthreads): WG_C's own, WG_E's own, FULL + buffer (WG_E arrives, WG_C
// syncs) and EMPTY + buffer (WG_C arrives, WG_E syncs).
// With three Kd^T buffers (NKD = 3) EMPTY + (n & 1) frees chunk n's Kbg / Qg buffer (WG_C has built its
// P1 operands from it) and EMPTY_KD + n % 3 its Kd^T buffer (P4 has read it).
// AHEAD (18): FULL / EMPTY + buffer hand over a buffer's Kbg / Qg only, FULL_KD / EMPTY_KD + buffer its Kd^T
// and 2^G_L (two lives: WG_C builds chunk n + 1's P1 operands during chunk n, and reads chunk n's Kd^T
// until P4 of chunk n completes early in chunk n + 1).
struct KdaWgBars { static constexpr int CONS = 1, PROD = 2, FULL = 3, EMPTY = 5, EMPTY_KD = 7, FULL_KD = 10, OFULL = 13,
                   OEMPTY = 14; };   // OFULL / OEMPTY: probe KDA_O_WARP's o tile (WG_C and the store warp)

// Byte offset, from a 1024-aligned tile, of element `e` (of `esz` bytes) of a row-major tile that a
// tensor copy landed with a swizzle of SW bytes (0: none): the copy engine moves the 16-byte piece at
// byte a to a ^ (((a >> 7) & (SW / 16 - 1)) << 4).
template <int SW>
static __device__ __forceinline__ int kda_slot_sw(int e, int esz) {
    const int a = e * esz;
    return SW ? a ^ (((a >> 7) & (SW / 16 - 1)) << 4) : a;
}

// Element offset, in a WG_C slot's v rows, of token i's column c: SLOT 2 as the tensor copies swizzled them, in one box or
// (27 on fp32 inputs) in boxes of L::VBOX columns one after the other; else rows of L::LV elements.
template <class L, int SLOT>
struct KdaVOff {
    static constexpr bool SPLIT = SLOT == 2 && L::VBOX < L::BV;
    static constexpr int VB = L::VBOX, ESZ = L::ESZ, VSW = L::VBOX * L::ESZ, OSW = SLOT == 2 ? L::BV * L::ESZ : 0;
    static __device__ __forceinline__ int at(int i, int c) {
        return SPLIT ? (c / VB) * (L::C * VB) + kda_slot_sw<VSW>(i * VB + c % VB, ESZ) / ESZ
                     : kda_slot_sw<OSW>(i * L::LV + c, ESZ) / ESZ;
    }
};

// Shared-space address of (row r, 16-byte chunk ch) of a K-major 128-byte-swizzle tile at `tile`.
static __device__ __forceinline__ unsigned kda_sw128(unsigned tile, int r, int ch) {
    return tile + (r / 8) * 1024 + (r % 8) * 128 + ((ch ^ (r % 8)) * 16);
}

// What both warpgroups share: the aligned base of the block's shared memory, its indices and the
// chunk count (and, in KDA_PROBE=3 builds, the clock at the block's start).
template <class L>
struct KdaWgCtx {
    unsigned char* sm;   // the 1024-aligned base
    unsigned base;       // the same, as a shared-space address
    int tid, warp, lane, v0, h, b, H, NC;
    long long TT, bh;
    long long stamp0_;
    __device__ __forceinline__ int opb(int n) const {   // chunk n's Kd^T (buffer n & 1, or n % 3 of the ring)
        return L::NKD == 2 ? L::OFF_OPB + (n & 1) * L::OPB_BYTES : L::OFF_KDR + (n % 3) * L::KDB_BYTES;
    }
    __device__ __forceinline__ float* kb_of(int n) const {
        return reinterpret_cast<float*>(sm + (L::NKD == 2 ? opb(n) + L::KD_BYTES : L::OFF_OPB + (n & 1) * L::KQB_BYTES));
    }
    __device__ __forceinline__ float* qg_of(int n) const { return kb_of(n) + L::C * L::LE; }
    __device__ __forceinline__ float* gl_of(int n) const {
        if constexpr (L::SMA) return reinterpret_cast<float*>(sm + opb(n) + L::KD_BYTES + L::KQ_BYTES);
        return L::NKD == 2 ? qg_of(n) + L::C * L::LE : reinterpret_cast<float*>(sm + opb(n) + L::KD_BYTES);
    }
    __device__ __forceinline__ int kq_of(int n) const { return opb(n) + L::KD_BYTES; }   // SMA: [Kg; Qg]^T hi (lo K * 128 on)
};

template <class L>
static __device__ __forceinline__ KdaWgCtx<L> kda_wg_ctx(float* smem_f, int T, int H) {
    if (kda_dynamic_smem_size() < (unsigned)L::SMEM_BYTES) __trap();
    KdaWgCtx<L> cx;
    const unsigned raw_base = smem_u32(smem_f);
    cx.base = (raw_base + 1023u) & ~1023u;     // the swizzle needs 1024-aligned tiles
    cx.sm = reinterpret_cast<unsigned char*>(smem_f) + (cx.base - raw_base);
    cx.tid = threadIdx.x;
    cx.warp = cx.tid / 32;
    cx.lane = cx.tid % 32;
    cx.v0 = blockIdx.x * L::BV;
    cx.h = blockIdx.y;
    cx.b = blockIdx.z;
    cx.H = H;
    cx.TT = T;
    cx.bh = (long long)cx.b * H + cx.h;
    cx.NC = (T + L::C - 1) / L::C;
    cx.stamp0_ = 0;
#if KDA_PROBE == 3
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(cx.stamp0_));
#endif
    return cx;
}

// WG_E, one chunk: from its thread's channel c (tokens tok0 .. tok0 + TPT - 1) of g, k, q as loaded and
// the beta of token `lane` (bl), the operands of chunk n into buffer n & 1: Kbg and Qg (fp32), Kd^T
// (the wgmma's layout, bf16 hi and lo) and 2^G_L; then it hands the buffer to WG_C (FULL).
// MAKE (26's maker warpgroup, 19's operands; its threads after WG_C and the producer warp): the same operands in the
// buffer's byte image at `img` (a slot of the head's ring in global memory), no proxy fence and no hand-over.
// Hooks (probe KDA_E_LDG=3; 19's operands): g_done() once xg is read for the last time, kq_done(qd) once xk and xq of
// tokens tok0 + 8 qd .. + 7 are (the caller may load the next chunk's into them there).
template <class L, int TPT, bool MAKE = false, class GDone = KdaNoHook, class KqDone = KdaNoHook>
static __device__ __forceinline__ void kda_wg_operands(const KdaWgCtx<L>& cx, int n,
                                                       const typename KdaIn<L::BF>::T (&xg)[TPT],
                                                       const typename KdaIn<L::BF>::T (&xk)[TPT],
                                                       const typename KdaIn<L::BF>::T (&xq)[TPT], float bl,
                                                       float scale, float* ht, unsigned char* img = nullptr,
                                                       GDone g_done = {}, KqDone kq_done = {}) {
    static_assert(!MAKE || (L::SMA && L::DIET && !L::WY && !L::AHEAD && L::NKD == 2), "26's maker: 19's operands");
    constexpr int K = L::K, LE = L::LE;
    constexpr bool BF = L::BF;
    constexpr int BAR_PROD = KdaWgBars::PROD, BAR_FULL = KdaWgBars::FULL;
    const int warp = cx.warp, lane = cx.lane;
    const long long stamp0_ = cx.stamp0_;
    (void)warp; (void)lane; (void)stamp0_; (void)ht;
    const int e = cx.tid - 128 - (MAKE ? 32 : 0), c = e % L::KE, part = e / L::KE, tok0 = part * TPT;
    unsigned char* const sm = cx.sm;
    float* const sTot = reinterpret_cast<float*>(sm + L::OFF_TOT);
    (void)img;
    // 28 (PAIR): this block makes channels [rank KE, rank KE + KE) of the operands, rows ci of the buffer (kda_mc_body
    // then copies them to the other block of the pair)
    const int ci = c + (L::PAIR ? (int)cluster_ctarank() * L::KE : 0);
    auto opb = [&](int m) { return cx.opb(m); };
    auto kb_of = [&](int m) { return cx.kb_of(m); };
    auto qg_of = [&](int m) { return cx.qg_of(m); };
    auto gl_of = [&](int m) { return cx.gl_of(m); };
                float* const kb = kb_of(n);
                float* const qgp = qg_of(n);
                float e1[TPT], gl2;                    // 2^G of each token, 2^G_L
                unsigned kdh[TPT / 2], kdl[TPT / 2];
                if constexpr (!L::DIET) {
                float G[TPT];
                float run = 0.f;
    #pragma unroll
                for (int u = 0; u < TPT; ++u) { run += kda_widen1<BF>(xg[u]) * KDA_LOG2E; G[u] = run; }
                float off = 0.f, gl = run;
                static_assert(L::TPC <= 2, "13's gate sums are split over two threads a channel at most");
                if constexpr (L::TPC == 2) {   // K = 64: two threads per channel, 16 tokens each
                    sTot[part * K + c] = run;
                    named_bar_sync(BAR_PROD, L::NE);
                    off = part ? sTot[c] : 0.f;
                    gl = sTot[c] + sTot[K + c];
                    named_bar_sync(BAR_PROD, L::NE);   // both read before the next chunk's sums overwrite
                }
    #pragma unroll
                for (int u = 0; u < TPT; u += 2) {
                    const float G0 = G[u] + off, G1 = G[u + 1] + off;
                    e1[u] = fast_exp2(G0);
                    e1[u + 1] = fast_exp2(G1);
                    const float kd0 = kda_widen1<BF>(xk[u]) * fast_exp2(gl - G0);   // exponent <= 0
                    const float kd1 = kda_widen1<BF>(xk[u + 1]) * fast_exp2(gl - G1);
                    split_bf16x2(kd0, kd1, kdh[u / 2], kdl[u / 2]);
                }
                gl2 = fast_exp2(gl);
    #pragma unroll
                for (int u = 0; u < TPT; ++u) {
                    const float bt = __shfl_sync(ATTNLAB_FULL_MASK, bl, tok0 + u);   // beta of token tok0 + u
                    kb[(tok0 + u) * LE + c] = bt * kda_widen1<BF>(xk[u]) * e1[u];
                    qgp[(tok0 + u) * LE + c] = scale * kda_widen1<BF>(xq[u]) * e1[u];
                }
                } else {
                // DIET (15): one exp2 per element, 2^g_u; 2^G_u and 2^(G_L - G_u) are its running products
                // forward and backward (every factor <= 1: no overflow; an underflow to 0 stands for a
                // true value below 2^-126). No beta here: WG_C applies it to X's rows (X = beta (v - Kg S)).
                (void)bl;
                float xe[TPT];
    #pragma unroll
                for (int u = 0; u < TPT; ++u) xe[u] = fast_exp2(kda_widen1<BF>(xg[u]) * KDA_LOG2E);
                g_done();   // (probe KDA_E_LDG=3: the next chunk's g into xg)
                float run = 1.f;
    #pragma unroll
                for (int u = 0; u < TPT; ++u) { run *= xe[u]; e1[u] = run; }
                float pre = 1.f, suf = 1.f;
                gl2 = run;
                if constexpr (L::TPC > 1) {   // TPC threads per channel (K = 64; 20), C / TPC tokens each
                    sTot[part * K + c] = run;
                    named_bar_sync(BAR_PROD, L::NE);
                    gl2 = 1.f;
    #pragma unroll
                    for (int p = 0; p < L::TPC; ++p) {   // the earlier parts' products scale this part's 2^G, the
                        const float t = sTot[p * K + c];   // later parts' its 2^(G_L - G) (two parts: 13's values)
                        if (p < part) pre *= t;
                        if (p > part) suf *= t;
                        gl2 *= t;
                    }
                    named_bar_sync(BAR_PROD, L::NE);   // all read before the next chunk's products overwrite
                }
                float ed[TPT];
    #pragma unroll
                for (int u = TPT - 1; u >= 0; --u) { ed[u] = suf; suf *= xe[u]; }
    #pragma unroll
                for (int u = 0; u < TPT; u += 2) {
                    e1[u] *= pre;
                    e1[u + 1] *= pre;
                    const float kd0 = kda_widen1<BF>(xk[u]) * ed[u], kd1 = kda_widen1<BF>(xk[u + 1]) * ed[u + 1];
                    if constexpr (L::ONE) kdh[u / 2] = pack_bf16x2(kd0, kd1);   // 17: P4 reads Kd^T hi only
                    else split_bf16x2(kd0, kd1, kdh[u / 2], kdl[u / 2]);
                }
                    if constexpr (L::SMA) {   // 19: [Kg; Qg]^T row c: P1's rows 16j .. 16j + 7 are Kg of tokens 8j .., 16j + 8 ..
                                          // Qg of the same tokens (13's A fragments), so 16-byte chunk 2j holds Kg, 2j + 1 Qg
                    (void)kb; (void)qgp;
                    // 25 (WY): the tile's Kg rows hold -W = -T' Kg instead, W_r = sum_{j <= r} T'_rj Kg_j of this thread's
                    // channel, with T' = T diag(beta) as kda_mc_body left it in WG_E's buffer n & 1 (T is lower
                    // triangular: the quads past the diagonal add zeros); made 8 rows at a time, where they are stored
                    // At K = 64 two threads share a channel (16 tokens each): both store their Kg, and each reads the
                    // channel's 32 back after WG_E's barrier (the next chunk's stores come after its staging barrier)
                    float kg[L::WY ? L::C : 1];
                    const float4* tw = reinterpret_cast<const float4*>(sm + L::OFF_WT + (n & 1) * (L::C * L::LW * 4));
                    if constexpr (L::WY) {
                        static_assert(TPT * L::TPC == L::C && L::TPC <= 2, "25: one or two threads a channel");
    #pragma unroll
                        for (int u = 0; u < TPT; ++u) kg[u] = kda_widen1<BF>(xk[u]) * e1[u];
                        if constexpr (L::TPC == 2) {
                            float* const xkg = reinterpret_cast<float*>(sm + L::OFF_XK) + c * L::LW;
    #pragma unroll
                            for (int u = 0; u < TPT; u += 4)
                                *reinterpret_cast<float4*>(xkg + tok0 + u) = make_float4(kg[u], kg[u + 1], kg[u + 2], kg[u + 3]);
                            named_bar_sync(BAR_PROD, L::NE);
    #pragma unroll
                            for (int u = 0; u < L::C; u += 4) {
                                const float4 t = *reinterpret_cast<const float4*>(xkg + u);
                                kg[u] = t.x; kg[u + 1] = t.y; kg[u + 2] = t.z; kg[u + 3] = t.w;
                            }
                        }
                    }
                    (void)tw;
                    // KDA_WY_WLOOP 2: all of the thread's rows of W at once, a token j at a time (T' transposed in the
                    // buffer: row j holds T'_rj for every r); at K = 128 only rows r >= j (quads from j / 4)
                    constexpr bool WJ = L::WY && !KDA_WY_NO_W && KDA_WY_WLOOP == 2;
                    float wacc[WJ ? TPT : 1];
                    if constexpr (WJ) {
    #pragma unroll
                        for (int u = 0; u < TPT; ++u) wacc[u] = 0.f;
    #pragma unroll
                        for (int j = 0; j < L::C; ++j) {
    #pragma unroll
                            for (int rq = (L::TPC == 1 ? j / 4 : 0); rq < TPT / 4; ++rq) {
                                const float4 t = tw[j * (L::LW / 4) + tok0 / 4 + rq];
                                wacc[4 * rq] = fmaf(t.x, kg[j], wacc[4 * rq]);
                                wacc[4 * rq + 1] = fmaf(t.y, kg[j], wacc[4 * rq + 1]);
                                wacc[4 * rq + 2] = fmaf(t.z, kg[j], wacc[4 * rq + 2]);
                                wacc[4 * rq + 3] = fmaf(t.w, kg[j], wacc[4 * rq + 3]);
                            }
                        }
                    }
                    (void)wacc;
                    unsigned char* kq = (MAKE ? img + L::KD_BYTES : sm + cx.kq_of(n)) + (ci / 8) * 1024 + (c % 8) * 128;
    #pragma unroll
                    for (int qd = 0; qd < TPT / 8; ++qd) {
                        unsigned kh[4], kl[4], qh[4], ql[4];
                        float mw[L::WY ? 8 : 1];
                        if constexpr (WJ) {
    #pragma unroll
                            for (int rr = 0; rr < 8; ++rr) mw[rr] = -wacc[8 * qd + rr];
                        } else if constexpr (L::WY && !KDA_WY_NO_W) {
    #pragma unroll
                            for (int rr = 0; rr < 8; ++rr) {
                                const int r = 8 * qd + rr;   // (TPC = 2: row tok0 + r, every quad; zeros past the diagonal)
                                float acc = 0.f;
    #pragma unroll
                                for (int jq = 0; jq <= (L::TPC == 1 ? r / 4 : L::C / 4 - 1); ++jq) {
                                    const float4 t = tw[(tok0 + r) * (L::LW / 4) + jq];
                                    acc = fmaf(t.x, kg[4 * jq], acc);
                                    acc = fmaf(t.y, kg[4 * jq + 1], acc);
                                    acc = fmaf(t.z, kg[4 * jq + 2], acc);
                                    acc = fmaf(t.w, kg[4 * jq + 3], acc);
                                }
                                mw[rr] = -acc;
                            }
                        }
    #pragma unroll
                        for (int w = 0; w < 4; ++w) {
                            const int u = 8 * qd + 2 * w;
                            float k0 = kda_widen1<BF>(xk[u]) * e1[u], k1 = kda_widen1<BF>(xk[u + 1]) * e1[u + 1];
                            if constexpr (L::WY && !KDA_WY_NO_W) { k0 = mw[2 * w]; k1 = mw[2 * w + 1]; }
                            const float q0 = scale * kda_widen1<BF>(xq[u]) * e1[u];
                            const float q1 = scale * kda_widen1<BF>(xq[u + 1]) * e1[u + 1];
                            if constexpr (L::ONE) { kh[w] = pack_bf16x2(k0, k1); qh[w] = pack_bf16x2(q0, q1); }
                            else { split_bf16x2(k0, k1, kh[w], kl[w]); split_bf16x2(q0, q1, qh[w], ql[w]); }
                        }
                        const int ch = tok0 / 8 + qd;
                        *reinterpret_cast<U4*>(kq + (((2 * ch) ^ (c % 8)) * 16)) = U4{kh[0], kh[1], kh[2], kh[3]};
                        *reinterpret_cast<U4*>(kq + (((2 * ch + 1) ^ (c % 8)) * 16)) = U4{qh[0], qh[1], qh[2], qh[3]};
                        if constexpr (!L::ONE) {
                            *reinterpret_cast<U4*>(kq + K * 128 + (((2 * ch) ^ (c % 8)) * 16)) = U4{kl[0], kl[1], kl[2], kl[3]};
                            *reinterpret_cast<U4*>(kq + K * 128 + (((2 * ch + 1) ^ (c % 8)) * 16)) = U4{ql[0], ql[1], ql[2], ql[3]};
                        }
                        kq_done(qd);   // (probe KDA_E_LDG=3: the next chunk's k and q of these tokens)
                    }
                } else {
    #pragma unroll
                for (int u = 0; u < TPT; ++u) {
                    kb[(tok0 + u) * LE + c] = kda_widen1<BF>(xk[u]) * e1[u];
                    qgp[(tok0 + u) * LE + c] = scale * kda_widen1<BF>(xq[u]) * e1[u];
                }
                }
                }
                // AHEAD (18): Kbg / Qg go to WG_C now (it builds chunk n's P1 operands during chunk n - 1);
                // Kd^T and 2^G_L once P4 of chunk n - 2 (which completes early in chunk n - 1) has read its Kd^T
                if constexpr (L::AHEAD) {
                    named_bar_arrive(BAR_FULL + (n & 1), L::NTH);
                    if (n >= 2) named_bar_sync(KdaWgBars::EMPTY_KD + (n & 1), L::NTH);
                }
                // NKD = 3: Kd^T and 2^G_L go to the ring, once P4 has read chunk n - 3's
                if constexpr (L::NKD == 3) {
                    if (n >= 3) named_bar_sync(KdaWgBars::EMPTY_KD + n % 3, L::NTH);
                }
                // Kd^T row c: tokens tok0 .. tok0 + TPT - 1 are 16-byte chunks tok0/8 .. (hi), 4 + that (lo)
                unsigned char* kd = (MAKE ? img : sm + opb(n)) + (ci / 8) * 1024 + (c % 8) * 128;
    #pragma unroll
                for (int qd = 0; qd < TPT / 8; ++qd) {
                    const int ch = tok0 / 8 + qd;
                    *reinterpret_cast<U4*>(kd + ((ch ^ (c % 8)) * 16)) =
                        U4{kdh[4 * qd], kdh[4 * qd + 1], kdh[4 * qd + 2], kdh[4 * qd + 3]};
                    if constexpr (!L::ONE)
                        *reinterpret_cast<U4*>(kd + (((4 + ch) ^ (c % 8)) * 16)) =
                            U4{kdl[4 * qd], kdl[4 * qd + 1], kdl[4 * qd + 2], kdl[4 * qd + 3]};
                }
                if (part == 0) (MAKE ? reinterpret_cast<float*>(img + L::KD_BYTES + L::KQ_BYTES) : gl_of(n))[ci] = gl2;
                if constexpr (!MAKE) {   // (26: the maker publishes the image itself)
                KDA_STAMP(2);
                fence_proxy_async();                                      // Kd^T (19: and [Kg; Qg]^T) is read by wgmma
                named_bar_arrive((L::AHEAD ? KdaWgBars::FULL_KD : BAR_FULL) + (n & 1), L::NTH);   // buffer n & 1 holds chunk n
                KDA_STAMP(3);
                }
}

// Chunk n's T / A2 words and v columns into copy slot n & 1 by two tensor copies (SLOT 2, below), completing
// on the slot's mbarrier: issued by WG_C's thread 0 (14-20) or by 22's producer warp.
template <class L>
static __device__ __forceinline__ void kda_slot_tma(const KdaWgCtx<L>& cx, int n, const TmaMap* tv, const TmaMap* tta) {
    const unsigned slot = cx.base + L::OFF_SLOT + (n & 1) * L::SLOT_BYTES, bar = cx.base + L::OFF_MBAR + 16 + 8 * (n & 1);
    mbar_arrive_expect_tx(bar, L::TA_BYTES + L::C * L::BV * L::ESZ);
    tma_load_4d(slot, tta, 0, 0, (int)((cx.bh * cx.NC + n) * 4 * L::C), 0, bar);
    if constexpr (L::VBOX == L::BV) tma_load_4d(slot + L::TA_BYTES, tv, cx.v0, cx.h, n * L::C, cx.b, bar);
    else {   // 27 on fp32 inputs: boxes of VBOX columns
#pragma unroll
        for (int x = 0; x < L::BV / L::VBOX; ++x)
            tma_load_4d(slot + L::TA_BYTES + x * L::C * 128, tv, cx.v0 + x * L::VBOX, cx.h, n * L::C, cx.b, bar);
    }
}

// WG_C, the whole pass: the chain of products over every chunk, then the final state. Its T / A2
// rows and v rows of chunk n + 1 arrive during chunk n as (SLOT) 0: 16-byte cp.async pieces issued by
// all 128 threads (13); 1: bulk copies, one per row, issued by its first warp (14's "bulk2"); 2: one
// tensor copy of the chunk's 8 KB of T / A2 words (map `tta`: 07's output as rows of C/2 words, boxes
// of 4C rows, 64-byte swizzle) and one of its v box (map `tv`: v as (V, H, T, B), boxes of BV x 1 x C x 1,
// a swizzle of one box row; rows past T zero-filled), issued by one thread (14's "tma2": the slot's
// rows unpadded, L::DENSE, and read through the swizzle, kda_slot_sw, so that ldmatrix and the v reads
// meet no bank conflicts). With SLOT 1 or 2 they complete on the slot's mbarrier at
// `slot_bar` + 8 (slot & 1) (layout L::OFF_MBAR + 16: 14 inits them).
template <class L, int SLOT = 0>
static __device__ __forceinline__ void kda_wg_chain(const KdaWgCtx<L>& cx, const typename KdaIn<L::BF>::T* __restrict__ v,
                                                    const typename KdaIn<L::BF>::T* __restrict__ beta,
                                                    const unsigned* __restrict__ TA, const float* __restrict__ h0,
                                                    typename KdaIn<L::BF>::T* __restrict__ o, float* __restrict__ ht,
                                                    const TmaMap* tv = nullptr, const TmaMap* tta = nullptr,
                                                    const int* __restrict__ ready = nullptr, int epoch = 0) {
    static_assert(SLOT >= 0 && SLOT <= 2 && L::DENSE == (SLOT == 2), "tensor-copied slots are unpadded, the others padded");
    static_assert(!L::W64 || (SLOT == 2 && L::P4R && !L::WY && !L::AHEAD), "27: 24's tensor-copy loop");
    constexpr bool BSLOT = SLOT > 0;
    constexpr int K = L::K, V = L::V, C = L::C, BV = L::BV;
    constexpr bool BF = L::BF;
    using TIn = typename KdaIn<BF>::T;
    constexpr int MT = L::MT, NJ = BV / 8, KS = K / 16, LE = L::LE, LC = L::LC, LV = L::LV;
    constexpr int BAR_CONS = KdaWgBars::CONS, BAR_FULL = KdaWgBars::FULL, BAR_EMPTY = KdaWgBars::EMPTY;
    const int tid = cx.tid, warp = cx.warp, lane = cx.lane, g8 = lane / 4, t4 = lane % 4;
    const int v0 = cx.v0, h = cx.h, b = cx.b, H = cx.H, NC = cx.NC;
    const long long TT = cx.TT, bh = cx.bh, stamp0_ = cx.stamp0_;
    (void)stamp0_; (void)LE;
    const unsigned base = cx.base;
    unsigned char* const sm = cx.sm;
    auto opb = [&](int m) { return cx.opb(m); };
    auto kb_of = [&](int m) { return cx.kb_of(m); };
    auto qg_of = [&](int m) { return cx.qg_of(m); };
    auto gl_of = [&](int m) { return cx.gl_of(m); };
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
        if constexpr (L::ONE) {   // 17: the hi tile only, two column groups per stmatrix: (j), (j, + 8), (j + 1), (j + 1, + 8)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int j = 0; j < NJ; j += 2) {
                    const unsigned m[4] = {pack_bf16x2(sacc[mt][4 * j], sacc[mt][4 * j + 1]),
                                           pack_bf16x2(sacc[mt][4 * j + 2], sacc[mt][4 * j + 3]),
                                           pack_bf16x2(sacc[mt][4 * j + 4], sacc[mt][4 * j + 5]),
                                           pack_bf16x2(sacc[mt][4 * j + 6], sacc[mt][4 * j + 7])};
                    const int mi = lane / 8, r = lane % 8;
                    stmatrix_x4_trans(kda_sw128(sth_a + mt * (BV * 128), 8 * (j + mi / 2) + r, 2 * warp + (mi & 1)), m);
                }
            return;
        }
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
    const unsigned slot_bar = base + L::OFF_MBAR + 16;   // BSLOT: the two slots' mbarriers
    auto copy_slot = [&](int n) {
        unsigned* dta = reinterpret_cast<unsigned*>(slot(n));
        const unsigned* src = ta_head + (long long)n * (4 * C * (C / 2));
        if constexpr (SLOT == 2) {   // thread 0: the chunk's T / A2 rows and its v box, swizzled (22: its producer warp)
            (void)src; (void)dta;
            if constexpr (L::W64) {   // 27 beside 07 (epoch > 0): 07 has published chunk n's words
                if (tid == 0 && epoch > 0) kda_wait_ready(ready + bh * NC + n, epoch);
            }
            if (tid == 0 && !L::PRE) kda_slot_tma<L>(cx, n, tv, tta);
            return;
        }
        if constexpr (BSLOT) {   // warp 0: 4C rows of C/2 words (T, A2 hi/lo) and C rows of v; rows past T repeat row T - 1
            if (warp != 0) return;
            constexpr unsigned TROW = (C / 2) * 4, VROW = BV * sizeof(TIn);
            const unsigned bar = slot_bar + 8 * (n & 1);
            if (lane == 0) mbar_arrive_expect_tx(bar, 4 * C * TROW + C * VROW);
            for (int j = lane; j < 4 * C; j += 32) bulk_copy(smem_u32(dta + j * LC), src + j * (C / 2), TROW, bar);
            TIn* dv = reinterpret_cast<TIn*>(slot(n) + L::TA_BYTES);
            for (int r = lane; r < C; r += 32) {
                const long long t0 = (long long)n * C + r, t = t0 < TT ? t0 : TT - 1;   // read as beta = 0 past T
                bulk_copy(smem_u32(dv + r * LV), v + kda_bthd(b, t, h, v0, TT, H, V), VROW, bar);
            }
            return;
        }
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
    auto wait_slot = [&](int n) {   // slot n & 1 holds chunk n (this thread's view)
        if constexpr (BSLOT) {
            if (KDA_PROBE != 4 || n == 0) mbar_wait(slot_bar + 8 * (n & 1), (n >> 1) & 1);   // probe 4: no copy after 0
        }
        else cp_async_wait<0>();
    };
    // 25 (WY): chunk m's (beta v)^T into the X^T tile ([BV][32 tokens hi | lo]), P1's B for U = T beta v; beta_m: token i's
    auto write_bv = [&](int m, float beta_m) {
        const TIn* sv = reinterpret_cast<const TIn*>(slot(m) + L::TA_BYTES);
        float bv[BV / 4];
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            const float2 vv = kda_ld2<BF>(sv + kda_slot_sw<SLOT == 2 ? BV * (int)sizeof(TIn) : 0>(
                                                   i * LV + 8 * j + 2 * t4, (int)sizeof(TIn)) / (int)sizeof(TIn));
            bv[2 * j] = beta_m * vv.x;
            bv[2 * j + 1] = beta_m * vv.y;
        }
        write_tok_t(sx_a, bv);
    };
    copy_slot(0);
    if constexpr (L::WY) { if (1 < NC) copy_slot(1); }   // 25: each slot a chunk ahead of the one it is read in
    wait_slot(0);
    load_beta(0);
    if constexpr (L::WY) {   // 25: chunk 0's (beta v)^T tile for its P1
        write_bv(0, kda_widen1<BF>(rbeta));
        fence_proxy_async();
    }
    named_bar_sync(BAR_CONS, 128);   // S^T and slot 0 complete (25: and chunk 0's (beta v)^T)

    // P1's A fragments: rows g8 = Kbg of token i, g8 + 8 = Qg of token i; k step s = channels 16s ..
    unsigned ah[KS][4], al[KS][4];
    constexpr bool LDA = L::SMA && KDA_P1_LDA;   // probe: the SMA tile's fragments by ldmatrix (KDA_P1_LDA)
    auto build = [&](int n) {
        if constexpr (LDA) {
            // [Kg; Qg]^T of chunk n (K rows of 64 bf16, 128-byte swizzle): matrix mi of k step s is rows (channels)
            // 16s + 8 (mi / 2) .., 16-byte chunk 2 warp + mi % 2 (Kg, then Qg, of this warp's tokens); .trans hands
            // lane l the pair (k = 2 (l % 4), + 1) of row (token) l / 4: the m64k16 A fragment a0 .. a3
            const int mi = lane / 8, r = lane % 8;
            const unsigned a0 = kda_sw128(base + cx.kq_of(n), 8 * (mi / 2) + r, 2 * warp + (mi & 1));
#pragma unroll
            for (int s = 0; s < KS; ++s) {
                ldmatrix_x4_trans_at(ah[s], a0, s * 2048);
                if constexpr (!L::ONE) ldmatrix_x4_trans_at(al[s], a0, K * 128 + s * 2048);
            }
            return;
        }
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
    // P1: [Kbg; Qg] S from the built A fragments and the S^T tile, three terms (17: one)
    // (probe KDA_P1_CHAINS=3: the two lo terms into p1c[0], p1c[1], each its own chain; p1 += both once complete)
    // (the chain probes take the main loop only: not 18's, 25's or KDA_NO_P2's, which stay as built)
    constexpr bool MAIN = !L::WY && !L::AHEAD && !(KDA_NO_P2 && L::SMA && !L::HILO && L::NKD == 2);
    constexpr bool P1C = KDA_P1_CHAINS == 3 && !L::ONE && KDA_P1_TERMS == 3 && MAIN;
    float p1c[2][BV / 2];   // (unused as built: the compiler drops them)
    auto issue_p1 = [&](float (&p1)[BV / 2], int n) {
        float (&pl)[BV / 2] = p1c[0];
        float (&ph)[BV / 2] = p1c[1];
#pragma unroll
        for (int s = 0; s < KS; ++s) {
            const unsigned off = (s / 4) * (BV * 128) + 32 * (s % 4);
            if constexpr (L::SMA && !LDA) {   // 19: A = [Kg; Qg]^T of chunk n, MN-major: k step s is its rows 16s .. (2048 bytes on)
                const unsigned kq = base + cx.kq_of(n) + s * 2048;
                auto mna = [](unsigned addr) { return wgmma_desc_sw128(addr, 8192, 1024); };
                if constexpr (!L::ONE && KDA_P1_TERMS == 3) {
                    if constexpr (P1C) {
                        wgmma_ss_mna<BV>(pl, mna(kq + K * 128), desc(sth_a + off), s > 0);   // lo x hi
                        wgmma_ss_mna<BV>(ph, mna(kq), desc(stl_a + off), s > 0);             // hi x lo
                    } else {
                        wgmma_ss_mna<BV>(p1, mna(kq + K * 128), desc(sth_a + off), s > 0);   // lo x hi
                        wgmma_ss_mna<BV>(p1, mna(kq), desc(stl_a + off), 1);                 // hi x lo
                    }
                }
                wgmma_ss_mna<BV>(p1, mna(kq), desc(sth_a + off), L::ONE || KDA_P1_TERMS == 1 || P1C ? s > 0 : 1);   // hi x hi
                continue;
            }
            if constexpr (L::ONE || KDA_P1_TERMS == 1) {   // 17: one term, Kbg / Qg hi times S hi
                wgmma_rs_kb<BV, true>(p1, ah[s], desc(sth_a + off), s > 0);
                continue;
            }
            if constexpr (P1C) {
                wgmma_rs_kb<BV, true>(pl, al[s], desc(sth_a + off), s > 0);
                wgmma_rs_kb<BV, true>(ph, ah[s], desc(stl_a + off), s > 0);
                wgmma_rs_kb<BV, true>(p1, ah[s], desc(sth_a + off), s > 0);
            } else {
                wgmma_rs_kb<BV, true>(p1, al[s], desc(sth_a + off), s > 0);
                wgmma_rs_kb<BV, true>(p1, ah[s], desc(stl_a + off), 1);
                wgmma_rs_kb<BV, true>(p1, ah[s], desc(sth_a + off), 1);
            }
        }
    };
    // a product's sums once complete (the chain probes: its two lo terms' accumulators added to the hi x hi one)
    auto sums_done = [](float (&acc)[BV / 2], float (&lo)[2][BV / 2], bool split) {   // split: a compile-time constant
        fence_regs(acc);
        if (split) {
            fence_regs(lo[0]);
            fence_regs(lo[1]);
#pragma unroll
            for (int x = 0; x < BV / 2; ++x) acc[x] += lo[0][x] + lo[1][x];
        }
    };
    // 24 (P4R; probe KDA_P4_LDA in the other forms): P4's A fragments, Kd^T of chunk m ([tile][k step][lo / hi]; ONE:
    // hi only), K-major rows of the buffer: matrix mi of tile mt, k step s is channels 64 mt + 16 warp + 8 (mi % 2) ..,
    // tokens 16s + 8 (mi / 2) ..
    constexpr bool P4L = (KDA_P4_LDA || L::P4R) && !L::AHEAD;
    // probe (24), and 28 as built: buffer n & 1 free after load_kd (28: the other block's copy of chunk n + 2 has the rest
    // of the chunk to land)
    constexpr bool KD_EARLY = (KDA_KD_EARLY || L::PAIR) && L::P4R && L::NKD == 2;
    constexpr bool NO_P2 = KDA_NO_P2 && L::SMA && !L::HILO && !L::AHEAD && L::NKD == 2;   // probe (19, 20, 22, 24)
    static_assert(!NO_P2 || (KDA_PROBE != 3 && !KD_EARLY), "KDA_NO_P2: no clock stamps, no early hand-back");
    static_assert(!L::WY || !KDA_LATE_SIDE, "25's loop takes the side work where 19's does (KDA_LATE_SIDE=0)");
    unsigned kdf[P4L ? MT : 1][2][2][4];
    auto load_kd = [&](int m) {
        if constexpr (P4L) {
            const int mi = lane / 8, r = lane % 8, row = 16 * warp + 8 * (mi & 1) + r;
            const unsigned kd_a = base + opb(m);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int s = 0; s < 2; ++s)
#pragma unroll
                    for (int hl = L::ONE ? 1 : 0; hl < 2; ++hl) {   // 0: lo words (bytes 64 on), 1: hi
                        const unsigned a = L::FOLD ? kda_sw128(kd_a, row, 4 * mt + 2 * s + mi / 2)
                                                   : kda_sw128(kd_a + mt * 8192, row, 2 * s + mi / 2 + (hl ? 0 : 4));
                        ldmatrix_x4_at(kdf[mt][s][hl], a, 0);
                    }
        }
    };
    // P4 of chunk m: S += Kd^T V' (V'^T of chunk m in its tile; the caller fences and commits)
    // (probe KDA_P4_CHAINS=2, 24: the lo terms of tile mt into p4c[mt], each its own chain; p4_done adds them to S)
    constexpr bool P4C = KDA_P4_CHAINS == 2 && P4L && !L::ONE && MAIN;
    float p4c[P4C ? MT : 1][BV / 2];
    auto issue_p4 = [&](int m) {
        const unsigned kd_a = base + opb(m);
#pragma unroll
        for (int s = 0; s < 2; ++s)
#pragma unroll
            for (int term = L::ONE ? 2 : 0; term < 3; ++term)   // 17: the hi x hi term only
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {   // the m64 tiles' chains interleaved
                    const unsigned a = L::FOLD ? kd_a + 64 * mt + 32 * s   // 22 (bf16): tile 1 in the rows' second half
                                              : kd_a + mt * 8192 + 32 * s + (term == 0 ? 64 : 0);
                    const unsigned bb = svp_a + 32 * s + (term == 1 ? 64 : 0);
                    if constexpr (P4C) {
                        if (term < 2) wgmma_rs_kb<BV, true>(p4c[mt], kdf[mt][s][term == 0 ? 0 : 1], desc(bb), s + term > 0);
                        else wgmma_rs_kb<BV, true>(sacc[mt], kdf[mt][s][1], desc(bb), 1);
                    } else if constexpr (P4L) {
                        wgmma_rs_kb<BV, true>(sacc[mt], kdf[mt][s][term == 0 ? 0 : 1], desc(bb), 1);
                    } else {
                        wgmma_ss<BV, true>(sacc[mt], desc(a), desc(bb), 1);   // (P4L: load_kd's fragments of a)
                    }
                }
    };
    auto p4_done = [&]() {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) fence_regs(sacc[mt]);
        if constexpr (P4C) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                fence_regs(p4c[mt]);
#pragma unroll
                for (int x = 0; x < BV / 2; ++x) sacc[mt][x] += p4c[mt][x];
            }
        }
    };
    // P2's A rows of chunk n's slot (warp's tokens: T rows at g8, A2 rows at g8 + 8)
    auto load_ta = [&](int n, unsigned (&ta)[2][2][4]) {   // [hi/lo][k step][a0..a3]
        const unsigned* sta = reinterpret_cast<const unsigned*>(slot(n));
        const int mi = lane / 8, r = lane % 8;      // matrix mi: T (even) or A2 (odd), words 0-3 or 4-7
#pragma unroll
        for (int hl = 0; hl < 2; ++hl)
#pragma unroll
            for (int s = 0; s < 2; ++s)
                ldmatrix_x4(ta[hl][s], sta + kda_slot_sw<SLOT == 2 ? 64 : 0>(
                                           ((mi & 1) * 2 + hl) * C * LC + (8 * warp + r) * LC + 8 * s + (mi / 2) * 4, 4) / 4);
    };
    // X = beta (v - Kg S) or beta v - Kbg S (rows g8: token i), Ob = Qg S (rows g8 + 8), from P1's rows
    auto x_ob = [&](int n, float beta_i, const float (&p1)[BV / 2], float (&x)[BV / 4], float (&ob)[BV / 4]) {
        const TIn* sv = reinterpret_cast<const TIn*>(slot(n) + L::TA_BYTES);
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            const int c = 8 * j + 2 * t4;
            const float2 vv = kda_ld2<BF>(sv + KdaVOff<L, SLOT>::at(i, c));
            if constexpr (L::DIET) {   // P1's rows are Kg S (15: WG_E leaves beta to this row)
                x[2 * j] = beta_i * (vv.x - p1[4 * j]);
                x[2 * j + 1] = beta_i * (vv.y - p1[4 * j + 1]);
            } else {
                x[2 * j] = beta_i * vv.x - p1[4 * j];
                x[2 * j + 1] = beta_i * vv.y - p1[4 * j + 1];
            }
            ob[2 * j] = p1[4 * j + 2];
            ob[2 * j + 1] = p1[4 * j + 3];
        }
    };
    // P2: [V'; A2 X] = [T; A2] X (three terms), from ta and the X^T tile
    // (probe KDA_NO_P2: B from the V'^T tile, bt)
    // (probe KDA_P2_CHAINS=3, the main loop's P2 (chain = true): the two lo terms into p2c[0], p2c[1]; p2_done adds them)
    constexpr bool P2C = KDA_P2_CHAINS == 3 && MAIN;
    float p2c[2][BV / 2];
    auto issue_p2 = [&](float (&p2)[BV / 2], const unsigned (&ta)[2][2][4], bool onto = false, unsigned bt = 0,
                        bool chain = false) {
        if (!bt) bt = sx_a;   // onto: p2 += ...
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            if (P2C && chain) {
                wgmma_rs_kb<BV, true>(p2c[0], ta[1][s], desc(bt + 32 * s), s > 0);
                wgmma_rs_kb<BV, true>(p2c[1], ta[0][s], desc(bt + 64 + 32 * s), s > 0);
                wgmma_rs_kb<BV, true>(p2, ta[0][s], desc(bt + 32 * s), onto || s > 0);
                continue;
            }
            wgmma_rs_kb<BV, true>(p2, ta[1][s], desc(bt + 32 * s), onto || s > 0);
            wgmma_rs_kb<BV, true>(p2, ta[0][s], desc(bt + 64 + 32 * s), 1);
            wgmma_rs_kb<BV, true>(p2, ta[0][s], desc(bt + 32 * s), 1);
        }
    };
    // o = Ob + A2 X (rows g8 + 8) stored; V' (rows g8) returned for V'^T. with_ob = false: P2 started from Ob
    auto o_vp = [&](long long t0, const float (&ob)[BV / 4], const float (&p2)[BV / 2], float (&vp)[BV / 4],
                    bool with_ob = true) {
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            const long long t = t0 + i;
            if (t < TT)
                kda_st2<BF>(o + kda_bthd(b, t, h, v0 + 8 * j + 2 * t4, TT, H, V),
                            with_ob ? ob[2 * j] + p2[4 * j + 2] : p2[4 * j + 2],
                            with_ob ? ob[2 * j + 1] + p2[4 * j + 3] : p2[4 * j + 3]);
            vp[2 * j] = p2[4 * j];
            vp[2 * j + 1] = p2[4 * j + 1];
        }
    };
    // probe KDA_O_BULK: chunk n's o into a tile past the layout (rows of BV + 8 words: a warp's float2 stores of 8
    // tokens spread over the banks), stored by warp 0's bulk copies once V'^T's barrier has passed
    constexpr bool OBULK = KDA_O_BULK && MAIN && !BF && L::P4R;   // (24: its launch leaves the room)
    constexpr bool OWARP = KDA_O_WARP && MAIN && L::P4R && !OBULK;   // probe KDA_O_WARP: the store warp takes the tile
    if constexpr (OBULK || OWARP) {
        if (kda_dynamic_smem_size() < (unsigned)(L::OT_END + 1024)) __trap();
    }
    auto o_tile = [&](const float (&ob)[BV / 4], const float (&p2)[BV / 2], float (&vp)[BV / 4]) {
        float* ot = reinterpret_cast<float*>(sm + L::OT_OFF) + i * L::OT_LD;
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            *reinterpret_cast<float2*>(ot + 8 * j + 2 * t4) = make_float2(ob[2 * j] + p2[4 * j + 2], ob[2 * j + 1] + p2[4 * j + 3]);
            vp[2 * j] = p2[4 * j];
            vp[2 * j + 1] = p2[4 * j + 1];
        }
    };
    auto o_bulk = [&](long long t0) {   // warp 0, after the barrier that follows the tile's writes and proxy fence
        if (warp != 0) return;
        const long long t = t0 + lane;
        if (t < TT) bulk_store(o + kda_bthd(b, t, h, v0, TT, H, V), base + L::OT_OFF + lane * L::OT_LD * 4, BV * 4);
        bulk_store_commit();
    };
    // 30 (and the probe build KDA_O_LATE): chunk n's o (rows g8 + 8: Ob + A2 X) kept here, stored behind chunk n + 1's
    // P1 issue
    constexpr bool OLATE = (KDA_O_LATE || L::LATE) && MAIN;   // 30, and the probe build of 19-24
    float ol[BV / 4];
    long long t_ol = -1;   // its first token (-1: nothing kept)
    auto o_keep = [&](long long t0, const float (&ob)[BV / 4], const float (&p2)[BV / 2], float (&vp)[BV / 4]) {
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            ol[2 * j] = ob[2 * j] + p2[4 * j + 2];
            ol[2 * j + 1] = ob[2 * j + 1] + p2[4 * j + 3];
            vp[2 * j] = p2[4 * j];
            vp[2 * j + 1] = p2[4 * j + 1];
        }
        t_ol = t0;
    };
    auto o_flush = [&]() {
        if (t_ol < 0) return;
        const long long t = t_ol + i;
        if (t < TT && KDA_O_LATE != 2) {
#pragma unroll
            for (int j = 0; j < NJ; ++j)
                kda_st2<BF>(o + kda_bthd(b, t, h, v0 + 8 * j + 2 * t4, TT, H, V), ol[2 * j], ol[2 * j + 1]);
        }
        t_ol = -1;
    };
    // the state's decay by chunk m's 2^G_L (in S's rows)
    auto decay = [&](int m) {
        const float* dd = gl_of(m);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const float d0 = dd[64 * mt + 16 * warp + g8], d1 = dd[64 * mt + 16 * warp + g8 + 8];
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                sacc[mt][4 * j] *= d0; sacc[mt][4 * j + 1] *= d0;
                sacc[mt][4 * j + 2] *= d1; sacc[mt][4 * j + 3] *= d1;
            }
        }
    };
    // chunk m's operand buffer is full: WG_E's hand-over (FULL), or (22) its image's bulk copy landed
    auto full_wait = [&](int m) {
        if constexpr (L::PRE) {
            KDA_TL(const unsigned long long tl_a = kda_gtime();)
            mbar_wait(base + L::OFF_MBAR + 32 + 8 * (m & 1), (m >> 1) & 1);
            KDA_TL(if (tid == 0) kda_tl_full_wait += kda_gtime() - tl_a;)
        } else {
            named_bar_sync(BAR_FULL + (m & 1), L::NTH);
            // 28: and the other block's half of it (its WG_E's bulk copies, completing on PFULL m & 1 here)
            if (L::PAIR && !(KDA_PAIR_DIAG & 1)) mbar_wait(base + L::OFF_MBAR + 32 + 8 * (m & 1), (m >> 1) & 1);
        }
    };
    full_wait(0);
    if constexpr (!L::SMA || LDA) build(0);
    if constexpr (L::AHEAD) {
        // ====================== 18: chunk n + 1's P1 a chunk early (18_chunk_state_ahead.cu says why)
        // P1 of chunk m = [Kg; Qg]_m S_m = [Kg; Qg]_m (D S)_{m-1} + W_m V'_{m-1}, W_m = [Kg; Qg]_m Kd_{m-1}^T:
        // both products need only what chunk m - 1 starts with, so they run during chunk m - 1 (PQ), and
        // what stays between V'_{m-1} and X_m is W_m V'_{m-1} (two k steps). The S^T tile holds (D S)_{m-1}.
        // Every wgmma writes accumulators of its own site; what crosses from one chunk to the next
        // (P1a, W) is copied out once complete (ptxas serializes the wgmmas of a loop whose accumulators
        // are defined at two sites, the prologue's and the loop's).
        float c1[BV / 2];   // P1a of the next chunk: [Kg; Qg]_m (D S)_{m-1}
        unsigned wh[2][4], wl[2][4];   // W_m as A fragments (hi / lo): k step s = tokens 16s .. (column groups 2s, 2s + 1)
        // W's accumulators hold columns 0-31 from Kd^T hi (32-63: Kd^T's unused lo half, not read)
        auto w_frags = [&](const float (&qw)[32]) {
#pragma unroll
            for (int s = 0; s < 2; ++s)
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const int j = 2 * s + (q >> 1), e = 2 * (q & 1);
                    split_bf16x2(qw[4 * j + e], qw[4 * j + e + 1], wh[s][q], wl[s][q]);
                }
        };
#pragma unroll
        for (int s = 0; s < 2; ++s)
#pragma unroll
            for (int q = 0; q < 4; ++q) wh[s][q] = wl[s][q] = 0u;   // chunk 0's P1b and P4 multiply zeros: W and V'^T
        for (int idx = tid; idx < BV * 32; idx += 128) reinterpret_cast<unsigned*>(sm + L::OFF_VP)[idx] = 0u;
        fence_proxy_async();
        named_bar_sync(BAR_CONS, 128);
        auto kdt_mn = [](unsigned addr) { return wgmma_desc_sw128(addr, 8192, 1024); };   // Kd^T: MN-major B, one 64-wide chunk
        auto issue_pq = [&](int m, float (&q1)[BV / 2], float (&qw)[32]) {   // from the built A fragments (hi: ONE)
            wgmma_fence();
            issue_p1(q1, m);
            const unsigned kd_a = base + opb(m > 0 ? m - 1 : 0);   // chunk 0 has no W (its result is not read)
#pragma unroll
            for (int s = 0; s < KS; ++s) {   // k step s: channels 16s .. 16s + 15, Kd^T rows 16s ..
                wgmma_rs<64, true>(qw, ah[s], kdt_mn(kd_a + s * 2048), s > 0);
            }
            wgmma_commit();
        };
        if (2 < NC) named_bar_arrive(BAR_EMPTY + 0, L::NTH);   // chunk 0's Kbg / Qg are built
        named_bar_sync(KdaWgBars::FULL_KD + 0, L::NTH);        // chunk 0's Kd^T (the unread W of chunk 0)
        {
            float q1[BV / 2], qw[32];
            issue_pq(0, q1, qw);   // P1 of chunk 0: [Kg; Qg]_0 S_0 (the S^T tile holds S_0)
            wgmma_wait<0>();
            fence_regs(q1);
#pragma unroll
            for (int e = 0; e < BV / 2; ++e) c1[e] = q1[e];
        }
        named_bar_sync(BAR_CONS, 128);   // every warp's PQ has read S^T before chunk 0 overwrites it
        for (int n = 0; n < NC; ++n) {
            const long long t0 = (long long)n * C;
            KDA_STAMP(0);
            float pb[BV / 2];   // P1b: W_n V'_{n-1} (chunk 0: W and V'^T zero; a wgmma issued under
            {                   // a branch here would make ptxas serialize them all)
                // ------------------------------------------ P1b (3 terms), then P4 of chunk n - 1
                wgmma_fence();
#pragma unroll
                for (int s = 0; s < 2; ++s) {
                    wgmma_rs_kb<BV, true>(pb, wl[s], desc(svp_a + 32 * s), s > 0);
                    wgmma_rs_kb<BV, true>(pb, wh[s], desc(svp_a + 64 + 32 * s), 1);
                    wgmma_rs_kb<BV, true>(pb, wh[s], desc(svp_a + 32 * s), 1);
                }
                wgmma_commit();
                issue_p4(n > 0 ? n - 1 : 0);   // S_n = (D S)_{n-1} + Kd_{n-1}^T V'_{n-1}: completes while X_n is
                wgmma_commit();                // formed (chunk 0: V'^T is zero, S_0 unchanged)
            }
            if (n + 1 < NC && KDA_PROBE != 4) copy_slot(n + 1);   // lands during this chunk; waited before its last barrier
            const float beta_i = kda_widen1<BF>(rbeta);
            if (n + 1 < NC) load_beta(n + 1);
            unsigned ta[2][2][4];
            load_ta(n, ta);
            wgmma_wait<1>();   // P1b (P4 may still run)
            fence_regs(pb);
            KDA_STAMP(1);
            float p1[BV / 2], x[BV / 4], ob[BV / 4];
#pragma unroll
            for (int e = 0; e < BV / 2; ++e) p1[e] = c1[e] + pb[e];
            x_ob(n, beta_i, p1, x, ob);
            write_tok_t(sx_a, x);
            wgmma_wait<0>();   // P4 of chunk n - 1: S_n
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) fence_regs(sacc[mt]);
            if (n >= 1 && n + 1 < NC) named_bar_arrive(KdaWgBars::EMPTY_KD + ((n - 1) & 1), L::NTH);   // Kd^T of n - 1 read
            if (n > 0) named_bar_sync(KdaWgBars::FULL_KD + (n & 1), L::NTH);   // chunk n's Kd^T and 2^G_L
            decay(n);
            write_st();        // (D S)_n, for P1 of chunk n + 1 (the tile's last reader, PQ of chunk n, is done)
            fence_proxy_async();
            named_bar_sync(BAR_CONS, 128);   // X^T and S^T complete
            KDA_STAMP(2);
            // ------------------------------------------ P2, then PQ of chunk n + 1 behind it
            float p2[BV / 2], q1[BV / 2], qw[32];
#pragma unroll
            for (int j = 0; j < NJ; ++j) {   // P2 accumulates onto [0; Ob]: o needs no registers of its own
                p2[4 * j] = p2[4 * j + 1] = 0.f;
                p2[4 * j + 2] = ob[2 * j];
                p2[4 * j + 3] = ob[2 * j + 1];
            }
            wgmma_fence();
            issue_p2(p2, ta, true);
            wgmma_commit();
            if (n + 1 < NC) {
                named_bar_sync(BAR_FULL + ((n + 1) & 1), L::NTH);   // chunk n + 1's Kbg / Qg
                build(n + 1);
                if (n + 3 < NC) named_bar_arrive(BAR_EMPTY + ((n + 1) & 1), L::NTH);
                issue_pq(n + 1, q1, qw);
                wgmma_wait<1>();   // P2
            } else {
                wgmma_wait<0>();
            }
            fence_regs(p2);
            KDA_STAMP(3);
            float vp[BV / 4];
            o_vp(t0, ob, p2, vp, false);
            write_tok_t(svp_a, vp);   // its readers, P1b and P4 of chunk n - 1, are done
            fence_proxy_async();
            if (n + 1 < NC) {
                wait_slot(n + 1);
                wgmma_wait<0>();   // PQ of chunk n + 1 (before the barrier: after it, (D S)_{n+1} may overwrite S^T)
                fence_regs(q1);
                fence_regs(qw);
#pragma unroll
                for (int e = 0; e < BV / 2; ++e) c1[e] = q1[e];
                w_frags(qw);
            }
            named_bar_sync(BAR_CONS, 128);   // V'^T complete, chunk n + 1's slot landed, PQ done
            KDA_STAMP(4);
        }
        wgmma_fence();
        issue_p4(NC - 1);   // the last chunk's state update
        wgmma_commit();
        wgmma_wait<0>();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) fence_regs(sacc[mt]);
    } else {
    if (L::NKD == 3 && 2 < NC) named_bar_arrive(BAR_EMPTY + 0, L::NTH);   // chunk 0's Kbg / Qg buffer is free
    for (int n = 0; n < NC; ++n) {
        const long long t0 = (long long)n * C;
        KDA_STAMP(0);
#if !KDA_LATE_SIDE
        // (25: slot n + 1 was copied a chunk earlier, once chunk n - 1 had read its T words: write_bv waits for it
        // half-way through this chunk, too soon for a copy issued here)
        if (n + 1 < NC && KDA_PROBE != 4 && !L::WY) copy_slot(n + 1);   // lands during this chunk; waited before its last barrier
        const float beta_i = kda_widen1<BF>(rbeta);
        if (n + 1 < NC) load_beta(n + 1);
        decay(n);   // the state's decay for this chunk's update (S went to S^T before it)
#else
        const float beta_i = kda_widen1<BF>(rbeta);
#endif
        if constexpr (L::WY) {
            // ============================================ 25: the WY form's chain, P1 then P4
            // P1: [V'; Ob] = [-W; Qg] S + [T; 0] (beta v): WG_E's tile holds -W = -T Kbg in Kg's rows, and the U part takes
            // T's rows of this chunk's slot (A2's rows, Aqk here, zeroed) and the (beta v)^T tile made a chunk ago
            unsigned ta[2][2][4], tu[2][2][4];   // [hi/lo][k step][a0..a3]: [T; Aqk] (o's product), [T; 0] (U)
            load_ta(n, ta);
#pragma unroll
            for (int hl = 0; hl < 2; ++hl)
#pragma unroll
                for (int s = 0; s < 2; ++s) {
                    tu[hl][s][0] = ta[hl][s][0]; tu[hl][s][1] = 0u; tu[hl][s][2] = ta[hl][s][2]; tu[hl][s][3] = 0u;
                }
            float p1[BV / 2];
            wgmma_fence();
            issue_p1(p1, n);
            issue_p2(p1, tu, true, sx_a);
            wgmma_commit();
            load_kd(n);   // P4's A fragments while P1 runs
            wgmma_wait<0>();
            fence_regs(p1);
            KDA_STAMP(1);
            float vp[BV / 4], ob[BV / 4];
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                vp[2 * j] = p1[4 * j]; vp[2 * j + 1] = p1[4 * j + 1];
                ob[2 * j] = p1[4 * j + 2]; ob[2 * j + 1] = p1[4 * j + 3];
            }
            write_tok_t(svp_a, vp);
            fence_proxy_async();
            named_bar_sync(BAR_CONS, 128);   // V'^T complete; every thread's T words of slot n & 1 read (P1 has run)
            if (n + 2 < NC && KDA_PROBE != 4) copy_slot(n + 2);   // into slot n & 1: a chunk's time to land
            KDA_STAMP(2);
            // P4: S = 2^G_L S + Kd^T V', then o's product Aqk V' (rows g8 + 8 of [T; Aqk] V') behind it, off the chain
            wgmma_fence();
            issue_p4(n);
            wgmma_commit();
            float p2[BV / 2];
            issue_p2(p2, ta, false, svp_a);
            wgmma_commit();
            if (n + 1 < NC) {   // while they run: the next chunk's buffer, slot and (beta v)^T (P1 has read the tile)
                full_wait(n + 1);
                if constexpr (LDA) build(n + 1);   // probe KDA_P1_LDA: P1's A fragments from the tile
                wait_slot(n + 1);
                write_bv(n + 1, kda_widen1<BF>(rbeta));   // rbeta: chunk n + 1's (load_beta above)
            }
            KDA_STAMP(3);
            wgmma_wait<1>();   // P4
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) fence_regs(sacc[mt]);
            KDA_STAMP(4);
            if (n + 2 < NC) named_bar_arrive(BAR_EMPTY + (n & 1), L::NTH);   // buffer n & 1 is free
            if (n + 1 < NC) write_st();
            fence_proxy_async();
            wgmma_wait<0>();   // o's product (it read V'^T: the barrier below orders that before the next chunk's store)
            fence_regs(p2);
            o_vp(t0, ob, p2, vp);
            if (n + 1 < NC) named_bar_sync(BAR_CONS, 128);   // S^T and (beta v)^T complete, slot n + 1 landed
            KDA_STAMP(5);
            continue;
        }
        // ------------------------------------------------ P1: [Kbg S; Ob] = [Kbg; Qg] S
        float p1[BV / 2];
        wgmma_fence();
        issue_p1(p1, n);
        wgmma_commit();
#if KDA_LATE_SIDE   // probe: the side work behind P1's issue (thread 0's copies no longer delay the wgmmas)
        if (n + 1 < NC && KDA_PROBE != 4) copy_slot(n + 1);
        if (n + 1 < NC) load_beta(n + 1);
        decay(n);
#endif
        if constexpr (OLATE) o_flush();   // probe: the chunk before's o, while P1 runs
        // while P1 runs: this chunk's P2 A rows (warp's tokens: T rows at g8, A2 rows at g8 + 8)
        unsigned ta[2][2][4];   // [hi/lo][k step][a0..a3]
        load_ta(n, ta);
        if constexpr (NO_P2) load_kd(n);   // probe: P4 follows P1 directly
        wgmma_wait<0>();
        sums_done(p1, p1c, P1C);
        KDA_STAMP(1);
        // X = beta v - Kbg S (rows g8: token i), Ob = Qg S (rows g8 + 8)
        float x[BV / 4], ob[BV / 4];
        x_ob(n, beta_i, p1, x, ob);
        if constexpr (NO_P2) {
            // ------------------------------------------------ probe KDA_NO_P2: X in V''s place, P4, then o's product
            write_tok_t(svp_a, x);
            fence_proxy_async();
            named_bar_sync(BAR_CONS, 128);
            wgmma_fence();
            issue_p4(n);
            wgmma_commit();
            float p2[BV / 2];
            issue_p2(p2, ta, false, svp_a);   // o's product behind P4, off the chain
            wgmma_commit();
            if (n + 1 < NC) {
                full_wait(n + 1);
                if constexpr (LDA) build(n + 1);
            }
            wgmma_wait<1>();   // P4
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) fence_regs(sacc[mt]);
            if (n + 2 < NC) named_bar_arrive(BAR_EMPTY + (n & 1), L::NTH);   // buffer n & 1 is free
            if (n + 1 < NC) {
                write_st();
                fence_proxy_async();
                wait_slot(n + 1);
            }
            wgmma_wait<0>();   // o's product (it read V'^T: the barrier below orders that before the next chunk's store)
            fence_regs(p2);
            float vp[BV / 4];
            o_vp(t0, ob, p2, vp);
            if (n + 1 < NC) named_bar_sync(BAR_CONS, 128);
            continue;
        }
        write_tok_t(sx_a, x);
        fence_proxy_async();
        if (OBULK && warp == 0) bulk_store_wait_all();   // probe: the chunk before's o has left the tile
        named_bar_sync(BAR_CONS, 128);
        KDA_STAMP(2);
        // ------------------------------------------------ P2: [V'; A2 X] = [T; A2] X
        float p2[BV / 2];
        wgmma_fence();
        issue_p2(p2, ta, false, 0, true);
        wgmma_commit();
        load_kd(n);   // 24 (or probe KDA_P4_LDA): P4's A fragments while P2 runs (P4 of chunk n - 1 has read the last ones)
        wgmma_wait<0>();
        sums_done(p2, p2c, P2C);
        // probe KDA_KD_EARLY (24): nothing of WG_C reads buffer n & 1 after load_kd (WG_E writes it with generic stores:
        // the barrier orders this warpgroup's ldmatrix reads before them)
        if (KD_EARLY && n + 2 < NC) named_bar_arrive(BAR_EMPTY + (n & 1), L::NTH);
        KDA_STAMP(3);
        // o = Ob + A2 X (rows g8 + 8); V' (rows g8) to V'^T
        float vp[BV / 4];
        if constexpr (OWARP) {   // probe: the store warp has read the chunk before's tile; this chunk's o to it
            if (n > 0) named_bar_sync(KdaWgBars::OEMPTY, 160);
            o_tile(ob, p2, vp);
            named_bar_arrive(KdaWgBars::OFULL, 160);
        } else if constexpr (OBULK) o_tile(ob, p2, vp);
        else if constexpr (OLATE) o_keep(t0, ob, p2, vp);
        else o_vp(t0, ob, p2, vp);
        write_tok_t(svp_a, vp);
        fence_proxy_async();
        named_bar_sync(BAR_CONS, 128);
        if constexpr (OBULK) o_bulk(t0);
        KDA_STAMP(4);
        // ------------------------------------------------ P4: S = 2^G_L S + Kd^T V'
        wgmma_fence();
        issue_p4(n);
        wgmma_commit();
        // while P4 runs: the next chunk's P1 operands (its buffer)
        if (n + 1 < NC) {
            full_wait(n + 1);   // 19: P1 reads the buffer itself (nothing built; KDA_P1_LDA: its fragments loaded)
            if constexpr (!L::SMA || LDA) build(n + 1);
            if (L::NKD == 3 && n + 3 < NC) named_bar_arrive(BAR_EMPTY + ((n + 1) & 1), L::NTH);   // its Kbg / Qg buffer is free
        }
        KDA_STAMP(5);
        wgmma_wait<0>();
        p4_done();
        KDA_STAMP(6);
        if (L::NKD == 2 && !KD_EARLY && n + 2 < NC) named_bar_arrive(BAR_EMPTY + (n & 1), L::NTH);   // buffer n & 1 is free
        if (L::NKD == 3 && n + 3 < NC) named_bar_arrive(KdaWgBars::EMPTY_KD + n % 3, L::NTH);   // Kd^T buffer n % 3 is free
        if (n + 1 < NC) {
            write_st();
            fence_proxy_async();
            wait_slot(n + 1);                // slot (n + 1) & 1
            named_bar_sync(BAR_CONS, 128);
        }
        KDA_STAMP(7);
    }
    if constexpr (OLATE) o_flush();   // probe: the last chunk's o
    if (OBULK && warp == 0) bulk_store_wait_all();   // probe: the last chunk's o has left the tile
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

// Probe KDA_O_WARP (24): the store warp. Each chunk, once WG_C has written o to the tile (OFULL), lane r reads token r's
// row and stores it to o, then hands the tile back (OEMPTY; not after the last chunk, whose tile WG_C does not refill).
template <class L>
static __device__ void kda_o_warp(const KdaWgCtx<L>& cx, typename KdaIn<L::BF>::T* __restrict__ o) {
    const int lane = cx.lane;
    const float* row = reinterpret_cast<const float*>(cx.sm + L::OT_OFF) + lane * L::OT_LD;
    for (int n = 0; n < cx.NC; ++n) {
        named_bar_sync(KdaWgBars::OFULL, 160);
        float x[L::BV];
#pragma unroll
        for (int c = 0; c < L::BV; c += 4) {
            const float4 f = *reinterpret_cast<const float4*>(row + c);
            x[c] = f.x; x[c + 1] = f.y; x[c + 2] = f.z; x[c + 3] = f.w;
        }
        if (n + 1 < cx.NC) named_bar_arrive(KdaWgBars::OEMPTY, 160);
        const long long t = (long long)n * L::C + lane;
        if (t < cx.TT) {
#pragma unroll
            for (int c = 0; c < L::BV; c += 2)
                kda_st2<L::BF>(o + kda_bthd(cx.b, t, cx.h, cx.v0 + c, cx.TT, cx.H, L::V), x[c], x[c + 1]);
        }
    }
}

// WG_C of 23 (HILO), the whole pass: 16's chain turned around (every product's A operand from registers, S^T in
// the accumulators), at 19's 32 value columns a block. A wgmma's M is 64 rows; 16 filled them with 64 value
// columns (half the blocks, twice the products a block). Here the rows of warp w are value column 8w + g8 twice:
// row g8 carries its hi terms, row g8 + 8 its lo terms (A = [x_hi; x_lo] as one m64 fragment), and one wgmma
// per B term (hi, lo) makes (x_hi + x_lo)(B_hi + B_lo): the three-term product and its lo x lo term, the two
// halves summed in the thread that holds both. So the chain hands nothing through shared memory:
//   P1^T = S^T [Kg; Qg]^T   (B: WG_E's MN-major tile, columns Kg of tokens 8u .., Qg of 8u .., as 19 stores it)
//   X^T  = beta (v^T - (Kg S)^T), Ob^T = (Qg S)^T   (row pairs summed; X^T split as P2's A)
//   V'^T = X^T T^T          (B: 07's T rows as the copy landed them, K-major, 64-byte swizzle)
//   S^T  = S^T 2^G_L + V'^T Kd   (B: WG_E's Kd^T rows; V'^T's hi terms into row g8, lo into g8 + 8)
//   o^T  = Ob^T + X^T A2^T  (issued behind P4, off the chain; A2's rows after T's in the slot)
// The state is the sum of its row pair (two fp32 accumulators: P4 adds V'^T's hi terms to one, its lo terms to the
// other, the decay scales both, off the chain while P1 runs); before each P1 the pair is summed and split for P1's
// A fragments. P4 runs as two chains over halves of the channels (N = K / 2 each), so that the next chunk's
// fragments of the first half are made while the second half's wgmmas run. What is left between the products is
// element-wise work in registers: the chunk's only barrier is its copy slot's, and the chunk before's o is stored
// (and that barrier passed) while P1 runs. Slot n & 1 (T / A2, v) and buffer n & 1 (WG_E's operands) are handed
// over as in 19 (kda_slot_tma, FULL / EMPTY).
template <class L>
static __device__ __forceinline__ void kda_wg_chain_hilo(const KdaWgCtx<L>& cx, const float* __restrict__ beta,
                                                         const float* __restrict__ h0, float* __restrict__ o,
                                                         float* __restrict__ ht, const TmaMap* tv, const TmaMap* tta) {
    static_assert(L::HILO && !L::BF && L::C == 32 && L::BV == 32, "23: fp32 inputs, chunks of 32, 32 value columns");
    constexpr int K = L::K, V = L::V, C = L::C, BV = L::BV, KH = K / 2, NJH = KH / 8, KSH = KH / 16;
    constexpr int BAR_CONS = KdaWgBars::CONS, BAR_FULL = KdaWgBars::FULL, BAR_EMPTY = KdaWgBars::EMPTY;
    constexpr int TA_ROWS = C * (C / 2) * 4;   // bytes of one of the slot's T hi, T lo, A2 hi, A2 lo
    const int tid = cx.tid, warp = cx.warp, lane = cx.lane, g8 = lane / 4, t4 = lane % 4;
    const int h = cx.h, b = cx.b, H = cx.H, NC = cx.NC;
    const long long TT = cx.TT, bh = cx.bh, stamp0_ = cx.stamp0_;
    (void)stamp0_;
    const unsigned base = cx.base;
    const int cl = 8 * warp + g8, col = cx.v0 + cl;   // this thread's value column (rows g8: hi terms, g8 + 8: lo)
    // S^T of column col in two halves of the channels (P4's two wgmma chains, N = K / 2 each): channel
    // KH hv + 8j + 2 t4 + e is sacc[hv][4j + e] + sacc[hv][4j + 2 + e] (rows g8 and g8 + 8)
    float sacc[2][KH / 2];
#pragma unroll
    for (int hv = 0; hv < 2; ++hv)
#pragma unroll
        for (int j = 0; j < NJH; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                sacc[hv][4 * j + e] = h0 ? h0[(bh * K + KH * hv + 8 * j + 2 * t4 + e) * V + col] : 0.f;
                sacc[hv][4 * j + 2 + e] = 0.f;
            }
    // slot n & 1 (probe 4: no copy after chunk 0, its slot reused)
    auto slot_off = [&](int n) { return L::OFF_SLOT + (KDA_PROBE == 4 ? 0 : (n & 1)) * L::SLOT_BYTES; };
    const unsigned slot_bar = base + L::OFF_MBAR + 16;
    auto copy_slot = [&](int n) { if (tid == 0 && KDA_PROBE != 4) kda_slot_tma<L>(cx, n, tv, tta); };
    auto wait_slot = [&](int n) { if (KDA_PROBE != 4 || n == 0) mbar_wait(slot_bar + 8 * (n & 1), (n >> 1) & 1); };
    float rbeta = 0.f;   // beta of token `lane` of the chunk
    auto load_beta = [&](int n) {
        const long long t = (long long)n * C + lane;
        rbeta = t < TT ? beta[(b * TT + t) * H + h] : 0.f;
    };
    // half hv of the state (its row pair summed) as P1's A fragments: k step s of the half is channels
    // KH hv + 16s ..; a0, a2 its hi words in row g8, a1, a3 its lo words in row g8 + 8
    unsigned sf[2][KSH][4];
    auto state_frags = [&](int hv) {
#pragma unroll
        for (int s = 0; s < KSH; ++s)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int j = 2 * s + hf;
                split_bf16x2(sacc[hv][4 * j] + sacc[hv][4 * j + 2], sacc[hv][4 * j + 1] + sacc[hv][4 * j + 3],
                             sf[hv][s][2 * hf], sf[hv][s][2 * hf + 1]);
            }
    };
    auto dmn = [](unsigned addr) { return wgmma_desc_sw128(addr, 8192, 1024); };   // MN-major B: 2C tokens a row
    auto dk128 = [](unsigned addr) { return wgmma_desc_sw128(addr, 16, 1024); };   // K-major B, 128-byte swizzle
    auto dk64 = [](unsigned addr) { return wgmma_desc_sw64(addr, 512); };          // K-major B, 64-byte swizzle
    // P1^T's k steps over half hv of the channels: S^T's fragments times the tile's rows (hi, then lo words)
    auto issue_p1 = [&](float (&p1)[32], unsigned kq, int hv) {
#pragma unroll
        for (int s = 0; s < KSH; ++s) {
            const unsigned row = kq + (KSH * hv + s) * 2048;
            wgmma_rs<64, true>(p1, sf[hv][s], dmn(row), hv > 0 || s > 0);   // x [Kg; Qg]^T hi
            wgmma_rs<64, true>(p1, sf[hv][s], dmn(row + K * 128), 1);       // x [Kg; Qg]^T lo
        }
    };
    // o of chunk m (ov: A2 X's row pair on Ob^T, summed once its wgmmas completed), then every warp done with
    // slot m & 1 (its v reads fenced for the async proxy): the slot may take chunk m + 2's tensor copy
    float p3[16], ov[8];
    auto store_o = [&](int m) {
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const long long t = (long long)m * C + 8 * jj + 2 * t4 + e;
                if (t < TT) o[kda_bthd(b, t, h, col, TT, H, V)] = ov[2 * jj + e];
            }
        fence_proxy_async();
        named_bar_sync(BAR_CONS, 128);
    };
    unsigned xf[2][4];   // X^T as P2's A (k step u / 2, tokens 16 (u / 2) ..: a0 / a1 tokens 8u + 2 t4, u even; a2 / a3 odd)
    copy_slot(0);
    load_beta(0);
    named_bar_sync(BAR_FULL + 0, L::NTH);   // chunk 0's operand buffer
    state_frags(0);
    state_frags(1);
    for (int n = 0; n < NC; ++n) {
        KDA_STAMP(0);
        // ------------------------------------------------ P1^T = S^T [Kg; Qg]^T
        const unsigned kq = base + cx.kq_of(n);
        float p1[32];   // column group 2u: Kg of tokens 8u + 2 t4 (+1); 2u + 1: Qg of the same tokens
        wgmma_fence();
        issue_p1(p1, kq, 0);
        issue_p1(p1, kq, 1);
        wgmma_commit();
        // while P1 runs: the chunk before's o and slot release, the next chunk's copies into that slot, this
        // chunk's decay (S^T 2^G_L, both rows), its v and beta
        if (n > 0) store_o(n - 1);
        if (n + 1 < NC) copy_slot(n + 1);
        {
            const float* gl = cx.gl_of(n);
#pragma unroll
            for (int hv = 0; hv < 2; ++hv)
#pragma unroll
                for (int j = 0; j < NJH; ++j) {
                    const float2 d = *reinterpret_cast<const float2*>(gl + KH * hv + 8 * j + 2 * t4);
                    float* x = sacc[hv] + 4 * j;
                    x[0] *= d.x; x[1] *= d.y; x[2] *= d.x; x[3] *= d.y;
                }
        }
        wait_slot(n);
        const unsigned char* sv = cx.sm + slot_off(n) + L::TA_BYTES;   // v [C][BV], the copy's 128-byte swizzle
        float xv[8], bt[8];
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int tok = 8 * u + 2 * t4 + e;
                xv[2 * u + e] = *reinterpret_cast<const float*>(sv + kda_slot_sw<BV * 4>(tok * BV + cl, 4));
                bt[2 * u + e] = __shfl_sync(ATTNLAB_FULL_MASK, rbeta, tok);
            }
        if (n + 1 < NC) load_beta(n + 1);
        wgmma_wait<0>();
        fence_regs(p1);
        KDA_STAMP(1);
        // ------------------------------------------------ X^T = beta (v^T - (Kg S)^T) as P2's A; Ob^T = (Qg S)^T
        float ob[8];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            float x[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                x[e] = bt[2 * u + e] * (xv[2 * u + e] - (p1[8 * u + e] + p1[8 * u + 2 + e]));
                ob[2 * u + e] = p1[8 * u + 4 + e] + p1[8 * u + 6 + e];
            }
            split_bf16x2(x[0], x[1], xf[u / 2][2 * (u % 2)], xf[u / 2][2 * (u % 2) + 1]);
        }
        // ------------------------------------------------ P2: V'^T = X^T T^T
        const unsigned ta = base + slot_off(n);
        float p2[16];
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            wgmma_rs_kb<32, true>(p2, xf[s], dk64(ta + 32 * s), s > 0);                // T hi
            wgmma_rs_kb<32, true>(p2, xf[s], dk64(ta + TA_ROWS + 32 * s), 1);          // T lo
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(p2);
        KDA_STAMP(2);
        // ------------------------------------------------ P4: S^T += V'^T Kd, by halves of the channels; then
        // (A2 X)^T onto Ob^T. The next chunk's fragments of the first half are made while the second runs.
        unsigned vf[2][4];
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
            split_bf16x2(p2[4 * jj] + p2[4 * jj + 2], p2[4 * jj + 1] + p2[4 * jj + 3], vf[jj / 2][2 * (jj % 2)],
                         vf[jj / 2][2 * (jj % 2) + 1]);
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)   // o^T: Ob^T in row g8, and (A2 X)^T's row pair on it
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                p3[4 * jj + e] = ob[2 * jj + e];
                p3[4 * jj + 2 + e] = 0.f;
            }
        const unsigned kd = base + cx.opb(n);
        wgmma_fence();
#pragma unroll
        for (int hv = 0; hv < 2; ++hv) {   // channels KH hv ..: Kd^T rows KH hv .. (128 bytes each)
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                const unsigned row = kd + hv * (KH * 128) + 32 * s;
                wgmma_rs_kb<KH, true>(sacc[hv], vf[s], dk128(row), 1);        // x Kd hi (bytes 0-63 of a channel's row)
                wgmma_rs_kb<KH, true>(sacc[hv], vf[s], dk128(row + 64), 1);   // x Kd lo (64-127)
            }
            wgmma_commit();
        }
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            wgmma_rs_kb<32, true>(p3, xf[s], dk64(ta + 2 * TA_ROWS + 32 * s), 1);   // A2 hi
            wgmma_rs_kb<32, true>(p3, xf[s], dk64(ta + 3 * TA_ROWS + 32 * s), 1);   // A2 lo
        }
        wgmma_commit();
        if (n + 1 < NC) named_bar_sync(BAR_FULL + ((n + 1) & 1), L::NTH);   // chunk n + 1's operand buffer
        wgmma_wait<2>();   // P4's first half
        fence_regs(sacc[0]);
        if (n + 1 < NC) state_frags(0);
        wgmma_wait<1>();   // its second half
        fence_regs(sacc[1]);
        KDA_STAMP(3);
        if (n + 2 < NC) named_bar_arrive(BAR_EMPTY + (n & 1), L::NTH);   // buffer n & 1 is free
        if (n + 1 < NC) state_frags(1);
        wgmma_wait<0>();   // A2 X (o is stored behind the next chunk's P1 issue)
        fence_regs(p3);
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
#pragma unroll
            for (int e = 0; e < 2; ++e) ov[2 * jj + e] = p3[4 * jj + e] + p3[4 * jj + 2 + e];
        KDA_STAMP(4);
    }
    store_o(NC - 1);
    if (KDA_PROBE == 3) return;   // the stamps live where ht would be written
    if (ht) {
#pragma unroll
        for (int hv = 0; hv < 2; ++hv)
#pragma unroll
            for (int j = 0; j < NJH; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    ht[(bh * K + KH * hv + 8 * j + 2 * t4 + e) * V + col] = sacc[hv][4 * j + e] + sacc[hv][4 * j + 2 + e];
    }
}
