// 26 — chunked KDA: 22's chain and producer warp, the operand images made in the kernel, each chunk's once per head
// by one of the head's value blocks in turn, and shared through a ring in global memory (L2).
//
// What changed from 22 and 24, and why. 24's element-wise warpgroup (WG_E) makes every chunk's Kg, Qg, Kd^T and
// 2^G_L in each of a head's V / BV value blocks: four times the same work at V = 128, beside the chain. Notebook 13's
// bounds put that work between 24 and its chain alone (KDA_PROBE=5), and its probe KDA_E_SHARE=4 (each WG_E thread at a
// quarter of its tokens) near the chain alone. 22 took the work out of the recurrence (21 made the images, one per
// chunk and head), but 21 writes them through DRAM: on fp32 inputs 21 takes about twice 07's time. Here the block
// of value block r makes the chunks n = r, r + V / BV, ... (a quarter of them at V = 128) with 19's arithmetic, by
// a maker warpgroup (kda_share_maker, 14_chunk_state_multicast.cu) from a staging tile landed by tensor copies, and
// stores each image into slot n % KDA_SHARE_SLOTS of the head's ring (8 slots: 388 KB a head at K = 128, 12 MB at
// B H = 32, which L2 holds); the chunk's made flag publishes it. Every block's producer warp lands every chunk from the
// ring as 22's lands 21's images (one bulk copy on the buffer's mbarrier, after the flag's acquire and a proxy fence),
// and acknowledges the chunk once WG_C is done with it (the chunk's flag of that block); a maker fills a slot again
// only when all of the head's blocks have acknowledged the slot's last chunk. WG_C's chain is 22's (19's products).
// The image is 19's fp32 operand buffer byte for byte, made by 19's arithmetic: o and the final state are 22's on fp32
// images, 19's up to the rounding of the exponentials (tests/test_emu_delta_tc.py).
// Every block of a head waits for the others' chunks: the launcher checks that the whole grid is resident at once
// (one block per SM, kernels.share_resident), as 22 beside 21 checks its own.
// What the probe found (scripts/probe_delta_share.py on an H100, not recorded; notebook 13 does not time 26 yet): o
// and the final state 24's bit for bit, the recurrence a little slower than 24's and well above the bound that 24 with
// a quarter of WG_E's tokens (KDA_E_SHARE=4) puts on sharing; the maker's first form, each thread storing its rows of
// the image to global memory, ran it at two thirds of 24's speed. Where the rest goes (the makers' copy, make and
// store cycle against four chunk periods, the ring's place in L2) is for clock stamps to show.
//
// Launch: grid (V / BV, H, B), 288 threads (WG_C, the producer warp, the maker warpgroup), shared memory
// kernels.share_smem_words; the tensor maps of g, k, q, v and 07's output as 24 takes them, the ring, the made flags
// and acknowledgements, and the call's epoch (> 0). fp32 inputs; requires sm_90a.
#include "14_chunk_state_multicast.cu"

template <int K, int V, int C, int BV>
__global__ void __launch_bounds__(288, 1)
kda_chunk_state_share(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                      const float* __restrict__ g, const float* __restrict__ beta, const unsigned* __restrict__ TA,
                      unsigned char* __restrict__ ring,   // [B, H, KDA_SHARE_SLOTS, image bytes]
                      int* __restrict__ made,             // [B, H, NC]: the epoch once chunk n's image is in the ring
                      int* __restrict__ acks,             // [B, H, NC, V / BV]: the epoch once a block is done with it
                      int epoch, const float* __restrict__ h0, float* __restrict__ o, float* __restrict__ ht, int T,
                      int H, float scale, const __grid_constant__ TmaMap tg, const __grid_constant__ TmaMap tk,
                      const __grid_constant__ TmaMap tq, const __grid_constant__ TmaMap tv,
                      const __grid_constant__ TmaMap tta) {
    KDA_TMA_MAPS;
    kda_mc_body<K, V, C, BV, false, 1, 2, true, 2, true, false, false, true, 32, true, false, false, false, true>(
        q, k, v, g, beta, TA, h0, o, ht, T, H, scale, maps, nullptr, nullptr, epoch, ring, made, acks);
}
