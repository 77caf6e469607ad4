#!/usr/bin/env python3
"""GPU stress test of the two-kernel chunked KDA's determinism at one shape (not a recorded run).

    PYTHONPATH=lib python scripts/stress_delta.py [--impls tile diet] [--bf16-impls tile single]
                                                  [--reps 40] [--T 16384] [--out DIR]

The kernels are deterministic (no atomics, a fixed order of every sum), so two runs on the same inputs
must agree bit for bit; a difference is a race. Per impl and input precision:

1. 07 runs once; then ``--prep-reps`` more times into a poisoned workspace, each compared bit for bit
   with the first.
2. The recurrence runs ``--reps`` times over that first output of 07, o and the final state poisoned
   before every run, and each run is compared bit for bit with the first; every run's relative RMS
   error vs the float64 recurrence is kept. The runs cycle through four modes, to move the timing:
   the recurrence alone, with a memory-bound copy on another stream launched just after it, and the
   same two with 07 run again just before it (its output compared with the first too).
3. The elements of o that differ are mapped to (batch, head, chunk, value block), with the chunk's
   rows (tokens) and columns that differ as bit masks, so a race shows where it lands.
4. The first runs of the impls of one precision are compared with each other (the CPU model has
   19 reproduce 15, and 17, bit for bit).

Writes stress_runs_TAG.csv (a row a run, with its CUDA-event time) and stress_diffs_TAG.csv (a row a
differing chunk and value block; TAG: the defines, or "default") to --out (default $OUT or /tmp); prints
a summary; exits 1 if any run differed. Not a recorded run.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import pandas as pd

from attnlab.arrays import rel_error
from attnlab.delta import fast
from attnlab.delta import kernels as dk
from attnlab.delta.bench import device_inputs
from attnlab.delta.naive import kda_recurrent_fp64


def _xp(a):
    """The array module of ``a``: CuPy's for a device array, NumPy otherwise (and without CuPy)."""
    try:
        import cupy as cp
    except ImportError:
        return np
    return cp.get_array_module(a)


def bits(a):
    """The array's bit patterns (uint32 for fp32, uint16 for bf16 stored as int16)."""
    xp = _xp(a)
    return a.view(xp.uint16) if a.dtype == xp.int16 else a.view(xp.uint32)


