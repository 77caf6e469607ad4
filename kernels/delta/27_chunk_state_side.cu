// 27 — chunked KDA: 24's recurrence at 64 value columns a block, so that its grid leaves half the SMs to 07, which
// runs beside it; the recurrence waits for each chunk's words on 07's ready flags.
//
// What changed from 24, and why. 07 -> 24 runs one kernel after the other: 07 takes about a quarter of the call, and
// 24's grid (V / BV value blocks of every head: 128 blocks of one SM each at B = 2, H = 16, BV = 32) leaves 07 no SM
// to run on beside it. Notebook 13's bounds also put the sequential pair near the fp32 target however fast 24 gets:
// 22 on ready-made images, the fastest recurrence measured, plus 07 comes to about the time the target allows. Here a
// block takes 64 value columns: every wgmma of the chain is m64n64k16 in place of m64n32k16 (the same products, in
// the same order, for twice the columns; each column's sums are 24's), half as many blocks hold the SMs, and the
// element-wise warpgroup makes each chunk's operands for 64 columns in place of 32 (half as many copies of that work
// per head). 07 runs in 21's grid order (every head's chunk n before any chunk n + 1: kda_chunk_prep_side) on the
// SMs the recurrence leaves free, and publishes each chunk with a ready flag; WG_C's first thread acquires the flag
// before it issues the chunk's tensor copy of 07's words (the acquire and the proxy fence as 22's producer takes
// 21's). The launcher starts 27 first, on a stream of the highest priority, so that its blocks hold their SMs before
// 07's fill them, and runs the two side by side only where 27's grid leaves an SM free (kernels.side_by_side_safe:
// 07 then always has an SM, and never waits); elsewhere one after the other, with no flags (epoch 0).
// What 64 columns cost: the state (two m64 tiles of 64 columns) takes 64 accumulator registers a thread in place of
// 32, and P1's, P2's and P4's accumulators double too (246 registers a thread, no spill, nvcc 13); the S^T tiles and
// v's slots double, and X^T and V'^T share one tile (KdaWgLayout's W64: V'^T is written once P2, X^T's reader, has
// completed, the next X^T once P4, V'^T's last reader, has), 226 KB in all; v's rows (256 bytes on fp32 inputs) land
// as two boxes of 32 columns, each in the 128-byte swizzle. fp32 inputs only (the bf16-I/O target is met by 07 + 20).
// o and the final state are 24's bit for bit on the CPU model (tests/test_emu_delta_tc.py).
// What the probes found (scripts/probe_delta_side.py on an H100 and an H200, not recorded; notebook 13 does not time
// 27): o and the final state 24's bit for bit on the GPU too, and 07 beside it ran as designed (part of 07's time hidden
// against 07 then 27), but 27 is slower than 24, alone and in the call. Its chain alone (KDA_PROBE=5) takes about 1.4
// times 24's chain alone for twice the columns, while 24's chain at 16 columns a block takes most of its time at 32
// (the same builds at B = 1: 128 blocks either way; 24's chain runs as fast on 64 blocks as on 128): up to 32 columns
// a chunk's chain is set by its hand-overs and waits, past it by its products' throughput (the tensor pipe and the
// operands' shared-memory reads), and halving the grid costs more than hiding 07 saves.
// It stays a step of the registry (the side-by-side launch and 07's flags are the pieces a faster recurrence on fewer
// SMs would reuse), not a row of notebook 13's ladder.
//
// Launch: grid (V / 64, H, B), 256 threads, shared memory kernels.side_smem_words; the tensor maps of g, k, q as 24
// takes them, v's in boxes of 32 columns, 07's output; 07's ready flags [B, H, NC] and the call's epoch (0: none).
// Requires sm_90a.
#include "14_chunk_state_multicast.cu"

template <int K, int V, int C, int BV>
__global__ void __launch_bounds__(256, 1)
kda_chunk_state_side(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                     const float* __restrict__ g, const float* __restrict__ beta, const unsigned* __restrict__ TA,
                     const int* __restrict__ ready, int epoch,   // [B, H, NC]: 07's flags; the call's epoch (0: none)
                     const float* __restrict__ h0, float* __restrict__ o, float* __restrict__ ht, int T, int H,
                     float scale, const __grid_constant__ TmaMap tg, const __grid_constant__ TmaMap tk,
                     const __grid_constant__ TmaMap tq, const __grid_constant__ TmaMap tv,
                     const __grid_constant__ TmaMap tta) {
    static_assert(BV == 64, "27: 64 value columns a block");
    KDA_TMA_MAPS;
    kda_mc_body<K, V, C, BV, false, 1, 2, true, 2, true, false, false, true, 128, false, false, true>(
        q, k, v, g, beta, TA, h0, o, ht, T, H, scale, maps, nullptr, ready, epoch);
}
