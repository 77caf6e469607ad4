#!/usr/bin/env python3
"""GPU probe of the 3xBF16 recurrence kernels (09, 10, ...) before notebook 13 records them.

    PYTHONPATH=lib python scripts/probe_delta_recurrence.py [--T 4096 16384] [--out DIR] [--no-fla] [--ncu]

1. Bit-for-bit agreement of every two-kernel impl with 07 -> 08 (they share 08's arithmetic) on edge
   shapes and the target shape, and their error vs the float64 recurrence on the small ones.
2. Median latency at B=2, H=16, K=V=128 of each impl (07 + recurrence) and of each recurrence alone,
   plus the probe builds of 10 (KDA_PROBE=1: consumers idle, the producers' time alone; KDA_PROBE=2:
   producers' arithmetic idle, the consumers' time alone), beside fla's chunk_kda in bf16, timed in
   this one run; and the KDA_PROBE=3 build's clock stamps (notebook 13's attnlab.delta.fast.
   phase_cycles): the median cycles of every phase of each warp role.
3. With --ncu: shared-memory wavefronts and bank conflicts, pipe utilisation and stall reasons of
   each recurrence kernel at T=4096 (Nsight Compute, boost clocks).

Writes CSVs to --out (default $OUT or /tmp). Not a recorded run: notebook 13 records what the lab quotes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from attnlab.arrays import rel_error
from attnlab.delta import bench as db
from attnlab.delta import fast
from attnlab.delta import kernels as dk
from attnlab.delta.naive import kda_recurrent_fp64

TWO_KERNEL = [i for i in dk.STATE_IMPLS if i != "split" and i not in dk.BF16_ONLY_IMPLS]   # 09 and 10 reproduce 08 bit for bit (fast.SAME_AS_08);
#                                                   11 and 12 sum in another order: they match 08 to rounding
PROBES = {"10 producers alone (KDA_PROBE=1)": ("lean", {"KDA_PROBE": 1}),
          "10 consumers alone (KDA_PROBE=2)": ("lean", {"KDA_PROBE": 2}),
          "12 producers alone (KDA_PROBE=1)": ("regs", {"KDA_PROBE": 1}),
          "12 consumers alone (KDA_PROBE=2)": ("regs", {"KDA_PROBE": 2}),
          "12 two roles, producers alone (KDA_PROBE=1)": ("regs2", {"KDA_PROBE": 1}),
          "12 two roles, consumers alone (KDA_PROBE=2)": ("regs2", {"KDA_PROBE": 2}),
          "13 without input copies after chunk 0 (KDA_PROBE=4)": ("wgmma", {"KDA_PROBE": 4}),
          "13 chain alone, WG_E arithmetic idle (KDA_PROBE=5)": ("wgmma", {"KDA_PROBE": 5})}
NCU_METRICS = (
    "gpu__time_duration.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ldsm.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", "l1tex__data_pipe_lsu_wavefronts.sum",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", "sm__inst_issued.avg.pct_of_peak_sustained_active",
    "sm__cycles_elapsed.avg", "launch__registers_per_thread", "dram__bytes_read.sum", "lts__t_bytes.sum",
    "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_membar_per_issue_active.ratio",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed", "l1tex__m_xbar2l1tex_read_bytes.sum",
    "l1tex__throughput.avg.pct_of_peak_sustained_elapsed", "lts__t_sectors_srcunit_tex_op_read.sum",
)


def correctness(target_T: int, impls=None) -> pd.DataFrame:
    rows = []
    impls = [i for i in dk.STATE_IMPLS if (impls is None or i in impls or i == "split") and i not in dk.BF16_ONLY_IMPLS]
    cases = [dict(B=2, T=T, H=3, K=K, V=K, gate=gate, init=init)
             for K in (64, 128) for T in (1, 17, 333)
             for gate, init in (("logsigmoid", True), ("const", True), ("mixed", False), ("strong", True))]
    cases.append(dict(B=2, T=target_T, H=16, K=128, V=128, gate="logsigmoid", init=True))
    for i, c in enumerate(cases):
        _, d = db.device_inputs(c["B"], c["T"], c["H"], c["K"], c["V"], seed=200 + i, gate=c["gate"], init=c["init"])
        small = c["T"] < 1000
        ref = kda_recurrent_fp64(**d, output_final_state=True) if small else None
        for bv in dk.SUPPORTED_BV:
            outs = {}
            for impl in impls:
                plan = dk.prepare_tc(**d, output_final_state=True, bv=bv, check_gate=False, impl=impl)
                plan.poison()
                o, s = plan.run()
                outs[impl] = (o.get(), s.get())
                del plan
            for impl in [i for i in TWO_KERNEL if i in impls]:
                same = all(np.array_equal(a, b) for a, b in zip(outs[impl], outs["split"]))
                row = dict(**c, impl=impl, bv=bv, bitwise_eq_08=same)
                if ref is not None:
                    row.update(rel_err_o=rel_error(outs[impl][0], ref[0]), rel_err_state=rel_error(outs[impl][1], ref[1]))
                rows.append(row)
    return pd.DataFrame(rows)


def quick_check(impls, builds=()) -> pd.DataFrame:
    """One edge case (B=2, T=333: a chunk tail, H=3, K=V=128, an initial state) per impl at bv=32, fp32
    and bf16 I/O: its error against the float64 recurrence and whether it reproduces 13 ("wgmma") bit
    for bit — the cheap check a probe of a 13-family variant makes before it is timed."""
    rows = []
    _, d = db.device_inputs(2, 333, 3, 128, 128, seed=5, gate="mixed", init=True)
    ref = kda_recurrent_fp64(**d, output_final_state=True)
    for io, x in (("fp32", d), ("bf16", fast.bf16_inputs(d))):
        if x is None:
            continue
        outs = {}
        runs = [(i, None) for i in ["wgmma", *[i for i in impls if i != "wgmma"]]] + list(builds)
        for impl, defines in runs:
            if (io == "fp32" and impl in dk.BF16_ONLY_IMPLS) or (io == "bf16" and impl in dk.FP32_ONLY_IMPLS):
                continue
            p = dk.prepare_tc(**x, output_final_state=True, bv=None if impl in dk.FIXED_BV else 32, check_gate=False,
                              impl=impl, defines=defines)
            p.poison()
            o, s = p.run()
            o = o.float().cpu().numpy() if hasattr(o, "cpu") else o.get()
            if defines:
                impl = f"{impl} " + ",".join(f"{k_}={v_}" for k_, v_ in defines.items())
            outs[impl] = (o, s.get())
            rows.append(dict(impl=impl, io=io, rel_err_o=rel_error(o, ref[0]), rel_err_state=rel_error(outs[impl][1], ref[1]),
                             bitwise_eq_13=all(np.array_equal(a, b) for a, b in zip(outs[impl], outs["wgmma"]))))
            del p
    return pd.DataFrame(rows)


def latency(T_list, budget: float, with_fla: bool, impls=None, probes: bool = True, B: int = 2,
            builds=(), bvs=None, ios=("fp32", "bf16")) -> pd.DataFrame:
    H, K, V = 16, 128, 128
    rows = []
    chunk_kda = db.fla_functions()[0] if with_fla else None
    for T in T_list:
        _, d = db.device_inputs(B, T, H, K, V, seed=T)
        for impl in [i for i in TWO_KERNEL if (impls is None or i in impls) and "fp32" in ios]:
            for bv in (None,) if impl in dk.FIXED_BV else bvs or dk.SUPPORTED_BV:   # every value-block width an impl takes
                p = dk.prepare_tc(**d, check_gate=False, impl=impl, bv=bv)
                rows.append(db._timed(p.run, budget, implementation=f"07 + {impl}", config=f"BV={p.bv}", T=T))
                rows.append(db._timed(lambda p=p: p.run(stages=(2,)), budget,
                                      implementation=f"{impl} recurrence alone", config=f"BV={p.bv}", T=T))
                if impl == TWO_KERNEL[0] and bv == dk.SUPPORTED_BV[0]:
                    rows.append(db._timed(lambda p=p: p.run(stages=(1,)), budget, implementation="07 alone",
                                          config="", T=T))
                del p
        tb = fast.bf16_inputs(d) if "bf16" in ios else None
        if tb is not None:
            for impl in [i for i in dk.BF16_IMPLS if impls is None or i in impls]:
                for bv in (None,) if impl in dk.FIXED_BV else bvs or dk.SUPPORTED_BV:
                    p = dk.prepare_tc(**tb, check_gate=False, impl=impl, bv=bv)
                    rows.append(db._timed(p.run, budget, implementation=f"07 + {impl}, bf16 I/O",
                                          config=f"BV={p.bv}", T=T))
                    rows.append(db._timed(lambda p=p: p.run(stages=(2,)), budget,
                                          implementation=f"{impl} recurrence alone, bf16 I/O", config=f"BV={p.bv}", T=T))
                    if impl in dk.PREP_A2_IMPLS and not any(r["implementation"] == "07<A2> alone, bf16 I/O" and r["T"] == T
                                                            for r in rows):
                        rows.append(db._timed(lambda p=p: p.run(stages=(1,)), budget,
                                              implementation="07<A2> alone, bf16 I/O", config="", T=T))
                    del p
        for impl, defines in builds:   # --build: a recurrence built with other macros, timed as its plain build is
            label = f"{impl} " + ",".join(f"{k_}={v_}" for k_, v_ in defines.items())
            for io, x in (("fp32", d if "fp32" in ios else None), ("bf16", tb)):
                if x is None or (io == "fp32" and impl in dk.BF16_ONLY_IMPLS) or (io == "bf16" and impl in dk.FP32_ONLY_IMPLS):
                    continue
                for bv in (None,) if impl in dk.FIXED_BV else bvs or (None,):   # --bv: each width asked for
                    p = dk.prepare_tc(**x, check_gate=False, impl=impl, defines=defines, bv=bv)
                    sfx = ", bf16 I/O" if io == "bf16" else ""
                    rows.append(db._timed(p.run, budget, implementation=f"07 + {label}{sfx}", config=f"BV={p.bv}", T=T))
                    rows.append(db._timed(lambda p=p: p.run(stages=(2,)), budget,
                                          implementation=f"{label} recurrence alone{sfx}", config=f"BV={p.bv}", T=T))
                    del p
        for label, (impl, defines) in PROBES.items():
            if not probes or (impls is not None and impl not in impls):
                continue
            p = dk.prepare_tc(**d, check_gate=False, impl=impl, defines=defines)
            rows.append(db._timed(lambda p=p: p.run(stages=(2,)), budget, implementation=label, config=f"BV={p.bv}", T=T))
            del p
        del tb
        if chunk_kda is not None:
            rows.append(db._timed(fast.fla_bf16_call(d, chunk_kda), budget, implementation="fla chunk_kda bf16", config="",
                                  T=T))
    df = pd.DataFrame(rows)
    df["B"] = B
    return df[["implementation", "config", "B", "T", "median_ms", "rel_iqr"]]


NCU_TARGET = """
import sys
from attnlab.delta import bench as db, fast, kernels as dk
_, d = db.device_inputs(2, {T}, 16, 128, 128, seed=0)
for impl in {impls!r}:
    p = dk.prepare_tc(**d, check_gate=False, impl=impl)
    p.run(stages=(1,))
    p.run(stages=(2,))
