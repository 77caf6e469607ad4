// 10h — flash attention on tensor cores: 10g's row-block body, scheduled Stream-K: a persistent
// grid of one block per resident slot, each taking an equal share of all (row block, key tile)
// iterations, so that no last wave runs part-empty.
//
//   O[b,h,i,:] = sum_j softmax_j(scale * Q[b,h,i,:] . K[b,h,j,:]) * V[b,h,j,:]   (j <= i if CAUSAL)
//
// What changed from 10g_occupancy (same row-block body, attn10g::row_block, and same epilogue):
//  1. Why. 10g launches ceil(N / BM) * B*H blocks. At B = 2, H = 8, N = 4096, D = 128 that is 1024
//     blocks over 132 SMs x 3 resident blocks = 396 slots: 2.59 waves (Nsight Compute's "Waves
//     Per SM"), so the last wave leaves SMs partly idle, while FlashAttention-2's 512 blocks of 128
//     rows fill 2 slots an SM in 1.94 waves. Larger blocks (6 warps, 96 rows, 64-key tiles: less
//     shared-memory and L2 traffic per MMA) are faster per SM at N = 16384 but have even emptier
//     last waves at N = 4096.
//  2. Stream-K. Non-causal launches take a grid of P blocks, P = min(resident slots, iterations),
//     given by the launcher from the GPU's SM count and this kernel's occupancy. The T = B*H *
//     ceil(N/BM) * ceil(N/BN) iterations (row block u, key tile j; u-major) are cut into P ranges
//     of floor(T/P) or ceil(T/P): block c takes [c*T/P, (c+1)*T/P). Every SM gets the same number
//     of key tiles (+-1), whatever B, H and N are.
//  3. Row blocks cut between blocks. A block whose range holds only part of row block u (key
//     tiles [j0, j1)) runs 10g's body over those tiles alone: its O is relative to its own reference
//     point mus and its row sums are over its keys only. It stores that state (each thread its
//     own fragments: O, mus and l of its two rows, REC floats, thread-major so the stores are
//     coalesced) in the workspace slot (block, first/last row block of its range), fences, and
//     counts itself in u's counter (atomicAdd). The block that arrives last merges every part of
//     u into its registers, O = sum_i O_i 2^(mus_i - M) and l = sum_i l_i 2^(mus_i - M) with
//     M = max_i mus_i (each thread the same fragments in every part, so no exchange), resets the
//     counter for the next launch, and runs 10g's epilogue. Rows whose parts are whole run the
//     epilogue directly. Nothing waits for another block: the grid may be larger than what is
//     resident and still finish.
//  4. Locality. Blocks resident together must read neighbouring heads' K/V, or L2 stops holding
//     them: a pure Stream-K split over all row blocks (every block at its own place in the
//     sequence) measured slower than 10g at N = 16384 in a probe (all 16 heads' K/V in flight,
//     more than L2 holds) while it won at N = 4096. So the first floor(U/P) - 1 rounds of the U row blocks
//     are data-parallel in grid order (round r: block c takes row block r*P + c, whole) and only
//     the rest, one to two rounds' worth, is split (attn10h::Schedule).
//  5. Registers. The body needs 168 at D = 128 (two blocks of 6 warps an SM). The schedule's own
//     state is kept in shared memory across a row block and recomputed from the kernel
//     parameters after it; even so ptxas keeps one of the body's V base addresses in local
//     memory (a few dozen spilled bytes in the static build; notebook 10 shows the figure): one
//     4-byte reload per key tile on the common path (the registry allows 64 bytes for this
//     kernel, nothing for the others).
//  6. Causal launches keep 10g's grid (one block per row block, heaviest first): their row blocks
//     differ in length, and 10g already beats the library there.
//  7. Nearly full rounds keep it too. Splitting costs something (a second prologue and epilogue
//     per split row block, the workspace round trip), and a persistent grid's fixed assignment
//     cannot follow SMs that run ahead or behind the way the hardware's block scheduler does:
//     when a plain grid's rounds are at least FILL % full (100 * U >= FILL * ceil(U/P) * P; FILL
//     is a launch parameter of the registry; attn_stream_k_plain below), the launcher runs 10g's
//     kernel, attn_occupancy, with the same template arguments on its own grid (a separate
//     kernel: in this one its code would share, and cost, this kernel's registers).
//  8. (Later, for 10i.) The body is attn10h::stream_k_block, with CW (the warps that copy tiles;
//     0 here: 10g's rule), the same instructions.
//
// Workspace (the launcher allocates it once per plan): ws, 2 * P * REC * THREADS floats
// (REC = 4 * D/8 + 4), and counters, B*H * ceil(N/BM) ints, zero before the first launch (each
// merge leaves its counter at zero again). Template and layout as 10g; blockIdx.y = b*H + h
// (causal only). Dynamic shared memory: 10g's plus 16 bytes (the merge flag).
#pragma once  // 10i builds on this file
#include "10g_occupancy.cu"

