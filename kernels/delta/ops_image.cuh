// The element-wise operands of one chunk of one head, as the recurrence of step 22 holds them in an
// operand buffer of shared memory (KdaWgLayout with PRE), byte for byte: step 21 (the token-parallel
// kernel) stores them to global memory in this image, 22 lands each chunk's image with one bulk copy.
//   [0, 8192)            Kd^T = (k 2^(G_L - G))^T, bf16: 64 rows of 128 bytes, 128-byte swizzle; channel c is
//                        row c % 64, its tokens 8j .. 8j + 7 the 16-byte chunk 4 (c / 64) + j (K = 128 folds
//                        the second m64 tile into the bytes 19's tile kept for lo words)
//   [8192, + 128 K)      [Kg; Qg]^T, bf16 (19's MN-major A of P1): row c, chunk 2j Kg = k 2^G of tokens
//                        8j .., chunk 2j + 1 Qg = scale q 2^G of the same tokens, 128-byte swizzle
//   [.., + 4 K)          2^G_L, fp32, one per channel
// One bf16 term each (the bf16-I/O path's one-term P1 and P4, as in 17 and 19).
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
#else   // the CPU model runs 21 to its end before 22 starts: a flag not yet set is a bug
static inline void kda_flag_release(int* flag, int value) { *flag = value; }
static inline void kda_wait_ready(const int* flag, int value) {
    if (*flag != value) { std::fprintf(stderr, "22 read a chunk that 21 has not published\n"); std::abort(); }
}
#endif

static __host__ __device__ constexpr int kda_ops_image_bytes(int K) { return KDA_OPS_KD_BYTES + K * 128 + K * 4; }

// Byte offset of (row, 16-byte chunk) in a K-major tile of 128-byte rows with the 128-byte swizzle.
static __device__ __forceinline__ int kda_ops_sw(int row, int ch) {
    return (row / 8) * 1024 + (row % 8) * 128 + ((ch ^ (row % 8)) * 16);
}

// One thread's share of the image: channels c0, c0 + 1 over the RPG tokens r0 .. r0 + RPG - 1 (07's thread
// layout), from its q, k as loaded and its gate sums G (base 2, the chunk's running sum: its own rows'
// sums plus `off`, the earlier rows') and G_L. A thread's tokens of one channel are one 16-byte row chunk
// of each transposed tile (RPG = 8, K = 128; half of one at RPG = 4, K = 64): whole-chunk stores, since
// a warp's 4-byte stores to 32 rows at once cost the L2 a sector each (a first form, storing every four
// tokens' words as they completed to spare registers, ran 21 at five times 07's time). Kg and Qg first,
// then Kd: 16 words at a time beside the inputs (21 runs at three blocks per SM: at four, 64 registers,
// even this spills).
template <int K, int RPG, bool BF>
static __device__ __forceinline__ void kda_ops_image(unsigned char* img, int c0, int r0, const float (&G)[RPG][2],
                                                     const typename KdaRaw2<BF>::T (&xq)[RPG],
                                                     const typename KdaRaw2<BF>::T (&xk)[RPG], float off0, float off1,
                                                     float gl0, float gl1, float scale) {
    static_assert((RPG == 8 || RPG == 4) && (K == 64 || K == 128), "07's layout: 8 (K = 128) or 4 rows a thread");
    const int j = r0 / 8, sub = (r0 % 8) * 2;   // the 16-byte chunk of this thread's tokens, and the byte in it
    auto put = [&](unsigned char* p, const unsigned (&w)[RPG / 2]) {
        if constexpr (RPG == 8) *reinterpret_cast<U4*>(p) = U4{w[0], w[1], w[2], w[3]};
        else *reinterpret_cast<float2*>(p) = make_float2(__uint_as_float(w[0]), __uint_as_float(w[1]));
    };
#pragma unroll
    for (int part = 0; part < 2; ++part) {   // 0: Kg and Qg (k 2^G, scale q 2^G), 1: Kd = k 2^(G_L - G)
        unsigned w[2][2][RPG / 2];             // [array][channel][token pair]
#pragma unroll
        for (int u = 0; u < RPG; u += 2) {
            float v[2][2][2];                    // [array][channel][token of the pair]
#pragma unroll
            for (int t = 0; t < 2; ++t) {
                const float2 kv = kda_widen2<BF>(xk[u + t]);
                const float G0 = G[u + t][0] + off0, G1 = G[u + t][1] + off1;
                if (part == 0) {
                    const float2 qv = kda_widen2<BF>(xq[u + t]);
                    const float e0 = fast_exp2(G0), e1 = fast_exp2(G1);
                    v[0][0][t] = kv.x * e0;          v[0][1][t] = kv.y * e1;
                    v[1][0][t] = scale * qv.x * e0;  v[1][1][t] = scale * qv.y * e1;
                } else {
                    v[0][0][t] = kv.x * fast_exp2(gl0 - G0);   // exponent <= 0
                    v[0][1][t] = kv.y * fast_exp2(gl1 - G1);
                }
            }
#pragma unroll
            for (int a = 0; a < 2 - part; ++a)
#pragma unroll
                for (int cc = 0; cc < 2; ++cc) w[a][cc][u / 2] = pack_bf16x2(v[a][cc][0], v[a][cc][1]);
        }
        if (part == 0) {
            // Kg and Qg of a channel are the two halves of one 32-byte sector of its row (chunks 2j, 2j + 1:
            // the swizzle moves them as a pair). Lanes 2m and 2m + 1 (channels c0 .. c0 + 3) trade halves
            // so that in each store the even lane writes a row's Kg and the odd lane the same row's Qg:
            // one whole sector per lane pair, where each lane's own Kg, Qg would each half-fill one
            const bool odd = (threadIdx.x & 1) != 0;
            unsigned got[2][RPG / 2];   // even: the odd lane's Kg (channels c0 + 2, + 3); odd: the even lane's Qg
#pragma unroll
            for (int cc = 0; cc < 2; ++cc)
#pragma unroll
                for (int q = 0; q < RPG / 2; ++q)
                    got[cc][q] = __shfl_xor_sync(ATTNLAB_FULL_MASK, odd ? w[0][cc][q] : w[1][cc][q], 1);
            const int cb = odd ? c0 - 2 : c0;   // the pair's first channel
#pragma unroll
            for (int x = 0; x < 4; ++x) {
                unsigned d[RPG / 2];
#pragma unroll
                for (int q = 0; q < RPG / 2; ++q)
                    d[q] = odd ? (x < 2 ? got[x % 2][q] : w[1][x % 2][q]) : (x < 2 ? w[0][x % 2][q] : got[x % 2][q]);
                put(img + KDA_OPS_KD_BYTES + kda_ops_sw(cb + x, 2 * j + (odd ? 1 : 0)) + sub, d);
            }
        } else {
#pragma unroll
            for (int cc = 0; cc < 2; ++cc) {
                const int c = c0 + cc;
                put(img + kda_ops_sw(c % 64, 4 * (c / 64) + j) + sub, w[0][cc]);         // Kd^T
                if (r0 == 0) reinterpret_cast<float*>(img + KDA_OPS_KD_BYTES + K * 128)[c] = fast_exp2(cc ? gl1 : gl0);
            }
        }
    }
}
