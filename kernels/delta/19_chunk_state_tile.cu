// 19 — chunked KDA: 15's recurrence (17's for bf16 inputs) with P1's A operand read by the wgmma from
// shared memory, where the element-wise warpgroup stores it in the wgmma's own layout.
//
// What changed from 15 and 17, and why. P1 = [Kg; Qg] S is the chain's K = 128 contraction. Through 18
// its A operand went from WG_E to WG_C as fp32 rows (Kbg, Qg: C x (K + 8) words each), and WG_C built
// the A fragments in registers every chunk: 32 8-byte loads, 32 hi / lo splits (or bf16 packs) and 64
// registers of fragments at fp32 (ah, al), in the stage that notebook 13's clock stamps put among the
// longest of 17's chunk ("P4 issued, next chunk's P1 operands built"); the chain alone (KDA_PROBE=5,
// WG_E's arithmetic idle) still pays it. Per-instruction samples (scripts/ncu_source.py) find no
// single hot instruction, only many short stretches: the lever is instructions per chunk.
// Here WG_E writes [Kg; Qg]^T as the wgmma reads it: an MN-major A (tnspA), K rows (channels) of
// 64 bf16 (P1's rows: Kg of tokens 0-7, Qg of tokens 0-7, Kg of 8-15, ...: the rows each warp of WG_C
// reads back, as 13's A fragments had them), 128-byte swizzle; WG_E's thread holds one channel over the
// chunk's tokens, which is a row of that layout: four 16-byte stores for Kg and four for Qg per tile
// (a hi tile, and a lo tile for three-term products), in place of 64 scalar fp32 stores. WG_C builds
// nothing: P1 is a shared-memory wgmma (wgmma_ss_mna) over that tile and the S^T tile, as P4 already was.
//  * fp32 inputs: 15's three-term products (hi x hi + hi x lo + lo x hi), the hi and lo tiles;
//  * bf16 inputs: 17's one-term P1 and P4 (the hi tile only).
// The arithmetic is 15's / 17's: Kg and Qg are rounded to the same bf16 hi / lo words, in WG_E instead
// of WG_C (the CPU model reproduces 15 and 17 bit for bit).
// What the probes found (scripts/probe_delta_recurrence.py, not recorded; notebook 13 records the times):
// the chain alone (KDA_PROBE=5) runs faster than 15's and 17's, the recurrence with WG_E at work about
// as fast as they do (bf16 inputs: a little faster). The clock stamps have WG_E's arithmetic as the longest
// stage of either warpgroup's chunk: its stream, not WG_C's build, sets the period. Sharing WG_E's work across a head's value blocks (a cluster of four, each computing 32
// channels into every block's tiles by 16-byte distributed-shared-memory stores, buffers handed over on
// cluster mbarriers) was tried on top of this step and ran several times slower: its stamps put most of
// the chunk in WG_E's remote stores and their cluster-scope fences (kept in the repository's history,
// not in the ladder).
//
// A race this step exposed (fp32 inputs), found and fixed in kda_mc_body (14): a live run after notebook
// 13's recording at d1c621b failed its accuracy check at the target shape (o off, the final state right).
// scripts/stress_delta.py (the recurrence run 40-80 times on one 07 output, each run compared bit for bit
// with the first) found about half the runs differing, always in the same pattern: in one value block,
// the chunk's last one or two tokens of o slightly off, the whole next chunk far off, the error then
// decaying. That fits one channel of the staging tile whose last loads (tokens 30, 31) read chunk n + 1's
// g or k: WG_E's barrier that released the tile to the next chunk's tensor copy did not order the copy
// (async proxy) behind those loads still in flight. With a proxy fence after the loads, none of 80 runs
// differed (nor any of 15's, or of 17's and 19's on bf16 inputs); a probe build without the fence
// (KDA_STAGE_RELEASE=0) differed again in 24 of 40. The fence is in every form that stages its inputs
// by the copy engine (14-19, 16 included); 15 and 17 had not shown the race.
// Where this step's chunk goes (probe builds, not recorded): with P1's two lo terms dropped
// (KDA_P1_TERMS=1, fp32 inputs, results meaningless) the recurrence runs about an eighth faster, its
// chain alone (KDA_PROBE=5) too, and the stamps shrink both P1's stage and WG_E's arithmetic: P1's
// shared-memory operands (both tiles, A and B) and WG_E's stores draw on the same shared-memory
// bandwidth. 15's P1 (A from registers) loses less to the same probe. Neither the lo terms nor WG_E's
// share of the SM is the whole gap to the fp32 target: 07 + 19 comes to about the time that 1.9x fla
// asks only with both removed (one-term P1 and WG_E idle together), not with either alone.
//
// Launch: 15's (grid (V / BV, H, B), 256 threads, tensor maps of g, k, q, v and 07's output); shared
// memory kernels.tile_smem_words (the operand buffers shrink: bf16 tiles in place of fp32 rows).
// Requires sm_90a.
#include "14_chunk_state_multicast.cu"

template <int K, int V, int C, int BV, bool BF = false>
__global__ void __launch_bounds__(256, 1)
kda_chunk_state_tile(KDA_TMA_STATE_PARAMS) {
    KDA_TMA_MAPS;
    kda_mc_body<K, V, C, BV, BF, 1, 2, true, 2, true, BF, false, true>(q, k, v, g, beta, TA, h0, o, ht, T, H, scale, maps);
}
