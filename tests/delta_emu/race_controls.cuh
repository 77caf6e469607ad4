// Controls for the race checks: small kernels, each hazard of the lab's kernels in a form that
// synchronises what it must ("ok") and in forms that miss one step. Two checkers run them:
//  * the CPU model under ThreadSanitizer (race_controls.cpp, tests/test_emu_race.py), which must
//    stay quiet on every ok form and report every other;
//  * compute-sanitizer's racecheck on the GPU (race_controls_gpu.cu, scripts/racecheck_controls.py),
//    whose verdicts on the same forms say which of its reports on the lab's kernels to trust.
// The bodies are plain CUDA over kernels/common.cuh and kernels/hopper.cuh (the model supplies both on
// the CPU). Shared memory: the dynamic array, its 1024-byte aligned part (wgmma's 128-byte swizzle).
#pragma once

struct RaceForm {
    const char* name;
    bool race;             // a broken form: a checker must report it
    unsigned threads, smem;
};
// The forms, in the order race_controls_gpu.cu defines their kernels (race_<name>).
static const RaceForm RACE_FORMS[] = {
    {"handover_ok", false, 64, 2048},
    {"handover_raw", true, 64, 2048},
    {"handover_war", true, 64, 2048},
    {"ring_ok", false, 256, 8192},
    {"ring_war", true, 256, 8192},
    {"bulk_ok", false, 64, 9216},
    {"bulk_war", true, 64, 9216},
    {"bulk_raw", true, 64, 9216},
    {"cp_async_ok", false, 64, 2048},
    {"cp_async_raw", true, 64, 2048},
    {"cp_async_late", true, 64, 2048},
    {"wgmma_ok", false, 160, 17408},
    {"wgmma_war", true, 160, 17408},
    {"wgmma_late", true, 160, 17408},
    {"channel_ok", false, 64, 9216},
    {"channel_raw", true, 64, 9216},
    {"channel_cp_async", true, 64, 9216},
    {"warp_ok", false, 32, 2048},
    {"warp_shfl", true, 32, 2048},
};

// The 1024-byte aligned start of the dynamic shared memory: its shared-space address and pointer.
static __device__ __forceinline__ unsigned char* race_smem(unsigned& base) {
    extern __shared__ __align__(16) float smem[];
    const unsigned raw = smem_u32(smem);
    base = (raw + 1023u) & ~1023u;
    return reinterpret_cast<unsigned char*>(smem) + (base - raw);
}

// A producer warp hands a tile to a consumer warp through named barrier 1 (FULL) and gets it back
// through named barrier 2 (EMPTY), four times over one buffer. raw: the consumer reads before it
// waits for FULL; war: the consumer hands the buffer back (EMPTY) before it reads it, so the refill
// may overwrite what it reads. (Both keep every barrier's count: the model would report a deadlock,
// the GPU might hang.)
static __device__ __forceinline__ void race_handover(float* out, bool wait_full, bool empty_after_read) {
    unsigned base;
    float* tile = reinterpret_cast<float*>(race_smem(base));
    const int lane = threadIdx.x % 32;
    float acc = 0.f;
    for (int n = 0; n < 4; ++n) {
        if (threadIdx.x < 32) {
            if (n > 0) named_bar_sync(2, 64);
            tile[lane] = (float)(n * 32 + lane);
            named_bar_arrive(1, 64);
        } else {
            if (!wait_full) acc += tile[lane];   // before the hand-over
            named_bar_sync(1, 64);
            if (!empty_after_read && n < 3) named_bar_arrive(2, 64);
            if (wait_full) acc += tile[lane];
            if (empty_after_read && n < 3) named_bar_arrive(2, 64);
        }
    }
    out[threadIdx.x] = acc;
}

