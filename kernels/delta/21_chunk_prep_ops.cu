// 21 — chunked KDA, token-parallel half for bf16 inputs: 07 (with its A2 output) that also stores each
// chunk's element-wise operands of the recurrence, as the recurrence's shared memory holds them.
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
// bf16 inputs only: the image holds one bf16 term per operand, the bf16-I/O path's one-term P1 and P4
// (17, 19); fp32 inputs' hi and lo words would double it (0.9 GiB at T = 16384, B = 2, H = 16, past
// issue 13's memory bound).
// The arithmetic is 13's (2^G from the running sum, Kd from 2^(G_L - G)), in place of 15's running
// products; T and A2 are 07's, bit for bit.
// What the probes found (scripts/probe_delta_pre.py and Nsight Compute at T = 4096, not recorded; notebook 13
// records 21 alone beside 07): the stores decide what the image costs. Stored as four-token pieces (4-byte
// words, 32 rows a warp instruction, one L2 sector each) 21 ran five times as long as 07; as whole 16-byte
// row chunks, with each lane pair trading halves so that a row's Kg and Qg fill one sector together
// (kda_ops_image), about 1.5 times. What is left: the image's stores (L2 write requests about twelve times
// 07's), its arithmetic (a fifth more instructions) and occupancy (77 registers a thread: three blocks per
// SM where 07 runs four; at four this body spills), with barrier stalls, as in 07, the first stall reason.
// 21 and 22 run side by side (kernels.TcPlan.run, where 22's grid is at most a block per SM): 22 on a
// stream of higher priority, launched first, so that its blocks hold their SMs (two of 21's blocks fit beside
// each); 21's grid is (B H, NC), every head's chunk n dispatched before chunk n + 1, and each block, once its
// stores are fenced, sets the chunk's ready flag to the call's epoch (ops_image.cuh), which 22's producer
// warp waits for before it copies the chunk. A first form waited in the chain warpgroup (the flag's acquire
// and the proxy fence on the chain's path each chunk) and ran slower than one kernel after the other; with
// the wait in the producer warp, two chunks ahead, the probe had side by side a little faster.
//
// Launch: grid (B H, NC) (NC <= 65535), 256 threads, kernels.prep_smem_words; the image workspace
// [B, H, NC, kda_ops_image_bytes(K)] after 07's, the ready flags [B, H, NC] (int, zeroed once) and the epoch
// (0: one kernel after the other, no flags).
#include "07_chunk_prep_tc.cu"

template <int K, int C, bool BF = true>
__global__ void __launch_bounds__(256, 3)   // three blocks per SM: at four (07's bf16 form) this body spills
kda_chunk_prep_ops(const typename KdaIn<BF>::T* __restrict__ q, const typename KdaIn<BF>::T* __restrict__ k,
                   const typename KdaIn<BF>::T* __restrict__ g, const typename KdaIn<BF>::T* __restrict__ beta,
                   unsigned* __restrict__ TA,             // [B, H, NC, 4, C, C/2]: T, A2 = Aqk T
                   unsigned char* __restrict__ OPS,       // [B, H, NC, kda_ops_image_bytes(K)]
                   int* __restrict__ ready, int epoch,     // [B, H, NC]: set to epoch once written (epoch > 0)
                   int T, int H, float scale) {
    static_assert(BF, "the operand image is one bf16 term per operand: bf16 inputs only");
    kda_prep_body<K, C, BF, true, true>(q, k, g, beta, TA, OPS, ready, epoch, T, H, scale);
}
