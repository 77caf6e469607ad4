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
exceed L2 anyway at the default shape), beside 07 alone, the recurrence alone and both in sequence;
with 07 launched first too ("07 || recurrence"), and for each side-by-side form when each stream got
through (so a 07 that ran beside the recurrence tells itself from one that ran after it). A block of
07 fits beside a recurrence's only where the recurrence's shared memory leaves room (19 on bf16 inputs,
launched with its bf16 layout's size) and the SM keeps its largest shared-memory split: --carveout 100.
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
    ap.add_argument("--carveout", type=int, default=None,
                    help="preferred shared-memory carveout (percent) for both kernels: 100 keeps the SM's "
                         "largest shared-memory split, so a block of 07 can join a recurrence's")
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
            if args.carveout is not None:
                for p in (plan, side):
                    for kern in p.kernels.values():
                        kern.preferred_shared_memory_carveout = args.carveout
            plan.run()

            ends = {}   # side-by-side runs: when each kernel's stream got there (ms after the start)

            def timed(fn):
                ts, part = [], {}
                for _ in range(args.reps + 3):
                    ends.clear()
                    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                    e0.record(s1)
                    fn(e0)
                    e1.record(s1)
                    e1.synchronize()
                    ts.append(cp.cuda.get_elapsed_time(e0, e1))
                    for k_, e_ in ends.items():
                        part.setdefault(k_, []).append(cp.cuda.get_elapsed_time(e0, e_))
                for k_, v_ in part.items():
                    print(f"  {k_} done at {np.median(v_[3:]):.4f} ms", flush=True)
                return float(np.median(ts[3:])), float(np.percentile(ts[3:], 90))

            def mark(name, stream):
                ev = cp.cuda.Event()
                ev.record(stream)
                ends[name] = ev

            def seq(_):
                with s1:
                    plan.run()

            def prep(_):
                with s1:
                    plan.run(stages=(1,))

            def state(_):
                with s1:
                    plan.run(stages=(2,))

            def side_by_side(e0, prep_first=False):   # prep_first: 07 launched first, the recurrence's blocks
                s2.wait_event(e0)                          # take SMs as 07's free them
                launches = [(s1, "recurrence", lambda: plan.run(stages=(2,))), (s2, "07", lambda: side.run(stages=(1,)))]
                for stream, name, launch in (launches[::-1] if prep_first else launches):
                    with stream:
                        launch()
                        mark(name, stream)
                e2 = cp.cuda.Event()
                e2.record(s2)
                s1.wait_event(e2)

            for name, fn in (("07 alone", prep), ("recurrence alone", state), ("07 then recurrence", seq),
                             ("recurrence || 07", side_by_side),
                             ("07 || recurrence", lambda e0: side_by_side(e0, prep_first=True))):
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