namespace attn10h {

// Floats of one thread's part of a row block: O fragments (4 per n8 tile of D), mus and l_run.
__host__ __device__ constexpr int record_floats(int D) { return 4 * (D / 8) + 4; }

// The schedule of block c of P over bh heads of n rows (u = row block, j = key tile, iteration
// it = u * L + j). U = bh * ceil(n/BM) row blocks; the first W = max(0, floor(U/P) - 1) rounds
// are data-parallel (round r: block c takes row block r*P + c whole, so the blocks resident at
// once read the K/V of neighbouring row blocks, as a plain grid's would, and L2 keeps them); the
// remaining U - W*P row blocks (one to two rounds' worth) are Stream-K: their iterations
// [base, base + Tsk) are cut into P equal ranges, block c's being [base + c*Tsk/P, base + (c+1)*Tsk/P).
// Range k of block c: k < W its data-parallel row block, k = W its Stream-K share.
struct Schedule {
    long long P, c, L, W, base, Tsk;
    __device__ __forceinline__ Schedule(int n, int bh, int BM, int BN) {
        P = gridDim.x;
        c = blockIdx.x;
        L = (n + BN - 1) / BN;
        const long long U = (long long)bh * ((n + BM - 1) / BM);
        W = U / P > 1 ? U / P - 1 : 0;
        base = W * P * L;
        Tsk = (U - W * P) * L;
    }
    __device__ __forceinline__ long long sk_first(long long cc) const { return base + cc * Tsk / P; }
    __device__ __forceinline__ long long begin(long long k) const { return k < W ? (k * P + c) * L : sk_first(c); }
    __device__ __forceinline__ long long end(long long k) const { return k < W ? (k * P + c + 1) * L : sk_first(c + 1); }
    // the block whose Stream-K range holds iteration it (it >= base): the largest cc with sk_first(cc) <= it
    __device__ __forceinline__ long long owner(long long it) const { return ((it - base + 1) * P - 1) / Tsk; }
};

}  // namespace attn10h

