// The element-wise operands of one chunk of one head, as the recurrence of step 22 holds them in an
// operand buffer of shared memory (KdaWgLayout with PRE), byte for byte: step 21 (the token-parallel
// kernel) stores them to global memory in this image, 22 lands each chunk's image with one bulk copy.
// bf16 inputs (one bf16 term each: the bf16-I/O path's one-term P1 and P4, as in 17 and 19):
//   [0, 8192)            Kd^T = (k 2^(G_L - G))^T, bf16: 64 rows of 128 bytes, 128-byte swizzle; channel c is
//                        row c % 64, its tokens 8j .. 8j + 7 the 16-byte chunk 4 (c / 64) + j (K = 128 folds
//                        the second m64 tile into the bytes 19's tile kept for lo words)
//   [8192, + 128 K)      [Kg; Qg]^T, bf16 (19's MN-major A of P1): row c, chunk 2j Kg = k 2^G of tokens
//                        8j .., chunk 2j + 1 Qg = scale q 2^G of the same tokens, 128-byte swizzle
//   [.., + 4 K)          2^G_L, fp32, one per channel
// fp32 inputs (hi and lo bf16 words: the three-term products of 15 and 19), 19's fp32 operand buffer:
//   [0, 128 K)           Kd^T: row c, chunk j its tokens 8j .. hi, chunk 4 + j their lo words
//   [128 K, + 128 K)     [Kg; Qg]^T hi, as above; [256 K, + 128 K) its lo words
//   [384 K, + 4 K)       2^G_L
#pragma once

#include "delta_io.cuh"

static constexpr int KDA_OPS_KD_BYTES = 64 * 128;

// 21 and 22 side by side (kernels.TcPlan.run, epoch > 0): 21 publishes each (b, h, chunk) it has written by
// storing the call's epoch into the chunk's ready flag (release at GPU scope, after every thread's stores and
// a fence); 22's producer warp waits for the flag (acquire) before it copies the chunk, and orders those
// async-proxy copies behind what the acquire made visible with a proxy fence. Epoch 0: one after the
// other, no flags.
#ifndef KDA_HOST_EMULATION
static __device__ __forceinline__ void kda_flag_release(int* flag, int value) {
    asm volatile("st.release.gpu.global.s32 [%0], %1;" :: "l"(flag), "r"(value) : "memory");
}
static __device__ __forceinline__ void kda_wait_ready(const int* flag, int value) {
    int v;
    while (true) {
        asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
        if (v == value) break;
        __nanosleep(64);
    }
    asm volatile("fence.proxy.async.global;" ::: "memory");
}
// 26: a flag that another block of the same kernel sets (its blocks all resident: the launcher's check)
static __device__ __forceinline__ void kda_wait_flag(const int* flag, int value) { kda_wait_ready(flag, value); }
#else   // the CPU model runs 21 to its end before 22 starts: a flag not yet set is a bug
static inline void kda_flag_release(int* flag, int value) { *flag = value; }
static inline void kda_wait_ready(const int* flag, int value) {
    if (*flag != value) { std::fprintf(stderr, "22 read a chunk that 21 has not published\n"); std::abort(); }
}
// 26's blocks run together (a head's blocks as one cluster of fibers): the waiter lets the others run until the
// flag is set; if nobody can set it, the model reports a deadlock
static inline void kda_wait_flag(const int* flag, int value) {
    while (*static_cast<const volatile int*>(flag) != value) emu_yield();
}
#endif

