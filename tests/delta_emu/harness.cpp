// Runs kernels/delta/01-05 on the CPU model (tests/ladder_emu/ladder_emu.h with the delta hooks of
// kda_hooks.h) for one compile-time configuration.
// Build: g++ -std=c++20 -O1 -pthread -include tests/ladder_emu/ladder_emu.h -I kernels -DEMU_K=.. -DEMU_V=..
//        -DEMU_C=.. -DEMU_BV=.. -DEMU_RG=.. -DEMU_CPT=.. tests/delta_emu/harness.cpp
// Run:   harness DIR B T H SCALE HAS_H0
// DIR holds q k v g beta [h0] as raw float32 (C order); the program writes there
//   rec_o rec_ht (recurrent) and Akk Aqk Qg Kd Kbg gL W U o ht (chunked; W = Kbg after stage 2),
//   and tc_o tc_ht (stage 3 on tensor cores, 05_chunk_state_tc.cu; chunks up to 64 only).
#include "../ladder_emu/kda_hooks.h"

#include "delta/01_recurrent.cu"
#include "delta/02_chunk_intra.cu"
#include "delta/03_chunk_solve.cu"
#include "delta/04_chunk_state.cu"
#include "delta/05_chunk_state_tc.cu"


int main(int argc, char** argv) {
    if (argc != 7) { std::fprintf(stderr, "usage: harness DIR B T H SCALE HAS_H0\n"); return 2; }
    const std::string dir = argv[1];
    const int B = std::atoi(argv[2]), T = std::atoi(argv[3]), H = std::atoi(argv[4]);
    const float scale = (float)std::atof(argv[5]);
    const bool has_h0 = std::atoi(argv[6]) != 0;
    constexpr int K = EMU_K, V = EMU_V, C = EMU_C, BV = EMU_BV, RG = EMU_RG, CPT = EMU_CPT;
    const size_t nqk = (size_t)B * T * H * K, nv = (size_t)B * T * H * V, nb = (size_t)B * T * H;
    const size_t ns = (size_t)B * H * K * V;
    auto q = read_f32(dir + "/q", nqk), k = read_f32(dir + "/k", nqk), g = read_f32(dir + "/g", nqk);
    auto v = read_f32(dir + "/v", nv), beta = read_f32(dir + "/beta", nb);
    std::vector<float> h0 = has_h0 ? read_f32(dir + "/h0", ns) : std::vector<float>();
    const float* h0p = has_h0 ? h0.data() : nullptr;
    const float nan = std::nanf("");

    // ---- recurrent
    {
        std::vector<float> o(nv, nan), ht(ns, nan);
        constexpr int WARPS = 2;
        constexpr int cols = WARPS * 32 / RG;
        emu_launch3(dim3{V / cols, H, B}, WARPS * 32, 0, [&] {
            kda_recurrent<K, V, RG, WARPS>(q.data(), k.data(), v.data(), g.data(), beta.data(), h0p,
                                           o.data(), ht.data(), T, H, scale);
        });
        write_f32(dir + "/rec_o", o);
        write_f32(dir + "/rec_ht", ht);
    }
    // ---- chunked
    {
        const int NT = (T + C - 1) / C;
        const size_t Tp = (size_t)NT * C;
        std::vector<float> Akk((size_t)B * H * NT * C * C, nan), Aqk(Akk.size(), nan);
        std::vector<float> Qg((size_t)B * H * Tp * K, nan), Kd(Qg.size(), nan), Kbg(Qg.size(), nan);
        std::vector<float> gL((size_t)B * H * NT * K, nan), U((size_t)B * H * Tp * V, nan);
        std::vector<float> o(nv, nan), ht(ns, nan);
        emu_launch3(dim3{NT, H, B}, 4 * C, 0, [&] {
            kda_chunk_intra<K, C>(q.data(), k.data(), g.data(), beta.data(), Akk.data(), Aqk.data(),
                                  Qg.data(), Kd.data(), Kbg.data(), gL.data(), T, H, scale);
        });
        write_f32(dir + "/Akk", Akk); write_f32(dir + "/Aqk", Aqk); write_f32(dir + "/Qg", Qg);
        write_f32(dir + "/Kd", Kd); write_f32(dir + "/Kbg", Kbg); write_f32(dir + "/gL", gL);
        emu_launch3(dim3{NT, H, B}, (K + V) / CPT, 0, [&] {
            kda_chunk_solve<K, V, C, CPT>(Akk.data(), Kbg.data(), v.data(), beta.data(), U.data(), T, H);
        });
        write_f32(dir + "/W", Kbg); write_f32(dir + "/U", U);
        using L = KdaStateLayout<K, V, C, BV>;
        emu_launch3(dim3{V / BV, H, B}, (K / 4) * (BV / 4), L::FLOATS * sizeof(float), [&] {
            kda_chunk_state<K, V, C, BV>(Kbg.data(), U.data(), Qg.data(), Kd.data(), Aqk.data(), gL.data(),
                                         h0p, o.data(), ht.data(), T, H, NT);
        });
        write_f32(dir + "/o", o); write_f32(dir + "/ht", ht);
#if EMU_C <= 64
        using LT = KdaStateTcLayout<K, V, C, BV>;
        std::vector<float> o_tc(nv, nan), ht_tc(ns, nan);
        emu_launch3(dim3{V / BV, H, B}, LT::NTH, LT::FLOATS * sizeof(float), [&] {
            kda_chunk_state_tc<K, V, C, BV>(Kbg.data(), U.data(), Qg.data(), Kd.data(), Aqk.data(), gL.data(),
                                            h0p, o_tc.data(), ht_tc.data(), T, H, NT);
        });
        write_f32(dir + "/tc_o", o_tc); write_f32(dir + "/tc_ht", ht_tc);
#endif
    }
    return 0;
}