def diff_map(o, o0, C: int, BV: int, cap: int = 2_000_000) -> pd.DataFrame:
    """The differing elements of o (B, T, H, V) against o0, grouped by (b, h, chunk, value block): how
    many, the largest absolute difference, which rows of the chunk (a bit a token) and which columns of
    the block (a bit a column). o and o0 are float32, or bf16 bit patterns stored as int16."""
    xp = _xp(o)
    host = getattr(xp, "asnumpy", np.asarray)
    idx = xp.nonzero(bits(o) != bits(o0))
    if int(idx[0].size) == 0:
        return pd.DataFrame()
    idx = tuple(x[:cap] for x in idx)
    b, t, h, v = (host(x) for x in idx)
    a, r = host(o[idx]), host(o0[idx])
    if a.dtype == np.int16:   # bf16 bits: widen by hand
        a, r = ((x.view(np.uint16).astype(np.uint32) << 16).view(np.float32) for x in (a, r))
    df = pd.DataFrame(dict(b=b, h=h, chunk=t // C, vblock=v // BV, row=t % C, col=v % BV,
                           absdiff=np.abs(a.astype(np.float64) - r.astype(np.float64))))
    g = df.groupby(["b", "h", "chunk", "vblock"])
    out = g.agg(n=("row", "size"), max_absdiff=("absdiff", "max")).reset_index()
    for name, col in (("rows", "row"), ("cols", "col")):
        masks = g[col].agg(lambda s: int(np.bitwise_or.reduce(np.left_shift(1, s.to_numpy().astype(np.int64)))))
        out[name] = [f"{m:#010x}" for m in masks.to_numpy()]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--impls", nargs="*", default=["tile", "diet"], help="fp32-input impls")
    ap.add_argument("--bf16-impls", nargs="*", default=["tile", "single"], help="bf16-input impls")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--prep-reps", type=int, default=10)
    ap.add_argument("--B", type=int, default=2)
    ap.add_argument("--H", type=int, default=16)
    ap.add_argument("--K", type=int, default=128)
    ap.add_argument("--T", type=int, default=16384)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--define", nargs="*", default=[], metavar="KEY=VAL",
                    help="probe-build defines of the recurrence (e.g. KDA_STAGE_RELEASE=0)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    args = ap.parse_args()
    import cupy as cp

    B, H, K, V, T = args.B, args.H, args.K, args.K, args.T
    defines = dict(kv.split("=", 1) for kv in args.define) or None
    _, d = device_inputs(B, T, H, K, V, seed=args.seed, init=True)
    ref_o, ref_s = kda_recurrent_fp64(**d, output_final_state=True)
    noise_src = cp.ones(1 << 28, dtype=cp.float32)   # 1 GiB: a copy of it keeps the memory system busy ~0.5 ms
    noise_dst = cp.empty_like(noise_src)
    side = cp.cuda.Stream(non_blocking=True)
    runs, diffs, firsts = [], [], {}
    cases = [("fp32", i) for i in args.impls] + [("bf16", i) for i in args.bf16_impls]
    tb = fast.bf16_inputs(d)
    for io, impl in cases:
        inputs = d if io == "fp32" else dict(tb, initial_state=d["initial_state"])
        plan = dk.prepare_tc(**inputs, output_final_state=True, impl=impl, defines=defines)
        plan.poison()
        plan.run(stages=(1,))
        ta0 = plan.ws["TA"].copy()
        prep_bad = 0
        for _ in range(args.prep_reps):
            plan.ws["TA"].fill(np.uint32(0x7FC07FC0))
            plan.run(stages=(1,))
            prep_bad += int(cp.count_nonzero(plan.ws["TA"] != ta0))
        plan.ws["TA"][...] = ta0          # in place: the tensor maps hold its address
        o0 = s0 = None
        for rep in range(args.reps):
            plan.o.fill(np.int16(0x7FC0) if plan.o.dtype == cp.int16 else np.nan)
            plan.final_state.fill(np.nan)
            cp.cuda.Device().synchronize()
            noisy, with_prep = rep % 2 == 1, rep % 4 >= 2
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record()
            plan.run(stages=(1, 2) if with_prep else (2,))
            e1.record()
            if noisy:
                with side:
                    noise_dst[...] = noise_src
            cp.cuda.Device().synchronize()
            o = plan.o.copy()
            s = plan.final_state.copy()
            of = o if io == "fp32" else cp.from_dlpack(plan.output().float().contiguous())
            if with_prep:
                prep_bad += int(cp.count_nonzero(plan.ws["TA"] != ta0))
            row = dict(io=io, impl=impl, defines=" ".join(args.define), rep=rep, noisy=noisy, with_prep=with_prep,
                       ms=cp.cuda.get_elapsed_time(e0, e1), prep_bits_differing=prep_bad,
                       rel_err_o=rel_error(of, ref_o), rel_err_state=rel_error(s, ref_s),
                       nan_o=int(cp.count_nonzero(cp.isnan(of))))
            if o0 is None:
                o0, s0 = o, s
                firsts[(io, impl)] = o
                row.update(o_bits_differing=0, state_bits_differing=0)
            else:
                row.update(o_bits_differing=int(cp.count_nonzero(bits(o) != bits(o0))),
                           state_bits_differing=int(cp.count_nonzero(bits(s) != bits(s0))))
                if row["o_bits_differing"]:
                    dm = diff_map(o, o0, dk.FUSED_CHUNK, plan.bv)
                    dm.insert(0, "rep", rep)
                    dm.insert(0, "impl", impl)
                    dm.insert(0, "io", io)
                    diffs.append(dm)
            runs.append(row)
            if row["o_bits_differing"] or rep % 10 == 0:
                print({k: (f"{v:.3e}" if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
        del plan
    for io in ("fp32", "bf16"):
        keys = [k for k in firsts if k[0] == io]
        for k in keys[1:]:
            n = int(cp.count_nonzero(bits(firsts[k]) != bits(firsts[keys[0]])))
            print(f"{io}: first o of {k[1]} vs {keys[0][1]}: {n} elements differ bit for bit", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rdf = pd.DataFrame(runs)
    tag = "_".join(args.define).replace("=", "") or "default"
    rdf.to_csv(out / f"stress_runs_{tag}.csv", index=False)
    ddf = pd.concat(diffs, ignore_index=True) if diffs else pd.DataFrame()
    ddf.to_csv(out / f"stress_diffs_{tag}.csv", index=False)
    summ = rdf.groupby(["io", "impl"]).agg(runs=("rep", "size"), runs_differing=("o_bits_differing", lambda s: int((s > 0).sum())),
                                           worst_rel_err_o=("rel_err_o", "max"), best_rel_err_o=("rel_err_o", "min"),
                                           worst_rel_err_state=("rel_err_state", "max"))
    summ["median_ms_alone"] = rdf[~rdf.noisy & ~rdf.with_prep].groupby(["io", "impl"])["ms"].median()
    print(summ.to_string())
    if len(ddf):
        print(ddf.groupby(["io", "impl"]).agg(chunks=("n", "size"), elements=("n", "sum")).to_string())
        print(ddf.head(40).to_string())
    return 1 if len(ddf) or (rdf.prep_bits_differing > 0).any() else 0   # a difference is a race: fail


if __name__ == "__main__":
    raise SystemExit(main())