tb = fast.bf16_inputs(d)
if tb is not None:      # the bf16-I/O instantiations of 07 and of each recurrence asked for (default: 10)
    for impl in {bf_impls!r}:
        p = dk.prepare_tc(**tb, check_gate=False, impl=impl)
        p.run(stages=(1,))
        p.run(stages=(2,))
import cupy as cp; cp.cuda.Device().synchronize()
"""


def stage_latency(T_list, budget: float) -> pd.DataFrame:
    """07 and 10 alone, fp32 and bf16 I/O, each stage timed by itself (the bf16 path's cost located)."""
    rows = []
    for T in T_list:
        _, d = db.device_inputs(2, T, 16, 128, 128, seed=T)
        for io, x in (("fp32", d), ("bf16", fast.bf16_inputs(d))):
            if x is None:
                continue
            p = dk.prepare_tc(**x, check_gate=False, impl=fast.BEST_IMPL, bv=32)
            for st, name in ((1, "07"), (2, "10")):
                rows.append(db._timed(lambda p=p, st=st: p.run(stages=(st,)), budget, implementation=f"{name} alone",
                                      config=f"io={io}", T=T))
            rows.append(db._timed(p.run, budget, implementation="07 + 10", config=f"io={io}", T=T))
            del p
    return pd.DataFrame(rows)[["implementation", "config", "T", "median_ms", "rel_iqr"]]


def ncu_counters(out: Path, T: int = 4096, impls=None) -> pd.DataFrame | None:
    from attnlab import ncu

    exe = ncu.ncu_path()
    if exe is None:
        print("ncu not found: no counters", flush=True)
        return None
    target = out / "ncu_target.py"
    bf_impls = [i for i in dk.BF16_IMPLS if impls is not None and i in impls] or [fast.BEST_IMPL]
    target.write_text(NCU_TARGET.format(T=T, impls=[i for i in TWO_KERNEL if impls is None or i in impls], bf_impls=bf_impls))
    cmd = ncu.build_command([sys.executable, str(target)], metrics=NCU_METRICS, kernel_regex="kda_chunk",
                            ncu=exe)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=500)
    (out / "ncu_raw.csv").write_text(res.stdout)
    if res.returncode != 0:
        print(res.stderr[-3000:], flush=True)
        return None
    tidy = ncu.parse_raw_csv(res.stdout)
    return tidy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--T", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--B", type=int, default=2, help="batch of the latency runs (H = 16, K = V = 128); B = 1 against 2 "
                    "shows whether a grid's clusters are all resident at once")
    ap.add_argument("--budget", type=float, default=0.3)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--skip-correctness", action="store_true")
    ap.add_argument("--ncu", action="store_true")
    ap.add_argument("--impls", nargs="+", default=None, help="only these recurrence impls (default: all)")
    ap.add_argument("--no-phases", action="store_true", help="skip the clock stamps")
    ap.add_argument("--no-probes", action="store_true", help="skip the KDA_PROBE=1/2 builds (each side alone)")
    ap.add_argument("--phases-only", action="store_true", help="only the clock stamps (no correctness, no latency)")
    ap.add_argument("--phases-impl", nargs="+", default=[fast.BEST_IMPL],
                    help="recurrences whose clock stamps to take (fast.CONSUMER_STAMP_PHASES)")
    ap.add_argument("--stages-only", action="store_true", help="only 07 and 10 alone, fp32 and bf16 I/O (and --ncu)")
    ap.add_argument("--quick-check", action="store_true",
                    help="in place of the correctness grid: one edge case per impl against float64 and against 13")
    ap.add_argument("--bv", type=int, nargs="+", default=None, help="only these value-block widths (default: all)")
    ap.add_argument("--io", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"], help="input precisions timed")
    ap.add_argument("--build", nargs=2, action="append", default=[], metavar=("IMPL", "KEY=VAL[,KEY=VAL]"),
                    help="also check and time IMPL built with these macros (e.g. diet3 KDA_P1_CHAINS=3)")
    a = ap.parse_args()
    builds = [(i, {kv.split("=")[0]: int(kv.split("=")[1]) for kv in spec.split(",")}) for i, spec in a.build]
    out = Path(a.out)
    pd.set_option("display.width", 220)
    if a.stages_only:
        st = stage_latency(a.T, a.budget)
        st.to_csv(out / "stage_latency.csv", index=False)
        print(st.to_string(), flush=True)
    if a.quick_check:
        qc = quick_check(a.impls or list(dk.STATE_IMPLS), builds)
        qc.to_csv(out / "quick_check.csv", index=False)
        print(qc.to_string(), flush=True)
    elif not a.skip_correctness and not a.stages_only and not a.phases_only:
        c = correctness(max(a.T), a.impls)
        c.to_csv(out / "state_correctness.csv", index=False)
        print(c.to_string(), flush=True)
        print("09, 10 bitwise equal to 07 -> 08:", bool(c[c["impl"].isin(fast.SAME_AS_08)]["bitwise_eq_08"].all()),
              " worst rel err o:", c["rel_err_o"].max(), " state:", c["rel_err_state"].max(), flush=True)
    if not a.stages_only:
        if not a.no_phases:
            for impl in a.phases_impl:   # notebook 13's clock-stamp table, for each impl asked for
                ph = fast.phase_cycles(2, 16, 128, 128, 4096, seed=4096, impl=impl)
                ph.to_csv(out / f"state_phases_{impl}.csv", index=False)
                print(impl, fast.phase_summary(ph).to_string(), sep="\n", flush=True)
            for impl, defines in builds:
                if defines.get("KDA_PROBE"):
                    continue
                tag = "_".join(f"{k_}{v_}" for k_, v_ in defines.items())
                ph = fast.phase_cycles(2, 16, 128, 128, 4096, seed=4096, impl=impl, defines=defines)
                ph.to_csv(out / f"state_phases_{impl}_{tag}.csv", index=False)
                print(impl, defines, fast.phase_summary(ph).to_string(), sep="\n", flush=True)
        if a.phases_only:
            return
        lat = latency(a.T, a.budget, not a.no_fla, a.impls, probes=not a.no_probes, B=a.B, builds=builds, bvs=a.bv,
                      ios=a.io)
        lat.to_csv(out / "state_latency.csv", index=False)
        print(lat.to_string(), flush=True)
    if a.ncu:
        tidy = ncu_counters(out, impls=a.impls)
        if tidy is not None:
            tidy.to_csv(out / "state_ncu.csv", index=False)
            from attnlab import ncu

            w = ncu.wide(tidy)
            print(w.T.to_string(), flush=True)


if __name__ == "__main__":
    main()
