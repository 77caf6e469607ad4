// Runs the tensor-core flash-attention ladder kernels/attention/10[a-f]_*.cu on the CPU model
// (ladder_emu.h) for one compile-time configuration, plus a self-test of the emulator's fragment
// layouts (ldmatrix / mma.m16n8k16) against the PTX ISA's documented layouts. 10a-10d and 10f own 16
// query rows a warp (BM = 16 * WARPS), 10e 32 (BM = 32 * WARPS): a configuration with
// BM = 16 * WARPS runs 10a-10d and 10f, one with BM = 32 * WARPS runs 10e and, as its baseline, 10a with
// BM / 16 warps. Build:
//   g++ -std=c++20 -O1 -pthread -include ladder_emu.h -I kernels -DEMU_D=64 -DEMU_BM=64 -DEMU_BN=64
//       -DEMU_WARPS=4 -DEMU_BF16=1 -DEMU_CAUSAL=0 -DEMU_STAGES=2 [-DEMU_KC=64] harness_10.cpp
//   (EMU_KC: 10e's S chunk in keys, 32 or 64, default 32; EMU_QREG: whether 10g, 10h and 10i hold
//   Q's fragments, default 0; EMU_CW: 10i's copying warps, default -1: 10i not built; the other
//   steps ignore them)
// Run: harness_10 selftest
//      harness_10 DIR B H N [KERNELS]   (DIR holds q, k, v as raw 16-bit [B, H, N, D] bit patterns,
//      bf16 or fp16 per EMU_BF16; writes o_<kernel> there, same format; KERNELS is a comma list of
//      mma_baseline,ldmatrix_swizzle,cp_async,tuned,two_row_tiles,fixed_offsets,occupancy,stream_k,
//      copy_warps, default all that apply; stream_k and copy_warps read EMU_SK_BLOCKS, EMU_REVERSE
//      and EMU_FILL (10h's FILL, default 100) from the environment)
#include "attention/10a_mma_baseline.cu"
#include "attention/10b_ldmatrix_swizzle.cu"
#include "attention/10c_cp_async.cu"
#include "attention/10d_tuned.cu"
#include "attention/10e_two_row_tiles.cu"
#include "attention/10f_fixed_offsets.cu"
#include "attention/10g_occupancy.cu"
#include "attention/10h_stream_k.cu"
#include "attention/10i_copy_warps.cu"

#ifndef EMU_KC
#define EMU_KC 32
#endif
#ifndef EMU_QREG
#define EMU_QREG 0
#endif
#ifndef EMU_CW
#define EMU_CW -1
#endif

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

// ------------------------------------------------------------------ layout self-test (one warp)
// Reference layouts written from the PTX ISA ("Matrix fragments for mma.m16n8k16 with floating
// point type", "Warp-level matrix load instruction: ldmatrix"), g = lane / 4, t = lane % 4:
//   A (16x16, row):  a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
//   B (16x8, col):   b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
//   C/D (16x8):      d0 = D[g][2t], d1 = D[g][2t+1], d2 = D[g+8][2t], d3 = D[g+8][2t+1]
//   the lower row/column index in the low 16 bits of a register.
//   ldmatrix .x1/.x2/.x4: lanes 8i..8i+7 give the 8 row addresses of matrix i; lane l receives
//   from matrix i the elements (row l/4, cols 2(l%4), 2(l%4)+1); with .trans (rows 2(l%4),
//   2(l%4)+1, col l/4).
static std::atomic<int> g_selftest_fail{0};

template <bool BF16>
static unsigned short st_enc(float x) { return BF16 ? emu_float_to_bf16(x) : emu_float_to_f16(x); }
template <bool BF16>
static float st_dec(unsigned short x) { return BF16 ? emu_bf16_to_float(x) : f16_to_float(x); }

static void st_check(bool ok, const char* what, int lane, int idx) {
    if (!ok) {
        if (g_selftest_fail.fetch_add(1) < 20) std::fprintf(stderr, "selftest: %s mismatch (lane %d, reg %d)\n", what, lane, idx);
    }
}

