// Runs kernels/attention/09_tf32_mma.cu on the CPU model (ladder_emu.h) for one compile-time
// configuration. Build:
//   g++ -std=c++20 -O1 -pthread -include ladder_emu.h -I kernels -DEMU_D=64 -DEMU_BM=32 -DEMU_BN=16 \
//       -DEMU_WARPS=2 -DEMU_PASSES=3 -DEMU_PREP=1 [-DEMU_QSMEM=0] harness_09.cpp
// Run: harness_09 DIR B H N [ROW_BLOCKS]   (DIR holds q, k, v as raw float32 [B, H, N, D]; writes
// DIR/o and prints the dynamic shared memory size it launched with). ROW_BLOCKS (optional) runs
// only the first ROW_BLOCKS blocks of query rows of every head (all N keys each): a long-sequence
// accuracy check at the cost of a few rows; the rows not run stay NaN in DIR/o.
// The output buffer starts as NaN, so a row never written shows up.
#ifndef SKIP09
#include "attention/09_tf32_mma.cu"
#endif

#include <cstdint>
#include <string>

#ifndef EMU_QSMEM
#define EMU_QSMEM 0   // 0: attn_tf32_mma; 1, 2: attn_tf32_mma_q with Q's fragments in shared memory
#endif


int main(int argc, char** argv) {
    if (argc != 5 && argc != 6) { std::fprintf(stderr, "usage: harness_09 DIR B H N [ROW_BLOCKS]\n"); return 2; }
    const std::string dir = argv[1];
    const int B = std::atoi(argv[2]), H = std::atoi(argv[3]), N = std::atoi(argv[4]);
    constexpr int D = EMU_D, BM = EMU_BM, BN = EMU_BN, WARPS = EMU_WARPS, PASSES = EMU_PASSES, PREP = EMU_PREP,
                  QSMEM = EMU_QSMEM;
    const size_t n = (size_t)B * H * N * D;
    auto q = read_f32(dir + "/q", n), k = read_f32(dir + "/k", n), v = read_f32(dir + "/v", n);
    if ((reinterpret_cast<std::uintptr_t>(q.data()) | reinterpret_cast<std::uintptr_t>(k.data()) |
         reinterpret_cast<std::uintptr_t>(v.data())) % 16) { std::fprintf(stderr, "inputs not 16-byte aligned\n"); return 3; }
    const float scale = 1.0f / std::sqrt((float)D);
    std::vector<float> o(n, std::numeric_limits<float>::quiet_NaN());
    const size_t smem_bytes = attn09::Attn09Layout<D, BM, BN, PASSES, PREP, QSMEM>::BYTES;
    // Sentinel past the kernel's shared memory: a write beyond Attn09Layout::BYTES is caught below.
    std::fill(smem + smem_bytes / 4, smem + EMU_SMEM_FLOATS, 12345.0f);
    unsigned gx = (unsigned)((N + BM - 1) / BM);
    if (argc == 6) gx = std::min(gx, (unsigned)std::atoi(argv[5]));
    emu_launch3(dim3{gx, (unsigned)(B * H), 1}, 32 * WARPS, smem_bytes, [&] {
        if constexpr (QSMEM == 0) attn_tf32_mma<D, BM, BN, WARPS, PASSES, PREP>(q.data(), k.data(), v.data(), o.data(), N, scale);
        else attn_tf32_mma_q<D, BM, BN, WARPS, PASSES, PREP, QSMEM, 0>(q.data(), k.data(), v.data(), o.data(), N, scale);
    });
    for (size_t i = smem_bytes / 4; i < EMU_SMEM_FLOATS; ++i)
        if (smem[i] != 12345.0f) { std::fprintf(stderr, "shared memory written past %zu bytes\n", smem_bytes); return 4; }
    std::printf("smem_bytes=%zu\n", smem_bytes);   // the test checks the header's launch formula
    FILE* f = std::fopen((dir + "/o").c_str(), "wb");
    std::fwrite(o.data(), 4, o.size(), f);
    std::fclose(f);
    return 0;
}
