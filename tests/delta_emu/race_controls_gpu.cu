// The race-check controls (race_controls.cuh) as GPU kernels, race_<form> one a form, for
// compute-sanitizer's racecheck (scripts/racecheck_controls.py): which forms it reports says which of
// its reports on the lab's kernels are hazards and which are its own limits. One block a launch;
// `out` takes 256 floats, `src` holds 64 (16-byte aligned).
#include "common.cuh"
#include "hopper.cuh"
#include "race_controls.cuh"

#define RACE_KERNEL(i, form) \
    extern "C" __global__ void __launch_bounds__(256) race_##form(float* out, const float* src) { race_form(i, out, src); }

RACE_KERNEL(0, handover_ok)
RACE_KERNEL(1, handover_raw)
RACE_KERNEL(2, handover_war)
RACE_KERNEL(3, ring_ok)
RACE_KERNEL(4, ring_war)
RACE_KERNEL(5, bulk_ok)
RACE_KERNEL(6, bulk_war)
RACE_KERNEL(7, bulk_raw)
RACE_KERNEL(8, cp_async_ok)
RACE_KERNEL(9, cp_async_raw)
RACE_KERNEL(10, cp_async_late)
RACE_KERNEL(11, wgmma_ok)
RACE_KERNEL(12, wgmma_war)
RACE_KERNEL(13, wgmma_late)
RACE_KERNEL(14, channel_ok)
RACE_KERNEL(15, channel_raw)
RACE_KERNEL(16, channel_cp_async)
RACE_KERNEL(17, warp_ok)
RACE_KERNEL(18, warp_shfl)
