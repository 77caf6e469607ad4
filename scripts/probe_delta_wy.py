#!/usr/bin/env python3
"""GPU probe: what the WY form's chain would leave of 24's chunk (KDA_NO_P2), before building it.

    PYTHONPATH=lib python scripts/probe_delta_wy.py [--T 16384] [--B 2] [--H 16] [--check-T 333] [--budget 0.3]
        [--out DIR] [--no-fla] [--stamps 4096]

24's chain runs three products a chunk, one after another: P1 ([Kbg; Qg] S), P2 ([T; A2] X) and P4 (2^G_L S + Kd^T V').
In the WY form of the chunk (lib/attnlab/delta/chunk.py; fla's w and u), V' = U - W S with W = T Kbg and U = T beta v
made off the chain, so P2 leaves it: P1 gives V' directly, then P4. The probe build KDA_NO_P2
(kernels/delta/wgmma_recurrence.cuh) runs 24 (and 22 on fp32 images) that way with X in V''s place and o's product
issued behind P4, results meaningless but every product issued (tests/test_emu_delta_tc.py holds it to its own float64
model). It makes no W and no U, so 07 + its time bounds what the WY form can reach.

At B=2, H=16, K=V=128, one run: 07 alone (the form 24 reads), fla's chunk_kda in bf16 (eager and as a CUDA graph),
the recurrences of fast.WY_LABELS alone (24 and 22 on fp32 images as built, with the chain alone, and in the WY
form's chain; 25's probe builds), and 25 itself (kernels/delta/25_chunk_state_wy.cu, the WY form: its call, 07 in its Aqk form alone and
25 alone; its o against 24's at the target shape and against the float64 recurrence at B=2, T=333, H=3), then the
generated lines of fast.describe_probes and fast.describe_wy_probe and 25's against the target. Writes probe_wy.csv to
--out (default $OUT or /tmp), a temporary file then a rename. With --stamps T: 24's and 25's clock stamps at T (notebook
13's phase table for the two) and 25's with KDA_WY_NO_W and KDA_WY_WLOOP=2, to phases_wy.csv. Not a recorded run: notebook 13 records what the lab
quotes (its probe table holds the same builds, fast.PROBE_BUILDS).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import pandas as pd

from attnlab.delta import fast
from attnlab.delta import kernels as dk
from attnlab.arrays import rel_error
from attnlab.delta.bench import _timed, device_inputs, fla_functions
from attnlab.delta.naive import kda_recurrent_fp64
from attnlab.results import write_csv_atomic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, default=16384)
    ap.add_argument("--B", type=int, default=2)
    ap.add_argument("--H", type=int, default=16)
    ap.add_argument("--check-T", type=int, default=333, help="T of 25's float64 check (B=2, H=3)")
    ap.add_argument("--budget", type=float, default=0.3)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--stamps", type=int, default=0, metavar="T",
                    help="also 24's and 25's clock stamps (and 25's without W's product, and with W a token at a time) at B, H "
                         "and this T; "
                         "phases_wy.csv beside probe_wy.csv")
    a = ap.parse_args()
    B, H, K, V, T = a.B, a.H, 128, 128, a.T
    out = Path(a.out) / "probe_wy.csv"
    out.parent.mkdir(parents=True, exist_ok=True)

    probes = fast.probe_latency(B, H, K, V, T, budget_s=a.budget, labels=fast.WY_LABELS)
    rows = probes.to_dict("records")
    write_csv_atomic(pd.DataFrame(rows), out)   # what is timed so far survives an interrupted call
    _, d = device_inputs(B, T, H, K, V, seed=T)
    p = dk.prepare_tc(**d, check_gate=False, impl="kdreg")
    rows.append(_timed(lambda: p.run(stages=(1,)), a.budget, implementation="07 alone (24's form)", dtype="fp32", T=T,
                       config=f"C=32 BV={p.bv}", stage="07"))
    prep = rows[-1]["median_ms"]
    o24 = p.run()[0].get()
    del p
    # 25, the WY form itself (07 in its Aqk form): the call, each kernel alone, and its o against 24's (both
    # fp32-accurate: they differ by rounding) and, on a small case, against the float64 recurrence
    p = dk.prepare_tc(**d, check_gate=False, impl="wy")
    p.poison()
    err = dict(rel_o_vs_24=rel_error(p.run()[0].get(), o24))
    for st, stage in (((1, 2), "all"), ((1,), "07"), ((2,), "25")):
        rows.append(_timed(lambda st=st: p.run(stages=st), a.budget, implementation="07+25", dtype="fp32", T=T,
                           config=f"C=32 BV={p.bv}", stage=stage, **err))
    del p
    x, ds = device_inputs(2, a.check_T, 3, K, V, seed=1, init=True)
    ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
    o, s = dk.prepare_tc(**ds, output_final_state=True, check_gate=False, impl="wy").run()
    print(f"25 at B=2, T={a.check_T}, H=3: rel error o {rel_error(o.get(), ref_o):.2e}, state {rel_error(s.get(), ref_s):.2e}; "
          f"at the target shape its o is {err['rel_o_vs_24']:.2e} from 24's")
    fla = float("nan")
    chunk_kda, _, _ = fla_functions()
    if chunk_kda is not None and not a.no_fla:
        call = fast.fla_bf16_call(d, chunk_kda)
        rows.append(_timed(call, a.budget, implementation=fast.FLA, dtype="bf16", T=T, config="default", stage="all"))
        rows.append(_timed(fast._graphed(call), a.budget, implementation=fast.FLA_GRAPH, dtype="bf16", T=T,
                           config="default", stage="all"))
        fla = min(rows[-1]["median_ms"], rows[-2]["median_ms"])
    df = pd.DataFrame(rows)
    write_csv_atomic(df, out)
    print(df[[c for c in ("implementation", "dtype", "T", "median_ms", "rel_iqr") if c in df]].to_string())
    lines = fast.describe_probes(probes) + fast.describe_wy_probe(probes, prep, fla)
    t25 = df[(df["implementation"] == "07+25") & (df["stage"] == "all")]["median_ms"]
    if len(t25) and np.isfinite(fla):
        allow = fla / 1.9
        lines.append(f"- 07+25 (the WY form): {t25.iloc[0]:.3f} ms; 1.9x fla's {fla:.3f} ms allows {allow:.3f} ms: "
                     + ("met." if t25.iloc[0] <= allow else f"{t25.iloc[0] - allow:.3f} ms past it."))
    print("\n".join(lines))
    if not np.isfinite(fla):
        print("fla not timed: no target line")
    if a.stamps:   # where 25's chunk goes, beside 24's: notebook 13's phase table for the two, and the W probe's
        ph = fast.wg_phase_cycles(B, H, K, V, a.stamps, impls=("kdreg", "wy"))
        ph = pd.concat([ph] + [fast.phase_cycles(B, H, K, V, a.stamps, impl="wy", defines={m: x})
                               .assign(implementation=f"wy, {m}={x}") for m, x in (("KDA_WY_NO_W", 1), ("KDA_WY_WLOOP", 2))],
                       ignore_index=True)
        write_csv_atomic(ph, out.with_name("phases_wy.csv"))
        for impl, g in ph.groupby("implementation", sort=False):
            print(f"{impl} (T={a.stamps}):")
            print(fast.phase_summary(g.drop(columns="implementation")).to_string(index=False))
        print("\n".join(fast.describe_wg_phases(ph)))


if __name__ == "__main__":
    main()
