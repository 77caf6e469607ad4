// A self-test of the CPU model's thread-block clusters (tests/ladder_emu/ladder_emu.h): ranks,
// the cluster barrier and distributed shared memory, against what the PTX ISA specifies for
// %cluster_ctarank, barrier.cluster.{arrive.release, wait.acquire} and mapa. Build:
//   g++ -std=c++20 -O1 -pthread -include ladder_emu.h -I kernels harness_cluster.cpp
// Run: harness_cluster   (prints "cluster selftest ok" or the first mismatch; exit 1)
#include <cstdio>

// Each block fills its shared memory, reads the next block's after a cluster barrier, then writes
// its rank into the next block's shared memory; out[block][0..63] = what it read, [64..127] = what
// the previous block wrote into it.
__global__ void cluster_selftest(float* out) {
    float* s = emu_dynamic_smem();
    const unsigned r = cluster_ctarank(), n = cluster_nctarank(), t = threadIdx.x;
    s[t] = 100.0f * r + t;
    cluster_sync();
    const float seen = cluster_map_shared(s, (r + 1) % n)[t];
    cluster_sync();                                   // every read done before the next writes
    cluster_map_shared(s, (r + 1) % n)[64 + t] = static_cast<float>(r);
    cluster_sync();
    out[blockIdx.x * 128 + t] = seen;
    out[blockIdx.x * 128 + 64 + t] = s[64 + t];
}

int main() {
    constexpr unsigned CL = 4, NB = 8, NT = 64;
    std::vector<float> out(NB * 128, -1.0f);
    emu_launch_cluster(dim3{NB, 1, 1}, CL, NT, 128 * sizeof(float), [&] { cluster_selftest(out.data()); });
    for (unsigned b = 0; b < NB; ++b) {
        const unsigned r = b % CL;
        for (unsigned t = 0; t < NT; ++t) {
            const float want_seen = 100.0f * ((r + 1) % CL) + t, want_rank = static_cast<float>((r + CL - 1) % CL);
            if (out[b * 128 + t] != want_seen || out[b * 128 + 64 + t] != want_rank) {
                std::printf("mismatch: block %u thread %u: read %g (want %g), got rank %g (want %g)\n", b, t,
                            out[b * 128 + t], want_seen, out[b * 128 + 64 + t], want_rank);
                return 1;
            }
        }
    }
    std::printf("cluster selftest ok\n");
    return 0;
}
