// 29 — chunked KDA, token-parallel half: 07 with the inverse's two diagonal 16 x 16 blocks solved by every warp, not
// by warp 0 alone.
//
// What changed from 07, and why. 07 inverts T's diagonal blocks on warp 0 (lane = column j of block j / 16, a
// right-looking substitution over the column's 16 rows, each step's 15 - m updates a chain of FMAs on one lane) while
// the other seven warps wait at the next barrier. Nsight Compute's per-instruction view of 07 (scripts/ncu_source.py
// delta:kdreg:16384:prep, not recorded; 256 threads, 64 registers, four blocks per SM) put about a fifth of its warps'
// stall samples on that barrier: with four blocks an SM, the other blocks' warps did not fill the time.
// Here warp w solves columns 4 (w % 4) .. + 3 of block w / 4; within a column, lane rg of its eight holds rows rg and
// rg + 8, reads A_im of its two rows from shared memory, and takes each step's pivot x_m from the lane holding row m
// by a shuffle. Every update is 07's (x_i -= A_im x_m for i > m, m ascending, the same fused
// multiply-add): T, A2 and every later word are 07's bit for bit, and so are o and the final state of the recurrence
// after it (tests/test_emu_delta_tc.py on the CPU model; scripts/probe_delta_prep.py compared 07 -> 24's outputs on an
// H100 as 07's probe build KDA_PREP_INV=1). The zeroing of each output array's upper-right block, which warps 1-7 did
// meanwhile, is every warp's first.
// The recurrence after it is 30 (24 with o stored behind the next chunk's first product; impl "late"); notebook 13
// times 29 alone (the "29" stage of "29+30") beside 07 alone (the "07" stage of "07+19") and the call.
//
// Launch: 07's (grid (NC, H, B), 256 threads, kernels.prep_smem_words in its aliased layout, four blocks per SM).
#include "07_chunk_prep_tc.cu"

template <int K, int C, bool BF = false,   // BF: q, k, g, beta in bf16 (the bf16-I/O path)
          bool A2 = true>                  // A2: Aqk T in place of Aqk (the wgmma recurrences')
__global__ void __launch_bounds__(256, 4)   // four blocks per SM (kernels.prep_blocks_per_sm): 07's aliased layout
kda_chunk_prep_inv(const typename KdaIn<BF>::T* __restrict__ q, const typename KdaIn<BF>::T* __restrict__ k,
                   const typename KdaIn<BF>::T* __restrict__ g, const typename KdaIn<BF>::T* __restrict__ beta,
                   unsigned* __restrict__ TA,        // [B, H, NC, 4, C, C/2]
                   int T, int H, float scale) {
    static_assert(KDA_PREP_ALIAS == 1, "29 is 07 in its aliased layout (KDA_PREP_ALIAS is a probe build of 07)");
    kda_prep_body<K, C, BF, A2, false, false, true>(q, k, g, beta, TA, nullptr, nullptr, 0, T, H, scale);
}
