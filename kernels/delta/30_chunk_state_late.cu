// 30 — chunked KDA: 24's recurrence with each chunk's o stored behind the next chunk's first product (P1) issue,
// not before V'^T's proxy fence.
//
// What changed from 24, and why. 24's chain warpgroup (WG_C) stores a chunk's o (Ob + A2 X, rows g8 + 8 of P2's
// accumulators) as soon as P2 completes, then writes V'^T, fences it for the wgmmas (the async proxy) and meets the
// barrier before P4. That fence is a membar (SASS MEMBAR.ALL.CTA, then FENCE.VIEW.ASYNC.S), and a membar waits for the
// thread's outstanding memory operations, the o stores just issued among them: Nsight Compute's per-instruction view
// of 24 (scripts/ncu_source.py, not recorded) put long-scoreboard stalls on it, on the chain between P2 and P4.
// Here the o values stay in registers (BV / 4 floats a thread) and are stored while the next chunk's P1 runs, where
// WG_C only waits for its wgmmas; the last chunk's after the loop. The same words are stored to the same places: o
// and the final state are 24's bit for bit (tests/test_emu_delta_tc.py on the CPU model; scripts/probe_delta_olate.py
// compared them on an H100 as 24's probe build KDA_O_LATE=1, which is this loop).
// What it does not take off the chain: the stores still issue from WG_C, and the next fence after them (X^T's, after
// P1) may wait for them instead; o never stored at all (KDA_O_LATE=2, results meaningless) bounds what moving them
// could save. Taken off WG_C through a shared-memory tile (24's probes KDA_O_BULK, KDA_O_WARP), o made 24 slower.
// The token-parallel half before it is 29 (07 with its inverse on every warp); notebook 13 times "29+30" beside
// "07+24".
//
// Launch: 24's (grid (V / BV, H, B), 256 threads, the tensor maps of g, k, q, v and 29's output; shared memory
// kernels.tile_smem_words). Requires sm_90a.
#include "14_chunk_state_multicast.cu"

template <int K, int V, int C, int BV, bool BF = false>
__global__ void __launch_bounds__(256, 1)
kda_chunk_state_late(KDA_TMA_STATE_PARAMS) {
    static_assert(!KDA_O_WARP && !KDA_O_BULK, "30 stores o itself, a chunk late (the o-tile probes are 24's)");
    KDA_TMA_MAPS;
    kda_mc_body<K, V, C, BV, BF, 1, 2, true, 2, true, BF, false, true, 128, false, false, true, false, false, false,
                true>(q, k, v, g, beta, TA, h0, o, ht, T, H, scale, maps);
}
