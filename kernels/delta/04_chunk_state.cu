// 04 — chunked KDA, stage 3 of 3: the chunk-to-chunk state pass and the output.
//
// For each (b, h) the state S [K, V] is carried through the chunks in order; per chunk n
//   V' = U - W S                  (the chunk's corrected values, C x V)
//   O  = Qg S + Aqk V'            (inter-chunk part through S, intra-chunk part through Aqk)
//   S  = diag(gL) S + Kd^T V'
// with W, U, Qg, Kd, Aqk, gL precomputed chunk-parallel by stages 1 and 2. Only this loop is
// sequential. Columns of S (and of V', O) are independent, so the value dimension is split into
// blocks of BV columns: grid = (V / BV, H, B), e.g. 4 * 16 * 2 = 128 blocks at BV = 32 or 256 at
// BV = 16 for B = 2, H = 16, V = 128 — enough to fill the GPU although each block is sequential.
//
// Each thread owns a 4 x 4 tile of S (rows 4 ct.., columns 4 vt..) in registers for the whole
// pass; a copy in shared memory feeds the products that need whole columns of S. The three
// products are fp32 SIMT with register tiles (2 rows x 4 columns for V' and O, 4 x 4 for the
// state update) fed by float4 shared-memory loads: 8 to 16 FMAs per 128-bit load.
//
// The operands stream through one shared buffer in "steps": K/SK slabs of W|Qg (SK channels),
// C/SJ slabs of Aqk (SJ columns), C/SI slabs of Kd (SI rows) per chunk, each at most 16 floats
// per thread. None of them depends on
// S, so the loads for step s+1 (the next chunk's first step after the last one) are issued into
// registers before step s is computed, and stored to shared memory after it: the global-memory
// latency hides behind the arithmetic instead of stalling every step. U and gL for chunk n+1
// are likewise loaded during chunk n.
// Shared memory is dynamic (the launcher passes kda_state_smem_floats * 4 bytes).
#include "delta_common.cuh"

// Each step's slab is at most SLAB floats (16 per thread: four float4 prefetch registers).
template <int K, int V, int C, int BV>
struct KdaStateLayout {
    static constexpr int NTH = (K / 4) * (BV / 4);
    static constexpr int SLAB = 16 * NTH;
    static constexpr int SK = (K < SLAB / (2 * C)) ? K : SLAB / (2 * C);   // channels of W / Qg per step
    static constexpr int SJ = (C < SLAB / C) ? C : SLAB / C;              // columns of Aqk per step
    static constexpr int SI = (C < SLAB / K) ? C : SLAB / K;              // rows of Kd per step
    static_assert(SK % 4 == 0 && SJ % 4 == 0 && SI >= 1, "slabs must be whole float4s");
    static constexpr int NSK = K / SK, NSJ = C / SJ, NSI = C / SI;
    static constexpr int NSTEP = NSK + NSJ + NSI;
    static constexpr int LS = BV + 4;                         // row stride of S and V' (float4-aligned)
    static constexpr int LW = SK + 4;
    static constexpr int LA = SJ + 4;
    static constexpr int LK = K + 4;
    static constexpr int F4_W = 2 * C * SK / 4;               // float4s per step of each kind
    static constexpr int F4_A = C * SJ / 4;
    static constexpr int F4_K = SI * K / 4;
    static constexpr int F4_MAX = F4_W > F4_A ? (F4_W > F4_K ? F4_W : F4_K) : (F4_A > F4_K ? F4_A : F4_K);
    static constexpr int STAGE_W = 2 * C * LW;
    static constexpr int STAGE_A = C * LA;
    static constexpr int STAGE_K = SI * LK;
    static constexpr int STAGE = STAGE_W > STAGE_A ? (STAGE_W > STAGE_K ? STAGE_W : STAGE_K)
                                                   : (STAGE_A > STAGE_K ? STAGE_A : STAGE_K);
    static constexpr int FLOATS = K * LS + C * LS + STAGE;
};

