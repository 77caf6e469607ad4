// 08 — flash attention in fp32 on the CUDA cores, register-tiled (2-D micro-tiles, outer products).
//
//   O[b,h,i,:] = sum_j softmax_j(scale * Q[b,h,i,:] . K[b,h,j,:]) * V[b,h,j,:]
//
// What changed from the SIMT ladder 01-05: there, one warp owns one query row and every score is
// a warp-wide dot product (a shuffle reduction per key), so each FMA needs its own shared-memory
// load and the FP32 pipes idle (~7 TFLOP/s at best). Here both products are small GEMMs done the
// SGEMM way: each thread owns a TM x BN/CG micro-tile of S = Q K^T and a TM x D/CG micro-tile of
// O and builds both from outer products of register fragments read with 128-bit shared loads:
//   S,  per 4 head dims: BN/CG K float4s + 4*TM/4 Q float4s -> 4*TM*BN/CG FMAs
//                        (TM=8, BN/CG=4: 12 LDS.128 -> 128 FFMA)
//   PV, per key j:       TM/4 P float4s + D/(4*CG) V float4s -> TM*D/CG FMAs
//                        (TM=8, D/CG=8:  4 LDS.128 ->  64 FFMA)
// The thread owning rows R of S owns rows R of O, so the online softmax needs no shared memory:
// the CG lanes of a row group (consecutive lanes) reduce the tile's row maximum with log2(CG)
// xor-shuffles; the running sum l stays a per-lane partial sum (all lanes of a row rescale it by
// the same alpha) and is reduced across the CG lanes once, at the end. Scores live in the log2
// domain: Q is multiplied by scale*log2(e) when staged, p = fast_exp2(s - m) (ex2.approx, SFU).
// A row whose running max is still -inf uses 0 as reference (no -inf - -inf); a NaN in a query
// row makes that row's p, l and O NaN and reaches no other row (fmaxf drops the NaN, so the row
// max stays -inf; no other row reads that row's scores or P).
//
// Launch (template <D, BM, BN, CG, TM>):
//   grid  = (ceil(n / BM), B*H), blockIdx.y = b*H + h
//   block = THREADS = (BM / TM) * CG; thread t: row group rg = t / CG (block rows TM*rg ..
//           TM*rg + TM-1), column group cg = t % CG (S keys cg + CG*kk, O columns 4*(cg + CG*c) + e)
//   dynamic shared memory = 4 * (D*BM + 2*BN*D + BN*BM) bytes  (no padding: two XOR swizzles)
//   Defaults per D (sm_90, nvcc 13.0; registers, spills none; the registry in
//   lib/attnlab/attention/kernels.py holds the launcher's choice, from an H200 sweep: D=128 uses BN=32):
//     D=128: <128, 64, 32, 16, 8> 128 threads (BN=64: 168 regs, 112 KiB -> 2 blocks/SM)
//     D=64:  < 64,128, 64,  8, 8> 128 threads, 254 regs,  96 KiB -> 2 blocks/SM
//     D=32:  < 32,128, 64,  8, 8> 128 threads, 232 regs,  64 KiB -> 2 blocks/SM (registers)
//   Worth measuring too: <128, 64, 64, 16, 4> (256 threads, 110 regs, 112 KiB: 2 blocks = 16
//   warps/SM, but 50% more LDS per FFMA) and <64, 64, 64, 16, 8> (128 threads, 128 regs, 64 KiB:
//   3 blocks/SM). 2 blocks of 112 KiB need the full 228 KiB carveout (the launcher sets the
//   max-dynamic-smem attribute; the driver then picks the carveout).
//   Allowed: D a multiple of 32 and of 4*CG with THREADS % (D/4) == 0 (D = 32, 64, 128 tested);
//   BM in {32, 64, 128}; TM in {4, 8}; CG in {8, 16, 32}; BN a multiple of CG (and of 8);
//   THREADS a multiple of 32, at most 1024.
// Requirements: q, k, v, o 16-byte aligned, rows of D floats (float4 loads/stores, 16-byte
// cp.async; the launcher refuses misaligned views); any n >= 1.
//
// Shared-memory layout (floats; every buffer starts at a multiple of 128 bytes):
//   qt [D][BM]   Q tile transposed and pre-scaled: qt[d][r] = Q[row0+r][d] * scale*log2(e), rows
//                past n zero. Staged once per block by plain float4 loads and scalar stores
//                (consecutive lanes take consecutive r: consecutive banks).
//   ks [BN][D]   K tile, row-major; the 16-byte chunk c of key row j is stored at chunk c ^ (j & 7).
//   vs [BN][D]   V tile, row-major.
//   pt [BN][BM]  P transposed (pt[j][r] = p of row r for key j); chunk c of row j at c ^ (j & 7).
//   K and V arrive by cp.async, 16 bytes per copy: thread t copies chunk t % (D/4) of rows
//   t / (D/4) + i * THREADS/(D/4), so a warp reads whole 512-byte runs of a global row
//   (coalesced), and the copies are grouped by (row & 7) so that all addresses are per-group bases
//   plus immediates. Rows past n (last tile only) are zeroed by plain stores instead (no address
//   past the tensor is formed); their scores are then forced to -inf, so p = 0 times V = 0.
//
// Bank-conflict freedom by construction. A 128-bit access is served in quarter-warp phases (8
// lanes x 16 bytes = all 32 banks); a phase is conflict-free when its 8 lanes read 8 chunks whose
// indices differ mod 8 (row starts are multiples of 32 banks), or the same chunk (broadcast).
// CG >= 8, so a phase is 8 consecutive cg of a single row group:
//   K reads (S)   lane cg reads key j = cg + CG*kk, logical chunk d4, stored at d4 ^ (j & 7) =
//                 d4 ^ (cg & 7) (CG is a multiple of 8): 8 distinct chunks mod 8. Unswizzled, the
//                 8 lanes would read 8 rows' chunk d4, one bank group: 8-way conflict.
//   Q reads (S)   qt[d][TM*rg + 4c ..]: one address per phase (broadcast).
//   P writes      lane cg writes pt[j][(TM/4*rg + c) ^ (j & 7)] for j = cg + CG*kk: chunk XOR
//                 8 distinct values (j & 7 = cg & 7) -> 8 distinct chunks. Unswizzled: 8-way.
//   P reads (PV)  pt[j][(TM/4*rg + c) ^ (j & 7)]: one j per warp instruction (broadcast within a
//                 phase; distinct row groups keep distinct chunks, the XOR being a bijection).
//   V reads (PV)  vs[j][4*(cg + CG*c) ..]: 8 consecutive chunks per phase.
//   Q stores      scalar, 32 consecutive words per warp.
// tests/test_emu_08_register_tiled.py replays these addresses through attnlab.banks.
//
// Pipeline: K and V are staged separately, each load hidden behind half a tile of maths, with no
// second buffer (prologue: issue K(0), stage Q). Per K/V tile t:
//   wait K(t); __syncthreads() #1   K(t) (and, first time, qt) visible; every thread is past
//                                   PV(t-1), so vs and pt may be overwritten.
//   issue V(t)
//   S = Q K(t)^T; mask keys >= n; running max (shuffles); rescale O, l; p = exp2(s - m) -> pt
//   wait V(t); __syncthreads() #2   P(t) and V(t) visible; every thread is done reading ks.
//   issue K(t+1) (if any)
//   O += P V(t)
// The last tile issues no K: nothing is in flight at exit. Inner loops are software-pipelined in
// registers (the next K/Q or P/V fragments are requested before the current FMAs), with the
// last step peeled so that nothing past a tile is read.
//
// Performance reasoning (D=128 default; SASS of nvcc 13.0, sm_90): the S loop is 293
// instructions for 256 FFMA, the PV loop 155 for 128; with the softmax (~40 MUFU.EX2, 32
// SHFL, 64 FMUL rescale, 40 STS.128 of P) and the 32 LDGSTS a tile costs ~10.4k instructions per
// thread for 8192 FFMA, so FFMA issue is capped near 79% of the 67 TFLOP/s peak. Shared memory:
// per warp and 4 head dims the S phase issues 12 LDS.128 (4 K with 16 distinct float4s, 8 Q with
// 2 distinct), the PV phase per key 4 (2 P with 2 distinct, 2 V with 16); if the hardware merges
// lanes that share an address (as Nsight's wavefront counters should show), that is ~16
// wavefronts per 128 FFMA-cycles and 6 per 64 (~50% of the bandwidth with 4 schedulers issuing
// FFMA); under the strict quarter-warp model (4 wavefronts per LDS.128) the S phase would need
// 150% and cap it at ~2/3 of the FFMA rate. Latency: 8 warps/SM (2 per scheduler), the LDS
// results mostly consumed 30+ instructions after issue, the barriers of one block covered by the
// other. Expected limiter: FFMA issue and shared-memory latency/bandwidth in the S phase.
#include "common.cuh"
#include "mma.cuh"  // fast_exp2

