#!/usr/bin/env python3
"""GPU probe of 21 -> 22 (``impl="pre"``) before notebook 13 records it.

    PYTHONPATH=lib python scripts/probe_delta_pre.py [--io bf16|fp32] [--T 4096 16384] [--bv 16 32] [--out DIR] [--no-fla]

At B=2, H=16, K=V=128 with bf16 (or fp32) inputs: 21 -> 22 at each value-block width (the whole call, side by side
where the launcher runs them so and one after the other, 21 alone, 22 alone; --prep-blocks: 21 alone at
most N blocks per SM, as beside 22), 07 -> 20 (fp32: 07 -> 19) and fla's chunk_kda (bf16) beside them in this one
run, and 22's o and final state against 07 -> 20's / 19's (the same products on operands rounded alike: bf16-level
differences at most on bf16 inputs, fp32-level on fp32; the float64 checks are tests/test_delta_kernels.py's GPU
tests). Writes probe_pre_<io>.csv to --out (default $OUT or /tmp). Not a recorded run: notebook 13 records what the lab quotes.
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
from attnlab.delta.bench import _timed, device_inputs, fla_functions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--bv", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--io", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--budget", type=float, default=0.3)
    ap.add_argument("--prep-blocks", type=int, nargs="*", default=[],
                    help="also time 21 alone with its shared memory padded to at most N blocks per SM")
    a = ap.parse_args()
    B, H, K, V = 2, 16, 128, 128
    rows = []
    chunk_kda, _, _ = fla_functions()
    for T in a.T:
        _, d = device_inputs(B, T, H, K, V, seed=T, init=True)
        tb = fast.bf16_inputs(d) if a.io == "bf16" else {n: d[n] for n in ("q", "k", "v", "g", "beta")}
        h0 = d["initial_state"]
        host = (lambda x: x.float().cpu().numpy()) if a.io == "bf16" else (lambda x: x.get())
        ref_impl, ref_step = ("wide", "20") if a.io == "bf16" else ("tile", "19")
        ref = dk.prepare_tc(**tb, initial_state=h0, output_final_state=True, impl=ref_impl)
        o20, s20 = ref.run()
        o20, s20 = host(o20), s20.get()
        rows.append(_timed(ref.run, a.budget, implementation=f"07+{ref_step} {a.io}", T=T, bv=ref.bv, stage="all"))
        rows.append(_timed(lambda: ref.run(stages=(1,)), a.budget, implementation=f"07+{ref_step} {a.io}", T=T, bv=ref.bv,
                           stage="07"))
        rows.append(_timed(lambda: ref.run(stages=(2,)), a.budget, implementation=f"07+{ref_step} {a.io}", T=T, bv=ref.bv,
                           stage=ref_step))
        del ref
        for bv in a.bv:
            p = dk.prepare_tc(**tb, initial_state=h0, output_final_state=True, impl="pre", bv=bv)
            p.poison()
            o, s = p.run()
            o, s = host(o), s.get()
            err = dict(rel_o_vs_20=rel_error(o, o20), rel_state_vs_20=rel_error(s, s20), finite=bool(np.isfinite(o).all()))
            print(f"T={T} bv={bv}: {err}", flush=True)
            for st, label in (((1, 2), "all"), ((1,), "21"), ((2,), "22")):
                rows.append(_timed(lambda p=p, st=st: p.run(stages=st), a.budget, implementation=f"21+22 {a.io}", T=T, bv=bv,
                                   stage=label, overlap=p.overlap, **err))
            if a.prep_blocks:   # 21 alone with its shared memory padded so that at most N blocks share an SM (beside
                cfg = p.launch_configs()["prep"]   # a block of 22, two fit): how its residency sets its time
                for nb in a.prep_blocks:
                    smem = max(cfg["smem"], (228 * 1024) // (nb + 1) - 1024 + 16)
                    p.kernels["prep"].max_dynamic_shared_size_bytes = smem
                    args = (p.arrays["q"], p.arrays["k"], p.arrays["g"], p.arrays["beta"], p.ws["TA"], p.ws["OPS"], p.ws["READY"], np.int32(0),
                            np.int32(T), np.int32(H), p.scale)
                    rows.append(_timed(lambda smem=smem, args=args: p.kernels["prep"](cfg["grid"], cfg["block"], args,
                                                                                       shared_mem=smem),
                                       a.budget, implementation=f"21 alone, at most {nb} blocks per SM", T=T, bv=bv,
                                       stage="21"))
            if p.overlap:   # and one after the other, on one stream
                p.overlap = False
                rows.append(_timed(p.run, a.budget, implementation=f"21+22 {a.io} one after the other", T=T, bv=bv,
                                   stage="all"))
            del p
        if chunk_kda is not None and not a.no_fla:   # on the bf16 copies of d (tb's, on bf16 I/O)
            rows.append(_timed(fast.fla_bf16_call(d, chunk_kda), a.budget, implementation="fla chunk_kda bf16", T=T, bv=0,
                               stage="all"))
        del tb, d
    df = pd.DataFrame(rows)
    cols = [c for c in ("implementation", "T", "bv", "stage", "median_ms", "rel_iqr", "rel_o_vs_20", "rel_state_vs_20")
            if c in df]
    print(df[cols].to_string())
    Path(a.out).mkdir(parents=True, exist_ok=True)
    df.to_csv(Path(a.out) / f"probe_pre_{a.io}.csv", index=False)


if __name__ == "__main__":
    main()