// 19 / 24's operand hand-over at K = 64, BV = 16, in miniature: WG_E (threads 128-255, two per channel
// c, `part` 0 or 1) fills buffer n & 1 with chunk n's Kd^T words (every thread) and 2^G_L (part 0
// only, one word a channel), then arrives on FULL + (n & 1); WG_C (threads 0-127) waits for FULL a
// chunk ahead, reads the two 2^G_L rows of its fragment (16 warp + g8, + 8) and a Kd^T row, and
// arrives on EMPTY + (n & 1) once done with the buffer, on which WG_E waits before chunk n + 2.
// (Named barriers 3-6, 256 threads each, as in kernels/delta/wgmma_recurrence.cuh.) war: WG_C hands the
// buffer back before its Kd^T read.
static __device__ __forceinline__ void race_ring(float* out, bool empty_after_read) {
    constexpr int NC = 6, K = 64, KDW = 8, BUF = (K + K * KDW) * 4;   // 2^G_L [K], Kd^T [K][KDW] words
    constexpr int FULL = 3, EMPTY = 5, NTH = 256;
    unsigned base;
    unsigned char* sm = race_smem(base);
    auto gl = [&](int n) { return reinterpret_cast<float*>(sm + (n & 1) * BUF); };
    auto kd = [&](int n) { return reinterpret_cast<unsigned*>(sm + (n & 1) * BUF + K * 4); };
    if (threadIdx.x >= 128) {
        const int e = threadIdx.x - 128, c = e % K, part = e / K;
        for (int n = 0; n < NC; ++n) {
            if (n >= 2) named_bar_sync(EMPTY + (n & 1), NTH);
            for (int w = 0; w < KDW / 2; ++w) kd(n)[c * KDW + part * (KDW / 2) + w] = (unsigned)(n + w);
            if (part == 0) gl(n)[c] = 0.5f + (float)n;
            fence_proxy_async();
            named_bar_arrive(FULL + (n & 1), NTH);
        }
    } else {
        const int warp = threadIdx.x / 32, g8 = (threadIdx.x % 32) / 4;
        float acc = 0.f;
        named_bar_sync(FULL + 0, NTH);
        for (int n = 0; n < NC; ++n) {
            acc += gl(n)[16 * warp + g8] + gl(n)[16 * warp + g8 + 8];   // the state's decay
            if (!empty_after_read && n + 2 < NC) named_bar_arrive(EMPTY + (n & 1), NTH);
            acc += (float)kd(n)[(16 * warp + g8) * KDW + threadIdx.x % 4];   // P4's operand
            if (n + 1 < NC) named_bar_sync(FULL + ((n + 1) & 1), NTH);      // the next chunk's buffer
            if (empty_after_read && n + 2 < NC) named_bar_arrive(EMPTY + (n & 1), NTH);
        }
        out[threadIdx.x] = acc;
    }
}

// Thread 0 refills a tile by a bulk copy completing on an mbarrier, twice; every thread reads the
// tile before and after each refill. ok: a refill is issued after a barrier that ends the reads of
// the old tile (behind a proxy fence), the new tile read after the mbarrier's phase. war: the copy
// issued before that barrier (it may land while others still read the old tile). raw: the new tile
// read after a plain barrier, not the mbarrier. (Two rounds: the second copy's unit has worked
// before, so only the issue orders it after the reads.)
static __device__ __forceinline__ void race_bulk(float* out, const float* src, bool issue_after_reads, bool wait_phase) {
    unsigned base;
    float* tile = reinterpret_cast<float*>(race_smem(base));
    const unsigned bar = base + 4096;
    if (threadIdx.x == 0) mbar_init(bar, 1);
    tile[threadIdx.x] = 1.f;
    __syncthreads();
    float acc = 0.f;
    for (unsigned round = 0; round < 2; ++round) {
        acc += tile[(threadIdx.x + 1) % 64];   // the old tile
        fence_proxy_async();
        if (!issue_after_reads && threadIdx.x == 0) {
            mbar_arrive_expect_tx(bar, 256);
            bulk_copy(base, src, 256, bar);
        }
        __syncthreads();
        if (issue_after_reads && threadIdx.x == 0) {
            mbar_arrive_expect_tx(bar, 256);
            bulk_copy(base, src, 256, bar);
        }
        if (!wait_phase) __syncthreads();
        else mbar_wait(bar, round & 1);
        acc += tile[(threadIdx.x + 2) % 64];        // the new tile
        if (!wait_phase) mbar_wait(bar, round & 1);  // (every copy waited for before the next round)
        __syncthreads();   // every wait done before the next phase can complete (no parity is passed over)
    }
    out[threadIdx.x] = acc;
}