// Component i (compile-time after unrolling) of a float4.
static __device__ __forceinline__ float rt_get(const float4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// dst[i] = p[i], i < T, by float4 loads (p 16-byte aligned).
template <int T>
static __device__ __forceinline__ void rt_load_row(float (&dst)[T], const float* p) {
#pragma unroll
    for (int c = 0; c < T / 4; ++c) {
        const float4 x = *reinterpret_cast<const float4*>(p + 4 * c);
        dst[4 * c + 0] = x.x;
        dst[4 * c + 1] = x.y;
        dst[4 * c + 2] = x.z;
        dst[4 * c + 3] = x.w;
    }
}
// K fragment: the float4 at float offset `at` of keys cg + CG*kk (k_frag = key cg's row; the
// rows of one thread are STRIDE = CG*D floats apart).
template <int KN, int STRIDE>
static __device__ __forceinline__ void rt_load_k(float4 (&kf)[KN], const float* k_frag, int at) {
#pragma unroll
    for (int kk = 0; kk < KN; ++kk) kf[kk] = *reinterpret_cast<const float4*>(k_frag + kk * STRIDE + at);
}
// P fragment of one key row of pt: this thread's TM rows = logical chunks first .. first+TM/4-1,
// stored at chunk (first + c) ^ (j & 7). The caller passes y = first ^ (j & 6) and FLIP = j & 1
// (first is a multiple of TM/4, so first + c = first ^ c): the chunk is y ^ c ^ FLIP.
template <int TM, int FLIP>
static __device__ __forceinline__ void rt_load_p(float (&pf)[TM], const float* row, int y) {
#pragma unroll
    for (int c = 0; c < TM / 4; ++c) {
        const float4 x = *reinterpret_cast<const float4*>(row + 4 * (y ^ c ^ FLIP));
        pf[4 * c + 0] = x.x;
        pf[4 * c + 1] = x.y;
        pf[4 * c + 2] = x.z;
        pf[4 * c + 3] = x.w;
    }
}
// V fragment: DC float4s STEP floats apart.
template <int DC, int STEP>
static __device__ __forceinline__ void rt_load_v(float4 (&vf)[DC], const float* p) {
#pragma unroll
    for (int c = 0; c < DC; ++c) vf[c] = *reinterpret_cast<const float4*>(p + STEP * c);
}
// Four head-dim steps of S += q k^T (outer products). On entry qa holds this thread's Q rows
// at the first dim (q_cur); on exit it holds them at q_next (the next step's first dim): each
// dim's fragment is requested one dim ahead, ping-ponging between qa and qb. LAST: no next.
template <int TM, int KN, int BM, bool LAST = false>
static __device__ __forceinline__ void rt_s_step(float (&s)[TM][KN], const float4 (&kf)[KN], float (&qa)[TM],
                                                 float (&qb)[TM], const float* q_cur, const float* q_next) {
#pragma unroll
    for (int dd = 0; dd < 4; ++dd) {
        float(&use)[TM] = (dd % 2 == 0) ? qa : qb;
        float(&fill)[TM] = (dd % 2 == 0) ? qb : qa;
        if (dd < 3) rt_load_row<TM>(fill, q_cur + (dd + 1) * BM);
        else if (!LAST) rt_load_row<TM>(fill, q_next);
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int kk = 0; kk < KN; ++kk) s[i][kk] = fmaf(use[i], rt_get(kf[kk], dd), s[i][kk]);
    }
}
// One key of O += p v^T (outer product) on the TM x 4*DC micro-tile.
template <int TM, int DC>
static __device__ __forceinline__ void rt_pv_step(float (&acc)[TM][4 * DC], const float (&pf)[TM], const float4 (&vf)[DC]) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int c = 0; c < DC; ++c)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][4 * c + e] = fmaf(pf[i], rt_get(vf[c], e), acc[i][4 * c + e]);
}

