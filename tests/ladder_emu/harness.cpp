// Runs kernels/attention/01_naive.cu and 02-05 on the CPU (see ladder_emu.h) for one compile-time
// configuration. Build:
//   g++ -std=c++20 -O1 -pthread -include ladder_emu.h -I kernels -DEMU_D=64 -DEMU_TR=8 -DEMU_TK=16 harness.cpp
// Run: harness DIR B H N   (DIR holds q, k, v as raw float32 [B, H, N, D]; writes o_<kernel> there)
#include "attention/01_naive.cu"
#include "attention/02_tiled.cu"
#include "attention/03_vec_load.cu"
#include "attention/04_vec_padded.cu"
#include "attention/04b_double_buffer.cu"

#include <cstdint>
#include <string>


int main(int argc, char** argv) {
    if (argc != 5) { std::fprintf(stderr, "usage: harness DIR B H N\n"); return 2; }
    const std::string dir = argv[1];
    const int B = std::atoi(argv[2]), H = std::atoi(argv[3]), N = std::atoi(argv[4]);
    constexpr int D = EMU_D, TR = EMU_TR, TK = EMU_TK;
    const size_t n = (size_t)B * H * N * D;
    auto q = read_f32(dir + "/q", n), k = read_f32(dir + "/k", n), v = read_f32(dir + "/v", n);
    if ((reinterpret_cast<std::uintptr_t>(q.data()) | reinterpret_cast<std::uintptr_t>(k.data()) |
         reinterpret_cast<std::uintptr_t>(v.data())) % 16) { std::fprintf(stderr, "inputs not 16-byte aligned\n"); return 3; }
    const float scale = 1.0f / std::sqrt((float)D);
    const unsigned row_tiles = (N + TR - 1) / TR;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    auto run = [&](const char* name, unsigned grid, unsigned threads, size_t smem_bytes, auto fn) {
        std::vector<float> o(n, nan);   // poisoned: an element never written stays NaN
        emu_launch(grid, threads, smem_bytes, [&] { fn(o.data()); });
        write_f32(dir + "/o_" + name, o);
    };
    run("naive", B * H * N, 32, 0, [&](float* o) { attn_naive<D>(q.data(), k.data(), v.data(), o, N, scale); });
    run("tiled", B * H * row_tiles, 32 * TR, (TR + 2 * TK) * D * 4,
        [&](float* o) { attn_tiled<D, TR, TK>(q.data(), k.data(), v.data(), o, N, scale); });
    run("vec_load", B * H * row_tiles, 32 * TR, (TR + 2 * TK) * D * 4,
        [&](float* o) { attn_vec_load<D, TR, TK>(q.data(), k.data(), v.data(), o, N, scale); });
    run("vec_padded", B * H * row_tiles, 32 * TR, (TR + 2 * TK) * (D + 4) * 4,
        [&](float* o) { attn_vec_padded<D, TR, TK>(q.data(), k.data(), v.data(), o, N, scale); });
    run("double_buffer", B * H * row_tiles, 32 * TR, (TR + 4 * TK) * (D + 4) * 4,
        [&](float* o) { attn_double_buffer<D, TR, TK>(q.data(), k.data(), v.data(), o, N, scale); });
    return 0;
}
