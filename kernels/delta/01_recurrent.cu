// 01 — recurrent Kimi Delta Attention: the definition, token by token, fp32.
//
// For each (b, h), with state S [K, V] and per token t (the order of flash-linear-attention):
//   S = diag(exp(g_t)) S;   u = beta_t (v_t - S^T k_t);   S = S + k_t u^T;   o_t = S^T (scale q_t)
//
// Every value column j of S evolves on its own: column j needs only v_t[j] and the dot product
// k_t . S[:, j]. So the kernel is parallel over batch, head and value columns, and sequential
// over T. A column lives in the registers of RG lanes of one warp (a "row group"): lane rg of the
// group owns rows 4*RG*m + 4*rg + e (m < K/(4 RG), e < 4), i.e. K/RG rows, so the two dot
// products per token (k.S for the update, q.S for the output) are RG-lane reductions:
// log2(RG) xor-shuffles instead of 5. A warp holds 32/RG columns, a block WARPS warps;
// grid = (V / (WARPS * 32 / RG), H, B).
//
// The token's k, q and decay factors a = exp(g) are the same for every column of the block, so
// they are staged once per token in shared memory (one exp per key channel per block, not one
// per state element: exp runs at 1/8 of the FMA rate) and read back as float4 broadcasts. The
// staging is double-buffered and one token ahead: while the warps work on token t from buffer
// t&1, the next token's inputs (which do not depend on S) are loaded and written to the other
// buffer, so global-memory latency stays off the dependent chain decay -> dot -> shuffles ->
// update that links token t to token t+1. One __syncthreads per token.
#include "delta_common.cuh"

template <int K, int V, int RG, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
kda_recurrent(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
              const float* __restrict__ g, const float* __restrict__ beta,
              const float* __restrict__ h0,   // [B, H, K, V] or nullptr
              float* __restrict__ o,          // [B, T, H, V]
              float* __restrict__ ht,         // [B, H, K, V] or nullptr
              int T, int H, float scale) {
    static_assert(RG == 4 || RG == 8 || RG == 16 || RG == 32, "row group must be 4, 8, 16 or 32 lanes");
    static_assert(K % (4 * RG) == 0, "K must be a multiple of 4 * RG");
    constexpr int NTH = WARPS * 32;
    constexpr int NF = K / (4 * RG);            // float4 slabs per lane
    constexpr int COLS_PER_WARP = 32 / RG;
    constexpr int COLS_PER_BLOCK = COLS_PER_WARP * WARPS;
    constexpr int RPT = (K + NTH - 1) / NTH;    // staged key channels per thread
    static_assert(V % COLS_PER_BLOCK == 0, "V must be a multiple of the columns per block");

    __shared__ __align__(16) float sK[2][K];
    __shared__ __align__(16) float sQ[2][K];
    __shared__ __align__(16) float sA[2][K];    // exp(g): decay factors in (0, 1]

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int rg = lane % RG;                   // which rows
    const int col = blockIdx.x * COLS_PER_BLOCK + warp * COLS_PER_WARP + lane / RG;
    const int h = blockIdx.y;
    const int b = blockIdx.z;
    const long long TT = T;

    // The state column, in registers: s[m][e] is row 4*RG*m + 4*rg + e.
    float s[NF][4];
    const long long state_base = ((long long)b * H + h) * K * V;
#pragma unroll
    for (int m = 0; m < NF; ++m) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int row = 4 * RG * m + 4 * rg + e;
            s[m][e] = h0 ? h0[state_base + (long long)row * V + col] : 0.0f;
        }
    }

    // Staging registers: this thread's key channels of the next token, and its column's v, beta.
    float kn[RPT], qn[RPT], gn[RPT];
    auto fetch = [&](long long t) {
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
            const int c = tid + r * NTH;
            if (c < K) {
                const long long off = kda_bthd(b, t, h, c, TT, H, K);
                kn[r] = k[off];
                qn[r] = q[off];
                gn[r] = g[off];
            }
        }
    };
    auto stash = [&](int buf) {
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
            const int c = tid + r * NTH;
            if (c < K) {
                sK[buf][c] = kn[r];
                sQ[buf][c] = qn[r] * scale;            // o_t = S^T (scale q_t)
                sA[buf][c] = exp2f(gn[r] * KDA_LOG2E);  // g <= 0: in (0, 1], never overflows
            }
        }
    };

    fetch(0);
    stash(0);
    float vc = v[kda_bthd(b, 0, h, col, TT, H, V)];
    float bc = beta[((long long)b * T) * H + h];
    __syncthreads();   // token 0 is staged

    for (long long t = 0; t < TT; ++t) {
        const int cur = (int)(t & 1);
        float vn = 0.0f, bn = 0.0f;
        if (t + 1 < TT) {
            fetch(t + 1);
            vn = v[kda_bthd(b, t + 1, h, col, TT, H, V)];
            bn = beta[((long long)b * T + t + 1) * H + h];
        }

        // S = diag(a) S, and this lane's share of k . S.
        float pk = 0.0f;
#pragma unroll
        for (int m = 0; m < NF; ++m) {
            const float4 a4 = kda_ld4(&sA[cur][4 * RG * m + 4 * rg]);
            const float4 k4 = kda_ld4(&sK[cur][4 * RG * m + 4 * rg]);
            const float av[4] = {a4.x, a4.y, a4.z, a4.w};
            const float kv[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[m][e] *= av[e];
                pk = fmaf(kv[e], s[m][e], pk);
            }
        }
        const float pred = kda_group_allreduce_sum<RG>(pk);     // (S^T k)[col], on all RG lanes
        const float u = bc * (vc - pred);

        // S += k u^T, and this lane's share of (scale q) . S.
        float po = 0.0f;
#pragma unroll
        for (int m = 0; m < NF; ++m) {
            const float4 k4 = kda_ld4(&sK[cur][4 * RG * m + 4 * rg]);
            const float4 q4 = kda_ld4(&sQ[cur][4 * RG * m + 4 * rg]);
            const float kv[4] = {k4.x, k4.y, k4.z, k4.w};
            const float qv[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[m][e] = fmaf(kv[e], u, s[m][e]);
                po = fmaf(qv[e], s[m][e], po);
            }
        }
        const float out = kda_group_allreduce_sum<RG>(po);
        if (rg == 0) o[kda_bthd(b, t, h, col, TT, H, V)] = out;

        // The other buffer was last read in iteration t-1, which every thread has finished
        // (barrier below), so it can take token t+1 now.
        if (t + 1 < TT) stash(cur ^ 1);
        vc = vn;
        bc = bn;
        __syncthreads();   // token t+1 staged; everyone is done reading buffer `cur`
    }

    if (ht) {
#pragma unroll
        for (int m = 0; m < NF; ++m) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = 4 * RG * m + 4 * rg + e;
                ht[state_base + (long long)row * V + col] = s[m][e];
            }
        }
    }
}