template <bool BF16>
static void selftest_body() {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    // Small integers: every product and sum below is exact in bf16/fp16 and fp32.
    // (Hash-like patterns, so that no operand is constant along a row or a column.)
    auto Av = [](int m, int kk) { return (float)(((m * 37 + kk * 11 + m * kk * 5) % 7) - 3); };   // A  16x16
    auto Bv = [](int kk, int nn) { return (float)(((kk * 13 + nn * 29 + kk * nn * 3) % 7) - 3); }; // B  16x16 (two n8 tiles)
    auto Cv = [](int kk, int nn) { return (float)(((kk * 5 + nn * 7 + kk * nn) % 3) - 1); };        // B3 16x8
    unsigned short* sA = reinterpret_cast<unsigned short*>(smem);    // [16][16] row-major
    unsigned short* sB = sA + 256;                                   // [16][16] = [k][n] row-major
    unsigned short* sBt = sB + 256;                                  // [16][16] = [n][k] (B transposed)
    unsigned short* sC = sBt + 256;                                  // [16][8]  = [k][n]
    for (int i = lane; i < 256; i += 32) {
        const int r = i / 16, c = i % 16;
        sA[i] = st_enc<BF16>(Av(r, c));
        sB[i] = st_enc<BF16>(Bv(r, c));
        sBt[i] = st_enc<BF16>(Bv(c, r));
        if (i < 128) sC[i] = st_enc<BF16>(Cv(i / 8, i % 8));
    }
    __syncwarp();
    auto pk = [](const unsigned short* p0, const unsigned short* p1) { return (unsigned)*p0 | ((unsigned)*p1 << 16); };

    // A via the documented scalar layout and via ldmatrix.x4.
    unsigned a_doc[4] = {pk(&sA[g * 16 + 2 * t], &sA[g * 16 + 2 * t + 1]),
                         pk(&sA[(g + 8) * 16 + 2 * t], &sA[(g + 8) * 16 + 2 * t + 1]),
                         pk(&sA[g * 16 + 2 * t + 8], &sA[g * 16 + 2 * t + 9]),
                         pk(&sA[(g + 8) * 16 + 2 * t + 8], &sA[(g + 8) * 16 + 2 * t + 9])};
    unsigned a_ldm[4];
    ldmatrix_x4(a_ldm, sA + ((lane % 8) + 8 * ((lane / 8) % 2)) * 16 + 8 * (lane / 16));
    for (int i = 0; i < 4; ++i) st_check(a_ldm[i] == a_doc[i], "ldmatrix_x4 A", lane, i);

    // B n-tile nn (columns 8nn..8nn+7 of sB) via the scalar layout, ldmatrix.x2.trans of [k][n],
    // ldmatrix.x2 of the transposed copy [n][k], and ldmatrix.x4.trans covering both n-tiles.
    unsigned b_doc[2][2], b_tr[2][2], b_nt[2][2], b_x4[4];
    for (int nn = 0; nn < 2; ++nn) {
        const int col = 8 * nn + g;
        b_doc[nn][0] = pk(&sB[(2 * t) * 16 + col], &sB[(2 * t + 1) * 16 + col]);
        b_doc[nn][1] = pk(&sB[(2 * t + 8) * 16 + col], &sB[(2 * t + 9) * 16 + col]);
        ldmatrix_x2_trans(b_tr[nn], sB + (lane % 16) * 16 + 8 * nn);
        ldmatrix_x2(b_nt[nn], sBt + (8 * nn + lane % 8) * 16 + 8 * ((lane / 8) % 2));
        for (int i = 0; i < 2; ++i) {
            st_check(b_tr[nn][i] == b_doc[nn][i], "ldmatrix_x2_trans B", lane, i);
            st_check(b_nt[nn][i] == b_doc[nn][i], "ldmatrix_x2 B^T", lane, i);
        }
    }
    ldmatrix_x4_trans(b_x4, sB + ((lane % 8) + 8 * ((lane / 8) % 2)) * 16 + 8 * (lane / 16));
    for (int i = 0; i < 4; ++i) st_check(b_x4[i] == b_doc[i / 2][i % 2], "ldmatrix_x4_trans B", lane, i);

    // D = A B for each n-tile vs the plain product, in the documented accumulator layout.
    float d[2][4];
    for (int nn = 0; nn < 2; ++nn) {
        for (int r = 0; r < 4; ++r) d[nn][r] = 0.0f;
        if (BF16) mma_m16n8k16_bf16(d[nn], a_ldm, b_tr[nn]); else mma_m16n8k16_f16(d[nn], a_ldm, b_tr[nn]);
        for (int r = 0; r < 4; ++r) {
            const int m = g + 8 * (r / 2), nc = 8 * nn + 2 * t + r % 2;
            float ref = 0.0f;
            for (int kk = 0; kk < 16; ++kk) ref += Av(m, kk) * Bv(kk, nc);
            st_check(d[nn][r] == ref, "mma_m16n8k16 A*B", lane, r);
        }
    }
    // Accumulators of two adjacent n8 tiles, packed in pairs, are the A fragment of a k16 step:
    // E = (A B) B3 with (A B) taken straight from the registers (the flash-attention P reuse).
    const unsigned p[4] = {BF16 ? pack_bf16x2(d[0][0], d[0][1]) : pack_f16x2(d[0][0], d[0][1]),
                           BF16 ? pack_bf16x2(d[0][2], d[0][3]) : pack_f16x2(d[0][2], d[0][3]),
                           BF16 ? pack_bf16x2(d[1][0], d[1][1]) : pack_f16x2(d[1][0], d[1][1]),
                           BF16 ? pack_bf16x2(d[1][2], d[1][3]) : pack_f16x2(d[1][2], d[1][3])};
    unsigned c_frag[2];
    ldmatrix_x2_trans(c_frag, sC + (lane % 16) * 8);
    float e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (BF16) mma_m16n8k16_bf16(e, p, c_frag); else mma_m16n8k16_f16(e, p, c_frag);
    for (int r = 0; r < 4; ++r) {
        const int m = g + 8 * (r / 2), nc = 2 * t + r % 2;
        float ref = 0.0f;
        for (int j = 0; j < 16; ++j) {
            float ab = 0.0f;
            for (int kk = 0; kk < 16; ++kk) ab += Av(m, kk) * Bv(kk, j);
            ref += ab * Cv(j, nc);
        }
        st_check(e[r] == ref, "accumulator -> A fragment reuse", lane, r);
    }
    // Packing: lo in bits 0-15.
    const unsigned pk2 = BF16 ? pack_bf16x2(1.0f, -2.0f) : pack_f16x2(1.0f, -2.0f);
    st_check(st_dec<BF16>((unsigned short)(pk2 & 0xffff)) == 1.0f && st_dec<BF16>((unsigned short)(pk2 >> 16)) == -2.0f,
             "pack lo/hi", lane, 0);
}