// KDA_TIMELINE=1 (scripts/probe_delta_timeline.py; results unchanged, not a recorded build): 21 and 22 stamp
// %globaltimer and %smid into the words after the ready flags, so that the probe can see how the two kernels
// share the SMs: per block of 21 (start, end, SM, 0, KDA_TIMELINE=2's clocks) after its chunk is published; per block of 22
// KDA_TL_W words: start, WG_C's end, SM, the producer's total wait for flags, the number of chunks it
// waited for, the time it asked for chunk 64 i (i < KDA_TL_W - 7), WG_C's total wait for the operand buffers
// and the time WG_C ended.
#define KDA_TL_W 16
#define KDA_TL_P 20   // words per block of 21
#if defined(KDA_TIMELINE) && !defined(KDA_HOST_EMULATION)
static __device__ __forceinline__ unsigned long long kda_gtime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
static __device__ __forceinline__ unsigned long long kda_smid() {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}
// the stamps after the B H NC ready flags (rounded up to 8 bytes): 21's KDA_TL_P words a block (chunk-major,
// grid (B H, NC)), then 22's KDA_TL_W (grid (V / BV, H, B))
static __device__ __forceinline__ unsigned long long* kda_tl_words(const int* ready, long long flags) {
    return reinterpret_cast<unsigned long long*>(const_cast<int*>(ready) + ((flags + 1) & ~1LL));
}
static __device__ __forceinline__ unsigned long long* kda_tl_prep_words(const int* ready, int NC, int n) {
    return kda_tl_words(ready, (long long)gridDim.x * NC) + KDA_TL_P * ((long long)n * gridDim.x + blockIdx.x);
}
static __device__ __forceinline__ unsigned long long* kda_tl_state_words(const int* ready, int H, int NC) {
    const long long flags = (long long)gridDim.z * H * NC;
    return kda_tl_words(ready, flags) + KDA_TL_P * flags +
           KDA_TL_W * (((long long)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x);
}
static __shared__ unsigned long long kda_tl_full_wait;   // 22's WG_C thread 0: its total wait for the operand buffers
#define KDA_TL(...) __VA_ARGS__
#else
#define KDA_TL(...)
#endif
// KDA_TIMELINE=2: 21's thread 0 also stores %clock64 after each of its barriers (words 4 .. 16 of its block's 20)
#if defined(KDA_TIMELINE) && KDA_TIMELINE >= 2 && !defined(KDA_HOST_EMULATION)
#define KDA_PH(i)                                                                                              \
    do {                                                                                                       \
        if (OPS && tid == 0) {                                                                                 \
            long long ck_;                                                                                     \
            asm volatile("mov.u64 %0, %%clock64;" : "=l"(ck_));                                               \
            kda_tl_prep_words(ready, NC, n)[4 + (i)] = ck_;                                                   \
        }                                                                                                      \
    } while (0)
#else
#define KDA_PH(i) do { } while (0)
#endif

// lo: fp32 inputs' image (hi and lo words)
static __host__ __device__ constexpr int kda_ops_image_bytes(int K, bool lo = false) {
    return lo ? 3 * K * 128 + K * 4 : KDA_OPS_KD_BYTES + K * 128 + K * 4;
}

// Byte offset of (row, 16-byte chunk) in a K-major tile of 128-byte rows with the 128-byte swizzle.
static __device__ __forceinline__ int kda_ops_sw(int row, int ch) {
    return (row / 8) * 1024 + (row % 8) * 128 + ((ch ^ (row % 8)) * 16);
}

// One thread's share of the image: channels c0, c0 + 1 over the RPG tokens r0 .. r0 + RPG - 1 (07's thread
// layout), from its q, k as loaded and its gate sums G (base 2, the chunk's running sum: its own rows'
// sums plus `off`, the earlier rows') and G_L. A thread's tokens of one channel are one 16-byte row chunk
// of each transposed tile (RPG = 8, K = 128; half of one at RPG = 4, K = 64): whole-chunk stores, since
// a warp's 4-byte stores to 32 rows at once cost the L2 a sector each (a first form, storing every four
// tokens' words as they completed to spare registers, ran 21 at five times 07's time). One channel at a
// time, Kg and Qg first, then Kd: at most 12 words beside the inputs at bf16 (21 runs at 64 registers,
// four blocks per SM, with a small spill). fp32 inputs (LO): each value split into its hi and lo words,
// the lo words to the same places of the lo tiles.
template <int K, int RPG, bool BF>
static __device__ __forceinline__ void kda_ops_image(unsigned char* img, int c0, int r0, const float (&G)[RPG][2],
                                                     const typename KdaRaw2<BF>::T (&xq)[RPG],
                                                     const typename KdaRaw2<BF>::T (&xk)[RPG], float off0, float off1,
                                                     float gl0, float gl1, float scale) {
    static_assert((RPG == 8 || RPG == 4) && (K == 64 || K == 128), "07's layout: 8 (K = 128) or 4 rows a thread");
    constexpr bool LO = !BF;                                 // fp32 inputs: hi and lo tiles
    constexpr int KD = LO ? K * 128 : KDA_OPS_KD_BYTES;      // Kd^T's bytes; [Kg; Qg]^T hi from here
    const int j = r0 / 8, sub = (r0 % 8) * 2;   // the 16-byte chunk of this thread's tokens, and the byte in it
    auto put = [&](unsigned char* p, const unsigned (&w)[RPG / 2]) {
        if constexpr (RPG == 8) *reinterpret_cast<U4*>(p) = U4{w[0], w[1], w[2], w[3]};
        else *reinterpret_cast<float2*>(p) = make_float2(__uint_as_float(w[0]), __uint_as_float(w[1]));
    };
    const bool odd = (threadIdx.x & 1) != 0;
    const int cb = odd ? c0 - 2 : c0;   // the lane pair's first channel
    // Kg and Qg of a channel are the two halves of one 32-byte sector of its row (chunks 2j, 2j + 1: the
    // swizzle moves them as a pair). Lanes 2m and 2m + 1 (channels c0 .. c0 + 3) trade halves so that in
    // each store the even lane writes a row's Kg and the odd lane the same row's Qg: one whole sector per
    // lane pair, where each lane's own Kg, Qg would each half-fill one. Even lane: its Kg to row cb + cc,
    // the odd lane's Kg to row cb + 2 + cc; odd lane: the even lane's Qg to row cb + cc, its Qg to cb + 2 + cc
    auto put_pair = [&](unsigned char* kq, int cc, const unsigned (&kg)[RPG / 2], const unsigned (&qg)[RPG / 2]) {
        unsigned got[RPG / 2];
#pragma unroll
        for (int q = 0; q < RPG / 2; ++q) got[q] = __shfl_xor_sync(ATTNLAB_FULL_MASK, odd ? kg[q] : qg[q], 1);
        unsigned char* const r0p = kq + kda_ops_sw(cb + cc, 2 * j + (odd ? 1 : 0)) + sub;
        unsigned char* const r2p = kq + kda_ops_sw(cb + 2 + cc, 2 * j + (odd ? 1 : 0)) + sub;
        if (odd) { put(r0p, got); put(r2p, qg); }
        else { put(r0p, kg); put(r2p, got); }
    };
#pragma unroll
    for (int cc = 0; cc < 2; ++cc) {   // one channel at a time (fewer live words: 21 runs at 64 registers)
        // Kg = k 2^G and Qg = scale q 2^G of channel c0 + cc, token pairs packed (LO: and their lo words)
        unsigned kg[RPG / 2], qg[RPG / 2], kgl[RPG / 2], qgl[RPG / 2];
#pragma unroll
        for (int u = 0; u < RPG; u += 2) {
            float vk[2], vq[2];
#pragma unroll
            for (int t = 0; t < 2; ++t) {
                const float2 kv = kda_widen2<BF>(xk[u + t]), qv = kda_widen2<BF>(xq[u + t]);
                const float e = fast_exp2(G[u + t][cc] + (cc ? off1 : off0));
                vk[t] = (cc ? kv.y : kv.x) * e;
                vq[t] = scale * (cc ? qv.y : qv.x) * e;
            }
            if constexpr (LO) {
                split_bf16x2(vk[0], vk[1], kg[u / 2], kgl[u / 2]);
                split_bf16x2(vq[0], vq[1], qg[u / 2], qgl[u / 2]);
            } else {
                kg[u / 2] = pack_bf16x2(vk[0], vk[1]);
                qg[u / 2] = pack_bf16x2(vq[0], vq[1]);
            }
        }
        put_pair(img + KD, cc, kg, qg);
        if constexpr (LO) put_pair(img + KD + K * 128, cc, kgl, qgl);
    }
#pragma unroll
    for (int cc = 0; cc < 2; ++cc) {   // Kd = k 2^(G_L - G) (exponent <= 0), and 2^G_L
        const int c = c0 + cc;
        const float gl = cc ? gl1 : gl0, off = cc ? off1 : off0;
        unsigned kd[RPG / 2], kdl[RPG / 2];
#pragma unroll
        for (int u = 0; u < RPG; u += 2) {
            float vk[2];
#pragma unroll
            for (int t = 0; t < 2; ++t) {
                const float2 kv = kda_widen2<BF>(xk[u + t]);
                vk[t] = (cc ? kv.y : kv.x) * fast_exp2(gl - (G[u + t][cc] + off));
            }
            if constexpr (LO) split_bf16x2(vk[0], vk[1], kd[u / 2], kdl[u / 2]);
            else kd[u / 2] = pack_bf16x2(vk[0], vk[1]);
        }
        if constexpr (LO) {   // 19's rows: channel c is row c, hi chunk j, lo chunk 4 + j
            put(img + kda_ops_sw(c, j) + sub, kd);
            put(img + kda_ops_sw(c, 4 + j) + sub, kdl);
        } else {
            put(img + kda_ops_sw(c % 64, 4 * (c / 64) + j) + sub, kd);   // Kd^T
        }
        if (r0 == 0) reinterpret_cast<float*>(img + KD + (LO ? 2 : 1) * K * 128)[c] = fast_exp2(gl);
    }
}
