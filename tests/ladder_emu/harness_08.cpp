// Runs kernels/attention/08_register_tiled.cu on the CPU (see ladder_emu.h) for one compile-time
// configuration <D, BM, BN, CG, TM>. Build:
//   g++ -std=c++20 -O1 -pthread -include ladder_emu.h -I kernels \
//       -DEMU_D=128 -DEMU_BM=64 -DEMU_BN=64 -DEMU_CG=16 -DEMU_TM=8 harness_08.cpp
// Run: harness_08 DIR B H N   (DIR holds q, k, v as raw float32 [B, H, N, D]; writes DIR/o)
#include "attention/08_register_tiled.cu"

#include <cstdint>
#include <string>


int main(int argc, char** argv) {
    if (argc != 5) { std::fprintf(stderr, "usage: harness_08 DIR B H N\n"); return 2; }
    const std::string dir = argv[1];
    const int B = std::atoi(argv[2]), H = std::atoi(argv[3]), N = std::atoi(argv[4]);
    constexpr int D = EMU_D, BM = EMU_BM, BN = EMU_BN, CG = EMU_CG, TM = EMU_TM;
    const size_t n = (size_t)B * H * N * D;
    auto q = read_f32(dir + "/q", n), k = read_f32(dir + "/k", n), v = read_f32(dir + "/v", n);
    if ((reinterpret_cast<std::uintptr_t>(q.data()) | reinterpret_cast<std::uintptr_t>(k.data()) |
         reinterpret_cast<std::uintptr_t>(v.data())) % 16) { std::fprintf(stderr, "inputs not 16-byte aligned\n"); return 3; }
    const float scale = 1.0f / std::sqrt((float)D);
    // The launch formula of the file header.
    const dim3 grid{(unsigned)((N + BM - 1) / BM), (unsigned)(B * H), 1};
    const unsigned threads = (BM / TM) * CG;
    const size_t smem_bytes = 4 * (size_t)(D * BM + 2 * BN * D + BN * BM);
    std::vector<float> o(n, std::numeric_limits<float>::quiet_NaN());   // poisoned: unwritten stays NaN
    emu_launch3(grid, threads, smem_bytes,
                [&] { attn_register_tiled<D, BM, BN, CG, TM>(q.data(), k.data(), v.data(), o.data(), N, scale); });
    write_f32(dir + "/o", o);
    return 0;
}
