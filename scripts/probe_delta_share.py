#!/usr/bin/env python3
"""GPU probe: 26 (each chunk's operand images made once per head in the kernel, shared through an L2 ring) against 24.

    PYTHONPATH=lib python scripts/probe_delta_share.py [--T 4096 16384] [--rounds 2] [--out DIR] [--no-fla]

Notebook 13's bounds put 24's element-wise warpgroup between 24 and its chain alone, and 24 with that work at a
quarter of its tokens a thread (KDA_E_SHARE=4) near the chain alone: the bound on sharing it over a head's four value
blocks. 26 does share it: value block r's maker warpgroup makes every fourth chunk's image into a ring in global
memory, and every block lands every chunk from the ring with 22's producer warp and chain.

At B=2, H=16, K=V=128, fp32 inputs, each T: 07 -> 24 and 07 -> 26 (each call, and its recurrence alone), 24's chain
alone (KDA_PROBE=5) and 24 at a quarter of its tokens (KDA_E_SHARE=4) for the bounds, in turn, --rounds times; o and
the final state of 26 against 24's (expected equal: the same arithmetic, up to ptxas's contractions); fla's chunk_kda
(bf16) in the same run. Writes probe_share.csv to --out (default $OUT or /tmp) after each T (a temporary file, then a
rename). Not a recorded run: notebook 13 records what the lab quotes.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import pandas as pd

from attnlab.arrays import rel_error
from attnlab.env import provenance, resolve_mode
from attnlab.results import write_csv_atomic
from attnlab.delta import kernels as dk
from attnlab.delta.bench import _timed, device_inputs, fla_functions
from attnlab.delta.fast import fla_bf16_call

#: (label, impl, the recurrence's defines, side by side, stages timed: (stages, stage label), ...)
FORMS = (("07+24", "kdreg", None, False, (((1, 2), "all"), ((2,), "recurrence"))),
         ("07+26", "share", None, False, (((1, 2), "all"), ((2,), "recurrence"))),
         ("24 chain alone (KDA_PROBE=5)", "kdreg", {"KDA_PROBE": 5}, False, (((2,), "recurrence"),)),
         ("24 at a quarter of WG_E's tokens (KDA_E_SHARE=4)", "kdreg", {"KDA_E_SHARE": 4}, False, (((2,), "recurrence"),)))


def run_forms(forms, csv_name: str, description: str, before=None) -> None:
    """Time ``forms`` (:data:`FORMS`' shape; the first must be 07 -> 24, the reference the others' results are compared
    with) at B=2, H=16, K=V=128 on fp32 inputs for each --T, in turn, --rounds times, with fla's chunk_kda (bf16) in the
    same run; write the rows, with the run's provenance, to --out/``csv_name`` after each T (a temporary file, then a
    rename). A form marked side by
    side runs so where its launcher allows it (``plan.overlap``); the others one kernel after the other. A form's results
    are compared with 24's where its defines are None or its sixth item says they are valid; a seventh item, where given,
    is 07's defines (``prepare_tc``'s prep_defines). ``before(args)``, if given, runs once the arguments are parsed (a
    probe's own measurements)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--T", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--budget", type=float, default=0.3, help="seconds of timing per entry")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--no-fla", action="store_true")
    a = ap.parse_args()
    Path(a.out).mkdir(parents=True, exist_ok=True)
    if before is not None:
        before(a)
    B, H, K, V = 2, 16, 128, 128
    rows = []
    prov = provenance(resolve_mode("live"))   # which GPU, driver, clocks, commit, when: on every row of the CSV
    chunk_kda = None if a.no_fla else fla_functions()[0]
    for T in a.T:
        _, d = device_inputs(B, T, H, K, V, seed=T, init=True)
        x = {n: d[n] for n in ("q", "k", "v", "g", "beta")}
        plans, ref = {}, None
        for label, impl, defines, side, stages, *valid in forms:
            p = dk.prepare_tc(**x, initial_state=d["initial_state"], output_final_state=True, impl=impl, defines=defines,
                              prep_defines=valid[1] if len(valid) > 1 else None)
            p.overlap = p.overlap and side
            p.poison()
            o, s = (y.get() for y in p.run())
            err = {}
            if defines is None or (valid and valid[0]):   # the builds with valid results, against 07 -> 24's
                ref = ref or (o, s)
                err = dict(rel_o_vs_24=rel_error(o, ref[0]), rel_state_vs_24=rel_error(s, ref[1]),
                           equal_to_24=bool(np.array_equal(o, ref[0]) and np.array_equal(s, ref[1])),
                           finite=bool(np.isfinite(o).all()), overlap=p.overlap, epoch=p.epoch)
                print(f"T={T} {label}: {err}", flush=True)
            plans[label] = (p, stages, err)
        for rnd in range(a.rounds):
            for label, (p, stages, err) in plans.items():
                for st, stage in stages:
                    rows.append(_timed(lambda p=p, st=st: p.run(stages=st), a.budget, implementation=label, T=T,
                                       stage=stage, round=rnd, **err))
                    print(f"T={T} {label} {stage} round {rnd}: {rows[-1]['median_ms']:.4f} ms", flush=True)
        del plans
        if chunk_kda is not None:
            call = fla_bf16_call(d, chunk_kda)
            rows.append(_timed(call, a.budget, implementation="fla chunk_kda bf16", T=T, stage="all", round=0))
        write_csv_atomic(pd.DataFrame(rows).assign(**prov), Path(a.out) / csv_name)
        del d
    df = pd.DataFrame(rows)
    print(df.pivot_table(index=["implementation", "stage"], columns=["T", "round"], values="median_ms",
                         sort=False).to_string())


def warm_forms(forms, stamped, workers: int, impl: str = "kdreg") -> None:
    """Compile, in ``workers`` processes, every build of ``forms`` and the clock-stamp builds (KDA_PROBE=3) of ``impl``
    with each macro set of ``stamped``, into the lab's cache (07 first, here: every worker then loads it)."""
    import multiprocessing as mp
    import time

    from attnlab.delta import fast
    from warm_delta_builds import build

    tasks = [(impl_, 128, None, "fp32", tuple(d.items()) if d else None) for _, impl_, d, *_ in forms]
    tasks += [(impl, 128, None, "fp32", tuple({**d, "KDA_PROBE": 3, "KDA_NSTAMP": fast.STAMP_CHUNKS}.items()))
              for d in stamped]
    t0 = time.perf_counter()
    print(build(("lean", 128, None, "fp32", None)), flush=True)
    with mp.get_context("spawn").Pool(workers) as pool:
        for line in pool.imap_unordered(build, list(dict.fromkeys(tasks))):
            print(line, flush=True)
    print(f"builds: {time.perf_counter() - t0:.0f} s", flush=True)


def stamp_forms(out: Path, stamped, impl: str = "kdreg") -> None:
    """The clock stamps (KDA_PROBE=3) of ``impl`` with each macro set of ``stamped`` at T = 4096, into ``out``."""
    from attnlab.delta import fast

    for d in stamped:
        ph = fast.phase_cycles(2, 16, 128, 128, 4096, seed=4096, impl=impl, defines=d or None)
        tag = "_".join(f"{k}{v}" for k, v in d.items()) or "as_built"
        ph.to_csv(out / f"state_phases_{impl}_{tag}.csv", index=False)
        print(d, fast.phase_summary(ph).to_string(), sep="\n", flush=True)


def workers_arg(default: int = 14) -> int:
    """A probe's --workers N (the processes that compile its builds), taken out of sys.argv before run_forms parses it."""
    import sys

    if "--workers" not in sys.argv:
        return default
    i = sys.argv.index("--workers")
    n = int(sys.argv[i + 1])
    del sys.argv[i:i + 2]
    return n


def main() -> None:
    run_forms(FORMS, "probe_share.csv", __doc__.split("\n\n")[0])


if __name__ == "__main__":
    main()
