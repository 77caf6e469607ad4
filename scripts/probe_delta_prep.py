#!/usr/bin/env python3
"""GPU probe: 07 (the pair products and the inverse) in its probe builds against the recorded build.

    PYTHONPATH=lib python scripts/probe_delta_prep.py [--T 4096 16384] [--rounds 2] [--out DIR] [--io fp32 bf16]
        [--form KDA_PREP_INV=1 --form KDA_PREP_INV=1,KDA_PREP_LEAN=1 ...] [--impl kdreg | late]

Nsight Compute's per-instruction view of 07 (scripts/ncu_source.py delta:kdreg:4096:prep, not recorded) put about a
quarter of its issued instructions before its first barrier, most of them 64-bit address arithmetic and the
branches of the per-row bounds checks around 24 loads a thread, and about a sixth of its warps' stall samples at the
barrier behind warp 0's inverse. KDA_PREP_LEAN steps one offset a row with no branch (rows past T re-read the last
row and are zeroed) and writes the zero blocks as zeros in the copy out; on 07 without A2 (not 24's: 24 reads A2 = Aqk
T) it also has warps 1-7 store Aqk's words while warp 0 inverts. Same arithmetic: its outputs are the recorded build's
bit for bit on the CPU model (tests/test_emu_delta_tc.py); on the GPU ptxas may fuse a product and a sum differently in
the two builds, so o and the final state of 07 -> 24 are compared here and reported equal or not.
The same holds for the probe builds that --form names (default: KDA_PREP_LEAN=1): KDA_PREP_INV puts the inverse on
every warp (step 29's form: the barrier behind warp 0's inverse held a fifth of 07's stall samples); 07_chunk_prep_tc.cu
says what each does. --impl late runs the same builds of 29 (07 with the inverse on every warp) before 30 in place of
07 before 24.
What did not help (KDA_PREP_VEC, a probe build measured at commit 82d1fe2 and since removed so that 07's and 29's
recorded builds stay as they were: with it ptxas allocated their registers differently): four channels a thread, each
row's q, k, g as one 16-byte load and each operand row's words as 8-byte stores, the sums in 07's order (its words 07's
bit for bit). On an H100 (--impl late --form KDA_PREP_VEC=1, not recorded) 29 ran 3 to 5 % slower with it on fp32
inputs at T = 4096 and 16384 and no faster on bf16 ones; Nsight Compute's source view (scripts/ncu_source.py
delta:late:16384:prep:KDA_PREP_VEC=1) counted 3 % fewer instructions a warp and 9 % more stall samples, more of them
short-scoreboard (the row groups' sums read from shared memory, 16 bytes at a time, in a loop kept rolled: unrolled, it
spilled) and at barriers.

At B=2, H=16, K=V=128, fp32 and bf16 inputs, each T: 07 alone and 07 -> 24 (or 29 and 29 -> 30), recorded and probe
builds in turn, --rounds times (drift shows as a difference between rounds). Writes probe_prep.csv to --out (default
$OUT or /tmp) after each case (a temporary file, then a rename). Not a recorded run: notebook 13 records what the lab
quotes.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import pandas as pd

from attnlab.results import write_csv_atomic
from attnlab.delta import fast
from attnlab.delta import kernels as dk
from attnlab.delta.bench import _timed, device_inputs

#: (form, 07's defines): the recorded build first, then the probe builds (--form replaces the default's)
FORMS = (("recorded", None), ("KDA_PREP_LEAN=1", {"KDA_PREP_LEAN": 1}))


def parse_form(text: str) -> tuple[str, dict[str, int]]:
    """'KDA_PREP_INV=1,KDA_PREP_LEAN=1' -> (the text, its defines)."""
    try:
        return text, {kv.split("=")[0]: int(kv.split("=")[1]) for kv in text.split(",")}
    except (IndexError, ValueError):
        raise SystemExit(f"--form {text!r}: expected NAME=N[,NAME=N ...]") from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--T", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--budget", type=float, default=0.3, help="seconds of timing per entry")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--form", action="append", default=[],
                    help="a probe build's defines, NAME=N[,NAME=N ...] (repeatable; default: KDA_PREP_LEAN=1)")
    ap.add_argument("--io", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    ap.add_argument("--impl", default="kdreg", choices=["kdreg", "late"], help="07 -> 24 (kdreg) or 29 -> 30 (late)")
    a = ap.parse_args()
    forms = ((FORMS[0], *map(parse_form, a.form)) if a.form else FORMS)
    label, prep = next((lab, steps[0]) for lab, impl, steps in fast.TC_IMPLS if impl == a.impl)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    B, H, K, V = 2, 16, 128, 128
    rows = []
    for T in a.T:
        _, d = device_inputs(B, T, H, K, V, seed=T, init=True)
        for io in a.io:
            x = fast.bf16_inputs(d) if io == "bf16" else {n: d[n] for n in ("q", "k", "v", "g", "beta")}
            host = (lambda y: y.float().cpu().numpy()) if io == "bf16" else (lambda y: y.get())
            plans, ref = {}, None
            for form, pd_ in forms:
                p = dk.prepare_tc(**x, initial_state=d["initial_state"], output_final_state=True, impl=a.impl,
                                  prep_defines=pd_)
                p.poison()
                o, s = p.run()
                o, s = host(o), s.get()
                ref = ref or (o, s)
                same = bool(np.array_equal(o, ref[0]) and np.array_equal(s, ref[1]))
                print(f"T={T} {io} {form}: o and final state {'equal to' if same else 'DIFFER from'} the recorded build's",
                      flush=True)
                plans[form] = (p, same)
            for rnd in range(a.rounds):
                for form, (p, same) in plans.items():
                    for st, stage in (((1,), prep), ((1, 2), "all")):
                        rows.append(_timed(lambda p=p, st=st: p.run(stages=st), a.budget, implementation=label,
                                           io=io, form=form, T=T, stage=stage, round=rnd, same_as_recorded=same))
            write_csv_atomic(pd.DataFrame(rows), Path(a.out) / "probe_prep.csv")
            del plans
        del d
    df = pd.DataFrame(rows)
    piv = df.pivot_table(index=["T", "io", "stage", "round"], columns="form", values="median_ms", sort=False)
    for form, _ in forms[1:]:
        piv[f"recorded / {form}"] = piv["recorded"] / piv[form]
    print(piv.to_string())


if __name__ == "__main__":
    main()
