// 05 — chunked KDA, stage 3 on tensor cores: the state pass of 04, as warp-level TF32 MMAs with
// the "3xTF32" split, so it keeps fp32 accuracy.
//
// Same recurrence as 04_chunk_state.cu, per (b, h, block of BV value columns) and chunk n:
//   V' = U - W S                  (C x BV;  reduction over K)
//   O  = Qg S + Aqk V'            (C x BV;  reductions over K and over the chunk)
//   S  = diag(gL) S + Kd^T V'     (K x BV;  reduction over the chunk)
// Every product is a small matrix product, which is what tensor cores do. 04 runs them as fp32
// FMAs; here each is a sequence of mma.sync.m16n8k8 (tf32 inputs, fp32 accumulation).
//
// Why 3xTF32: a TF32 operand keeps 10 mantissa bits (relative rounding error up to 2^-11), so one
// TF32 product per term leaves an error of that order, above the 1e-4 this lab's fp32 kernels
// must meet (notebook 07 computes it; attnlab.delta.tf32 emulates the arithmetic). Split every
// operand x = hi + lo with hi = x rounded to TF32 and lo = x - hi (exact in fp32; the MMA reads its
// top 10 bits); then a b ~= a_hi b_hi + a_hi b_lo + a_lo b_hi, three MMAs, smallest terms first.
// The neglected a_lo b_lo and lo's truncation are ~2^-21 relative: fp32 level. The tensor core's
// fp32 accumulator carries S across chunks, so the state never leaves fp32.
//
// Work split (K/16 warps): warp w owns rows [16w, 16w + 16) of S as accumulator fragments for the
// whole pass (BV/8 tiles of 16 x 8). The C x BV outputs V' and O are (C/16) x (BV/8) tiles dealt
// to the warps in turn. A copy of S in shared memory feeds the products where S is the B operand
// (its accumulator layout is not the B-fragment layout).
//
// Per chunk, two barriers:
//   phase A  V' = U - W S and O = Qg S from S (shared) and the chunk's W, Qg; V' -> shared memory
//   -------- barrier: V' complete
//   phase B  O += Aqk V' (lower triangle only), O -> global; S = diag(gL) S + Kd^T V' in
//            registers, S -> shared memory
//   -------- barrier: new S visible
// None of W, Qg, Kd, Aqk depends on S, so cp.async streams them in ahead of use. With two operand
// stages (C <= 32, where both fit in shared memory) chunk n+1's operands load during all of chunk
// n. At C = 64 one stage fits: Kd, Aqk load during phase A, the next W, Qg during phase B.
// U and gL come straight from global memory into registers, U one chunk ahead.
//
// The tensor pipe's latency is hidden by independent accumulators: each 3xTF32 product is three
// dependent MMAs, so the k-steps alternate between two accumulators (summed at the end) and
// the V' and O products interleave: four independent chains per warp in phase A.
//
// Shared-memory row strides are chosen so every fragment load is bank-conflict free: a fragment
// reads 8 rows x 4 consecutive columns (A, row-major: stride = 4 mod 32) or 4 rows x 8 columns
// (B, and Kd read transposed: stride = 8 or 24 mod 32, four distinct multiples of 8).
//
// Requires sm_80+ (TF32 mma.sync, cp.async); the launcher falls back to 04 on older GPUs.
#include "delta_common.cuh"

#ifndef KDA_HOST_EMULATION
// d += A B for one 16 x 8 x 8 tile; a, b are TF32 values in the m16n8k8 fragment layout:
// with g = lane / 4, t = lane % 4:  a = A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4];
// b = B[t][g], B[t+4][g];  d = D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1].
static __device__ __forceinline__ void kda_mma_tf32(float (&d)[4], const float (&a)[4], const float (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])),
                   "r"(__float_as_uint(a[3])), "r"(__float_as_uint(b[0])), "r"(__float_as_uint(b[1])));
}

// 16-byte copy global -> shared that completes asynchronously (at kda_cp_async_wait_all).
static __device__ __forceinline__ void kda_cp_async16(float* smem_dst, const float* gmem_src) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem_src) : "memory");
}
static __device__ __forceinline__ void kda_cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
// This thread's copies have landed; a barrier must follow before other threads read them.
static __device__ __forceinline__ void kda_cp_async_wait_all() {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}
#endif

