// Sanitizer builds of the CPU execution models (tests/test_ladder_emu.py): force-included after
// the model's header, so every launch poisons the part of the model's 1 MiB `smem` array that the
// launch did not ask for. AddressSanitizer then reports a read or write past the dynamic shared
// memory a kernel was given, as it reports one past a global-memory vector.
#pragma once
#include <sanitizer/asan_interface.h>

#include <cstddef>
#include <functional>

inline void emu_launch_smem_guarded(unsigned grid, unsigned threads, std::size_t smem_bytes,
                                    const std::function<void()>& kernel) {
    // ASan tracks memory in 8-byte granules: the guard starts at the first whole granule past
    // the launch's bytes (a 4-byte overrun into a half-used granule goes unseen).
    const std::size_t lo = smem_bytes < sizeof(smem) ? (smem_bytes + 7) & ~std::size_t(7) : sizeof(smem);
    ASAN_POISON_MEMORY_REGION(reinterpret_cast<char*>(smem) + lo, sizeof(smem) - lo);
    emu_launch(grid, threads, smem_bytes, kernel);
    ASAN_UNPOISON_MEMORY_REGION(smem, sizeof(smem));
}
#define emu_launch emu_launch_smem_guarded

// The same for 3-D launches (tests/delta_emu/harness_06.cpp).
inline void emu_launch3_smem_guarded(dim3 grid, unsigned threads, std::size_t smem_bytes,
                                     const std::function<void()>& kernel) {
    const std::size_t lo = smem_bytes < sizeof(smem) ? (smem_bytes + 7) & ~std::size_t(7) : sizeof(smem);
    ASAN_POISON_MEMORY_REGION(reinterpret_cast<char*>(smem) + lo, sizeof(smem) - lo);
    emu_launch3(grid, threads, smem_bytes, kernel);
    ASAN_UNPOISON_MEMORY_REGION(smem, sizeof(smem));
}
#define emu_launch3 emu_launch3_smem_guarded