// Thread 0 fills a tile by cp.async, everyone reads it. ok: thread 0 waits for its copy, then a barrier.
// raw: the barrier comes before thread 0's wait (its copy may not have landed when others read).
// late (war): the others read the old tile between the issue and the wait, each side of it behind a
// barrier (the copy may land any time in between: a check that put its bytes at the issue, or at the
// wait, would call this ordered).
static __device__ __forceinline__ void race_cp_async(float* out, const float* src, bool wait_before_barrier,
                                                     bool read_old = false) {
    unsigned base;
    float* tile = reinterpret_cast<float*>(race_smem(base));
    if (read_old) {
        if (threadIdx.x < 4) tile[threadIdx.x] = 0.f;
        __syncthreads();
        if (threadIdx.x == 0) {
            cp_async16(tile, src);
            cp_async_commit();
        }
        __syncthreads();
        out[threadIdx.x] = tile[threadIdx.x % 4];   // the old tile, while the copy is in flight
        __syncthreads();
        if (threadIdx.x == 0) cp_async_wait<0>();
        return;
    }
    if (threadIdx.x == 0) {
        cp_async16(tile, src);
        cp_async_commit();
        if (wait_before_barrier) cp_async_wait<0>();
    }
    __syncthreads();
    out[threadIdx.x] = tile[threadIdx.x % 4];
    if (threadIdx.x == 0 && !wait_before_barrier) cp_async_wait<0>();
}

// A warpgroup (threads 0-127) multiplies two bf16 tiles from shared memory (wgmma m64n16k16, both
// K-major in the 128-byte swizzle); warp 4 then overwrites the tiles for the next step. ok: the
// warpgroup waits for its wgmma before the barrier that lets warp 4 write. war: it waits after
// that barrier (the tensor core may still be reading the tiles when they are overwritten). late:
// as war, with a second barrier between warp 4's writes and the wait (still a race: the wgmma may
// read at any time until its wait; a check that read the operands at the issue, or at the wait,
// would call this ordered).
static __device__ __forceinline__ void race_wgmma(float* out, bool wait_before_barrier, bool barrier_before_wait = false) {
    unsigned base;
    unsigned short* tiles = reinterpret_cast<unsigned short*>(race_smem(base));   // A: 64 rows of 128 bytes; B: 16
    constexpr unsigned A = 0, B = 8192, HALVES = (8192 + 2048) / 2;
    for (unsigned i = threadIdx.x; i < HALVES; i += blockDim.x) tiles[i] = 0x3f80;   // bf16 1.0
    fence_proxy_async();
    __syncthreads();
    float d[8];
    for (int i = 0; i < 8; ++i) d[i] = 0.f;
    if (threadIdx.x < 128) {
        wgmma_fence();
        wgmma_ss<16, true>(d, wgmma_desc_sw128(base + A, 16, 1024), wgmma_desc_sw128(base + B, 16, 1024), 0);
        wgmma_commit();
        if (wait_before_barrier) {
            wgmma_wait<0>();
            fence_regs(d);   // the accumulators are read after the wait, not moved above it
        }
    }
    __syncthreads();
    if (threadIdx.x >= 128)
        for (unsigned i = threadIdx.x - 128; i < HALVES; i += 32) tiles[i] = 0x4000;   // the next step's operands
    if (barrier_before_wait) __syncthreads();
    if (threadIdx.x < 128) {
        if (!wait_before_barrier) {
            wgmma_wait<0>();
            fence_regs(d);
        }
        out[threadIdx.x] = d[0];
    }
}