// x = hi + lo for the MMA. hi is x rounded to TF32 (nearest, ties away) by integer arithmetic:
// add half a TF32 ulp to the bit pattern, clear the 13 low bits. lo = x - hi is exact in fp32;
// it goes to the MMA unrounded, which reads only its top 10 mantissa bits (the tensor core
// truncates), an error of at most 2^-21 |x|. This is CUTLASS's "round half ulp, truncate" trick:
// cvt.rna.tf32.f32 would round too, but it is a conversion, which issues at a fraction of the
// integer/FP32 rate, and 3xTF32 splits every operand it loads. (Operands here are far from
// FLT_MAX, where the added half ulp could carry into the exponent.)
template <int N>
static __device__ __forceinline__ void kda_split_tf32(const float (&x)[N], float (&hi)[N], float (&lo)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
        hi[i] = __uint_as_float((__float_as_uint(x[i]) + 0x1000u) & 0xffffe000u);
        lo[i] = x[i] - hi[i];
    }
}

// d += A B with both operands given as (hi, lo) TF32 pairs: three MMAs, small terms first.
static __device__ __forceinline__ void kda_mma_3xtf32(float (&d)[4], const float (&ahi)[4], const float (&alo)[4],
                                                      const float (&bhi)[2], const float (&blo)[2]) {
    kda_mma_tf32(d, alo, bhi);
    kda_mma_tf32(d, ahi, blo);
    kda_mma_tf32(d, ahi, bhi);
}

// Fragment loads from shared memory (g = lane / 4, t = lane % 4), tile origin at s:
// A from a row-major [m][k] array, A from a [k][m] array (A = its transpose), B from a [k][n] array.
static __device__ __forceinline__ void kda_frag_a(const float* s, int ld, int g, int t, float (&a)[4]) {
    a[0] = s[g * ld + t];
    a[1] = s[(g + 8) * ld + t];
    a[2] = s[g * ld + t + 4];
    a[3] = s[(g + 8) * ld + t + 4];
}
static __device__ __forceinline__ void kda_frag_a_transposed(const float* s, int ld, int g, int t, float (&a)[4]) {
    a[0] = s[t * ld + g];
    a[1] = s[t * ld + g + 8];
    a[2] = s[(t + 4) * ld + g];
    a[3] = s[(t + 4) * ld + g + 8];
}
static __device__ __forceinline__ void kda_frag_b(const float* s, int ld, int g, int t, float (&b)[2]) {
    b[0] = s[t * ld + g];
    b[1] = s[(t + 4) * ld + g];
}

template <int K, int V, int C, int BV>
struct KdaStateTcLayout {
    static constexpr int NW = K / 16;          // warps
    static constexpr int NTH = 32 * NW;
    static constexpr int LS = BV + 8;          // S and V' rows (B operands): 40 or 24
    static constexpr int LWQ = K + 4;          // W and Qg rows (A operands)
    static constexpr int LKD = K + 8;          // Kd rows (read transposed)
    static constexpr int LA = C + 4;           // Aqk rows (A operand)
    static constexpr int STAGES = C <= 32 ? 2 : 1;   // operand buffers (two do not fit at C = 64)
    static constexpr int OFF_S = 0;
    static constexpr int OFF_VP = OFF_S + K * LS;
    static constexpr int OFF_STAGE = OFF_VP + C * LS;
    // within a stage:
    static constexpr int OFF_W = 0;
    static constexpr int OFF_Q = OFF_W + C * LWQ;
    static constexpr int OFF_KD = OFF_Q + C * LWQ;
    static constexpr int OFF_A = OFF_KD + C * LKD;
    static constexpr int STAGE_FLOATS = OFF_A + C * LA;
    static constexpr int FLOATS = OFF_STAGE + STAGES * STAGE_FLOATS;
};

