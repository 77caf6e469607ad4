#!/usr/bin/env python3
"""Quick GPU probe of the chunked KDA's state passes, to choose the defaults notebook 07 records.

    PYTHONPATH=lib python scripts/probe_delta_state.py [--T 16384] [--chunks 16 32 64] [--out DIR]

At B=2, H=16, K=V=128 (issue 5's target shape): the chunk sweep (every chunk size, value block and
state pass; each stage alone and all three), the recurrent kernel, fla's chunk_kda when installed,
and the error of each state pass vs a float64 reference. Prints tables and writes them as CSV to
--out (default $OUT or /tmp). Not a recorded run: notebook 07 records the figures the lab quotes.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pandas as pd

from attnlab.delta import bench as db


def solve_columns_per_thread(B, H, K, V, T, chunks, budget) -> pd.DataFrame:
    """Stage 2 alone with 1 and 2 columns per thread (the launcher's choice patched per run)."""
    from attnlab.delta import kernels as dk

    _, d = db.device_inputs(B, T, H, K, V, seed=0)
    rows, original = [], dk.solve_cols_per_thread
    try:
        for C in chunks:
            for cpt in (1, 2):
                dk.solve_cols_per_thread = lambda C, cpt=cpt: cpt
                plan = dk.prepare_chunk(**d, chunk_size=C, check_gate=False)
                plan.run()
                rows.append(db._timed(lambda p=plan: p.run(stages=(2,)), budget, chunk_size=C, cpt=cpt))
                del plan
    finally:
        dk.solve_cols_per_thread = original
    return pd.DataFrame(rows)[["chunk_size", "cpt", "median_ms", "rel_iqr"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, default=16384)
    ap.add_argument("--chunks", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument("--budget", type=float, default=0.2)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")))
    ap.add_argument("--no-latency", action="store_true", help="skip the recurrent and fla timings")
    ap.add_argument("--solve-cpt", action="store_true",
                    help="also time 03_chunk_solve with 1 and 2 columns per thread at each chunk size")
    a = ap.parse_args()
    B, H, K, V = 2, 16, 128, 128
    pd.set_option("display.width", 200)

    sweep = db.chunk_sweep(B, H, K, V, a.T, chunk_sizes=a.chunks, budget_s=a.budget)
    print(sweep.pivot_table(index=["chunk_size", "bv", "state"], columns="stage", values="median_ms").round(3))
    latency = pd.DataFrame()
    if not a.no_latency:
        latency = db.time_latency(B, H, K, V, [a.T], budget_s=a.budget)
        print(latency[["implementation", "dtype", "config", "median_ms", "rel_iqr"]].round(4))
    if a.solve_cpt:
        print(solve_columns_per_thread(B, H, K, V, a.T, a.chunks, a.budget))
    best = sweep[sweep["stage"] == "all"].sort_values("median_ms").iloc[0]
    accuracy = db.target_accuracy(B, H, K, V, a.T, chunk_size=int(best["chunk_size"]), with_fla=False)
    print(accuracy[["implementation", "rel_err_o"]])
    a.out.mkdir(parents=True, exist_ok=True)
    for name, df in (("sweep", sweep), ("latency", latency), ("accuracy", accuracy)):
        if df.empty:
            continue
        df.to_csv(a.out / f"probe_{name}.csv", index=False)


if __name__ == "__main__":
    main()
