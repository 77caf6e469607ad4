// 28 — chunked KDA: 24's recurrence with two value blocks of a head as one cluster, each block's element-wise
// warpgroup making half of the channels' operands, for both blocks: its half copied into the other block's buffer by
// bulk copies between the two shared memories.
//
// What changed from 24, and why. In 24 each of a head's V / BV value blocks has its element-wise warpgroup (WG_E)
// make the whole chunk's Kg, Qg, Kd^T and 2^G_L from the whole chunk's g, k, q: at V = 128, BV = 32 four blocks do
// the same work and stage the same 48 KB a chunk, beside the chain on their SMs. Notebook 13's bounds put that work
// between 24 and its chain alone (KDA_PROBE=5), and the probe KDA_E_SHARE=2 (each WG_E thread at half of its tokens)
// about half-way. 11 shared the element-wise work over a cluster by 4-byte stores through generic addresses and ran
// far slower (its header: MIO throttles); 14's clusters of four did not all fit on the GPU at once at one block per
// SM. Here the cluster is two blocks (value blocks 2j and 2j + 1 of a head: a pair fits any two SMs of a GPC):
//  * block `rank` stages only channels [64 rank, 64 rank + 64) of the chunk's g, k, q (one tensor copy per array,
//    boxes of K / 2 channels: half of 24's staging tile and of its L2 traffic), and its WG_E makes their operands
//    with two threads a channel (16 tokens each; the gate products' halves meet through WG_E's part sums, as at
//    K = 64) into rows [64 rank, 64 rank + 64) of buffer n & 1: a channel's [Kg; Qg]^T and Kd^T rows are whole
//    128-byte rows, so the block's half is three contiguous 8 KB runs and 256 bytes of 2^G_L;
//  * once every WG_E thread has stored chunk n (each behind its proxy fence, a named barrier), WG_E's thread 0 copies
//    the half into the other block's buffer n & 1 by four bulk copies (shared::cta -> shared::cluster), completing
//    on that block's PFULL n & 1 mbarrier, whose phase its own WG_E opened with the bytes to expect; WG_C waits for
//    its WG_E (FULL, as in 24) and on PFULL;
//  * the copy waits until the other block's WG_C is done with that buffer: that block's WG_E arrives on this block's
//    PEMPTY n & 1 (release at cluster scope) right after its own EMPTY hand-over, and WG_C hands the buffer back as
//    soon as P4's Kd^T fragments are loaded (24's probe build KDA_KD_EARLY, here as built: the copy then has the rest
//    of the chunk to land). No cluster-scope release is made by WG_C, and WG_E's thread 0 loads the next chunk's beta
//    after its release (a release waits for the thread's outstanding loads).
// WG_C's chain is 24's, product for product. WG_E's arithmetic is 24's, but for the gate products of a channel made
// in two halves of 16 tokens (15's running products, the earlier half's product scaling the later half's 2^G), so o
// and the final state are 24's up to that rounding (tests/test_emu_delta_tc.py holds them to the float64 model and to
// 24's; the same test runs it in the CPU model's eager order).
// What the probes found (scripts/probe_delta_pair.py on an H100, not recorded; notebook 13 does not time 28): o and the
// final state within rounding of 24's, and 28 slower than 24, by about a quarter. The first form, each WG_E thread
// storing its half into both blocks through distributed shared memory, with the hand-overs released by WG_C, ran at
// well under two thirds of 24's speed; KDA_PAIR_DIAG builds (results meaningless) put most of that in those stores.
// As built, with no copies (KDA_PAIR_DIAG=4) 28 runs at about 24's time, above the bound KDA_E_SHARE=2 sets on sharing
// over two blocks; the copies then add most of what 28 loses, and the chain alone (WG_E idle, its copies kept) takes
// about a third longer than 24's chain alone: a chunk's 24.8 KB between two SMs do not land within the chunk the
// chain gives them. The clock stamps (KDA_PROBE=3, fast.phase_cycles(impl="pair")) agree and say more: with half of the
// element-wise work a chunk, WG_E's arithmetic phase takes longer than 24's whole one (longer again with the copies),
// and WG_C waits for the hand-over about two fifths of each chunk; 24 with half of WG_E's tokens (KDA_E_SHARE=2) shortens its
// arithmetic phase by far less than half. WG_E's time beside the chain is not set by its own work, and halving that
// work this way costs more in moving the result than it saves.
//
// Launch: grid (V / BV, H, B) with clusters of two along x, 256 threads, shared memory kernels.pair_smem_words (24's
// layout with a staging tile of K / 2 channels and four more mbarriers); the tensor maps of g, k, q in boxes of K / 2
// channels, v's and 07's output as 24 takes them. fp32 inputs, K = 128, V / BV even. Requires sm_90a.
#include "14_chunk_state_multicast.cu"

template <int K, int V, int C, int BV>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(256, 1)
kda_chunk_state_pair(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                     const float* __restrict__ g, const float* __restrict__ beta, const unsigned* __restrict__ TA,
                     const float* __restrict__ h0, float* __restrict__ o, float* __restrict__ ht, int T, int H,
                     float scale, const __grid_constant__ TmaMap tg, const __grid_constant__ TmaMap tk,
                     const __grid_constant__ TmaMap tq, const __grid_constant__ TmaMap tv,
                     const __grid_constant__ TmaMap tta) {
    static_assert(K == 128 && (V / BV) % 2 == 0, "28: K = 128 (two threads a channel), value blocks in pairs");
    KDA_TMA_MAPS;
    kda_mc_body<K, V, C, BV, false, 1, 2, true, 2, true, false, false, true, 128, false, false, true, false, false, true>(
        q, k, v, g, beta, TA, h0, o, ht, T, H, scale, maps);
}