template <int K, int V, int C, int BV>
__global__ void __launch_bounds__(2 * K, 1)
kda_chunk_state_tc(const float* __restrict__ W, const float* __restrict__ U,     // [B,H,Tp,K], [B,H,Tp,V]
                   const float* __restrict__ Qg, const float* __restrict__ Kd,   // [B,H,Tp,K]
                   const float* __restrict__ Aqk,                                // [B,H,NT,C,C]
                   const float* __restrict__ gL,                                 // [B,H,NT,K]
                   const float* __restrict__ h0,                                 // [B,H,K,V] or nullptr
                   float* __restrict__ o,                                        // [B,T,H,V]
                   float* __restrict__ ht,                                       // [B,H,K,V] or nullptr
                   int T, int H, int NT) {
    using L = KdaStateTcLayout<K, V, C, BV>;
    static_assert(C == 16 || C == 32 || C == 64, "the tensor-core state pass takes chunks of 16, 32 or 64");
    static_assert(K % 16 == 0 && BV % 8 == 0 && V % BV == 0, "K % 16, BV % 8 and V % BV must be 0");
    constexpr int NW = L::NW;
    constexpr int NTH = L::NTH;
    constexpr int NTL = BV / 8;                      // column tiles
    constexpr int NTILE = (C / 16) * NTL;            // V' / O tiles per chunk
    constexpr int TPW = (NTILE + NW - 1) / NW;       // ... per warp

    KDA_DYNAMIC_SHARED(smem);
    if (kda_dynamic_smem_size() < (unsigned)(L::FLOATS * sizeof(float))) __trap();
    float* sS = smem + L::OFF_S;     // [K][LS]
    float* sVp = smem + L::OFF_VP;   // [C][LS]
    // Operand stage of chunk n: W, Qg [C][LWQ], Kd [C][LKD], Aqk [C][LA].
    auto stage_of = [&](int n) { return smem + L::OFF_STAGE + (n % L::STAGES) * L::STAGE_FLOATS; };

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int g = (tid % 32) / 4;
    const int t = tid % 4;
    const int v0 = blockIdx.x * BV;
    const int h = blockIdx.y;
    const int b = blockIdx.z;
    const long long TT = T;
    const long long bh = (long long)b * H + h;
    const long long Tp = (long long)NT * C;

    auto load_w_qg = [&](int n) {
        if (n >= NT) return;
        float* st = stage_of(n);
        const long long base = (bh * Tp + (long long)n * C) * K;
        for (int idx = tid; idx < C * K / 4; idx += NTH) {
            const int i = idx / (K / 4), c = (idx % (K / 4)) * 4;
            kda_cp_async16(st + L::OFF_W + i * L::LWQ + c, W + base + i * K + c);
            kda_cp_async16(st + L::OFF_Q + i * L::LWQ + c, Qg + base + i * K + c);
        }
        kda_cp_async_commit();
    };
    auto load_kd_aqk = [&](int n) {
        if (n >= NT) return;
        float* st = stage_of(n);
        const long long base = (bh * Tp + (long long)n * C) * K;
        for (int idx = tid; idx < C * K / 4; idx += NTH) {
            const int i = idx / (K / 4), c = (idx % (K / 4)) * 4;
            kda_cp_async16(st + L::OFF_KD + i * L::LKD + c, Kd + base + i * K + c);
        }
        const long long abase = (bh * NT + n) * (long long)(C * C);
        for (int idx = tid; idx < C * C / 4; idx += NTH) {
            const int i = idx / (C / 4), j = (idx % (C / 4)) * 4;
            kda_cp_async16(st + L::OFF_A + i * L::LA + j, Aqk + abase + i * C + j);
        }
        kda_cp_async_commit();
    };
    // U at this warp's V' tiles for chunk n (zeros past the last chunk: never used).
    float un[TPW][4];
    auto fetch_u = [&](int n) {
#pragma unroll
        for (int r = 0; r < TPW; ++r) {
            const int tile = warp + r * NW;
            un[r][0] = un[r][1] = un[r][2] = un[r][3] = 0.0f;
            if (tile < NTILE && n < NT) {
                const int row = (tile / NTL) * 16 + g, col = v0 + (tile % NTL) * 8 + 2 * t;
                const float* u = U + (bh * Tp + (long long)n * C + row) * V + col;
                const float2 x0 = *reinterpret_cast<const float2*>(u);
                const float2 x1 = *reinterpret_cast<const float2*>(u + 8 * V);
                un[r][0] = x0.x; un[r][1] = x0.y; un[r][2] = x1.x; un[r][3] = x1.y;
            }
        }
    };

    // ---- the state: rows [16 warp, 16 warp + 16) of S in accumulator fragments, and in shared memory.
    const int srow = 16 * warp + g;
    float sacc[NTL][4];
#pragma unroll
    for (int nt = 0; nt < NTL; ++nt) {
        const int col = nt * 8 + 2 * t;
        float2 x0 = make_float2(0.f, 0.f), x1 = x0;
        if (h0) {
            x0 = *reinterpret_cast<const float2*>(h0 + (bh * K + srow) * V + v0 + col);
            x1 = *reinterpret_cast<const float2*>(h0 + (bh * K + srow + 8) * V + v0 + col);
        }
        sacc[nt][0] = x0.x; sacc[nt][1] = x0.y; sacc[nt][2] = x1.x; sacc[nt][3] = x1.y;
        *reinterpret_cast<float2*>(sS + srow * L::LS + col) = x0;
        *reinterpret_cast<float2*>(sS + (srow + 8) * L::LS + col) = x1;
    }
    load_w_qg(0);
    if (L::STAGES == 2) load_kd_aqk(0);
    fetch_u(0);
    kda_cp_async_wait_all();
    __syncthreads();   // S and chunk 0's operands are in shared memory

    for (int n = 0; n < NT; ++n) {
        const long long t0 = (long long)n * C;
        const float* st = stage_of(n);
        const float* sW = st + L::OFF_W;
        const float* sQ = st + L::OFF_Q;
        const float* sKd = st + L::OFF_KD;
        const float* sA = st + L::OFF_A;
        // Issue the next loads into buffers whose last reads were before the previous barrier.
        if (L::STAGES == 2) {
            load_w_qg(n + 1);
            load_kd_aqk(n + 1);
        } else {
            load_kd_aqk(n);
        }
        const float gl0 = gL[(bh * NT + n) * K + srow];
        const float gl1 = gL[(bh * NT + n) * K + srow + 8];

        // ---------------- phase A: P = W S, O = Qg S (even and odd k-steps accumulate apart), V' = U - P
        float vacc[TPW][4], oacc[TPW][4], vacc2[TPW][4], oacc2[TPW][4], u[TPW][4];
#pragma unroll
        for (int r = 0; r < TPW; ++r) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                u[r][e] = un[r][e];
                vacc[r][e] = oacc[r][e] = vacc2[r][e] = oacc2[r][e] = 0.0f;
            }
        }
        fetch_u(n + 1);
