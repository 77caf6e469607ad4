// 23 — chunked KDA: 19's element-wise warpgroup, operand buffers and copies, with the chain turned around (16's
// products, every A operand from registers) at 19's 32 value columns a block: each value column fills two rows
// of the wgmma's M, one for its hi terms and one for its lo terms. fp32 inputs.
//
// What changed from 19, and why. Notebook 13's recorded stamps of 19 put about a third of the chain's chunk in
// its three hand-overs through shared memory: X^T, V'^T and S^T go from accumulators to tiles (hi / lo splits,
// stmatrix, a proxy fence, a warpgroup barrier) because each is the next product's B operand. 16 removed them by
// turning the products around (S^T in the accumulators, each result the next product's A operand in registers,
// as flash attention keeps P), but a wgmma's M is 64 rows, so 16 held 64 value columns a block: half the
// blocks of 19, each with twice the products (its three-term products at N = 2C and K on 64 rows), and its
// recorded chain ran slower than 15's. Here a warp's 16 rows are its 8 value columns twice: row g8 holds a
// column's hi terms, row g8 + 8 its lo terms, so that A = [x_hi; x_lo] is one fragment and one wgmma per B
// term gives x_hi B and x_lo B side by side, summed in the thread that holds both rows:
//   P1^T = S^T [Kg; Qg]^T   16 wgmmas m64n64k16 (K = 128)   19: 24 m64n32k16, A from shared memory
//   P2   = X^T T^T          4 m64n32k16                     19: 6 m64n32k16 (with A2 X)
//   P4   = V'^T Kd          8 m64n64k16 (two halves of K)   19: 12 m64n32k16 (two m64 tiles)
//   A2 X                    4 m64n32k16, issued behind P4, off the chain
// Each product is (x_hi + x_lo)(B_hi + B_lo): 19's three terms and the lo x lo term, about a third more
// tensor work than 19 for the same columns (two thirds of 16's a column), none of it through shared memory
// but WG_E's operands and 07's T / A2. The chain's only barrier is the copy slot's, once a chunk.
// The state is the sum of its row pair, two fp32 accumulators: P4 adds V'^T's hi terms to one row and its lo terms
// to the other, and the decay (off the chain, while P1 runs) scales both. Before each P1 WG_C sums the pair and
// splits the sum for P1's A fragments; P4 runs as two chains over halves of the channels, so that the first
// half's fragments are made while the second half's wgmmas run, and the chunk's o is stored (and its slot's
// barrier passed) while the next chunk's P1 runs. Products of the same words, accumulated in a different order and
// with the lo x lo term: the float64 recurrence's bound, and 19's values to rounding.
// WG_E, its operand buffers (Kd^T rows, the [Kg; Qg]^T tile, 2^G_L) and WG_C's tensor-copied slots (T / A2, v)
// are 19's, unchanged; the block's shared memory loses 19's S^T, X^T and V'^T tiles.
// Probe build KDA_STAGE_RING=1: WG_E stages q, k, g in two tiles, each chunk's tensor copies issued two chunks ahead
// (without 19's tiles the layout has room for a second 48 KiB staging tile: 225 320 bytes in all at K = 128, under
// the 227 KiB a block may use).
// Notebook 13 times it beside 19 (its latency table, stamps and probe table: slower than 19 there);
// scripts/probe_delta_lda.py also times it with the ring, after 07 in its earlier fp32 layout (KDA_PREP_ALIAS=0), with
// its chain alone and without input copies.
//
// Launch: 19's (grid (V / 32, H, B), 256 threads, tensor maps of g, k, q, v and 07's output), shared memory
// kernels.hilo_smem_words. Requires sm_90a.
#include "14_chunk_state_multicast.cu"

template <int K, int V, int C, int BV>
__global__ void __launch_bounds__(256, 1)
kda_chunk_state_hilo(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                     const float* __restrict__ g, const float* __restrict__ beta, const unsigned* __restrict__ TA,
                     const float* __restrict__ h0, float* __restrict__ o, float* __restrict__ ht, int T, int H, float scale,
                     const __grid_constant__ TmaMap tg, const __grid_constant__ TmaMap tk, const __grid_constant__ TmaMap tq,
                     const __grid_constant__ TmaMap tv, const __grid_constant__ TmaMap tta) {   // fp32 inputs only
    KDA_TMA_MAPS;
    kda_mc_body<K, V, C, BV, false, 1, 2, true, 2, true, false, false, true, 128, false, true>(q, k, v, g, beta, TA, h0, o,
                                                                                              ht, T, H, scale, maps);
}
