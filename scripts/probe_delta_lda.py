#!/usr/bin/env python3
"""GPU probe: the recurrence's A operands from registers (KDA_P1_LDA, KDA_P4_LDA; 23) against the recorded builds.

    PYTHONPATH=lib python scripts/probe_delta_lda.py [--T 16384] [--workers 15] [--out DIR] [--no-fla]
        [--cases IMPL:IO ...] [--build-only]

19, 20 and 22 read P1's A operand, the chunk's [Kg; Qg]^T tile, from shared memory in every wgmma; 13-22 read
P4's, Kd^T, the same way. At fp32 inputs a k step of P1 is three m64n32k16 wgmmas that read 2 KB of A and 1 KB
of B each. Notebook 13's recorded stamps (its phase table) have 19's P1 among the longest stages of its chunk and
15's P1, whose A came from registers (built at a cost elsewhere), well shorter. The probe builds load the tiles' fragments once per
chunk by ldmatrix, off the chain (P1's during the chunk before's P4, P4's during P2), and issue the same
products, in the same order, from registers: only B is read from shared memory by the wgmma.

At B=2, H=16, K=V=128, one run: 07 -> 19 (fp32 and bf16 inputs) and 21 -> 22 (fp32, bf16) in the recorded
build and with KDA_P1_LDA, KDA_P4_LDA and both (22 on fp32 inputs at one block per SM, KDA_PRE_MINB=1, in
every probe form and once as recorded, so that its registers are not capped; 22 on bf16 inputs at BV = 16
too), and 07 on fp32 inputs in its earlier layout at three blocks per SM (KDA_PREP_ALIAS=0; since step 24 07 is
built in the bf16 path's aliased layout at four, and 24 is 19 with KDA_P4_LDA's loads as its build): each
call, its recurrence alone (and 07 alone), and the difference of o and the final state from the recorded
build's at the default width (same words, same products: expected 0; at another width, rounding-level);
fla's chunk_kda (bf16) beside them; and 19's clock stamps (fp32, --stamps-T) in each recurrence form,
notebook 13's phase table per form (probe_lda_phases.csv). 23 (07 -> 23, fp32 inputs: 19's operands with the chain
turned around in registers, every A operand a register fragment) runs beside them as built, after 07 in its earlier
layout, with two staging tiles (KDA_STAGE_RING: WG_E's q, k, g copies two chunks ahead), both, with its
element-wise warpgroup idle (KDA_PROBE=5: the chain alone) and with no input copies after chunk 0 (KDA_PROBE=4: what
the input traffic costs it; both results meaningless), with its stamps too. The recurrences' builds are compiled first, many
at a time (scripts/warm_delta_builds.py's build). Writes probe_lda.csv to --out (default $OUT or /tmp)
after each case (a temporary file, then a rename: an interrupted call keeps what was timed). Not a recorded run: notebook 13 records what the lab quotes.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from attnlab.arrays import rel_error
from attnlab.results import write_csv_atomic
from attnlab.delta import fast
from attnlab.delta import kernels as dk
from attnlab.delta.bench import _timed, device_inputs, fla_functions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from warm_delta_builds import build  # noqa: E402  (a sibling script: one build in a worker process)

FORMS = {"P1 A from registers": {"KDA_P1_LDA": 1}, "P4 A from registers": {"KDA_P4_LDA": 1},
         "P1 and P4 A from registers": {"KDA_P1_LDA": 1, "KDA_P4_LDA": 1}}
#: (impl, inputs, label, value-block widths): 22 on bf16 inputs at BV = 16 too (two blocks per SM), where the recorded
#: build ran slower than at 32 (notebook 13's probe note): each chain's wgmmas re-read the whole A tile for half the
#: columns, which the register forms no longer do
#: 07's fp32 layout before step 24 (a probe build since): the late arrays in their own space, three blocks per SM
EARLY_07 = "07 in its earlier fp32 layout (KDA_PREP_ALIAS=0, three blocks per SM)"
CASES = (("tile", "fp32", "07+19", (None,)), ("tile", "bf16", "07+19", (None,)), ("pre", "fp32", "21+22", (None,)),
         ("pre", "bf16", "21+22", (None, 16)), ("hilo", "fp32", "07+23", (None,)))


def forms_of(impl: str, io: str) -> list[tuple[str, dict | None, dict | None]]:
    """(label, the recurrence's defines, 07's defines) of each build of a case, the recorded build first (every
    other is compared with it). 22 on fp32 inputs runs at one block per SM in every probe form, and once more so
    as the reference: its recorded cap, two, makes ptxas spill the register-operand forms, and one 22 block per
    SM is all that fits its 148 KB of shared memory anyway. 07 on fp32 inputs (before 19) also runs in its earlier
    layout, the late arrays in their own space at three blocks per SM (KDA_PREP_ALIAS=0; built aliased since step
    24, four blocks per SM)."""
    out = [("recorded build", None, None)]
    if impl == "hilo":   # 23: no P1 / P4 forms (its every A operand is a register fragment already)
        ring, early = {"KDA_STAGE_RING": 1}, {"KDA_PREP_ALIAS": 0}
        return out + [(EARLY_07, None, early),
                      ("two staging tiles (KDA_STAGE_RING)", ring, None),
                      (f"{EARLY_07}, two staging tiles", ring, early),
                      ("chain alone, WG_E arithmetic idle (KDA_PROBE=5; results meaningless)", {"KDA_PROBE": 5}, None),
                      ("no input copies after chunk 0 (KDA_PROBE=4; results meaningless)", {"KDA_PROBE": 4}, None)]
    minb = {"KDA_PRE_MINB": 1} if (impl, io) == ("pre", "fp32") else {}
    if minb:
        out.append(("recorded build, KDA_PRE_MINB=1", minb, None))
    out += [(label, {**form, **minb}, None) for label, form in FORMS.items()]
    if (impl, io) == ("tile", "fp32"):
        early = {"KDA_PREP_ALIAS": 0}
        out += [(EARLY_07, None, early), (f"{EARLY_07}, P1 and P4 A from registers", FORMS["P1 and P4 A from registers"],
                                          early)]
    return out


def _save(rows: list[dict], path: Path) -> None:
    """The rows as CSV at path, written whole or not at all (results.write_csv_atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_csv_atomic(pd.DataFrame(rows), path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, nargs="+", default=[16384])
    ap.add_argument("--workers", type=int, default=15)
    ap.add_argument("--budget", type=float, default=0.3)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--build-only", action="store_true",
                    help="compile the probe's builds into the lab's cache and stop (a call's spare minutes; carry the "
                         "cache to the call that times them)")
    ap.add_argument("--cases", nargs="+", default=None, metavar="IMPL:IO",
                    help="only these cases (e.g. tile:fp32 hilo:fp32); default all")
    ap.add_argument("--stamps-T", type=int, default=4096,
                    help="clock stamps of 19 (fp32) in each form at this T (notebook 13's phase table; 0: none)")
    a = ap.parse_args()
    known = [f"{impl}:{io}" for impl, io, _, _ in CASES]
    if a.cases and not set(a.cases) <= set(known):
        ap.error(f"--cases takes some of {' '.join(known)}; got {' '.join(a.cases)}")
    cases = [c for c in CASES if a.cases is None or f"{c[0]}:{c[1]}" in a.cases]
    tasks = list(dict.fromkeys((impl, 128, bv, io, tuple(d.items()) if d else None)   # the recurrences' builds (07's
                               for impl, io, _, bvs in cases for bv in bvs for _, d, _ in forms_of(impl, io)))   # compile inline)
    stamps = (([("tile", label, d) for label, d, p in forms_of("tile", "fp32") if not p] if ("tile", "fp32") in
               [c[:2] for c in cases] else []) + ([("hilo", "23", None)] if ("hilo", "fp32") in [c[:2] for c in cases]
                                                 else []) if a.stamps_T else [])
    tasks += [(impl, 128, None, "fp32", tuple({**(d or {}), "KDA_PROBE": 3, "KDA_NSTAMP": fast.STAMP_CHUNKS}.items()))
              for impl, _, d in stamps]   # the defines phase_cycles builds with, in its order
    for task in [("tile", 128, None, "fp32", None), ("pre", 128, None, "fp32", None)]:   # 07 and 21 in the cache first
        print(build(task), flush=True)
    pool = mp.get_context("spawn").Pool(a.workers)
    try:
        for line in pool.imap_unordered(build, tasks):
            print(line, flush=True)
    except KeyboardInterrupt:   # a pool left to its workers would outlive the call's guard (and its results with it)
        pool.terminate()
        sys.exit("probe_delta_lda: interrupted while compiling; nothing timed (the finished builds are in the cache)")
    pool.close()
    pool.join()
    if a.build_only:
        print(f"{len(tasks)} probe builds in the cache; nothing timed (--build-only)")
        return

    B, H, K, V = 2, 16, 128, 128
    rows = []
    chunk_kda, _, _ = fla_functions()
    for T in a.T:
        _, d = device_inputs(B, T, H, K, V, seed=T, init=True)
        for impl, io, label, bvs in cases:
            x = fast.bf16_inputs(d) if io == "bf16" else {n: d[n] for n in ("q", "k", "v", "g", "beta")}
            host = (lambda y: y.float().cpu().numpy()) if io == "bf16" else (lambda y: y.get())
            ref = None   # the recorded build at the default width: every form and width is compared with it
            for bv, (form, fd, prep_d) in ((bv, f) for bv in bvs for f in forms_of(impl, io)):
                p = dk.prepare_tc(**x, initial_state=d["initial_state"], output_final_state=True, impl=impl, bv=bv,
                                  defines=fd, prep_defines=prep_d)
                p.poison()
                o, s = p.run()
                o, s = host(o), s.get()
                if ref is None:
                    ref = (o, s)
                err = dict(rel_o_vs_recorded=rel_error(o, ref[0]), rel_state_vs_recorded=rel_error(s, ref[1]),
                           finite=bool(np.isfinite(o).all()))
                print(f"T={T} {label} {io} bv={p.bv} {form}: {err}", flush=True)
                rec = label.split("+")[1]
                for st, stage in (((1, 2), "all"), ((2,), rec)) + ((((1,), label.split("+")[0]),) if impl == "tile" else ()):
                    rows.append(_timed(lambda p=p, st=st: p.run(stages=st), a.budget, implementation=f"{label} {io}",
                                       form=form, T=T, bv=p.bv, stage=stage, overlap=p.overlap, **err))
                del p
            _save(rows, Path(a.out) / "probe_lda.csv")   # what is timed so far survives an interrupted call
        if chunk_kda is not None and not a.no_fla:
            call = fast.fla_bf16_call(d, chunk_kda)
            rows.append(_timed(call, a.budget, implementation="fla chunk_kda bf16", form="", T=T, bv=0, stage="all"))
        del d
    if stamps:   # where 19's chunk goes in each form, and 23's: WG_C's phases (warp 0) and WG_E's (warp 4)
        ph = []
        for impl, label, d in stamps:
            t = fast.phase_cycles(B, H, K, V, a.stamps_T, impl=impl, defines=d)
            ph.append(t[t.warp.isin([0, 4])].assign(form=label))
        ph = pd.concat(ph)
        print(ph.pivot_table(index=["role", "phase"], columns="form", values="median_cycles", sort=False).to_string())
        _save(ph.to_dict("records"), Path(a.out) / "probe_lda_phases.csv")
    df = pd.DataFrame(rows)
    cols = [c for c in ("implementation", "form", "T", "bv", "stage", "median_ms", "rel_iqr", "rel_o_vs_recorded",
                        "rel_state_vs_recorded") if c in df]
    print(df[cols].to_string())
    _save(rows, Path(a.out) / "probe_lda.csv")


if __name__ == "__main__":
    main()
