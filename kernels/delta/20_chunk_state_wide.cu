// 20 — chunked KDA: 19's recurrence with two element-wise warpgroups, each thread a channel over half
// of the chunk's tokens.
//
// What changed from 19, and why. 19's clock stamps put WG_E's arithmetic (a chunk's Kg, Qg, Kd^T and
// 2^G_L from its g, k, q) as the longest stage of either warpgroup's chunk, and WG_E is one warpgroup:
// one warp per SM sub-partition, each thread a channel over all 32 tokens of the chunk, its running
// products (2^G forward, 2^(G_L - G) backward) a chain of 32 dependent multiplies. A probe build that
// gives each WG_E thread half of its tokens (KDA_PROBE=6, results meaningless) runs the recurrence
// about a tenth faster at fp32 and bf16 inputs alike; the chain alone (KDA_PROBE=5, WG_E idle) is the
// floor. Here WG_E has 256 threads (two warpgroups, 384 a block): at K = 128 two threads share a
// channel, 16 tokens each (at K = 64 four, 8 tokens each), as 13-19 already split K = 64's channels
// over two threads. Each thread runs its tokens' products from 1, writes its part's product to
// shared memory, and after WG_E's barrier scales its 2^G by the earlier parts' products and its
// 2^(G_L - G) by the later ones' (2^G_L: all of them). WG_C, the hand-overs (their barriers count
// the 384 threads) and every product are 19's.
// The arithmetic is 19's but for the order of each running product's factors (a part's product
// times the earlier parts', not one running product): rounding-level differences from 19, held to the
// float64 recurrence like 19 (fp32 inputs) and to the float64 model of 17's roundings (bf16 inputs).
// Registers: 384 threads leave 168 a thread; the build needs fewer than 19's (WG_E's half-length
// chunk holds half the values), so nothing spills.
// What it showed (probe runs before the recording; notebook 13 records 19, 20 and the probe side by
// side): 20 runs barely faster than 19, far short of the half-token probe. What WG_E costs the chunk
// is not its threads' chains of dependent instructions but what its work takes from the SM that the
// chain's products need too (its staging loads, its tile stores, the issue slots of each sub-partition):
// the probe took half of that work away, 20 keeps all of it. A faster chunk needs less of that work
// per chunk (or none of it in the recurrence), not more threads doing it.
//
// Launch: 19's (grid (V / BV, H, B), the tensor maps of g, k, q, v and 07's output) with 384 threads;
// shared memory kernels.wide_smem_words (19's, WG_E's part products [TPC][K] at K = 64 in 1 KB).
// Requires sm_90a.
#include "14_chunk_state_multicast.cu"

template <int K, int V, int C, int BV, bool BF = false>
__global__ void __launch_bounds__(384, 1)
kda_chunk_state_wide(KDA_TMA_STATE_PARAMS) {
    KDA_TMA_MAPS;
    kda_mc_body<K, V, C, BV, BF, 1, 2, true, 2, true, BF, false, true, 256>(q, k, v, g, beta, TA, h0, o, ht, T, H, scale,
                                                                          maps);
}