#pragma unroll
        for (int r = 0; r < TPW; ++r) {
            const int tile = warp + r * NW;
            if (tile >= NTILE) continue;                 // warp-uniform: mma.sync needs the whole warp
            const int m0 = (tile / NTL) * 16, c0 = (tile % NTL) * 8;
            // One k-step of both products into the given accumulators.
            auto k_step = [&](int k0, float (&pv)[4], float (&po)[4]) {
                float w[4], q[4], s[2], whi[4], wlo[4], qhi[4], qlo[4], shi[2], slo[2];
                kda_frag_a(sW + m0 * L::LWQ + k0, L::LWQ, g, t, w);
                kda_frag_a(sQ + m0 * L::LWQ + k0, L::LWQ, g, t, q);
                kda_frag_b(sS + k0 * L::LS + c0, L::LS, g, t, s);
                kda_split_tf32(w, whi, wlo);
                kda_split_tf32(q, qhi, qlo);
                kda_split_tf32(s, shi, slo);
                kda_mma_3xtf32(pv, whi, wlo, shi, slo);
                kda_mma_3xtf32(po, qhi, qlo, shi, slo);
            };
#pragma unroll 2
            for (int kk = 0; kk < K; kk += 16) {
                k_step(kk, vacc[r], oacc[r]);
                k_step(kk + 8, vacc2[r], oacc2[r]);
            }
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                vacc[r][e] = u[r][e] - (vacc[r][e] + vacc2[r][e]);   // V'
                oacc[r][e] += oacc2[r][e];
            }
            *reinterpret_cast<float2*>(sVp + (m0 + g) * L::LS + c0 + 2 * t) = make_float2(vacc[r][0], vacc[r][1]);
            *reinterpret_cast<float2*>(sVp + (m0 + g + 8) * L::LS + c0 + 2 * t) = make_float2(vacc[r][2], vacc[r][3]);
        }
        if (L::STAGES == 1) kda_cp_async_wait_all();
        __syncthreads();   // V' complete (one stage: Kd and Aqk of chunk n landed, W and Qg are free)
        if (L::STAGES == 1) load_w_qg(n + 1);

        // ---------------- phase B.1: O += Aqk V' (Aqk[i][j] = 0 for j > i: skip k-blocks past the tile)
