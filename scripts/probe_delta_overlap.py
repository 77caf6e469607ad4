#!/usr/bin/env python3
"""GPU probe: what 07 and a recurrence cost when they share the GPU (not a recorded run; timing only).

    PYTHONPATH=lib python scripts/probe_delta_overlap.py [--impls tile diet] [--bf16-impls tile single] [--T 16384]

The two-kernel form runs 07 (every chunk of every head at once) and then the recurrence (one block per
SM, a chunk after another). If the recurrence could start while 07 still runs (07's blocks beside the
recurrence's on the same SMs, the recurrence waiting for each chunk's T / A2), the pair would take
about the longer of the two as they run side by side. This probe measures that side-by-side time with
no waiting at all: the recurrence is launched first on one stream (it takes its SMs), 07 right after on
another (it gets what the recurrence leaves: shared memory, registers, threads), into a workspace of
its own, so the recurrence reads the previous run's T / A2 (the right values: the same inputs), and
nothing orders them. Medians of CUDA-event times over --reps, no L2 flush (both kernels' inputs
exceed L2 anyway at the default shape), beside 07 alone, the recurrence alone and both in sequence.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import pandas as pd

from attnlab.delta import fast
from attnlab.delta import kernels as dk
from attnlab.delta.bench import device_inputs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--impls", nargs="*", default=["tile", "diet"])
    ap.add_argument("--bf16-impls", nargs="*", default=["tile", "single"])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--B", type=int, default=2)
    ap.add_argument("--H", type=int, default=16)
    ap.add_argument("--K", type=int, default=128)
    ap.add_argument("--T", type=int, nargs="*", default=[16384])
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    args = ap.parse_args()
    import cupy as cp

    rows = []
    s1 = cp.cuda.Stream(non_blocking=True)
    s2 = cp.cuda.Stream(non_blocking=True)
    for T in args.T:
        B, H, K, V = args.B, args.H, args.K, args.K
        _, d = device_inputs(B, T, H, K, V, seed=0, init=True)
        tb = fast.bf16_inputs(d)
        for io, impl in [("fp32", i) for i in args.impls] + [("bf16", i) for i in args.bf16_impls]:
            inputs = d if io == "fp32" else dict(tb, initial_state=d["initial_state"])
            plan = dk.prepare_tc(**inputs, output_final_state=True, impl=impl)
            side = dk.prepare_tc(**inputs, impl=impl)   # 07 into a workspace of its own
            plan.run()

            def timed(fn):
                ts = []
                for _ in range(args.reps + 3):
                    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                    e0.record(s1)
                    fn(e0)
                    e1.record(s1)
                    e1.synchronize()
                    ts.append(cp.cuda.get_elapsed_time(e0, e1))
                return float(np.median(ts[3:])), float(np.percentile(ts[3:], 90))

            def seq(_):
                with s1:
                    plan.run()

            def prep(_):
                with s1:
                    plan.run(stages=(1,))

            def state(_):
                with s1:
                    plan.run(stages=(2,))

            def overlap(e0):
                s2.wait_event(e0)
                with s1:
                    plan.run(stages=(2,))
                with s2:
                    side.run(stages=(1,))
                e2 = cp.cuda.Event()
                e2.record(s2)
                s1.wait_event(e2)

            for name, fn in (("07 alone", prep), ("recurrence alone", state), ("07 then recurrence", seq),
                             ("recurrence || 07", overlap)):
                med, p90 = timed(fn)
                rows.append(dict(T=T, io=io, impl=impl, what=name, median_ms=med, p90_ms=p90))
                print(rows[-1], flush=True)
            del plan, side
    df = pd.DataFrame(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "overlap.csv", index=False)
    print(df.pivot_table(index=["T", "io", "impl"], columns="what", values="median_ms").to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