// Issue the cp.async copies of one [BN][D] tile of a head: rows kv0 .. kv0+BN-1, rows past n
// zeroed by plain stores (no copy, so no address past the tensor is ever formed). SWIZZLE: the
// 16-byte chunk c of row r lands at chunk c ^ (r & 7).
// Thread t copies column chunk c = t % D4 of rows r0 + RS*i (r0 = t / D4, RS = THREADS / D4):
// a warp reads whole 512-byte runs of a global row (coalesced). The copies are grouped by
// r & 7 (P phases), so within a phase both addresses are a per-phase base plus compile-time
// offsets: no per-copy address registers survive across the main loop.
template <int D, int BN, int THREADS, bool SWIZZLE>
static __device__ __forceinline__ void rt_issue_tile(float* dst, const float* head, int kv0, int n) {
    constexpr int D4 = D / 4;
    static_assert(THREADS % D4 == 0, "a block pass covers whole rows");
    constexpr int RS = THREADS / D4;                  // rows per pass of the block
    static_assert((RS & (RS - 1)) == 0 && BN % RS == 0, "RS a power of two dividing BN");
    constexpr int P = RS >= 8 ? 1 : 8 / RS;           // passes until r & 7 repeats
    constexpr int STEP = RS * P;                      // rows between a phase's copies (8 or RS)
    static_assert(BN % STEP == 0, "whole phases");
    const int r0 = threadIdx.x / D4;
    const int c = threadIdx.x % D4;
    const float* src0 = head + (long long)(kv0 + r0) * D + 4 * c;
    if (kv0 + BN <= n) {  // a full tile (all but possibly the last): no guards
#pragma unroll
        for (int ph = 0; ph < P; ++ph) {
            const int rp = r0 + RS * ph;
            float* d0 = dst + rp * D + 4 * (SWIZZLE ? (c ^ (rp & 7)) : c);
#pragma unroll
            for (int i = 0; i < BN / STEP; ++i)   // row rp + STEP*i: the same r & 7 as rp
                cp_async16(d0 + STEP * i * D, src0 + (RS * ph + STEP * i) * D);
        }
    } else {
        const int lim = n - kv0;  // rows r < lim exist
#pragma unroll
        for (int ph = 0; ph < P; ++ph) {
            const int rp = r0 + RS * ph;
            float* d0 = dst + rp * D + 4 * (SWIZZLE ? (c ^ (rp & 7)) : c);
#pragma unroll
            for (int i = 0; i < BN / STEP; ++i) {
                if (rp + STEP * i < lim) {
                    cp_async16(d0 + STEP * i * D, src0 + (RS * ph + STEP * i) * D);
                } else {
                    *reinterpret_cast<float4*>(d0 + STEP * i * D) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
            }
        }
    }
}

template <int D, int BM, int BN, int CG, int TM>
__global__ void __launch_bounds__((BM / TM) * CG)
attn_register_tiled(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                    float* __restrict__ o, int n, float scale) {
    constexpr int THREADS = (BM / TM) * CG;
    constexpr int KN = BN / CG;        // keys per thread in the S micro-tile
    constexpr int DC = D / (4 * CG);   // float4 column chunks per thread in the O micro-tile
    constexpr int D4 = D / 4;
    constexpr int TM4 = TM / 4;        // float4 chunks per thread's rows
    static_assert(TM == 4 || TM == 8, "TM rows per thread: 4 or 8");
    static_assert(CG == 8 || CG == 16 || CG == 32, "CG lanes share a row group: 8, 16 or 32");
    static_assert(D % 32 == 0 && D % (4 * CG) == 0, "D: a multiple of 32 and of 4*CG");
    static_assert(BM % 32 == 0 && BM % TM == 0, "BM: a multiple of 32");
    static_assert(BN % CG == 0 && BN >= 8, "BN: a multiple of CG");
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, at most 1024 threads");
    static_assert((BM * D4) % THREADS == 0, "Q staging: the same number of float4s per thread");

    extern __shared__ __align__(16) float smem[];
    float* qt = smem;            // [D][BM]
    float* ks = qt + D * BM;     // [BN][D], chunk-swizzled
    float* vs = ks + BN * D;     // [BN][D]
    float* pt = vs + BN * D;     // [BN][BM], chunk-swizzled

    const int tid = threadIdx.x;
    const int rg = tid / CG;
    const int cg = tid % CG;
    const int sw = cg & 7;       // (key & 7) for every key this thread owns in S
    const int row0 = blockIdx.x * BM;
    const long long head = head_offset(blockIdx.y, n, D);
    const float* q_head = q + head;
    const float* k_head = k + head;
    const float* v_head = v + head;

    // Prologue: K(0) in flight while Q is staged.
    rt_issue_tile<D, BN, THREADS, true>(ks, k_head, 0, n);
    cp_async_commit();

    // Q tile, transposed and scaled into the log2 domain. Consecutive threads take consecutive
    // rows (conflict-free scalar stores); rows past n are zeros (finite scores, never stored).
    const float qscale = scale * 1.4426950408889634f;
#pragma unroll
    for (int it = 0; it < BM * D4 / THREADS; ++it) {
        const int idx = tid + it * THREADS;
        const int r = idx % BM;
        const int c4 = idx / BM;
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (row0 + r < n) x = *reinterpret_cast<const float4*>(q_head + (long long)(row0 + r) * D + 4 * c4);
        qt[(4 * c4 + 0) * BM + r] = x.x * qscale;
        qt[(4 * c4 + 1) * BM + r] = x.y * qscale;
        qt[(4 * c4 + 2) * BM + r] = x.z * qscale;
        qt[(4 * c4 + 3) * BM + r] = x.w * qscale;
    }

    float acc[TM][4 * DC];
    float m_run[TM], l_part[TM];
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        m_run[i] = ATTNLAB_NEG_INF;
        l_part[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < 4 * DC; ++c) acc[i][c] = 0.0f;
    }

    const float* q_frag = qt + TM * rg;               // + d * BM: this thread's TM rows at dim d
    const float* k_frag = ks + cg * D;                // + kk * CG * D: key cg + CG*kk
    const float* v_frag = vs + 4 * cg;                // + j * D + 4 * CG * c

    for (int kv0 = 0; kv0 < n; kv0 += BN) {
        cp_async_wait<0>();
        // Barrier #1: K(t) (and, first time, qt) visible to all; all threads are past PV(t-1),
        // so vs and pt may be overwritten.
        __syncthreads();
        rt_issue_tile<D, BN, THREADS, false>(vs, v_head, kv0, n);
        cp_async_commit();

        // ---- S = (Q * scale * log2 e) K^T on the micro-tile: rows TM*rg + i, keys cg + CG*kk.
        float s[TM][KN];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int kk = 0; kk < KN; ++kk) s[i][kk] = 0.0f;
        // Software-pipelined: the K fragment of step d4+1 is requested at the start of step d4
        // (~100 FMAs ahead), the Q fragment of dim d+1 before the FMAs of dim d (32 FMAs ahead).
        // Two explicit steps per iteration keep every buffer index a compile-time constant; the
        // last two steps are peeled off so that nothing past the tile is prefetched.
        float4 kf0[KN], kf1[KN];
        float qf0[TM], qf1[TM];
        rt_load_k<KN, CG * D>(kf0, k_frag, 4 * sw);
        rt_load_row<TM>(qf0, q_frag);
        for (int d4 = 0; d4 < D4 - 2; d4 += 2) {
            rt_load_k<KN, CG * D>(kf1, k_frag, 4 * ((d4 + 1) ^ sw));
            rt_s_step<TM, KN, BM>(s, kf0, qf0, qf1, q_frag + 4 * d4 * BM, q_frag + 4 * (d4 + 1) * BM);
            rt_load_k<KN, CG * D>(kf0, k_frag, 4 * ((d4 + 2) ^ sw));
            rt_s_step<TM, KN, BM>(s, kf1, qf0, qf1, q_frag + 4 * (d4 + 1) * BM, q_frag + 4 * (d4 + 2) * BM);
        }
        rt_load_k<KN, CG * D>(kf1, k_frag, 4 * ((D4 - 1) ^ sw));
        rt_s_step<TM, KN, BM>(s, kf0, qf0, qf1, q_frag + 4 * (D4 - 2) * BM, q_frag + 4 * (D4 - 1) * BM);
        rt_s_step<TM, KN, BM, true>(s, kf1, qf0, qf1, q_frag + 4 * (D4 - 1) * BM, nullptr);

        // ---- Online softmax on the micro-tile rows.
        if (kv0 + BN > n) {  // the last, partial tile: keys past n get -inf (block-uniform branch)
#pragma unroll
            for (int kk = 0; kk < KN; ++kk) {
                if (kv0 + cg + CG * kk >= n) {
#pragma unroll
                    for (int i = 0; i < TM; ++i) s[i][kk] = ATTNLAB_NEG_INF;
                }
            }
        }
        float m_new[TM];
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            m_new[i] = m_run[i];
#pragma unroll
            for (int kk = 0; kk < KN; ++kk) m_new[i] = fmaxf(m_new[i], s[i][kk]);
        }
        // The CG lanes of a row group are consecutive: xor offsets < CG stay inside the group.
