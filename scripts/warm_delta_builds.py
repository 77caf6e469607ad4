#!/usr/bin/env python3
"""Compile, many at a time, the delta kernel builds notebook 13 loads, into the lab's compile cache.

    PYTHONPATH=lib python scripts/warm_delta_builds.py [--workers 14]

A fresh device machine compiles every build the first time a plan asks for it, one after another
(NVRTC, seconds each for the sm_90a recurrences, and an edited shared header invalidates all of them):
notebook 13 then spends minutes compiling before it measures. This prepares a plan for every build
notebook 13's full profile uses (each impl at K = 64 and 128 and both value-block widths on fp32
inputs, the bf16-I/O impls, the probe builds and the clock-stamp builds at the target shape) on tiny
inputs, in worker processes: each build lands in the persistent cache (attnlab.compile, written
atomically), and the notebook then loads it. Times nothing, records nothing.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

from attnlab.delta import fast
from attnlab.delta import kernels as dk


def builds() -> list[tuple]:
    """(impl, K, bv or None, io, defines) of every recurrence build notebook 13's full profile prepares."""
    out = []
    for _, impl, _ in fast.TC_IMPLS + fast.FP32_IMAGE_IMPLS:   # check_correctness: K = V in {64, 128}, both widths (16: one)
        for K in (64, 128):
            for bv in ((None,) if impl in dk.FIXED_BV else dk.SUPPORTED_BV):
                out.append((impl, K, bv, "fp32", None))
    for _, impl, _ in fast.BF16_IO_IMPLS:   # the target shape's default width
        out.append((impl, 128, None, "bf16", None))
    for label, impl, defines in fast.PROBE_BUILDS:
        out.append((impl, 128, None, fast.probe_io(label, impl), defines or None))
    for impl in (fast.BEST_IMPL, *fast.WG_STAMP_IMPLS):
        out.append((impl, 128, None, "bf16" if impl in dk.BF16_ONLY_IMPLS else "fp32",
                    {"KDA_PROBE": 3, "KDA_NSTAMP": fast.STAMP_CHUNKS}))
    return list(dict.fromkeys((i, K, bv, io, tuple(d.items()) if d else None) for i, K, bv, io, d in out))   # keys in the order
                                                                                 # the notebook passes them (its build options)


def build(task) -> str:
    impl, K, bv, io, defines = task
    from attnlab.delta.bench import device_inputs

    B, H = 2, 16   # the target shape's B and H: the default width (bv None) is the one the notebook gets
    _, d = device_inputs(B, 64, H, K, K, seed=0)
    x = d if io == "fp32" else fast.bf16_inputs(d)
    t0 = time.perf_counter()
    dk.prepare_tc(**x, check_gate=False, impl=impl, bv=bv, defines=dict(defines) if defines else None)
    return f"{impl} K={K} bv={bv} {io} {dict(defines) if defines else ''}: {time.perf_counter() - t0:.1f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=14)
    a = ap.parse_args()
    tasks = builds()
    t0 = time.perf_counter()
    # the token-parallel kernels (07, 21) first, here: every worker's plan loads them from the cache
    for task in [("lean", 64, None, "fp32", None), ("lean", 128, None, "fp32", None), ("wgmma", 64, None, "fp32", None),
                 ("wgmma", 128, None, "fp32", None), ("tile", 128, None, "bf16", None), ("lean", 128, None, "bf16", None),
                 ("pre", 128, None, "bf16", None), ("pre", 128, None, "fp32", None)]:
        print(build(task), flush=True)
    with mp.get_context("spawn").Pool(a.workers) as pool:
        for line in pool.imap_unordered(build, tasks):
            print(line, flush=True)
    print(f"{len(tasks)} builds in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