namespace attn10h {

// The kernel's body (10i launches it with CW > 0, the warps that issue the tile copies); smem is
// the kernel's dynamic shared memory.
template <int D, int BM, int BN, int WARPS, bool BF16, bool CAUSAL, int STAGES, int QREG, int CW>
static __device__ __forceinline__ void stream_k_block(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
                                                      const unsigned short* __restrict__ v, unsigned short* __restrict__ o,
                                                      int n, float scale, int bh, float* __restrict__ ws,
                                                      int* __restrict__ counters, float* smem) {
    constexpr int DT = D / 8, THREADS = 32 * WARPS, REC = attn10h::record_floats(D);
    const int tid = threadIdx.x, warp = tid / 32;
    float acc[DT][4], mus[2], l_run[2];

    if constexpr (CAUSAL) {  // 10g's schedule
        const int m0 = (int)(gridDim.x - 1 - blockIdx.x) * BM;
        const long long head = head_offset(blockIdx.y, n, D);
        const int n_tiles = min((n + BN - 1) / BN, (m0 + BM + BN - 1) / BN);
        attn10g::row_block<D, BM, BN, WARPS, BF16, CAUSAL, STAGES, QREG, CW>(q, k, v, n, scale, head, m0, 0, n_tiles, smem, acc, mus, l_run);
        attn10g::store_rows<D, BF16>(o, n, head, m0 + warp * 16, smem, acc, l_run);
        return;
    }

    int* last_flag = reinterpret_cast<int*>(reinterpret_cast<unsigned short*>(smem) + (BM + 2 * STAGES * BN) * D);
    volatile long long* s_it = reinterpret_cast<long long*>(last_flag + 2);
    volatile int* s_k = last_flag + 1;
    // The schedule lives in shared memory across a row block, not in registers (the row-block body
    // needs all of them): the range k and the iteration `it` where the current part starts; the
    // rest is recomputed from n, bh, gridDim and blockIdx.
    const int MB = (n + BM - 1) / BM;   // row blocks per head
    long long it = Schedule(n, bh, BM, BN).begin(0);
    for (long long kr = 0;;) {
        {
            const Schedule sched(n, bh, BM, BN);
            if (it >= sched.end(kr)) {
                if (kr == sched.W) break;
                it = sched.begin(++kr);
                continue;
            }
            __syncthreads();   // every warp's epilogue has left sQ, and every thread has read s_it and s_k
            if (tid == 0) {    // read back after the body's barriers
                *s_it = it;
                *s_k = (int)kr;
            }
            const long long L = sched.L;
            const int u = (int)(it / L), j0 = (int)(it - (long long)u * L);
            const int j1 = (int)min(L, j0 + (sched.end(kr) - it));
            attn10g::row_block<D, BM, BN, WARPS, BF16, CAUSAL, STAGES, QREG, CW>(
                q, k, v, n, scale, head_offset(u / MB, n, D), (u % MB) * BM, j0, j1, smem, acc, mus, l_run);
        }
        const Schedule sched(n, bh, BM, BN);
        const long long L = sched.L, c = sched.c;
        it = *s_it;
        kr = *s_k;
        const int u = (int)(it / L), j0 = (int)(it - (long long)u * L);
        const int j1 = (int)min(L, j0 + (sched.end(kr) - it));
        const int slot = it == sched.begin(kr) ? 0 : 1;   // u is the first row block of this block's range, or its last
        const int m0 = (u % MB) * BM;
        const long long head = head_offset(u / MB, n, D);
        it += j1 - j0;
        if (j0 > 0 || j1 < L) {  // a part of row block u: store it; the last part to arrive merges
            float* mine = ws + ((c * 2 + slot) * REC) * THREADS + tid;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
#pragma unroll
                for (int r = 0; r < 4; ++r) mine[(4 * dt + r) * THREADS] = acc[dt][r];
            mine[(4 * DT + 0) * THREADS] = mus[0];
            mine[(4 * DT + 1) * THREADS] = mus[1];
            mine[(4 * DT + 2) * THREADS] = l_run[0];
            mine[(4 * DT + 3) * THREADS] = l_run[1];
            __threadfence();   // this thread's part is visible device-wide before the count below
            __syncthreads();
            const long long c_lo = sched.owner((long long)u * L), c_hi = sched.owner((long long)u * L + L - 1);
            if (tid == 0) *last_flag = atomicAdd(&counters[u], 1) == (int)(c_hi - c_lo);
            __syncthreads();
            if (!*last_flag) continue;
            __threadfence();   // every other part, counted before our atomicAdd, is visible now
            if (tid == 0) counters[u] = 0;
            for (long long cc = c_lo; cc <= c_hi; ++cc) {
                if (cc == c) continue;
                const int cc_slot = sched.sk_first(cc) / L == u ? 0 : 1;   // u is cc's first row block, or its last   // u is cc's first row block, or its last
                const float* part = ws + ((cc * 2 + cc_slot) * REC) * THREADS + tid;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const float mus_p = __ldcg(part + (4 * DT + h) * THREADS);
                    const float m = fmaxf(mus[h], mus_p);
                    const float a = fast_exp2(mus[h] - m), b = fast_exp2(mus_p - m);   // <= 1 each
                    l_run[h] = l_run[h] * a + __ldcg(part + (4 * DT + 2 + h) * THREADS) * b;
#pragma unroll
                    for (int dt = 0; dt < DT; ++dt) {
                        acc[dt][2 * h] = acc[dt][2 * h] * a + __ldcg(part + (4 * dt + 2 * h) * THREADS) * b;
                        acc[dt][2 * h + 1] = acc[dt][2 * h + 1] * a + __ldcg(part + (4 * dt + 2 * h + 1) * THREADS) * b;
                    }
                    mus[h] = m;
                }
            }
        }
        attn10g::store_rows<D, BF16>(o, n, head, m0 + warp * 16, smem, acc, l_run);
    }
}

}  // namespace attn10h

template <int D, int BM, int BN, int WARPS, bool BF16, bool CAUSAL, int STAGES, int MINB, int QREG>
__global__ void __launch_bounds__(WARPS * 32, MINB > 0 ? MINB : attn10g::min_blocks(D, WARPS * 32))
attn_stream_k(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
              const unsigned short* __restrict__ v, unsigned short* __restrict__ o, int n, float scale, int bh,
              float* __restrict__ ws, int* __restrict__ counters) {
    static_assert(MINB >= 0, "MINB >= 0 blocks per SM");
    extern __shared__ __align__(16) float smem[];
    attn10h::stream_k_block<D, BM, BN, WARPS, BF16, CAUSAL, STAGES, QREG, 0>(q, k, v, o, n, scale, bh, ws, counters, smem);
}

// Whether a non-causal launch over bh heads of n rows takes 10g's plain grid (point 7): its
// ceil(U/P) rounds of the U = bh * ceil(n/BM) row blocks over P resident slots are at least FILL %
// full.
constexpr __host__ __device__ bool attn_stream_k_plain(int bh, int n, int BM, long long P, int FILL) {
    return 100 * ((long long)bh * ((n + BM - 1) / BM)) >= FILL * (((long long)bh * ((n + BM - 1) / BM) + P - 1) / P) * P;
}

// Dynamic shared memory in bytes for attn_stream_k<D, BM, BN, ..., STAGES, ...>: 10g's and the flag.
constexpr __host__ __device__ unsigned long long attn_stream_k_smem_bytes(int D, int BM, int BN, int STAGES) {
    return attn_occupancy_smem_bytes(D, BM, BN, STAGES) + 16;
}
// Workspace floats for a grid of P blocks of `threads` threads (two parts a block).
constexpr __host__ __device__ unsigned long long attn_stream_k_ws_floats(int D, int threads, int P) {
    return 2ull * (unsigned long long)P * (unsigned long long)attn10h::record_floats(D) * (unsigned long long)threads;
}