static int selftest() {
    emu_launch(1, 32, 4096, [] { selftest_body<true>(); });
    emu_launch(1, 32, 4096, [] { selftest_body<false>(); });
    const int fails = g_selftest_fail.load();
    std::printf(fails ? "selftest FAILED (%d mismatches)\n" : "selftest ok\n", fails);
    return fails ? 1 : 0;
}

// ------------------------------------------------------------------ attention runs
static std::vector<unsigned short> read_u16(const std::string& path, size_t n) {
    std::vector<unsigned short> v(n);
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f || std::fread(v.data(), 2, n, f) != n) { std::fprintf(stderr, "cannot read %s\n", path.c_str()); std::exit(2); }
    std::fclose(f);
    return v;
}
static void write_u16(const std::string& path, const std::vector<unsigned short>& v) {
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(v.data(), 2, v.size(), f);
    std::fclose(f);
}

// The kernels that apply to one configuration (a template, so that the other arrangement's
// kernels, whose static_asserts would fail, are never instantiated).
template <int D, int BM, int BN, int WARPS, bool BF16, bool CAUSAL, int STAGES, int KC, typename Run>
static void run_kernels(Run& run, const unsigned short* q, const unsigned short* k, const unsigned short* v, int N,
                        float scale, dim3 gridDim_default) {
    if constexpr (BM == 16 * WARPS) {
        run("mma_baseline", (size_t)(BM + 2 * BN) * D * 2, 32 * WARPS, [&](unsigned short* o) {
            attn_mma_baseline<D, BM, BN, WARPS, BF16, CAUSAL>(q, k, v, o, N, scale);
        });
        run("ldmatrix_swizzle", (size_t)(BM + 2 * BN) * D * 2, 32 * WARPS, [&](unsigned short* o) {
            attn_ldmatrix_swizzle<D, BM, BN, WARPS, BF16, CAUSAL>(q, k, v, o, N, scale);
        });
        run("cp_async", (size_t)(BM + 2 * STAGES * BN) * D * 2, 32 * WARPS, [&](unsigned short* o) {
            attn_cp_async<D, BM, BN, WARPS, BF16, CAUSAL, STAGES>(q, k, v, o, N, scale);
        });
        // 10d and 10f copy with every thread, 8 rows a pass: 32 * WARPS a multiple of D (10g's copy
        // also takes blocks such as 6 warps at D = 128, where only the first 128 threads copy)
        if constexpr ((32 * WARPS) % D == 0 && BN % (256 * WARPS / D) == 0) {
            run("tuned", attn_tuned_smem_bytes(D, BM, BN, STAGES), 32 * WARPS, [&](unsigned short* o) {
                attn_tuned<D, BM, BN, WARPS, BF16, CAUSAL, STAGES>(q, k, v, o, N, scale);
            });
            run("fixed_offsets", attn_fixed_offsets_smem_bytes(D, BM, BN, STAGES), 32 * WARPS, [&](unsigned short* o) {
                attn_fixed_offsets<D, BM, BN, WARPS, BF16, CAUSAL, STAGES>(q, k, v, o, N, scale);
            });
        }
        run("occupancy", attn_occupancy_smem_bytes(D, BM, BN, STAGES), 32 * WARPS, [&](unsigned short* o) {
            attn_occupancy<D, BM, BN, WARPS, BF16, CAUSAL, STAGES, 0, EMU_QREG>(q, k, v, o, N, scale);
        });
        // 10h: non-causal on a persistent grid of EMU_SK_BLOCKS blocks (env, default 5; capped at
        // the iteration count as the launcher caps it), blocks in reverse order with EMU_REVERSE=1
        // (so the other part of a split row block arrives last); causal, and non-causal launches
        // whose plain rounds over EMU_SK_BLOCKS slots are EMU_FILL % full take 10g's grid, the
        // latter with 10g's kernel, as the launcher decides (printed for the test to compare with
        // its own rule).
        const int bh = (int)gridDim_default.y;
        const long long iters = (long long)bh * ((N + BM - 1) / BM) * ((N + BN - 1) / BN);
        const char* env_p = std::getenv("EMU_SK_BLOCKS");
        const long long slots = env_p ? std::atoll(env_p) : 5;
        const unsigned P = (unsigned)std::min<long long>(slots, iters);
        const char* env_f = std::getenv("EMU_FILL");
        const bool plain = CAUSAL || attn_stream_k_plain(bh, N, BM, slots, env_f ? std::atoi(env_f) : 100);
        if (!CAUSAL) std::printf("stream_k plain=%d\n", (int)plain);
        // The workspace and counters as the kernel's size helper and the launcher say, each followed
        // by a guard of the same size holding a sentinel: a write past either is reported (exit 5),
        // however far past it lands (AddressSanitizer only sees a few KiB around an allocation).
        const size_t n_ws = attn_stream_k_ws_floats(D, 32 * WARPS, (int)P), n_counters = (size_t)bh * ((N + BM - 1) / BM);
        constexpr unsigned WS_GUARD = 0x7fbadbadu;   // a NaN no kernel computes
        constexpr int COUNTER_GUARD = 0x5a5a5a5a;
        std::vector<float> ws(2 * n_ws, std::numeric_limits<float>::quiet_NaN());
        std::vector<int> counters(2 * n_counters, 0);
        auto guard_ws = [&] {
            std::fill(ws.begin(), ws.begin() + n_ws, std::numeric_limits<float>::quiet_NaN());
            for (size_t i = n_ws; i < 2 * n_ws; ++i) std::memcpy(&ws[i], &WS_GUARD, 4);
            std::fill(counters.begin() + n_counters, counters.end(), COUNTER_GUARD);
        };
        auto check_guards = [&](const char* name) {
            for (size_t i = n_ws; i < 2 * n_ws; ++i) {
                unsigned bits;
                std::memcpy(&bits, &ws[i], 4);
                if (bits != WS_GUARD) { std::fprintf(stderr, "%s wrote past its workspace (float %zu of %zu)\n", name, i, n_ws); std::exit(5); }
            }
            for (size_t i = n_counters; i < 2 * n_counters; ++i)
                if (counters[i] != COUNTER_GUARD) { std::fprintf(stderr, "%s wrote past its counters (%zu of %zu)\n", name, i, n_counters); std::exit(5); }
            for (size_t i = 0; i < n_counters; ++i)
                if (counters[i] != 0) { std::fprintf(stderr, "%s left a row-block counter at %d (not reset by its merge)\n", name, counters[i]); std::exit(4); }
        };
        guard_ws();
        emu_reverse_blocks = std::getenv("EMU_REVERSE") && std::atoi(std::getenv("EMU_REVERSE")) != 0;
        run("stream_k", attn_stream_k_smem_bytes(D, BM, BN, STAGES), 32 * WARPS, [&](unsigned short* o) {
            if (CAUSAL || !plain)
                attn_stream_k<D, BM, BN, WARPS, BF16, CAUSAL, STAGES, 0, EMU_QREG>(q, k, v, o, N, scale, bh, ws.data(),
                                                                                  counters.data());
            else
                attn_occupancy<D, BM, BN, WARPS, BF16, CAUSAL, STAGES, 0, EMU_QREG>(q, k, v, o, N, scale);
        }, plain ? gridDim_default : dim3{P, 1, 1});
        check_guards("stream_k");
        // 10i: 10h with the tile copies by EMU_CW warps, on the same grid and plain-grid choice
        if constexpr (EMU_CW >= 0) {
            guard_ws();
            run("copy_warps", attn_copy_warps_smem_bytes(D, BM, BN, STAGES), 32 * WARPS, [&](unsigned short* o) {
                if (CAUSAL || !plain)
                    attn_copy_warps<D, BM, BN, WARPS, BF16, CAUSAL, STAGES, 0, EMU_QREG, EMU_CW>(q, k, v, o, N, scale, bh,
                                                                                             ws.data(), counters.data());
                else
                    attn_copy_warps_plain<D, BM, BN, WARPS, BF16, CAUSAL, STAGES, 0, EMU_QREG, EMU_CW>(q, k, v, o, N, scale);
            }, plain ? gridDim_default : dim3{P, 1, 1});
            check_guards("copy_warps");
        }
        emu_reverse_blocks = false;
    } else if constexpr (BM == 32 * WARPS) {
        run("mma_baseline", (size_t)(BM + 2 * BN) * D * 2, 64 * WARPS, [&](unsigned short* o) {
            attn_mma_baseline<D, BM, BN, 2 * WARPS, BF16, CAUSAL>(q, k, v, o, N, scale);
        });
        run("two_row_tiles", attn_two_row_tiles_smem_bytes(D, BM, BN, STAGES), 32 * WARPS, [&](unsigned short* o) {
            attn_two_row_tiles<D, BM, BN, WARPS, BF16, CAUSAL, STAGES, KC>(q, k, v, o, N, scale);
        });
    } else {
        static_assert(BM == 16 * WARPS || BM == 32 * WARPS, "BM must be 16 or 32 rows a warp");
    }
}

