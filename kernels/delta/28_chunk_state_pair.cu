// 28 — chunked KDA: 24's recurrence with two value blocks of a head as one cluster, each block's element-wise
// warpgroup making half of the channels' operands and storing them into both blocks' buffers through distributed
// shared memory.
//
// What changed from 24, and why. In 24 each of a head's V / BV value blocks has its element-wise warpgroup (WG_E)
// make the whole chunk's Kg, Qg, Kd^T and 2^G_L from the whole chunk's g, k, q: at V = 128, BV = 32 four blocks do
// the same work and stage the same 48 KB a chunk, beside the chain on their SMs. Notebook 13's bounds put that work
// between 24 and its chain alone (KDA_PROBE=5), and the probe KDA_E_SHARE=2 (each WG_E thread at half of its tokens)
// half-way. 11 shared the element-wise work over a cluster by 4-byte stores through generic addresses, one per word
// and block, and ran far slower (its header: MIO throttles); 14's clusters of four did not all fit on the GPU at once
// at one block per SM. Here the cluster is two blocks (value blocks 2j and 2j + 1 of a head: a pair fits any two SMs
// of a GPC), and every word leaves its maker once more, in the same 16-byte stores that write it locally:
//  * block `rank` stages only channels [64 rank, 64 rank + 64) of the chunk's g, k, q (one tensor copy per array,
//    boxes of K / 2 channels: half of 24's staging tile and of its L2 traffic), and its WG_E makes their operands
//    with two threads a channel (16 tokens each; the gate products' halves meet through WG_E's part sums, as at
//    K = 64) into rows [64 rank, 64 rank + 64) of buffer n & 1 here and, by the same 16-byte stores to the mapped
//    address, in the other block (the [Kg; Qg]^T and Kd^T rows of a channel are whole 128-byte rows, so the two
//    halves never share a row);
//  * the hand-over spans the pair: once every WG_E thread has stored chunk n (a named barrier, after each thread's
//    proxy fence), WG_E's thread 0 arrives, release at cluster scope, on the other block's PFULL n & 1 mbarrier;
//    WG_C waits for its own WG_E (FULL, as in 24) and for PFULL (acquire at cluster scope, then a proxy fence: the
//    wgmmas read the words). Before it writes chunk n + 2 into the other block's buffer n & 1, WG_E waits on PEMPTY
//    n & 1, which that block's WG_C thread 0 arrives on (release at cluster scope) after the barrier that follows
//    P4 of chunk n, when no thread of it reads the buffer any more.
// WG_C's chain is 24's, product for product. WG_E's arithmetic is 24's, but for the gate products of a channel made
// in two halves of 16 tokens (15's running products, the earlier half's product scaling the later half's 2^G), so o
// and the final state are 24's up to that rounding (tests/test_emu_delta_tc.py holds them to the float64 model).
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