#pragma unroll
        for (int off = CG / 2; off > 0; off >>= 1)
#pragma unroll
            for (int i = 0; i < TM; ++i) m_new[i] = fmaxf(m_new[i], __shfl_xor_sync(ATTNLAB_FULL_MASK, m_new[i], off));
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            // Still -inf (only a row whose scores are all NaN): use 0, so no -inf - -inf.
            const float m_ref = m_new[i] == ATTNLAB_NEG_INF ? 0.0f : m_new[i];
            const float alpha = fast_exp2(m_run[i] - m_ref);  // 0 on the first tile
            m_run[i] = m_new[i];
            l_part[i] *= alpha;
#pragma unroll
            for (int c = 0; c < 4 * DC; ++c) acc[i][c] *= alpha;
#pragma unroll
            for (int kk = 0; kk < KN; ++kk) {
                const float p = fast_exp2(s[i][kk] - m_ref);
                s[i][kk] = p;
                l_part[i] += p;
            }
        }
        // P -> pt[key][rows], swizzled chunks (conflict-free stores; see the header).
#pragma unroll
        for (int kk = 0; kk < KN; ++kk) {
            float* prow = pt + (cg + CG * kk) * BM;
#pragma unroll
            for (int c = 0; c < TM4; ++c) {
                *reinterpret_cast<float4*>(prow + 4 * ((TM4 * rg + c) ^ sw)) =
                    make_float4(s[4 * c + 0][kk], s[4 * c + 1][kk], s[4 * c + 2][kk], s[4 * c + 3][kk]);
            }
        }

        cp_async_wait<0>();
        // Barrier #2: P(t) and V(t) visible to all; all threads are done reading ks.
        __syncthreads();
        if (kv0 + BN < n) {
            rt_issue_tile<D, BN, THREADS, true>(ks, k_head, kv0 + BN, n);
            cp_async_commit();
        }

        // ---- O += P V(t) on the micro-tile: rows TM*rg + i, columns 4*(cg + CG*c) + e.
        // Keys past n contribute p = 0 times zero-filled V rows.
        // Software-pipelined like the S loop: the fragments of key j+1 are requested before the
        // FMAs of key j (64 FMAs ahead).
        float pf0[TM], pf1[TM];
        float4 vf0[DC], vf1[DC];
        const int pfirst = TM4 * rg;  // this thread's first logical chunk of a pt row
        rt_load_p<TM, 0>(pf0, pt, pfirst);
        rt_load_v<DC, 4 * CG>(vf0, v_frag);
        for (int j = 0; j < BN - 2; j += 2) {  // j even: keys j (FLIP 0) and j+1 (FLIP 1)
            rt_load_p<TM, 1>(pf1, pt + (j + 1) * BM, pfirst ^ (j & 6));
            rt_load_v<DC, 4 * CG>(vf1, v_frag + (j + 1) * D);
            rt_pv_step<TM, DC>(acc, pf0, vf0);
            rt_load_p<TM, 0>(pf0, pt + (j + 2) * BM, pfirst ^ ((j + 2) & 6));
            rt_load_v<DC, 4 * CG>(vf0, v_frag + (j + 2) * D);
            rt_pv_step<TM, DC>(acc, pf1, vf1);
        }
        rt_load_p<TM, 1>(pf1, pt + (BN - 1) * BM, pfirst ^ ((BN - 2) & 6));
        rt_load_v<DC, 4 * CG>(vf1, v_frag + (BN - 1) * D);
        rt_pv_step<TM, DC>(acc, pf0, vf0);
        rt_pv_step<TM, DC>(acc, pf1, vf1);
    }

    // ---- Epilogue: full row sums across the CG lanes, normalise, float4 stores of rows < n.
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        float l = l_part[i];
#pragma unroll
        for (int off = CG / 2; off > 0; off >>= 1) l += __shfl_xor_sync(ATTNLAB_FULL_MASK, l, off);
        const int row = row0 + TM * rg + i;
        if (row < n) {
            // l >= 1 (the row maximum contributes exp2(0) = 1) unless the row is NaN.
            const float inv_l = 1.0f / l;
            float* o_row = o + head + (long long)row * D + 4 * cg;
#pragma unroll
            for (int c = 0; c < DC; ++c) {
                *reinterpret_cast<float4*>(o_row + 4 * CG * c) =
                    make_float4(acc[i][4 * c + 0] * inv_l, acc[i][4 * c + 1] * inv_l,
                                acc[i][4 * c + 2] * inv_l, acc[i][4 * c + 3] * inv_l);
            }
        }
    }
}
