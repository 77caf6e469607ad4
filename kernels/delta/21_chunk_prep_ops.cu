// 21 — chunked KDA, token-parallel half: 07 (with its A2 output) that also stores each chunk's
// element-wise operands of the recurrence, as the recurrence's shared memory holds them.
//
// What changed from 07, and why. Through 20 the recurrence's element-wise warpgroup (WG_E) made every
// chunk's Kg, Qg, Kd^T and 2^G_L from the chunk's g, k, q, once per value block: at V = 128 and BV = 32
// four blocks of a head each staged the same q, k, g and did the same arithmetic, beside the chain's
// products on the same SM. Notebook 13's probes put the cost there: the chain alone (WG_E idle) ran
// about a quarter faster than 19 with WG_E at work, and more element-wise threads (20) did not
// close it: WG_E's work takes shared-memory bandwidth and issue slots that the chain needs.
// 07 already holds what those operands need, once per chunk and head and with no dependence on the
// state: each thread's two channels over 8 tokens (4 at K = 64) of q, k and their gates' running
// sums. Here it also writes them, bf16, in the byte image of the recurrence's operand buffer
// (ops_image.cuh: Kd^T, [Kg; Qg]^T with the 128-byte swizzle, 2^G_L; 24.5 KB a chunk at K = 128):
// three 16-byte stores per channel, each a row chunk of a transposed tile, since a thread's tokens of
// one channel are exactly one such chunk. Step 22 then lands the image with one bulk copy.
// bf16 inputs: the image holds one bf16 term per operand, the bf16-I/O path's one-term P1 and P4 (17, 19).
// fp32 inputs: hi and lo words (19's fp32 operand buffer, 48.5 KB a chunk at K = 128), for 19's three-term
// products: as many bytes per element as the q, k and g they are made from, about 0.8 GiB of images at
// T = 16384, B = 2, H = 16, past issue 13's memory bound. A probe (scripts/probe_delta_pre.py --io fp32, not
// recorded; notebook 13's latency table times both pairs in one run) found 22 on them about as much faster
// than 19 as 21 is slower than 07, so the pair sits beside the fp32 ladder, not on it: the bytes the images
// move cost what WG_E's work did.
// The arithmetic is 13's (2^G from the running sum, Kd from 2^(G_L - G)), in place of 15's running
// products; T and A2 are 07's, bit for bit.
// What the probes found (scripts/probe_delta_pre.py, scripts/probe_delta_timeline.py and Nsight Compute, not
// recorded; notebook 13 records 21 alone beside 07): the stores decide what the image costs. Stored as four-token
// pieces (4-byte words, 32 rows a warp instruction, one L2 sector each) 21 ran five times as long as 07; as
// whole 16-byte row chunks, with each lane pair trading halves so that a row's Kg and Qg fill one sector together
// (kda_ops_image), about 1.5 times.
// How 21 and 22 share the GPU (kernels.TcPlan.run; scripts/probe_delta_timeline.py stamps every block's start,
// end and SM, and 21's clock after each barrier). A block of 21 is latency-bound (about 20 000 cycles a chunk:
// the loads and gate sums, the operands and image, and warp 0's inverse are the longest phases), so its
// rate follows how many of its blocks an SM holds. Beside a block of 22 (97 KB of shared memory, five warps of
// 124 registers) the first form held one (80 registers; the driver's default carveout), and 22's producer
// waited for 21's flags most of the call. Built for 64 registers (four blocks per SM alone, a spill of a few dozen bytes;
// alone it also ran faster) and with both kernels asking for the largest shared-memory carveout, two of its
// blocks run beside each block of 22 (at 80 registers still one: two would not fit the register file of the
// SM quarter that holds two of 22's warps, by the per-quarter count). A head start (the first chunks by 21
// alone, then both) ran slower: beside 21's blocks each chunk of 22's chain takes about 1.5 times as long, even with
// every operand ready. The flag is published as a grid barrier publishes: every thread's stores, a barrier,
// one release at GPU scope (cumulative over the block's stores); a fence in every thread first held each
// block about 1700 cycles longer.
// Every head's chunk n is dispatched before chunk n + 1 (grid (B H, NC)), and each block sets its chunk's
// ready flag to the call's epoch (ops_image.cuh), which 22's producer warp waits for before it copies the chunk.
//
// Launch: grid (B H, NC) (NC <= 65535), 256 threads, kernels.prep_smem_words, the largest carveout; the image
// workspace [B, H, NC, kda_ops_image_bytes(K)] after 07's, the ready flags [B, H, NC] (int, zeroed once) and
// the epoch (0: one kernel after the other, no flags).
#include "07_chunk_prep_tc.cu"

#ifndef KDA_PREP_OPS_MINB   // probe builds only (scripts/probe_delta_timeline.py): 3 is the 80-register form
#define KDA_PREP_OPS_MINB 4
#endif

template <int K, int C, bool BF = true>
__global__ void __launch_bounds__(256, BF ? KDA_PREP_OPS_MINB : 3)   // bf16: 64 registers, two blocks beside one of 22;
                                                                      // fp32: three (07's earlier fp32 layout)
kda_chunk_prep_ops(const typename KdaIn<BF>::T* __restrict__ q, const typename KdaIn<BF>::T* __restrict__ k,
                   const typename KdaIn<BF>::T* __restrict__ g, const typename KdaIn<BF>::T* __restrict__ beta,
                   unsigned* __restrict__ TA,             // [B, H, NC, 4, C, C/2]: T, A2 = Aqk T
                   unsigned char* __restrict__ OPS,       // [B, H, NC, kda_ops_image_bytes(K, !BF)]
                   int* __restrict__ ready, int epoch,     // [B, H, NC]: set to epoch once written (epoch > 0)
                   int T, int H, float scale) {
    kda_prep_body<K, C, BF, true, true>(q, k, g, beta, TA, OPS, ready, epoch, T, H, scale);
}
