// The race-check controls (race_controls.cuh) on the CPU model: one form a run, for ThreadSanitizer
// (tests/test_emu_race.py), which must report every broken form and stay quiet on every ok one.
// Build: g++ -std=c++20 -O1 -g -fsanitize=thread -pthread -include tests/ladder_emu/ladder_emu.h
//        -I kernels tests/delta_emu/race_controls.cpp
// Run:   race_controls FORM      (race_controls list: the forms, one a line, "FORM race" or "FORM ok")
#include <string>

#include "common.cuh"
#include "hopper.cuh"
#include "race_controls.cuh"

static float out[256];
alignas(16) static float src[64];   // what the copies bring (16-byte aligned, as a bulk copy's source must be)

int main(int argc, char** argv) {
    if (argc != 2) { std::fprintf(stderr, "usage: race_controls FORM | list\n"); return 2; }
    const std::string want = argv[1];
    for (int i = 0; i < 64; ++i) src[i] = (float)i;
    int i = 0;
    for (const RaceForm& f : RACE_FORMS) {
        if (want == "list") std::printf("%s %s\n", f.name, f.race ? "race" : "ok");
        else if (want == f.name) {
            emu_launch(1, f.threads, f.smem, [i] { race_form(i, out, src); });
            double sum = 0;   // read back, so no read of the form is optimised away
            for (float x : out) sum += x;
            std::printf("%s %g\n", f.name, sum);
            return 0;
        }
        ++i;
    }
    if (want == "list") return 0;
    std::fprintf(stderr, "race_controls: no form %s (race_controls list names them)\n", argv[1]);
    return 2;
}