template <int K, int V, int C, int BV>
__global__ void __launch_bounds__((K / 4) * (BV / 4))
kda_chunk_state(const float* __restrict__ W, const float* __restrict__ U,     // [B,H,Tp,K], [B,H,Tp,V]
                const float* __restrict__ Qg, const float* __restrict__ Kd,   // [B,H,Tp,K]
                const float* __restrict__ Aqk,                                // [B,H,NT,C,C]
                const float* __restrict__ gL,                                 // [B,H,NT,K]
                const float* __restrict__ h0,                                 // [B,H,K,V] or nullptr
                float* __restrict__ o,                                        // [B,T,H,V]
                float* __restrict__ ht,                                       // [B,H,K,V] or nullptr
                int T, int H, int NT) {
    using L = KdaStateLayout<K, V, C, BV>;
    static_assert(C == 16 || C == 32 || C == 64 || C == 128, "chunk size must be 16, 32, 64 or 128");
    static_assert(K % 32 == 0 && V % BV == 0 && BV % 4 == 0, "K % 32, V % BV and BV % 4 must be 0");
    constexpr int NTH = (K / 4) * (BV / 4);
    constexpr int CG = BV / 4;                          // column groups of 4
    constexpr int NI = (C / 2) * CG;                    // (row pair, column group) items
    constexpr int IT = (NI + NTH - 1) / NTH;            // items per thread
    constexpr int RPT = (L::F4_MAX + NTH - 1) / NTH;    // prefetched float4s per thread per step

    KDA_DYNAMIC_SHARED(smem);
    float* sS = smem;                                   // [K][LS]
    float* sVp = sS + K * L::LS;                        // [C][LS]
    float* sStage = sVp + C * L::LS;                    // the current step's operand slab
    if (kda_dynamic_smem_size() < (unsigned)(L::FLOATS * sizeof(float))) __trap();

    const int tid = threadIdx.x;
    const int v0 = blockIdx.x * BV;
    const int h = blockIdx.y;
    const int b = blockIdx.z;
    const long long TT = T;
    const long long bh = (long long)b * H + h;
    const long long Tp = (long long)NT * C;

    // ---- the operand stream: step `step` of chunk `n`, global -> registers -> shared memory.
    float4 pre[RPT];
    auto fetch = [&](int n, int step) {
        if (n >= NT) return;
        const long long row0 = bh * Tp + (long long)n * C;
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
            const int idx = tid + r * NTH;
            if (step < L::NSK) {                                   // W | Qg, channels [c0, c0+SK)
                if (idx < L::F4_W) {
                    const int half = idx / (C * L::SK / 4), rem = idx % (C * L::SK / 4);
                    const int i = rem / (L::SK / 4), cc = (rem % (L::SK / 4)) * 4;
                    pre[r] = kda_ld4((half ? Qg : W) + (row0 + i) * K + step * L::SK + cc);
                }
            } else if (step < L::NSK + L::NSJ) {                   // Aqk, columns [j0, j0+SJ)
                if (idx < L::F4_A) {
                    const int i = idx / (L::SJ / 4), jj = (idx % (L::SJ / 4)) * 4;
                    const int j0 = (step - L::NSK) * L::SJ;
                    pre[r] = kda_ld4(Aqk + (bh * NT + n) * (long long)(C * C) + i * C + j0 + jj);
                }
            } else {                                               // Kd, rows [i0, i0+SI)
                if (idx < L::F4_K) {
                    const int i = idx / (K / 4), c = (idx % (K / 4)) * 4;
                    const int i0 = (step - L::NSK - L::NSJ) * L::SI;
                    pre[r] = kda_ld4(Kd + (row0 + i0 + i) * K + c);
                }
            }
        }
    };
    auto stash = [&](int step) {
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
            const int idx = tid + r * NTH;
            if (step < L::NSK) {
                if (idx < L::F4_W) {
                    const int half = idx / (C * L::SK / 4), rem = idx % (C * L::SK / 4);
                    const int i = rem / (L::SK / 4), cc = (rem % (L::SK / 4)) * 4;
                    kda_st4(sStage + half * C * L::LW + i * L::LW + cc, pre[r]);
                }
            } else if (step < L::NSK + L::NSJ) {
                if (idx < L::F4_A) {
                    const int i = idx / (L::SJ / 4), jj = (idx % (L::SJ / 4)) * 4;
                    kda_st4(sStage + i * L::LA + jj, pre[r]);
                }
            } else {
                if (idx < L::F4_K) {
                    const int i = idx / (K / 4), c = (idx % (K / 4)) * 4;
                    kda_st4(sStage + i * L::LK + c, pre[r]);
                }
            }
        }
    };
    // U rows of this thread's items and gL of its state rows, one chunk ahead.
    float4 un[IT][2];
    float4 gln = make_float4(0.f, 0.f, 0.f, 0.f);
    auto fetch_u = [&](int n) {
        if (n >= NT) return;
        const long long row0 = bh * Tp + (long long)n * C;
#pragma unroll
        for (int r = 0; r < IT; ++r) {
            const int item = tid + r * NTH;
            const int cg = item % CG, rp = item / CG;
            if (item < NI) {
                un[r][0] = kda_ld4(U + (row0 + rp) * V + v0 + 4 * cg);
                un[r][1] = kda_ld4(U + (row0 + rp + C / 2) * V + v0 + 4 * cg);
            }
        }
        gln = kda_ld4(gL + (bh * NT + n) * K + 4 * (tid / CG));
    };

    // The state tile this thread owns.
    const int vt = tid % CG;
    const int ct = tid / CG;
    float4 s[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const long long off = (bh * K + 4 * ct + e) * V + v0 + 4 * vt;
        s[e] = h0 ? kda_ld4(h0 + off) : make_float4(0.f, 0.f, 0.f, 0.f);
        kda_st4(sS + (4 * ct + e) * L::LS + 4 * vt, s[e]);
    }