#pragma unroll
        for (int r = 0; r < TPW; ++r) {
            const int tile = warp + r * NW;
            if (tile >= NTILE) continue;
            const int m0 = (tile / NTL) * 16, c0 = (tile % NTL) * 8;
#pragma unroll
            for (int kk = 0; kk < C; kk += 8) {
                if (kk > m0 + 15) break;
                float a[4], vp[2], ahi[4], alo[4], vhi[2], vlo[2];
                kda_frag_a(sA + m0 * L::LA + kk, L::LA, g, t, a);
                kda_frag_b(sVp + kk * L::LS + c0, L::LS, g, t, vp);
                kda_split_tf32(a, ahi, alo);
                kda_split_tf32(vp, vhi, vlo);
                kda_mma_3xtf32(oacc[r], ahi, alo, vhi, vlo);
            }
            const long long ta = t0 + m0 + g, tb = ta + 8;
            const int col = v0 + c0 + 2 * t;
            if (ta < TT) *reinterpret_cast<float2*>(o + kda_bthd(b, ta, h, col, TT, H, V)) = make_float2(oacc[r][0], oacc[r][1]);
            if (tb < TT) *reinterpret_cast<float2*>(o + kda_bthd(b, tb, h, col, TT, H, V)) = make_float2(oacc[r][2], oacc[r][3]);
        }

        // ---------------- phase B.2: S = diag(gL) S + Kd^T V' on this warp's rows
#pragma unroll
        for (int nt = 0; nt < NTL; ++nt) {
            sacc[nt][0] *= gl0; sacc[nt][1] *= gl0;
            sacc[nt][2] *= gl1; sacc[nt][3] *= gl1;
        }
#pragma unroll
        for (int kk = 0; kk < C; kk += 8) {
            float a[4], ahi[4], alo[4];
            kda_frag_a_transposed(sKd + kk * L::LKD + 16 * warp, L::LKD, g, t, a);
            kda_split_tf32(a, ahi, alo);
#pragma unroll
            for (int nt = 0; nt < NTL; ++nt) {
                float vp[2], vhi[2], vlo[2];
                kda_frag_b(sVp + kk * L::LS + nt * 8, L::LS, g, t, vp);
                kda_split_tf32(vp, vhi, vlo);
                kda_mma_3xtf32(sacc[nt], ahi, alo, vhi, vlo);
            }
        }
#pragma unroll
        for (int nt = 0; nt < NTL; ++nt) {
            const int col = nt * 8 + 2 * t;
            *reinterpret_cast<float2*>(sS + srow * L::LS + col) = make_float2(sacc[nt][0], sacc[nt][1]);
            *reinterpret_cast<float2*>(sS + (srow + 8) * L::LS + col) = make_float2(sacc[nt][2], sacc[nt][3]);
        }
        kda_cp_async_wait_all();
        __syncthreads();   // the new S and chunk n+1's operands are visible; V' is free again
    }

    if (ht) {
#pragma unroll
        for (int nt = 0; nt < NTL; ++nt) {
            const int col = v0 + nt * 8 + 2 * t;
            *reinterpret_cast<float2*>(ht + (bh * K + srow) * V + col) = make_float2(sacc[nt][0], sacc[nt][1]);
            *reinterpret_cast<float2*>(ht + (bh * K + srow + 8) * V + col) = make_float2(sacc[nt][2], sacc[nt][3]);
        }
    }
}