int main(int argc, char** argv) {
    if (argc == 2 && std::string(argv[1]) == "selftest") return selftest();
    if (argc != 5 && argc != 6) { std::fprintf(stderr, "usage: harness_10 selftest | DIR B H N [KERNELS]\n"); return 2; }
    const std::string dir = argv[1];
    const int B = std::atoi(argv[2]), H = std::atoi(argv[3]), N = std::atoi(argv[4]);
    const std::string which = argc == 6 ? std::string(",") + argv[5] + "," : std::string(",all,");
    constexpr int D = EMU_D, BM = EMU_BM, BN = EMU_BN, WARPS = EMU_WARPS, STAGES = EMU_STAGES;
    constexpr bool BF16 = EMU_BF16 != 0, CAUSAL = EMU_CAUSAL != 0;
    const size_t count = (size_t)B * H * N * D;
    auto q = read_u16(dir + "/q", count), k = read_u16(dir + "/k", count), v = read_u16(dir + "/v", count);
    if ((reinterpret_cast<std::uintptr_t>(q.data()) | reinterpret_cast<std::uintptr_t>(k.data()) |
         reinterpret_cast<std::uintptr_t>(v.data())) % 16) { std::fprintf(stderr, "inputs not 16-byte aligned\n"); return 3; }
    const float scale = 1.0f / std::sqrt((float)D);
    const dim3 grid{(unsigned)((N + BM - 1) / BM), (unsigned)(B * H), 1};
    const unsigned short poison = BF16 ? 0x7fc0 : 0x7e00;   // NaN: an element never written stays NaN
    auto run = [&](const char* name, size_t smem_bytes, unsigned threads, auto fn, dim3 g = dim3{0, 0, 0}) {
        if (which != ",all," && which.find(std::string(",") + name + ",") == std::string::npos) return;
        std::vector<unsigned short> o(count, poison);
        emu_launch3(g.x ? g : grid, threads, smem_bytes, [&] { fn(o.data()); });
        write_u16(dir + "/o_" + name, o);
    };
    run_kernels<D, BM, BN, WARPS, BF16, CAUSAL, STAGES, EMU_KC>(run, q.data(), k.data(), v.data(), N, scale, grid);
    return 0;
}
