// The fiber scheduler of the CPU execution models (tests/emu_fibers.h), on its own: tests/test_emu_fibers.py
// runs each mode and reads what it prints.
//   race      two warps of 32 threads; warp 1 overwrites a shared word that warp 0 reads, with no block
//             barrier between: prints what each of warp 0's threads read (the scheduling order decides)
//   fenced    the same with a block barrier between the read and the write: always the old value
//   deadlock  one thread waits at a barrier of more arrivals than there are threads: must abort
//   count     a long run of warp barriers over 192 threads: prints how often the scheduler switched
//             to a thread (a waiting thread that is passed over costs none)
#include "emu_fibers.h"

#include <string>

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "race" || mode == "fenced") {
        const bool fenced = mode == "fenced";
        EmuBarrier block(64), warp[2] = {EmuBarrier(32), EmuBarrier(32)};
        int x = 1, seen[32] = {};
        emu_fibers_run(64, [&](unsigned t) {
            const unsigned w = t / 32;
            block.arrive_and_wait();
            warp[w].arrive_and_wait();        // a warp-level operation (a shuffle, an MMA) before the access
            if (w == 0) seen[t] = x;
            if (fenced) block.arrive_and_wait();
            if (w == 1) x = 2;
        }, std::vector<void*>(64, nullptr).data());
        for (int t = 0; t < 32; ++t) std::printf("%d", seen[t]);
        std::printf("\n");
        return 0;
    }
    if (mode == "deadlock") {
        EmuBarrier wide(33);
        emu_fibers_run(32, [&](unsigned) { wide.arrive_and_wait(); }, std::vector<void*>(32, nullptr).data());
        return 0;
    }
    if (mode == "count") {
        constexpr unsigned N = 192, ROUNDS = 200;
        EmuBarrier block(N);
        std::vector<EmuBarrier> warps(N / 32, EmuBarrier(32));
        emu_fibers_run(N, [&](unsigned t) {
            for (unsigned r = 0; r < ROUNDS; ++r) {
                warps[t / 32].arrive_and_wait();
                if (r % 50 == 49) block.arrive_and_wait();
            }
        }, std::vector<void*>(N, nullptr).data());
        std::printf("%lu\n", emu_fiber_switches);
        return 0;
    }
    std::fprintf(stderr, "usage: %s race|fenced|deadlock|count\n", argv[0]);
    return 2;
}