// Thread 0 fills tile A by a bulk copy on mbarrier 0, tile B by one on mbarrier 1, and tile C by
// cp.async; the others read the tiles. ok: each tile read after its own completion (A after barrier 0,
// B after barrier 1, C after thread 0's wait and a barrier). raw: A read after barrier 1 only.
// cp_async: C read after barrier 1 only (an mbarrier does not complete a cp.async).
static __device__ __forceinline__ void race_channel(float* out, const float* src, int form) {
    unsigned base;
    float* tiles = reinterpret_cast<float*>(race_smem(base));   // A at 0, B at 256 bytes, C at 512
    const unsigned bar0 = base + 4096, bar1 = base + 4104;
    if (threadIdx.x == 0) {
        mbar_init(bar0, 1);
        mbar_init(bar1, 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        mbar_arrive_expect_tx(bar0, 256);
        bulk_copy(base, src, 256, bar0);
        cp_async16(tiles + 128, src);
        cp_async_commit();
        mbar_arrive_expect_tx(bar1, 256);
        bulk_copy(base + 256, src, 256, bar1);
    }
    float acc = 0.f;
    if (form == 0) {
        mbar_wait(bar0, 0);
        acc += tiles[threadIdx.x % 64];
        mbar_wait(bar1, 0);
        acc += tiles[64 + threadIdx.x % 64];
        if (threadIdx.x == 0) cp_async_wait<0>();
        __syncthreads();
        acc += tiles[128 + threadIdx.x % 4];
    } else {
        mbar_wait(bar1, 0);
        acc += tiles[64 + threadIdx.x % 64];
        acc += form == 1 ? tiles[threadIdx.x % 64] : tiles[128 + threadIdx.x % 4];
        mbar_wait(bar0, 0);                          // (every copy waited for before the block ends)
        if (threadIdx.x == 0) cp_async_wait<0>();
    }
    out[threadIdx.x] = acc;
}

// Lane 0 writes a word of shared memory, lane 1 reads it. ok: __syncwarp between them. shfl: a
// shuffle between them (a warp collective orders no memory).
static __device__ __forceinline__ void race_warp(float* out, bool syncwarp) {
    unsigned base;
    float* tile = reinterpret_cast<float*>(race_smem(base));
    if (threadIdx.x == 0) tile[0] = 3.f;
    float x = (float)threadIdx.x;
    if (syncwarp) __syncwarp();
    else x = __shfl_sync(0xffffffffu, x, 0);
    out[threadIdx.x] = x + (threadIdx.x == 1 ? tile[0] : 0.f);
}

// Form i of RACE_FORMS.
static __device__ __forceinline__ void race_form(int i, float* out, const float* src) {
    switch (i) {
        case 0: race_handover(out, true, true); break;
        case 1: race_handover(out, false, true); break;
        case 2: race_handover(out, true, false); break;
        case 3: race_ring(out, true); break;
        case 4: race_ring(out, false); break;
        case 5: race_bulk(out, src, true, true); break;
        case 6: race_bulk(out, src, false, true); break;
        case 7: race_bulk(out, src, true, false); break;
        case 8: race_cp_async(out, src, true); break;
        case 9: race_cp_async(out, src, false); break;
        case 10: race_cp_async(out, src, true, true); break;
        case 11: race_wgmma(out, true); break;
        case 12: race_wgmma(out, false); break;
        case 13: race_wgmma(out, false, true); break;
        case 14: race_channel(out, src, 0); break;
        case 15: race_channel(out, src, 1); break;
        case 16: race_channel(out, src, 2); break;
        case 17: race_warp(out, true); break;
        case 18: race_warp(out, false); break;
        default: break;
    }
}