#pragma unroll
    for (int r = 0; r < IT; ++r) un[r][0] = un[r][1] = make_float4(0.f, 0.f, 0.f, 0.f);
    fetch_u(0);
    fetch(0, 0);
    // (No barrier needed yet: the first barrier inside the loop orders these shared stores.)

    for (int n = 0; n < NT; ++n) {
        const long long t0 = (long long)n * C;
        float4 av[IT][2], ao[IT][2];
#pragma unroll
        for (int r = 0; r < IT; ++r) {
            av[r][0] = un[r][0];
            av[r][1] = un[r][1];
            ao[r][0] = ao[r][1] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
        // S's decay can be applied to the register copy now: the shared copy, which the W|Qg
        // steps read, still holds the undecayed S of this chunk's start.
        const float glv[4] = {gln.x, gln.y, gln.z, gln.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            s[e].x *= glv[e]; s[e].y *= glv[e]; s[e].z *= glv[e]; s[e].w *= glv[e];
        }
        fetch_u(n + 1);

#pragma unroll 1
        for (int step = 0; step < L::NSTEP; ++step) {
            stash(step);
            __syncthreads();   // the step's slab is visible (and, at step 0, the new S and V')
            if (step + 1 < L::NSTEP) fetch(n, step + 1);
            else fetch(n + 1, 0);

            if (step < L::NSK) {
                // ---------------- V' = U - W S and P = Qg S over channels [c0, c0 + SK)
                const int c0 = step * L::SK;
                const float* sW = sStage;
                const float* sQ = sStage + C * L::LW;
#pragma unroll
                for (int r = 0; r < IT; ++r) {
                    const int item = tid + r * NTH;
                    if (item >= NI) continue;
                    const int cg = item % CG, rp = item / CG;
                    const float* w0 = sW + rp * L::LW;
                    const float* w1 = sW + (rp + C / 2) * L::LW;
                    const float* q0 = sQ + rp * L::LW;
                    const float* q1 = sQ + (rp + C / 2) * L::LW;
#pragma unroll 2
                    for (int cc = 0; cc < L::SK; cc += 4) {
                        const float4 wa = kda_ld4(w0 + cc), wb = kda_ld4(w1 + cc);
                        const float4 qa = kda_ld4(q0 + cc), qb = kda_ld4(q1 + cc);
                        const float wav[4] = {wa.x, wa.y, wa.z, wa.w}, wbv[4] = {wb.x, wb.y, wb.z, wb.w};
                        const float qav[4] = {qa.x, qa.y, qa.z, qa.w}, qbv[4] = {qb.x, qb.y, qb.z, qb.w};
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const float4 sv = kda_ld4(sS + (c0 + cc + e) * L::LS + 4 * cg);
                            av[r][0].x = fmaf(-wav[e], sv.x, av[r][0].x); av[r][0].y = fmaf(-wav[e], sv.y, av[r][0].y);
                            av[r][0].z = fmaf(-wav[e], sv.z, av[r][0].z); av[r][0].w = fmaf(-wav[e], sv.w, av[r][0].w);
                            av[r][1].x = fmaf(-wbv[e], sv.x, av[r][1].x); av[r][1].y = fmaf(-wbv[e], sv.y, av[r][1].y);
                            av[r][1].z = fmaf(-wbv[e], sv.z, av[r][1].z); av[r][1].w = fmaf(-wbv[e], sv.w, av[r][1].w);
                            ao[r][0].x = fmaf(qav[e], sv.x, ao[r][0].x); ao[r][0].y = fmaf(qav[e], sv.y, ao[r][0].y);
                            ao[r][0].z = fmaf(qav[e], sv.z, ao[r][0].z); ao[r][0].w = fmaf(qav[e], sv.w, ao[r][0].w);
                            ao[r][1].x = fmaf(qbv[e], sv.x, ao[r][1].x); ao[r][1].y = fmaf(qbv[e], sv.y, ao[r][1].y);
                            ao[r][1].z = fmaf(qbv[e], sv.z, ao[r][1].z); ao[r][1].w = fmaf(qbv[e], sv.w, ao[r][1].w);
                        }
                    }
                }
                if (step == L::NSK - 1) {
                    // V' is complete in registers; publish it (read from the next step on, after
                    // the barriers; its last readers, the previous chunk's Kd steps, are done).
#pragma unroll
                    for (int r = 0; r < IT; ++r) {
                        const int item = tid + r * NTH;
                        if (item >= NI) continue;
                        const int cg = item % CG, rp = item / CG;
                        kda_st4(sVp + rp * L::LS + 4 * cg, av[r][0]);
                        kda_st4(sVp + (rp + C / 2) * L::LS + 4 * cg, av[r][1]);
                    }
                }
            } else if (step < L::NSK + L::NSJ) {
                // ---------------- O = P + Aqk V' over columns [j0, j0 + SJ) (upper part is 0)
                const int j0 = (step - L::NSK) * L::SJ;
#pragma unroll
                for (int r = 0; r < IT; ++r) {
                    const int item = tid + r * NTH;
                    if (item >= NI) continue;
                    const int cg = item % CG, rp = item / CG;
                    const float* a0p = sStage + rp * L::LA;
                    const float* a1p = sStage + (rp + C / 2) * L::LA;
#pragma unroll 2
                    for (int jj = 0; jj < L::SJ; jj += 4) {
                        const float4 a0 = kda_ld4(a0p + jj), a1 = kda_ld4(a1p + jj);
                        const float a0v[4] = {a0.x, a0.y, a0.z, a0.w}, a1v[4] = {a1.x, a1.y, a1.z, a1.w};
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const float4 vp = kda_ld4(sVp + (j0 + jj + e) * L::LS + 4 * cg);
                            ao[r][0].x = fmaf(a0v[e], vp.x, ao[r][0].x); ao[r][0].y = fmaf(a0v[e], vp.y, ao[r][0].y);
                            ao[r][0].z = fmaf(a0v[e], vp.z, ao[r][0].z); ao[r][0].w = fmaf(a0v[e], vp.w, ao[r][0].w);
                            ao[r][1].x = fmaf(a1v[e], vp.x, ao[r][1].x); ao[r][1].y = fmaf(a1v[e], vp.y, ao[r][1].y);
                            ao[r][1].z = fmaf(a1v[e], vp.z, ao[r][1].z); ao[r][1].w = fmaf(a1v[e], vp.w, ao[r][1].w);
                        }
                    }
                }
                if (step == L::NSK + L::NSJ - 1) {
#pragma unroll
                    for (int r = 0; r < IT; ++r) {
                        const int item = tid + r * NTH;
                        if (item >= NI) continue;
                        const int cg = item % CG, rp = item / CG;
                        const long long ta = t0 + rp, tb = t0 + rp + C / 2;
                        if (ta < TT) kda_st4(o + kda_bthd(b, ta, h, v0 + 4 * cg, TT, H, V), ao[r][0]);
                        if (tb < TT) kda_st4(o + kda_bthd(b, tb, h, v0 + 4 * cg, TT, H, V), ao[r][1]);
                    }
                }
            } else {
                // ---------------- S = diag(gL) S + Kd^T V' over rows [i0, i0 + SI) of the chunk
                const int i0 = (step - L::NSK - L::NSJ) * L::SI;
#pragma unroll 4
                for (int i = 0; i < L::SI; ++i) {
                    const float4 kd = kda_ld4(sStage + i * L::LK + 4 * ct);
                    const float4 vp = kda_ld4(sVp + (i0 + i) * L::LS + 4 * vt);
                    const float kdv[4] = {kd.x, kd.y, kd.z, kd.w};
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        s[e].x = fmaf(kdv[e], vp.x, s[e].x); s[e].y = fmaf(kdv[e], vp.y, s[e].y);
                        s[e].z = fmaf(kdv[e], vp.z, s[e].z); s[e].w = fmaf(kdv[e], vp.w, s[e].w);
                    }
                }
                if (step == L::NSTEP - 1) {
                    // The new S for the next chunk's W|Qg steps; every read of the old one
                    // (this chunk's W|Qg steps) finished several barriers ago.
#pragma unroll
                    for (int e = 0; e < 4; ++e) kda_st4(sS + (4 * ct + e) * L::LS + 4 * vt, s[e]);
                }
            }
            __syncthreads();   // everyone is done with this step's slab before the next stash
        }
    }

    if (ht) {
#pragma unroll
        for (int e = 0; e < 4; ++e) kda_st4(ht + (bh * K + 4 * ct + e) * V + v0 + 4 * vt, s[e]);
    }
}
