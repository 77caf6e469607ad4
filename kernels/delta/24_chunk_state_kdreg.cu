// 24 — chunked KDA: 19's recurrence with P4's A operand, the chunk's Kd^T, taken from registers: its fragments
// are loaded by ldmatrix once a chunk while P2 runs, off the chain, and P4's wgmmas read only V'^T (B) from
// shared memory.
//
// What changed from 19, and why. P4 (S = 2^G_L S + Kd^T V') is the chain's last product: at fp32 inputs two
// k steps of three terms over the state's two m64 tiles, twelve m64n32k16 wgmmas that each read a 2 KB A tile
// (Kd^T, hi or lo) and a 1 KB B tile (V'^T) from shared memory. 19's notes find the chunk short of shared-memory
// bandwidth rather than of tensor work (notebook 13's Nsight Compute rows of 19: shared-memory wavefronts far above
// the tensor pipe's share; P1's two lo terms dropped, and their shared-memory operands with them, ran faster).
// Kd^T does not depend on the state, so its fragments can be in registers before the chain needs them: each WG_C
// warp loads its 16 channels of both m64 tiles, k steps 0 and 1, hi and lo (8 ldmatrix.x4, 32 registers at fp32
// inputs; on bf16 ones the hi words only, 4 and 16) right after issuing P2, and P4 issues the same products in the
// same order as register-A wgmmas. Same words, same products, same order: o and the final state are 19's bit for
// bit (tests/test_emu_delta_tc.py on the CPU model; scripts/probe_delta_lda.py compared them on the H200 as 19's
// probe build KDA_P4_LDA=1).
// Why P4 and not P1: the same probe loaded P1's A ([Kg; Qg]^T, twice Kd^T's fragments) the same way (KDA_P1_LDA);
// that recurrence ran faster alone but not after 07, and both loaded together ran no faster than P4's alone (a
// probe's times, not recorded; notebook 13 records 24 beside 19).
// Kd^T's buffer is still handed back after P4 (its fragments are in registers earlier, but 19's hand-overs are
// kept as they are: the element-wise warpgroup's period is set elsewhere, 19_chunk_state_tile.cu says where). The
// probe build KDA_KD_EARLY=1 hands it back right after load_kd instead (results the same); notebook 13's probe table
// times it beside 24.
// What the WY form would leave of the chunk: the probe build KDA_NO_P2 (results meaningless, every product issued)
// runs P1 then P4 with no X^T tile, barrier or P2 between them, as the chain would if W = T Kbg and U = T beta v
// were made off it (V' = U - W S, lib/attnlab/delta/chunk.py); scripts/probe_delta_wy.py and notebook 13's probe
// table time it beside 24.
// Where the rest of 24's chunk goes beside the chain (notebook 13's Nsight Compute rows; the probe table's bounds):
// KDA_E_SHARE=2 / 4 (results meaningless) give each WG_E thread a share of its tokens, the bound on sharing WG_E's
// work over a cluster of that many value blocks; KDA_E_LDG=1 / 2 (results 24's) load WG_E's q, k, g from global
// memory with no staging tile (each chunk's boxes prefetched into L2 a chunk ahead; 2: no L1 allocation), taking the
// tile's landing and reads out of shared memory, whose load/store pipe is the busiest of 24's (the counters).
// Where the chain waits (probe builds of the shared loop, wgmma_recurrence.cuh; scripts/probe_delta_chains.py and
// probe_delta_olate.py, not recorded): not on its wgmmas' shared accumulators (KDA_P1/P2/P4_CHAINS, each product's lo
// terms in accumulators of their own: no faster; kernels/bench/04_wgmma_rate.cu issues a wgmma that sums onto the one
// before as fast as an independent one), but partly on its own o stores: V'^T's proxy fence is a membar that waits for
// them (scripts/ncu_source.py's samples). Stored behind the next chunk's P1 instead (KDA_O_LATE=1), the recurrence is a
// little faster; never stored (KDA_O_LATE=2, results meaningless: the bound), faster still. Taken off
// the chain through a shared-memory tile, stored by bulk copies (KDA_O_BULK) or by a ninth warp (KDA_O_WARP), o made
// the recurrence slower, not faster.
//
// Launch: 19's (grid (V / BV, H, B), 256 threads, the tensor maps of g, k, q, v and 07's output; shared memory
// kernels.tile_smem_words). Requires sm_90a.
#include "14_chunk_state_multicast.cu"

template <int K, int V, int C, int BV, bool BF = false>
__global__ void __launch_bounds__(256 + 32 * KDA_O_WARP, 1)   // (probe KDA_O_WARP: a ninth warp stores o)
kda_chunk_state_kdreg(KDA_TMA_STATE_PARAMS) {
    KDA_TMA_MAPS;
    kda_mc_body<K, V, C, BV, BF, 1, 2, true, 2, true, BF, false, true, 128, false, false, true>(
        q, k, v, g, beta, TA, h0, o, ht, T, H, scale, maps);
}
