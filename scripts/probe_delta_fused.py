#!/usr/bin/env python3
"""Quick GPU probe of the 3xBF16 KDA kernels (06; 07 -> 08; 07 -> 09) before notebook 13 records them.

    PYTHONPATH=lib python scripts/probe_delta_fused.py [--T 4096 16384] [--out DIR] [--no-fla]
                                                       [--skip-correctness] [--budget S]

Correctness of every implementation (both value-block widths) on small edge shapes and at the
target shape against a float64 reference, then latency at B=2, H=16, K=V=128 beside the three-kernel
chunked form (02 -> 03 -> 05), the recurrent kernel and fla's chunk_kda (bf16 and fp32 inputs), all
timed in this one run. Prints tables and writes them as CSV to --out (default $OUT or /tmp). Not a
recorded run: notebook 13 records the figures the lab quotes.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pandas as pd

from attnlab.arrays import rel_error
from attnlab.delta import bench as db
from attnlab.delta import kernels as dk
from attnlab.delta.naive import kda_recurrent_fp64


def correctness(target_T: int) -> pd.DataFrame:
    rows = []
    cases = [dict(B=2, T=T, H=3, K=K, V=K, gate=gate, init=init)
             for K in (64, 128) for T in (17, 333)
             for gate, init in (("logsigmoid", True), ("const", True), ("mixed", False), ("strong", True))]
    cases.append(dict(B=2, T=target_T, H=16, K=128, V=128, gate="logsigmoid", init=True))
    for i, c in enumerate(cases):
        _, d = db.device_inputs(c["B"], c["T"], c["H"], c["K"], c["V"], seed=100 + i, gate=c["gate"], init=c["init"])
        ref_o, ref_s = kda_recurrent_fp64(**d, output_final_state=True)
        for impl in [i for i in dk.SUPPORTED_TC_IMPL if i not in dk.BF16_ONLY_IMPLS]:
            for bv in dk.SUPPORTED_BV:
                if (impl in dk.FIXED_BV and bv != dk.FIXED_BV[impl]) or (impl in dk.PAIR_IMPLS and c["K"] != dk.PAIR_K):
                    continue   # 16, 23, 27: their own width; 28: K = 128 only
                plan = dk.prepare_tc(**d, output_final_state=True, bv=bv, check_gate=False, impl=impl)
                plan.poison()
                o, s = plan.run()
                rows.append(dict(**c, impl=impl, bv=bv, rel_err_o=rel_error(o, ref_o), rel_err_state=rel_error(s, ref_s)))
                del plan
    return pd.DataFrame(rows)


def latency(T_list, budget: float, with_fla: bool) -> pd.DataFrame:
    B, H, K, V = 2, 16, 128, 128
    rows = []
    chunk_kda = db.fla_functions()[0] if with_fla else None
    for T in T_list:
        _, d = db.device_inputs(B, T, H, K, V, seed=T)
        for bv in (32,):
            p = dk.prepare_tc(**d, bv=bv, check_gate=False, impl="fused")
            rows.append(db._timed(p.run, budget, implementation="fused (06)", config=f"BV={bv}", T=T))
            del p
            p = dk.prepare_tc(**d, bv=bv, check_gate=False, impl="ws")
            rows.append(db._timed(p.run, budget, implementation="ws (07+09)", config=f"BV={bv}", T=T))
            rows.append(db._timed(lambda: p.run(stages=(2,)), budget, implementation="ws: 09 state", config=f"BV={bv}", T=T))
            del p
            p = dk.prepare_tc(**d, bv=bv, check_gate=False, impl="split")
            rows.append(db._timed(p.run, budget, implementation="split (07+08)", config=f"BV={bv}", T=T))
            rows.append(db._timed(lambda: p.run(stages=(1,)), budget, implementation="split: 07 prep", config=f"BV={bv}", T=T))
            rows.append(db._timed(lambda: p.run(stages=(2,)), budget, implementation="split: 08 state", config=f"BV={bv}", T=T))
            del p
        p = dk.prepare_chunk(**d, check_gate=False)
        rows.append(db._timed(p.run, budget, implementation="chunked (02,03,05)", config=f"BV={p.bv}", T=T))
        del p
        p = dk.prepare_recurrent(**d, check_gate=False)
        rows.append(db._timed(p.run, budget, implementation="recurrent (01)", config="", T=T))
        del p
        if chunk_kda is not None:
            import torch

            from attnlab.delta.fast import fla_bf16_call

            rows.append(db._timed(fla_bf16_call(d, chunk_kda), budget, implementation="fla chunk_kda bf16", config="", T=T))
            t = {n: torch.from_dlpack(a).to(torch.float32).contiguous() for n, a in d.items()}   # fp32 inputs too

            def call(t=t):
                with torch.no_grad():
                    return chunk_kda(t["q"], t["k"], t["v"], t["g"], t["beta"])
            rows.append(db._timed(call, budget, implementation="fla chunk_kda fp32", config="", T=T))
            del t
    df = pd.DataFrame(rows)
    return df[["implementation", "config", "T", "median_ms", "rel_iqr"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--T", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--budget", type=float, default=0.3)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--skip-correctness", action="store_true")
    a = ap.parse_args()
    out = Path(a.out)
    pd.set_option("display.width", 200)
    if not a.skip_correctness:
        c = correctness(max(a.T))
        c.to_csv(out / "fused_correctness.csv", index=False)
        print(c.to_string(), flush=True)
        print("worst rel err o:", c["rel_err_o"].max(), " state:", c["rel_err_state"].max(), flush=True)
    lat = latency(a.T, a.budget, not a.no_fla)
    lat.to_csv(out / "fused_latency.csv", index=False)
    print(lat.to_string(), flush=True)


if __name__ == "__main__":
    main()
