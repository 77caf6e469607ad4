"""Live measurements and verdicts for notebook 13 (fast delta attention on tensor cores, issue 13).

The 3xBF16 kernels (``kernels/delta/06``-``12``, launched through :func:`.kernels.prepare_tc`) beside
the three-kernel chunked form (02 -> 03 -> 05), the recurrent kernel (01) and flash-linear-attention's
``chunk_kda`` in bf16 and fp32, all in the same run: correctness grid, accuracy at the target shape,
latency, peak extra memory, and :func:`targets` — the issue's targets as computed verdicts with the
headline keys. Everything returns tidy DataFrames that the notebook records with
``attnlab.results.save_table``; :func:`targets` and :func:`ladder_table` are pure and run in replay.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from . import kernels as dk
from ..arrays import rel_error
from .bench import REL_ERR_TARGET, _timed, device_inputs, fla_functions
from .naive import kda_recurrent_fp64

#: issue 13's accuracy bound (relative RMS error vs float64, fp32 inputs), o and final state: the
#: same bound notebook 07 holds its kernels to at the target shape
REL_ERR_BOUND = REL_ERR_TARGET
#: the implementations timed, in ladder order: (label, impl for prepare_tc or None, steps)
TC_IMPLS = (("06 fused", "fused", ("06",)), ("07+08", "split", ("07", "08")), ("07+09", "ws", ("07", "09")),
            ("07+10", "lean", ("07", "10")), ("07+11", "cluster", ("07", "11")), ("07+12", "regs", ("07", "12")),
            ("07+12 two roles", "regs2", ("07", "12")), ("07+13", "wgmma", ("07", "13")),
            ("07+14 bulk", "bulk", ("07", "14")), ("07+14 tma", "tma", ("07", "14")),
            ("07+14 tma, WG_C too", "tma2", ("07", "14")), ("07+15", "diet", ("07", "15")),
            ("07+16", "wgrs", ("07", "16")), ("07+19", "tile", ("07", "19")), ("07+20", "wide", ("07", "20")),
            ("07+23", "hilo", ("07", "23")), ("07+24", "kdreg", ("07", "24")), ("07+25", "wy", ("07", "25")),
            ("29+30", "late", ("29", "30")))
#: steps that branch off an earlier step rather than the row above them in TC_IMPLS: {label: predecessor}
STEP_PREDECESSORS = {"07+11": "07+10", "07+12": "07+10", "07+12 two roles": "07+12", "07+13": "07+10", "07+19": "07+15",
                     "07+23": "07+19", "07+24": "07+19", "07+25": "07+24", "29+30": "07+24",
                     "07+14 bulk": "07+13", "07+14 tma": "07+14 bulk", "07+14 tma, WG_C too": "07+14 tma"}
BEST = "07+10"
BEST_IMPL = "lean"
#: the bf16-I/O paths (bf16 q, k, v, g, beta and o; fp32 arithmetic and state): (label, impl, steps)
BF16_IO = "07+10 bf16 I/O"
BF16_IO_IMPLS = ((BF16_IO, BEST_IMPL, ("07", "10")), ("07+13 bf16 I/O", "wgmma", ("07", "13")),
                 ("07+13 two stages bf16 I/O", "wgmma2", ("07", "13")),
                 ("07+15 bf16 I/O", "diet", ("07", "15")), ("07+16 bf16 I/O", "wgrs", ("07", "16")),
                 ("07+17 bf16 I/O", "single", ("07", "17")), ("07+18 bf16 I/O", "ahead", ("07", "18")),
                 ("07+19 bf16 I/O", "tile", ("07", "19")), ("07+20 bf16 I/O", "wide", ("07", "20")),
                 ("21+22 bf16 I/O", "pre", ("21", "22")))
#: 21 -> 22 on fp32 inputs (hi / lo operand images): timed, checked and measured beside the ladder, not one of its
#: rows (TC_IMPLS), on which the fp32 targets are judged: its images add a workspace of as many bytes as q, k and g
#: (about 0.8 GiB at the target shape, past issue 13's memory bound), and a probe found 21 slower than 07 by about
#: what 22 saves against 19 (describe_fp32_images states it from the recorded tables)
FP32_IMAGES = "21+22"
IMAGES_BASE = "07+19"   # the ladder row 21 -> 22 takes the element-wise work out of (19's WG_E)
FP32_IMAGE_IMPLS = ((FP32_IMAGES, "pre", ("21", "22")),)
#: the impls that must reproduce 07 -> 08 bit for bit (the same arithmetic, other schedules)
SAME_AS_08 = ("ws", "lean")
THREE = "02+03+05 (three kernels)"
RECURRENT = "01 recurrent"
FLA = "fla chunk_kda"
#: fla's call captured once as a CUDA graph and replayed: its kernels' time without Python's launch overhead, which
#: on a slow host sets the eager call's time at short T (the targets quote the faster of the two: :func:`fla_ms`)
FLA_GRAPH = "fla chunk_kda (CUDA graph)"


def static_builds(K: int, V: int, forms=("tc", "cluster", "wgmma"), workers: int | None = None) -> pd.DataFrame:
    """The static build (:func:`attnlab.static.static_build`: registers, spills, stack, barriers) of every
    instantiation :func:`.kernels.static_instantiations` lists for ``forms``, each for its target
    (:func:`.kernels.static_arch`), with the dynamic shared memory it is launched with; the compiles run
    ``workers`` at a time (default: the CPUs, at most 8). One row per instantiation, in the list's order."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    from ..static import static_build

    def one(row):
        source, function, args = row
        (r,) = static_build(source, function, [args], dk.static_arch(function, "sm_90"))
        return {**r.row(), "dynamic_smem_KiB": dk.tc_smem_bytes(function, args) / 1024,
                "spill_allowed_bytes": dk.SPILL_ALLOWANCE.get(function, 0)}

    rows = dk.static_instantiations(K, V, forms=forms)
    with ThreadPoolExecutor(max_workers=workers or min(8, os.cpu_count() or 1)) as ex:
        return pd.DataFrame(list(ex.map(one, rows)))


def spills_past_allowance(static: pd.DataFrame) -> pd.DataFrame:
    """The rows of :func:`static_builds` whose spill stores, spill loads or stack exceed the kernel's
    :data:`.kernels.SPILL_ALLOWANCE` (0 for all but 21): empty when every build is as designed."""
    worst = static[["spill_store_bytes", "spill_load_bytes", "stack_bytes"]].max(axis=1)
    return static[worst > static["spill_allowed_bytes"]]


def tc_impls(compute_capability: int | None = None) -> tuple:
    """The :data:`TC_IMPLS` a GPU of this compute capability runs (default: the current device's):
    those whose every step's registry ``min_cc`` it meets (11 needs thread-block clusters, sm_90)."""
    if compute_capability is None:
        import cupy as cp

        compute_capability = int(cp.cuda.Device().compute_capability)
    need = {k.step: k.min_cc for k in dk.DELTA_KERNELS}
    return tuple(x for x in TC_IMPLS if all(need[s] <= int(compute_capability) for s in x[2]))


def fp32_image_impls(compute_capability: int | None = None) -> tuple:
    """The :data:`FP32_IMAGE_IMPLS` this GPU runs (the registry's ``min_cc`` of every step)."""
    if compute_capability is None:
        import cupy as cp

        compute_capability = int(cp.cuda.Device().compute_capability)
    need = {k.step: k.min_cc for k in dk.DELTA_KERNELS}
    return tuple(x for x in FP32_IMAGE_IMPLS if all(need[s] <= int(compute_capability) for s in x[2]))


def bf16_io_impls(compute_capability: int | None = None) -> tuple:
    """The :data:`BF16_IO_IMPLS` this GPU runs (the registry's ``min_cc`` of every step)."""
    if compute_capability is None:
        import cupy as cp

        compute_capability = int(cp.cuda.Device().compute_capability)
    need = {k.step: k.min_cc for k in dk.DELTA_KERNELS}
    return tuple(x for x in BF16_IO_IMPLS if all(need[s] <= int(compute_capability) for s in x[2]))


def fastest(latency: pd.DataFrame, labels, T: int, dtype: str = "fp32") -> str | None:
    """The label among ``labels`` with the lowest whole-call median at T (None if none was timed):
    the targets are judged on the lab's fastest step in the run, whichever it is."""
    ms = {lab: _ms(latency, lab, T, dtype) for lab in labels}
    ms = {lab: v for lab, v in ms.items() if np.isfinite(v)}
    return min(ms, key=ms.get) if ms else None


def bf16_inputs(d: dict):
    """q, k, v, g, beta as torch bfloat16 CUDA tensors (None without torch or a CUDA device): the
    bf16-I/O path's inputs, the same values fla's bf16 run gets."""
    try:
        import torch
    except ImportError:
        return None
    t = {n: torch.from_dlpack(d[n]) for n in ("q", "k", "v", "g", "beta")}
    if not t["q"].is_cuda:    # e.g. the CPU model's stand-in arrays: the bf16 path needs a CUDA device
        return None
    return {n: a.to(torch.bfloat16).contiguous() for n, a in t.items()}


def ladder_table() -> pd.DataFrame:
    """The delta registry's tensor-core steps and the three-kernel form they climb from."""
    rows = [dict(step=k.step, file=k.source.split("/")[-1], function=k.function, role=k.role,
                 min_cc=k.min_cc / 10, changed=k.summary) for k in dk.DELTA_KERNELS if k.step >= "05"]
    return pd.DataFrame(rows)


def correctness_cases(K_list=(64, 128), T_list=(1, 17, 100, 333), B: int = 2, H: int = 3) -> list[dict]:
    """Small shapes: every T with and without an initial state under log-sigmoid gates, then g = -50
    per step (the exact pair path), mixed and strong gates at two lengths, for each head size."""
    cases = []
    for K in K_list:
        for T in T_list:
            for init in (False, True):
                cases.append(dict(B=B, T=T, H=H, K=K, V=K, gate="logsigmoid", init=init))
        for gate in ("const", "mixed", "strong", "zero"):
            for T in (17, 333):
                cases.append(dict(B=B, T=T, H=H, K=K, V=K, gate=gate, init=True))
    return cases


def check_correctness(cases: Iterable[dict], seed: int = 0) -> pd.DataFrame:
    """Every tensor-core implementation at both value-block widths on each case: outputs (and the
    workspace) poisoned with NaN first, errors of o and the final state vs the float64 recurrence
    (on the GPU), and whether 07 -> 09 and 07 -> 10 reproduced 07 -> 08 bit for bit (11 sums the gates
    in another order: it is held to the error bound only)."""
    rows, impls = [], tc_impls() + fp32_image_impls()
    for i, c in enumerate(cases):
        _, d = device_inputs(c["B"], c["T"], c["H"], c["K"], c["V"], seed=seed + i, gate=c["gate"], init=c["init"])
        ref_o, ref_s = kda_recurrent_fp64(**d, output_final_state=True)
        for bv in dk.SUPPORTED_BV:
            outs, at = {}, {}
            for label, impl, _ in impls:
                if impl in dk.FIXED_BV and bv != dk.SUPPORTED_BV[0]:
                    continue   # 16 (64 value columns) and 23 (32) run one width: checked once per case
                plan = dk.prepare_tc(**d, output_final_state=True, bv=None if impl in dk.FIXED_BV else bv,
                                     check_gate=False, impl=impl)
                plan.poison()
                o, s = plan.run()
                o, s = o.get(), s.get()
                outs[impl] = (o, s)
                written = bool(np.isfinite(o).all() and np.isfinite(s).all())
                eo, es = rel_error(o, ref_o), rel_error(s, ref_s)
                at[impl] = len(rows)
                rows.append(dict(implementation=label, B=c["B"], T=c["T"], H=c["H"], K=c["K"], V=c["V"], bv=plan.bv,
                                 gate={"const": "const-50"}.get(c["gate"], c["gate"]), initial_state=c["init"],
                                 all_written=written, rel_err_o=eo, rel_err_state=es,
                                 passed=written and eo < REL_ERR_BOUND and es < REL_ERR_BOUND))
                del plan
            for impl in SAME_AS_08:
                same = all(np.array_equal(a, b) for a, b in zip(outs[impl], outs["split"]))
                rows[at[impl]]["matches_07_08"] = same
    return pd.DataFrame(rows)


def target_accuracy(B: int, H: int, K: int, V: int, T: int, seed: int = 0, with_fla: bool = True) -> pd.DataFrame:
    """Relative RMS error of o and of the final state vs a float64 recurrence computed on the GPU, at
    the target shape with an initial state: every implementation, fla in bf16 and fp32 inputs."""
    import cupy as cp

    _, d = device_inputs(B, T, H, K, V, seed=seed, init=True)
    ref_o, ref_s = kda_recurrent_fp64(**d, output_final_state=True)
    rows = []

    def add(name, dtype, o, s):
        rows.append(dict(implementation=name, dtype=dtype, T=T, rel_err_o=rel_error(o, ref_o),
                         rel_err_state=rel_error(s, ref_s) if s is not None else np.nan))

    for label, impl, _ in tc_impls() + fp32_image_impls():
        plan = dk.prepare_tc(**d, output_final_state=True, impl=impl)
        plan.poison()
        add(label, "fp32", *plan.run())
        del plan
    plan = dk.prepare_chunk(**d, output_final_state=True)
    add(THREE, "fp32", *plan.run())
    del plan
    plan = dk.prepare_recurrent(**d, output_final_state=True)
    add(RECURRENT, "fp32", *plan.run())
    del plan
    tb = bf16_inputs(d)
    if tb is not None:
        for label, impl, _ in bf16_io_impls():
            plan = dk.prepare_tc(**tb, initial_state=d["initial_state"], output_final_state=True, impl=impl)
            plan.poison()
            o, s = plan.run()
            add(label, "bf16", cp.from_dlpack(o.float().contiguous()), s)
            del plan
    chunk_kda, _, _ = fla_functions()
    if with_fla and chunk_kda is not None:
        import torch

        for dtype, tdt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
            t = {n: torch.from_dlpack(a).to(tdt).contiguous() for n, a in d.items() if n != "initial_state"}
            h0 = torch.from_dlpack(d["initial_state"]).float().contiguous()
            try:
                with torch.no_grad():
                    of, sf = chunk_kda(t["q"], t["k"], t["v"], t["g"], t["beta"], initial_state=h0,
                                       output_final_state=True)
                add(FLA, dtype, cp.from_dlpack(of.float().contiguous()),
                    cp.from_dlpack(sf.float().contiguous()) if sf is not None else None)
            except Exception as exc:  # noqa: BLE001
                print(f"{FLA} {dtype} failed: {type(exc).__name__}: {exc}")
            del t
    df = pd.DataFrame(rows)
    df["B"], df["H"], df["K"], df["V"] = B, H, K, V
    return df


def _graphed(call):
    """``call`` captured once as a CUDA graph (after two calls on a side stream, as torch asks), and the function
    that replays it on the current stream: one launch for all of fla's kernels."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    torch.cuda.synchronize()
    return graph.replay


def fla_bf16_call(d, chunk_kda):
    """A warmed-up call of fla's ``chunk_kda`` on the bf16 copies of CuPy inputs ``d`` (q, k, v, g, beta): what the
    GPU probes time beside the lab's kernels in the same run."""
    import torch

    t = bf16_inputs(d)

    def call():
        with torch.no_grad():
            return chunk_kda(t["q"], t["k"], t["v"], t["g"], t["beta"])
    call()
    torch.cuda.synchronize()
    return call


def time_latency(B: int, H: int, K: int, V: int, T_list: Iterable[int], budget_s: float = 0.2, seed: int = 0,
                 with_fla: bool = True) -> pd.DataFrame:
    """Median latency per T: each tensor-core implementation (and 07, 08, 09, 10 alone), the three-kernel
    form, the recurrent kernel and fla's chunk_kda in bf16 and fp32 — one run, the same inputs."""
    rows = []
    chunk_kda, _, _ = fla_functions()
    for T in T_list:
        _, d = device_inputs(B, T, H, K, V, seed=seed + T)
        for label, impl, steps in tc_impls():
            p = dk.prepare_tc(**d, check_gate=False, impl=impl)
            rows.append(_timed(p.run, budget_s, implementation=label, dtype="fp32", T=T, config=f"C=32 BV={p.bv}",
                               stage="all"))
            if len(steps) == 2:
                for st, step in zip((1, 2), steps):
                    if impl != "split" and step == "07":
                        continue   # 07 alone is timed once, with 08
                    rows.append(_timed(lambda p=p, st=st: p.run(stages=(st,)), budget_s, implementation=label,
                                       dtype="fp32", T=T, config=f"C=32 BV={p.bv}", stage=step))
            del p
        images = fp32_image_impls()
        if images and any(x[1] == "tile" for x in tc_impls()):   # what 21 adds to: 07 in the form 19 reads (A2)
            p = dk.prepare_tc(**d, check_gate=False, impl="tile")
            rows.append(_timed(lambda p=p: p.run(stages=(1,)), budget_s, implementation=IMAGES_BASE, dtype="fp32",
                               T=T, config=f"C=32 BV={p.bv}", stage="07"))
            del p
        for label, impl, steps in images:   # 21 -> 22 on fp32 inputs: the call, each kernel alone, and
            p = dk.prepare_tc(**d, check_gate=False, impl=impl)   # (where the call runs them side by side) one after
            cfg = f"C=32 BV={p.bv}"                                # the other
            rows.append(_timed(p.run, budget_s, implementation=label, dtype="fp32", T=T, config=cfg, stage="all",
                               overlap=p.overlap))
            for st, step in zip((1, 2), steps):
                rows.append(_timed(lambda p=p, st=st: p.run(stages=(st,)), budget_s, implementation=label,
                                   dtype="fp32", T=T, config=cfg, stage=step))
            if p.overlap:
                p.overlap = False
                rows.append(_timed(p.run, budget_s, implementation=f"{label} one after the other", dtype="fp32", T=T,
                                   config=cfg, stage="all", overlap=False))
            del p
        tb = bf16_inputs(d)
        if tb is not None:
            prep_timed = set()
            for label, impl, steps in bf16_io_impls():
                p = dk.prepare_tc(**tb, check_gate=False, impl=impl)
                rows.append(_timed(p.run, budget_s, implementation=label, dtype="bf16", T=T,
                                   config=f"C=32 BV={p.bv}", stage="all"))
                # each recurrence alone; 07 alone once, in the form 13-20 read (its A2 output), and 21 alone
                rows.append(_timed(lambda p=p: p.run(stages=(2,)), budget_s, implementation=label, dtype="bf16",
                                   T=T, config=f"C=32 BV={p.bv}", stage=steps[1]))
                if (impl in dk.PREP_A2_IMPLS or impl in dk.PRE_IMPLS) and steps[0] not in prep_timed:
                    rows.append(_timed(lambda p=p: p.run(stages=(1,)), budget_s, implementation=label, dtype="bf16",
                                       T=T, config=f"C=32 BV={p.bv}", stage=steps[0]))
                    prep_timed.add(steps[0])
                del p
            del tb
        p = dk.prepare_chunk(**d, check_gate=False)
        rows.append(_timed(p.run, budget_s, implementation=THREE, dtype="fp32", T=T,
                           config=f"C={p.chunk_size} BV={p.bv} state={p.state_kernel}", stage="all"))
        del p
        p = dk.prepare_recurrent(**d, check_gate=False)
        rows.append(_timed(p.run, budget_s, implementation=RECURRENT, dtype="fp32", T=T, config=f"RG={p.rg}",
                           stage="all"))
        del p
        if with_fla and chunk_kda is not None:
            import torch

            for dtype, tdt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
                t = {n: torch.from_dlpack(a).to(tdt).contiguous() for n, a in d.items() if n != "initial_state"}

                def call(t=t):
                    with torch.no_grad():
                        return chunk_kda(t["q"], t["k"], t["v"], t["g"], t["beta"])
                try:
                    call()   # compile / autotune outside the timing
                    torch.cuda.synchronize()
                    rows.append(_timed(call, budget_s, implementation=FLA, dtype=dtype, T=T, config="default",
                                       stage="all"))
                except Exception as exc:  # noqa: BLE001
                    print(f"{FLA} {dtype} T={T} not timed: {type(exc).__name__}: {exc}")
                    del t
                    continue
                try:
                    replay = _graphed(call)
                    rows.append(_timed(replay, budget_s, implementation=FLA_GRAPH, dtype=dtype, T=T,
                                       config="default", stage="all"))
                    del replay
                except Exception as exc:  # noqa: BLE001
                    print(f"{FLA_GRAPH} {dtype} T={T} not timed: {type(exc).__name__}: {exc}")
                del t
    df = pd.DataFrame(rows)
    df["B"], df["H"], df["K"], df["V"] = B, H, K, V
    df["tokens_per_s"] = df["B"] * df["T"] / (df["median_ms"] * 1e-3)
    return df


def peak_memory(B: int, H: int, K: int, V: int, T_list: Iterable[int], seed: int = 0,
                with_fla: bool = True) -> pd.DataFrame:
    """Device memory a call allocates beyond its inputs and outputs (CuPy pool for ours, torch's
    allocator peak for fla, whose output o is subtracted), with the modelled workspace."""
    import cupy as cp

    pool = cp.get_default_memory_pool()
    rows = []
    chunk_kda, _, _ = fla_functions()
    for T in T_list:
        _, d = device_inputs(B, T, H, K, V, seed=seed)
        out_bytes = 4 * B * T * H * V
        two = [(lab, impl) for lab, impl, steps in tc_impls() + fp32_image_impls()
               if impl in (BEST_IMPL, "wgmma", *dk.PRE_IMPLS)]
        for label, make in (*[(lab, lambda impl=impl: dk.prepare_tc(**d, check_gate=False, impl=impl)) for lab, impl in two],
                            ("06 fused", lambda: dk.prepare_tc(**d, check_gate=False, impl="fused")),
                            (THREE, lambda: dk.prepare_chunk(**d, check_gate=False))):
            pool.free_all_blocks()
            before = pool.used_bytes()
            plan = make()
            plan.run()
            cp.cuda.get_current_stream().synchronize()
            measured = pool.used_bytes() - before - out_bytes
            rows.append(dict(implementation=label, dtype="fp32", T=T, extra_bytes=int(measured),
                             model_bytes=int(plan.workspace_bytes())))
            del plan
        tb = bf16_inputs(d)   # the bf16-I/O path with the largest workspace, 21 -> 22 (its operand images): o is bf16
        pre = [lab for lab, impl, _ in bf16_io_impls() if impl in dk.PRE_IMPLS]
        if tb is not None and pre:
            pool.free_all_blocks()
            before = pool.used_bytes()
            plan = dk.prepare_tc(**tb, check_gate=False, impl=dk.PRE_IMPLS[0])
            plan.run()
            cp.cuda.get_current_stream().synchronize()
            measured = pool.used_bytes() - before - 2 * B * T * H * V
            rows.append(dict(implementation=pre[0], dtype="bf16", T=T, extra_bytes=int(measured),
                             model_bytes=int(plan.workspace_bytes())))
            del plan, tb
        if with_fla and chunk_kda is not None:
            import torch

            for dtype, tdt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
                t = {n: torch.from_dlpack(a).to(tdt).contiguous() for n, a in d.items() if n != "initial_state"}
                try:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    before = torch.cuda.memory_allocated()
                    with torch.no_grad():
                        o, _ = chunk_kda(t["q"], t["k"], t["v"], t["g"], t["beta"])
                    torch.cuda.synchronize()
                    measured = torch.cuda.max_memory_allocated() - before - o.numel() * o.element_size()
                    rows.append(dict(implementation=FLA, dtype=dtype, T=T, extra_bytes=int(measured),
                                     model_bytes=np.nan))
                    del o
                except Exception as exc:  # noqa: BLE001
                    print(f"{FLA} {dtype} T={T}: memory not measured ({type(exc).__name__}: {exc})")
                del t
        pool.free_all_blocks()
    df = pd.DataFrame(rows)
    df["B"], df["H"], df["K"], df["V"] = B, H, K, V
    return df


#: Kernel 10's clock stamps (its KDA_PROBE=3 build: the same kernel, plus lane 0 of every warp of
#: block (0, 0, 0) storing %clock64 at each phase boundary of the first STAMP_CHUNKS chunks into
#: the final-state buffer, which that build does not otherwise write). (phase, from, to) per role.
STAMP_CHUNKS = 48
STAMP_PHASES = {
    "consumer": (("wait for FULL", 0, 1), ("S1: X = beta v - Kbg S, O = Qg S", 1, 2), ("barrier after S1", 2, 3),
                 ("S2: V' = T X", 3, 4), ("barrier after S2", 4, 5), ("S3: O += Aqk V', S update", 5, 6)),
    "producer": (("wait for EMPTY", 0, 1), ("07 copies issued, v landed, barrier", 1, 2),
                 ("gate sums, barrier", 2, 3), ("P1: exp2, splits, stores", 3, 4),
                 ("next loads issued, beta v", 4, 5), ("barrier, v issued, 07 landed", 5, 6)),
}


#: The consumer phases of the other recurrences with clock stamps (their producers are 10's:
#: kernels/delta/lean_producer.cuh). 12 with two roles: role 0 (even warps) computes X and V' and
#: updates its state; role 1 (odd warps) waits for V', computes O, updates its copy and stores o.
CONSUMER_STAMP_PHASES = {
    "lean": STAMP_PHASES["consumer"],
    "regs": (("wait for FULL", 0, 1), ("P: S^T [Kbg; Qg]^T", 1, 2), ("X, V' = X T^T", 2, 3),
             ("S update", 3, 4), ("O += V' Aqk^T, o stored", 4, 5)),
    "regs2": (("wait for FULL", 0, 1), ("P: role 0 S^T Kbg^T, role 1 S^T Qg^T", 1, 2),
              ("role 0 X, V'; role 1 waits for V'", 2, 3), ("role 0 S update; role 1 O", 3, 4),
              ("role 0 EMPTY; role 1 S update, o stored", 4, 5)),
}


CONSUMER_STAMP_PHASES["wgmma"] = (
    ("next copies issued, decay, P1: [X; Ob] = [beta v; 0] - [Kbg; Qg] S", 0, 1), ("X^T stored, barrier", 1, 2),
    ("P2: [V'; A2 X] = [T; A2] X", 2, 3), ("o and V'^T stored, barrier", 3, 4),
    ("P4 issued, next chunk's P1 operands built", 4, 5), ("P4 completes", 5, 6),
    ("S^T stored, copies landed, barrier", 6, 7))
#: 13's element-wise warpgroup (the "producer" role): its phases and its warp count; 10 and 12 have
#: eight producer warps with STAMP_PHASES["producer"]
PRODUCER_STAMP_PHASES = {"wgmma": (("staged chunk read, next copies issued, wait for EMPTY", 0, 1),
                                   ("gates, e^G; Kbg, Qg, Kd^T, 2^G_L stored", 1, 2),
                                   ("fence, FULL", 2, 3))}
PRODUCER_WARPS = {"wgmma": 4}
#: 14 runs 13's chain and WG_E arithmetic; its WG_E waits on the tile's mbarrier and the cluster's release
for _mc in ("bulk", "bulk2", "multicast", "tma", "tma2", "tma3", "diet", "single"):
    CONSUMER_STAMP_PHASES[_mc] = CONSUMER_STAMP_PHASES["wgmma"]
    PRODUCER_STAMP_PHASES[_mc] = (("tile landed and read, (cluster released it,) next rows copied, "
                                   "wait for EMPTY", 0, 1),) + PRODUCER_STAMP_PHASES["wgmma"][1:]
    PRODUCER_WARPS[_mc] = 4


#: 19: 15's / 17's loop with nothing built between P4's issue and its completion (P1 reads WG_E's tile)
CONSUMER_STAMP_PHASES["tile"] = tuple(("P4 issued, next chunk's hand-over (FULL) waited", a, b) if a == 4 else (p, a, b)
                                      for p, a, b in CONSUMER_STAMP_PHASES["wgmma"])
PRODUCER_STAMP_PHASES["tile"] = (PRODUCER_STAMP_PHASES["diet"][0],
                                 ("gates, e^G; [Kg; Qg]^T tiles, Kd^T, 2^G_L stored", 1, 2),
                                 PRODUCER_STAMP_PHASES["diet"][2])
PRODUCER_WARPS["tile"] = 4


#: 18: each chunk's P1 a chunk early (wgmma_recurrence.cuh's AHEAD loop: WG_C stamps 0-4; WG_E's are 15's,
#: its wait for EMPTY now Kbg / Qg's, and its arithmetic holds the wait for Kd^T's EMPTY_KD)
CONSUMER_STAMP_PHASES["ahead"] = (
    ("P1b = W V' and P4 of the chunk before issued, next copies, P1b done", 0, 1),
    ("X^T stored, P4 done, decay, S^T stored, barrier", 1, 2),
    ("P2 issued, next chunk's operands built, its PQ issued, P2 done", 2, 3),
    ("o and V'^T stored, copies landed, PQ done, barrier", 3, 4))
PRODUCER_STAMP_PHASES["ahead"] = (PRODUCER_STAMP_PHASES["diet"][0],
                                  ("gates, e^G; Kbg, Qg stored, FULL; wait for EMPTY_KD; Kd^T, 2^G_L stored", 1, 2),
                                  PRODUCER_STAMP_PHASES["diet"][2])
PRODUCER_WARPS["ahead"] = 4


#: 23: 16's chain at 32 value columns, hi / lo row pairs (wgmma_recurrence.cuh's kda_wg_chain_hilo: WG_C stamps 0-4;
#: WG_E is 19's)
CONSUMER_STAMP_PHASES["hilo"] = (
    ("P1^T = S^T [Kg; Qg]^T issued; the chunk before's o stored, barrier; next copies, decay, v, beta; P1 done", 0, 1),
    ("X^T split, P2: V'^T = X^T T^T", 1, 2),
    ("V'^T split, P4 (two halves) and A2 X issued, next hand-over (FULL) waited, first half split, P4 done", 2, 3),
    ("second half of S^T split, A2 X done", 3, 4))
PRODUCER_STAMP_PHASES["hilo"] = PRODUCER_STAMP_PHASES["tile"]
PRODUCER_WARPS["hilo"] = 4


#: 24: 19's loop, P4's A fragments (Kd^T) loaded by ldmatrix behind P2's issue, inside P2's stamps
CONSUMER_STAMP_PHASES["kdreg"] = tuple(("P2: [V'; A2 X] = [T; A2] X, Kd^T fragments loaded", a, b) if a == 2 else (p, a, b)
                                       for p, a, b in CONSUMER_STAMP_PHASES["tile"])
PRODUCER_STAMP_PHASES["kdreg"] = PRODUCER_STAMP_PHASES["tile"]
PRODUCER_WARPS["kdreg"] = 4

#: 30: 24's loop; the chunk before's o stored behind P1's issue, inside P1's stamps
CONSUMER_STAMP_PHASES["late"] = tuple(("the chunk before's o stored, " + p, a, b) if a == 0 else (p, a, b)
                                      for p, a, b in CONSUMER_STAMP_PHASES["kdreg"])
PRODUCER_STAMP_PHASES["late"] = PRODUCER_STAMP_PHASES["kdreg"]
PRODUCER_WARPS["late"] = 4


#: 28: 24's loop; WG_C hands its buffer back inside P2's stamps and waits for the other block's half (PFULL) with its
#: FULL; WG_E's copies to the other block (after its PEMPTY) fall before the next chunk's EMPTY wait
CONSUMER_STAMP_PHASES["pair"] = tuple(
    (("P2: [V'; A2 X] = [T; A2] X, Kd^T fragments loaded, buffer handed back" if a == 2 else
      "P4 issued, next chunk's hand-over (FULL) and the other block's half (PFULL) waited" if a == 4 else p), a, b)
    for p, a, b in CONSUMER_STAMP_PHASES["kdreg"])
PRODUCER_STAMP_PHASES["pair"] = (("half copied to the other block (its PEMPTY waited), tile landed and read, next rows "
                                  "copied, wait for EMPTY", 0, 1),) + PRODUCER_STAMP_PHASES["kdreg"][1:]
PRODUCER_WARPS["pair"] = 4


#: 25: the WY form's loop (wgmma_recurrence.cuh's WY branch: WG_C stamps 0-5; WG_E is 19's, W made inside its arithmetic)
CONSUMER_STAMP_PHASES["wy"] = (
    ("next copies issued, decay, P1: [V'; Ob] = [-W; Qg] S + [T; 0] beta v, Kd^T fragments loaded", 0, 1),
    ("V'^T stored, barrier", 1, 2),
    ("P4 and Aqk V' issued, next hand-over (FULL), slot and (beta v)^T", 2, 3),
    ("P4 completes", 3, 4),
    ("S^T stored, o stored, barrier", 4, 5))
PRODUCER_STAMP_PHASES["wy"] = (PRODUCER_STAMP_PHASES["tile"][0],
                               ("gates, e^G; -W = -T' Kg, [-W; Qg]^T tiles, Kd^T, 2^G_L stored", 1, 2),
                               PRODUCER_STAMP_PHASES["tile"][2])
PRODUCER_WARPS["wy"] = 4


#: 16: the chain turned around (kernels/delta/16_chunk_state_wgrs.cu: WG_C stamps 0-4, WG_E 0-3)
CONSUMER_STAMP_PHASES["wgrs"] = (
    ("barrier, next copies issued, wait for FULL", 0, 1),
    ("P1^T = S^T [Kg^T | Qg^T] (S^T split; decay, next v and beta beside it)", 1, 2),
    ("X^T, P2^T = X^T [T^T | A2^T]", 2, 3),
    ("P4: S^T 2^G_L + V'^T Kd (o stored beside it)", 3, 4))
PRODUCER_STAMP_PHASES["wgrs"] = PRODUCER_STAMP_PHASES["diet"]
PRODUCER_WARPS["wgrs"] = 4


def phase_cycles(B: int, H: int, K: int, V: int, T: int, seed: int = 0, skip: int = 8,
                 impl: str = BEST_IMPL, defines: dict | None = None) -> pd.DataFrame:
    """Median SM cycles of every phase of a recurrence kernel (10 by default; ``impl`` any key of
    :data:`CONSUMER_STAMP_PHASES`) per warp role, over chunks skip..STAMP_CHUNKS-1 of block (0, 0, 0)
    (the first chunks fill the pipeline), with the chunk period (stamp 0 to stamp 0 of the next chunk).
    ``defines``: more macros for the build (a probe's variant). A bf16-only impl (17) runs on the inputs
    rounded to bf16 (:func:`probe_inputs`). One tidy row per (role, warp, phase)."""
    if impl not in CONSUMER_STAMP_PHASES:
        raise ValueError(f"phase_cycles times impl {' or '.join(map(repr, CONSUMER_STAMP_PHASES))}, got {impl!r}")
    _, d = device_inputs(B, T, H, K, V, seed=seed)
    d, _ = probe_inputs(d, impl)
    if -(-T // dk.FUSED_CHUNK) < STAMP_CHUNKS:
        raise ValueError(f"phase_cycles needs T >= {STAMP_CHUNKS * dk.FUSED_CHUNK} (stamps of "
                         f"{STAMP_CHUNKS} chunks), got {T}")
    plan = dk.prepare_tc(**d, check_gate=False, impl=impl, output_final_state=True, defines={**(defines or {}), "KDA_PROBE": 3, "KDA_NSTAMP": STAMP_CHUNKS})
    plan.run()   # compile and warm up
    plan.run()
    n_warps = plan.launch_configs()["state"]["block"][0] // 32
    n_consumers = n_warps - PRODUCER_WARPS.get(impl, 8)   # the producer warps come after the consumers
    st = plan.final_state.ravel()[: n_warps * STAMP_CHUNKS * 8].get()
    st = st.reshape(n_warps, STAMP_CHUNKS, 8).astype(np.float64)[:, skip:]
    rows = []
    phases = {"consumer": CONSUMER_STAMP_PHASES[impl],
              "producer": PRODUCER_STAMP_PHASES.get(impl, STAMP_PHASES["producer"])}
    for w in range(n_warps):
        role = "consumer" if w < n_consumers else "producer"
        for phase, a, b in phases[role]:
            rows.append(dict(role=role, warp=w, phase=phase, median_cycles=float(np.median(st[w, :, b] - st[w, :, a]))))
        rows.append(dict(role=role, warp=w, phase="chunk period", median_cycles=float(np.median(np.diff(st[w, :, 0])))))
    df = pd.DataFrame(rows)
    df["B"], df["T"], df["H"], df["K"], df["V"], df["chunks"] = B, T, H, K, V, STAMP_CHUNKS - skip
    return df


#: 24's probe build with valid results: its operand buffer handed back to WG_E right after P4's A fragments are loaded
KD_EARLY_PROBE = "24, its buffer handed back before P4 (KDA_KD_EARLY=1)"
#: a probe build within this fraction of its plain build's time is called neither faster nor slower (the timings'
#: relative IQR is a few tenths of a per cent at T = 16384; run-to-run shifts of a kernel reach about 1 %)
PROBE_NOISE = 0.02
#: the defines whose builds compute meaningless results (probes of time only): describe_probes sets each such build
#: against its plain build
MEANINGLESS_DEFINES = ("KDA_PROBE", "KDA_P1_TERMS", "KDA_NO_P2", "KDA_WY_NO_W", "KDA_E_SHARE")
#: the WY form's chain (wgmma_recurrence.cuh, KDA_NO_P2: P1 then P4, no P2 stage between them; results meaningless):
#: what computing W = T Kbg and U = T beta v off the chain would leave of 24's chunk, and of 22's on fp32 images
WY_PROBE = "as the WY form's chain would run, no P2 stage (KDA_NO_P2)"
#: 25 with WG_E's W = T' Kg product skipped, Kg stored in -W's place (results meaningless): what that product costs
WY_NO_W_PROBE = "25 without W's product in WG_E, Kg in -W's place (KDA_WY_NO_W=1; results meaningless)"
#: 25 with W's rows made a token at a time (every FMA of a step independent; results 25's)
WY_WLOOP_PROBE = "25, W made a token at a time into all of a thread's rows (KDA_WY_WLOOP=2; results 25's)"
#: 24 with WG_E's q, k, g loaded from global memory, no staging tile (results 24's): whether the tile's shared-memory
#: traffic (its landing and WG_E's reads of it) holds 24 back
E_LDG_PROBE = "24, WG_E's q, k, g loaded from global memory, no staging tile (KDA_E_LDG=1; results 24's)"
#: the same with loads that allocate no L1 line (a chunk's 48 KB of q, k, g read once would only evict)
E_LDG_NA_PROBE = ("24, WG_E's q, k, g loaded from global memory without L1 allocation, no staging tile (KDA_E_LDG=2; "
                  "results 24's)")
#: probe builds whose results are their plain build's: set against it as faster, slower or within the noise
SAME_RESULT_PROBES = (WY_WLOOP_PROBE, E_LDG_PROBE, E_LDG_NA_PROBE)
#: 24 with each WG_E thread at a share of its tokens (KDA_E_SHARE; results meaningless): the bound on sharing WG_E's
#: element-wise work over a cluster of that many value blocks, each making its share of every block's operands
E_SHARE_PROBES = {n: f"24, WG_E at {part} of its tokens a thread (KDA_E_SHARE={n}; results meaningless)"
                  for n, part in ((2, "half"), (4, "a quarter"))}
#: Probe builds timed beside the recurrences they change: (label, impl, defines; every impl one of :data:`TC_IMPLS`).
#: Results meaningless (KDA_PROBE, KDA_P1_TERMS, KDA_NO_P2, KDA_WY_NO_W, KDA_E_SHARE: :data:`MEANINGLESS_DEFINES`), times
#: telling, but for :data:`KD_EARLY_PROBE` and :data:`SAME_RESULT_PROBES`, whose results are their plain build's. 10: each side alone; 13: no input copies after chunk 0, WG_E's
#: arithmetic idle; 14's forms in the ladder beside them (bulk copies, tensor copies), and the same two probes of its
#: tensor-copy form; 15-24: their chains alone and other parts taken away; 24 and 22 on fp32 images with the WY form's
#: chain (:data:`WY_PROBE`); 25, its chain alone and without WG_E's W product (:data:`WY_NO_W_PROBE`); 24 with WG_E at
#: a share of its tokens (:data:`E_SHARE_PROBES`) and with its inputs loaded from global memory (:data:`E_LDG_PROBE`,
#: :data:`E_LDG_NA_PROBE`).
PROBE_BUILDS = (("10", "lean", {}), ("10 producers alone (KDA_PROBE=1)", "lean", {"KDA_PROBE": 1}),
                ("10 consumers alone (KDA_PROBE=2)", "lean", {"KDA_PROBE": 2}),
                ("13", "wgmma", {}), ("13 without input copies after chunk 0 (KDA_PROBE=4)", "wgmma", {"KDA_PROBE": 4}),
                ("13 chain alone, WG_E arithmetic idle (KDA_PROBE=5)", "wgmma", {"KDA_PROBE": 5}),
                ("14 bulk", "bulk", {}), ("14 tma", "tma", {}), ("14 tma, WG_C too", "tma2", {}),
                ("14 tma, WG_C too, without input copies after chunk 0 (KDA_PROBE=4)", "tma2", {"KDA_PROBE": 4}),
                ("14 tma, WG_C too, chain alone, WG_E arithmetic idle (KDA_PROBE=5)", "tma2", {"KDA_PROBE": 5}),
                ("15", "diet", {}), ("15 chain alone, WG_E arithmetic idle (KDA_PROBE=5)", "diet", {"KDA_PROBE": 5}),
                ("16", "wgrs", {}), ("16 chain alone, WG_E arithmetic idle (KDA_PROBE=5)", "wgrs", {"KDA_PROBE": 5}),
                ("17 (bf16 I/O)", "single", {}),
                ("17 (bf16 I/O) chain alone, WG_E arithmetic idle (KDA_PROBE=5)", "single", {"KDA_PROBE": 5}),
                ("18 (bf16 I/O)", "ahead", {}),
                ("18 (bf16 I/O) chain alone, WG_E arithmetic idle (KDA_PROBE=5)", "ahead", {"KDA_PROBE": 5}),
                ("19", "tile", {}), ("19 chain alone, WG_E arithmetic idle (KDA_PROBE=5)", "tile", {"KDA_PROBE": 5}),
                ("19, WG_E at half its tokens a thread (KDA_PROBE=6)", "tile", {"KDA_PROBE": 6}),
                ("20", "wide", {}), ("22 (bf16 I/O)", "pre", {}),
                ("23", "hilo", {}), ("23 chain alone, WG_E arithmetic idle (KDA_PROBE=5)", "hilo", {"KDA_PROBE": 5}),
                ("24", "kdreg", {}), ("24 chain alone, WG_E arithmetic idle (KDA_PROBE=5)", "kdreg", {"KDA_PROBE": 5}),
                ("24 without input copies after chunk 0 (KDA_PROBE=4)", "kdreg", {"KDA_PROBE": 4}),
                ("24 with P1 as one term, its two lo terms dropped (KDA_P1_TERMS=1; results meaningless, as a KDA_PROBE "
                 "build's)", "kdreg", {"KDA_P1_TERMS": 1}),
                (KD_EARLY_PROBE, "kdreg", {"KDA_KD_EARLY": 1}),
                (f"24 {WY_PROBE}", "kdreg", {"KDA_NO_P2": 1}),
                (f"24 chain alone, WG_E arithmetic idle, {WY_PROBE.replace(' (KDA_NO_P2)', '')} (KDA_NO_P2, KDA_PROBE=5)",
                 "kdreg", {"KDA_NO_P2": 1, "KDA_PROBE": 5}),
                ("22 (fp32 images)", "pre", {}), (f"22 (fp32 images) {WY_PROBE}", "pre", {"KDA_NO_P2": 1}),
                ("25", "wy", {}), ("25 chain alone, WG_E arithmetic idle (KDA_PROBE=5)", "wy", {"KDA_PROBE": 5}),
                (WY_NO_W_PROBE, "wy", {"KDA_WY_NO_W": 1}), (WY_WLOOP_PROBE, "wy", {"KDA_WY_WLOOP": 2}),
                *((label, "kdreg", {"KDA_E_SHARE": n}) for n, label in E_SHARE_PROBES.items()),
                (E_LDG_PROBE, "kdreg", {"KDA_E_LDG": 1}), (E_LDG_NA_PROBE, "kdreg", {"KDA_E_LDG": 2}))


#: kernels/bench/04_wgmma_rate.cu: the shapes a probe measures (N, A from registers, warpgroups, chains; four chains
#: at one warpgroup and N <= 64, where their accumulators fit)
WGMMA_RATE_SHAPES = tuple((n, rs, nwg, ch) for n in (16, 32, 64, 128) for rs in (True, False)
                          for nwg in (1, 2) for ch in (1, 2)) + tuple((n, rs, 1, 4) for n in (16, 32, 64)
                                                                     for rs in (True, False))
#: ... and its other forms at one warpgroup and chain (N, A from registers, form): 1, the shared-memory operand
#: MN-major (A, or B at N = 64); 2, each group of WGMMA_RATE_UNROLL wgmmas waited before the next is issued
WGMMA_FORM_SHAPES = (tuple((n, False, 1) for n in (16, 32, 64)) + ((64, True, 1),)
                     + tuple((n, rs, 2) for n in (16, 32, 64, 128) for rs in (True, False)))
WGMMA_FORMS = {0: "K-major, a group in flight", 1: "MN-major", 2: "each group waited"}
WGMMA_RATE_SOURCE = "bench/04_wgmma_rate.cu"
WGMMA_RATE_UNROLL = 8   # wgmmas per loop trip: passed to the kernel as WR_UNROLL, so the two cannot disagree


def wgmma_macs_per_cycle(n: int, wgmmas: int, nwg: int, cycles: float) -> float:
    """Multiply-adds per SM cycle of ``nwg`` warpgroups each issuing ``wgmmas`` m64nNk16 wgmmas in
    ``cycles`` SM cycles (one block per SM; pure)."""
    if min(n, wgmmas, nwg) < 1 or not cycles > 0:
        raise ValueError(f"need positive n, wgmma count, warpgroups and cycles, got {n}, {wgmmas}, {nwg}, {cycles}")
    return 64 * n * 16 * wgmmas * nwg / cycles


def wgmma_rate_table(shapes=WGMMA_RATE_SHAPES, iters: int = 4096, forms=WGMMA_FORM_SHAPES) -> pd.DataFrame:
    """kernels/bench/04_wgmma_rate.cu on every SM for each (N, A from registers, warpgroups, chains) of ``shapes``
    and each (N, A from registers, form) of ``forms`` (one warpgroup, one chain): the median over blocks of each
    warpgroup's loop cycles, the cycles per wgmma and per group of WGMMA_RATE_UNROLL, and the MACs per SM cycle that
    gives (sm_90a; a probe's table: what a narrow wgmma chain can issue, one warpgroup against two)."""
    import cupy as cp

    from ..compile import load_kernel

    sms = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"]
    rows = []
    for n, rs, nwg, ch, form in [(*s, 0) for s in shapes] + [(n, rs, 1, 1, f) for n, rs, f in forms]:
        ker = load_kernel(WGMMA_RATE_SOURCE, "wgmma_rate", (n, rs, nwg, ch, form), arch=dk.WGMMA_ARCH,
                          defines={"WR_UNROLL": WGMMA_RATE_UNROLL})
        smem = 64 * 128 + n * 128 + 1024   # WrLayout<N>::SMEM_BYTES: the A tile, the B tile, room to align
        ker.max_dynamic_shared_size_bytes = smem
        out = cp.zeros(2 * sms * nwg, dtype=cp.float32)
        ker((sms,), (128 * nwg,), (out, np.int32(iters // 8)), shared_mem=smem)   # warm-up
        out[:] = 0
        ker((sms,), (128 * nwg,), (out, np.int32(iters)), shared_mem=smem)
        cp.cuda.get_current_stream().synchronize()
        host = out.get()
        if not np.all(np.isfinite(host[sms * nwg:])):
            raise RuntimeError(f"wgmma_rate<{n}, {rs}, {nwg}, {ch}, {form}> produced non-finite values")
        cycles = float(np.median(host[:sms * nwg]))
        rows.append(dict(N=n, a_from="registers" if rs else "shared", warpgroups=nwg, chains=ch,
                         form=WGMMA_FORMS[form], iters=iters, median_cycles=cycles,
                         cycles_per_wgmma=cycles / (iters * WGMMA_RATE_UNROLL), cycles_per_group=cycles / iters,
                         macs_per_sm_cycle=wgmma_macs_per_cycle(n, iters * WGMMA_RATE_UNROLL, nwg, cycles)))
    return pd.DataFrame(rows)


def probe_io(label: str, impl: str) -> str:
    """The storage type a probe build of :data:`PROBE_BUILDS` runs on: bf16 for an impl that takes bf16 inputs
    only (17, 18) and for a label that says "(bf16 I/O)" (22), fp32 otherwise."""
    return "bf16" if impl in dk.BF16_ONLY_IMPLS or "(bf16 I/O)" in label else "fp32"


def probe_inputs(d: dict, impl: str, io: str | None = None) -> tuple[dict, str]:
    """The inputs a probe of ``impl`` runs on and their storage type: ``d`` ("fp32"), or, for an impl
    that takes bf16 inputs only (17) or ``io="bf16"``, q, k, v, g, beta rounded to bf16 (:func:`bf16_inputs`;
    the initial state stays fp32)."""
    if impl not in dk.BF16_ONLY_IMPLS and io != "bf16":
        return d, "fp32"
    tb = bf16_inputs(d)
    if tb is None:
        raise ValueError(f"impl={impl!r} runs on bf16 inputs only: it needs torch and a CUDA device")
    return dict(tb, **({"initial_state": d["initial_state"]} if d.get("initial_state") is not None else {})), "bf16"


def probe_latency(B: int, H: int, K: int, V: int, T: int, budget_s: float = 0.2, seed: int = 0,
                  labels: Iterable[str] | None = None) -> pd.DataFrame:
    """The recurrence alone (07's output in place) of 10 and 13 and of their probe builds
    (:data:`PROBE_BUILDS`; ``labels``: only those), timed at T in one run: where each recurrence's time goes."""
    if labels is not None:
        labels = set(labels)
        unknown = labels - {x[0] for x in PROBE_BUILDS}
        if unknown:
            raise ValueError(f"not probe builds (fast.PROBE_BUILDS): {sorted(unknown)}; pass labels from it")
    rows = []
    ok = {x[1] for x in tc_impls()} | {x[1] for x in bf16_io_impls()}   # 17: bf16 inputs (probe_inputs)
    _, d = device_inputs(B, T, H, K, V, seed=seed + T)
    for label, impl, defines in PROBE_BUILDS:
        if impl not in ok or (labels is not None and label not in labels):
            continue
        x, io = probe_inputs(d, impl, probe_io(label, impl))
        p = dk.prepare_tc(**x, check_gate=False, impl=impl, defines=defines or None)
        p.run()
        rows.append(_timed(lambda p=p: p.run(stages=(2,)), budget_s, implementation=label, dtype=io, T=T,
                           config=f"C=32 BV={p.bv}", stage="recurrence"))
        del p
    df = pd.DataFrame(rows)
    df["B"], df["H"], df["K"], df["V"] = B, H, K, V
    return df


#: The warpgroup recurrences whose clock stamps notebook 13 records beside 10's: 13, 14's row bulk copies
#: and its tensor-copy form with WG_C's copies as tensor copies too.
WG_STAMP_IMPLS = ("wgmma", "bulk", "tma2", "diet", "wgrs", "single", "ahead", "tile", "hilo", "kdreg", "wy", "late")   # 17, 18: on bf16 inputs


def wg_phase_cycles(B: int, H: int, K: int, V: int, T: int, seed: int = 0, impls=WG_STAMP_IMPLS) -> pd.DataFrame:
    """:func:`phase_cycles` of each of ``impls`` this GPU runs, one frame with an ``implementation``
    column (empty where none runs)."""
    ok = {x[1] for x in tc_impls()} | {x[1] for x in bf16_io_impls()}   # 17: bf16 inputs (probe_inputs)
    frames = [phase_cycles(B, H, K, V, T, seed=seed, impl=i).assign(implementation=i) for i in impls if i in ok]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["role", "warp", "phase", "median_cycles", "implementation"])


def describe_wg_phases(phases: pd.DataFrame) -> list[str]:
    """One generated line per implementation of :func:`wg_phase_cycles`'s table: its chunk period,
    how long the element-wise warpgroup spends before its arithmetic (its inputs landing and read,
    copies issued, WG_C's release), that arithmetic, and the chain's first phase (P1 with the copies
    issued beside it)."""
    lines = []
    for impl, g in phases.groupby("implementation", sort=False):
        m = phase_summary(g.drop(columns="implementation")).set_index(["role", "phase"])["median_cycles"]
        period = m[("consumer", "chunk period")]
        prod = [p for r, p in m.index if r == "producer" and p != "chunk period"]
        first, arith = m[("producer", prod[0])], m[("producer", prod[1])]
        p1_name = next(p for p, _, _ in CONSUMER_STAMP_PHASES.get(impl, CONSUMER_STAMP_PHASES["wgmma"]) if "P1" in p)
        p1 = m[("consumer", p1_name)]
        lines.append(f"- {impl}: chunk period {period:.0f} cycles; WG_E spends {first:.0f} ({100 * first / period:.0f} %) "
                     f"on its inputs and the hand-over before its arithmetic, {arith:.0f} on the arithmetic; "
                     f"WG_C's P1 phase ({p1_name}) takes {p1:.0f}.")
    return lines


def _within_noise(r: float) -> bool:
    """Whether a build's speed ratio to the build it varies lies inside the probes' noise band (:data:`PROBE_NOISE`)."""
    return abs(r - 1) < PROBE_NOISE


def describe_probes(probes: pd.DataFrame) -> list[str]:
    """Generated lines on :func:`probe_latency`'s table: each probe build (KDA_PROBE, whose results are
    meaningless, and 24's KDA_KD_EARLY, whose results are 24's) against the plain build of the same recurrence
    (:data:`PROBE_BUILDS`), and each plain build of 14 against 13."""
    ms = probes.set_index("implementation")["median_ms"]
    impl_of = {label: (impl, probe_io(label, impl)) for label, impl, _ in PROBE_BUILDS}   # 22: bf16 and fp32 inputs
    plain = {(impl, probe_io(label, impl)): label for label, impl, defines in PROBE_BUILDS if not defines}
    timing_only = {label for label, _, defines in PROBE_BUILDS if set(defines or {}) & set(MEANINGLESS_DEFINES)}
    lines = []
    for label, t in ms.items():
        base = plain.get(impl_of.get(label))
        if (label in timing_only or "KDA_PROBE" in label) and base in ms.index:
            lines.append(f"- {label}: {t:.3f} ms against {ms[base]:.3f} ms for {base} as built "
                         f"({ms[base] - t:+.3f} ms is what the build took away).")
        elif label in SAME_RESULT_PROBES and base in ms.index:   # the same results, another way to them
            r = ms[base] / t
            verdict = (f"within {PROBE_NOISE:.0%} of it" if _within_noise(r) else
                       "faster" if r > 1 else "slower")
            lines.append(f"- {label}: {t:.3f} ms against {ms[base]:.3f} ms for {base} as built, {r:.3f}× its speed "
                         f"({verdict}).")
        elif label == KD_EARLY_PROBE and base in ms.index:   # the same results, another hand-over
            r = ms[base] / t
            verdict = (f"within {PROBE_NOISE:.0%} of it: WG_E waiting for its buffer is not what holds {base} back"
                       if _within_noise(r) else
                       f"faster: WG_E waiting for its buffer held {base} back" if r > 1 else
                       "slower: the earlier hand-over costs more than it frees")
            lines.append(f"- {label}: {t:.3f} ms against {ms[base]:.3f} ms for {base} as built, {r:.3f}× its speed "
                         f"({verdict}).")
    for label, t in ms.items():
        if label.startswith("14") and "KDA_PROBE" not in label and "13" in ms.index:
            r = ms["13"] / t
            lines.append(f"- {label}: {t:.3f} ms, {r:.2f}× 13's speed ({'faster' if r > 1 else 'slower'}).")
    half = "19, WG_E at half its tokens a thread (KDA_PROBE=6)"
    if {"19", "20"} <= set(ms.index):
        r = ms["19"] / ms["20"]
        line = (f"- 20 (two element-wise warpgroups): {ms['20']:.3f} ms, {r:.2f}× 19's speed "
                f"({'faster' if r > 1 else 'slower'})")
        if half in ms.index and ms["19"] > ms[half]:
            got = (ms["19"] - ms["20"]) / (ms["19"] - ms[half])
            line += (f"; of what halving WG_E's tokens a thread took off 19 ({ms['19'] - ms[half]:.3f} ms, half of its "
                     f"work gone with them), 20 " + (f"gains {got:.0%}" if got >= 0 else "gains nothing") +
                     " with all of the work kept")
        lines.append(line + ".")
    if {"19", "23"} <= set(ms.index):   # 23: 19's operands, the chain turned around in registers
        r = ms["19"] / ms["23"]
        line = (f"- 23 (the chain in registers, hi / lo terms as accumulator row pairs): {ms['23']:.3f} ms, {r:.2f}× 19's "
                f"speed ({'faster' if r > 1 else 'slower'})")
        a19, a23 = (f"{n} chain alone, WG_E arithmetic idle (KDA_PROBE=5)" for n in ("19", "23"))
        if {a19, a23} <= set(ms.index):
            line += f"; its chain alone {ms[a23]:.3f} ms against 19's {ms[a19]:.3f} ms"
        lines.append(line + ".")
    rec, alone = "17 (bf16 I/O)", "17 (bf16 I/O) chain alone, WG_E arithmetic idle (KDA_PROBE=5)"
    if {"22 (bf16 I/O)", rec, alone} <= set(ms.index):
        t, gap = ms["22 (bf16 I/O)"], ms[rec] - ms[alone]
        lines.append(f"- 22 (the operands from 21, no element-wise warpgroup): {t:.3f} ms against 17's {ms[rec]:.3f} ms "
                     f"and 17's chain alone, WG_E idle, {ms[alone]:.3f} ms: "
                     + (f"below that floor by {ms[alone] - t:.3f} ms." if t < ms[alone] else
                        f"{(ms[rec] - t) / gap:.0%} of the gap between them closed." if gap > 0 else "no gap to close."))
    return lines


#: the probe builds scripts/probe_delta_wy.py times: 24 and 22 (fp32 images) as built and in the WY form's chain
WY_LABELS = ("24", "24 chain alone, WG_E arithmetic idle (KDA_PROBE=5)", f"24 {WY_PROBE}",
             f"24 chain alone, WG_E arithmetic idle, {WY_PROBE.replace(' (KDA_NO_P2)', '')} (KDA_NO_P2, KDA_PROBE=5)",
             "22 (fp32 images)", f"22 (fp32 images) {WY_PROBE}",
             "25", "25 chain alone, WG_E arithmetic idle (KDA_PROBE=5)", WY_NO_W_PROBE, WY_WLOOP_PROBE)


def describe_wy_probe(probes: pd.DataFrame, prep_ms: float, fla_bf16_ms: float, goal: float = 1.9) -> list[str]:
    """Generated lines on the WY probe (KDA_NO_P2, :data:`WY_PROBE`): 07 alone (``prep_ms``) plus 24 as built and plus
    24 with the WY form's chain, against the time ``goal`` x fla (bf16, ``fla_bf16_ms``) allows. The probe issues
    no product for W = T Kbg or U = T beta v, so its sum is a bound on what the WY form can reach, not a forecast.
    Empty where a time is missing."""
    ms = probes.set_index("implementation")["median_ms"]
    wy = f"24 {WY_PROBE}"
    if not {"24", wy} <= set(ms.index) or not np.isfinite([prep_ms, fla_bf16_ms]).all():
        return []
    allow = fla_bf16_ms / goal
    now, best = prep_ms + ms["24"], prep_ms + ms[wy]
    verdict = (f"{allow - best:.3f} ms inside it" if best <= allow else
               f"still {best - allow:.3f} ms ({best / allow - 1:.0%}) past it")
    return [f"- 07 alone + 24 as built: {prep_ms:.3f} + {ms['24']:.3f} = {now:.3f} ms; {goal}x fla's {fla_bf16_ms:.3f} ms "
            f"(bf16) allows {allow:.3f} ms.",
            f"- 07 alone + 24 {WY_PROBE}: {prep_ms:.3f} + {ms[wy]:.3f} = {best:.3f} ms, {verdict}. The probe makes no "
            "W = T Kbg and no U = T beta v: what they cost comes on top, so this is the WY form's bound, not its time."]


#: the call whose recurrence the probe builds of :func:`describe_recurrence_bounds` stand in for, and those builds
#: with the design each one bounds
BOUND_CALL, BOUND_BASE = "07+24", "24"
BOUND_PROBES = ((E_SHARE_PROBES[2], "WG_E's work shared by a cluster of two value blocks"),
                (E_SHARE_PROBES[4], "shared by a cluster of four"),
                ("24 chain alone, WG_E arithmetic idle (KDA_PROBE=5)", "no element-wise work beside the chain"),
                (f"24 {WY_PROBE}", "the WY form's chain with W and U free"),
                (f"24 chain alone, WG_E arithmetic idle, {WY_PROBE.replace(' (KDA_NO_P2)', '')} (KDA_NO_P2, KDA_PROBE=5)",
                 "both: the WY form's chain alone"))


def describe_recurrence_bounds(probes: pd.DataFrame, latency: pd.DataFrame, T: int, goal: float = 1.9) -> list[str]:
    """Generated lines: what :data:`BOUND_CALL` at T would take with its recurrence at each probe build's time of
    :data:`BOUND_PROBES` (the call, less :data:`BOUND_BASE` alone, plus the probe: both from the probe table), against
    the time ``goal``x fla (bf16, its faster call) allows. Each probe leaves work out that its design would still do
    (stores and hand-overs across a cluster, the products that make W and U), so each sum bounds that design from
    below; it forecasts nothing. Empty where the call, fla or 24 alone is missing."""
    ms = probes.set_index("implementation")["median_ms"]
    call, (fla, who) = _ms(latency, BOUND_CALL, T), fla_ms(latency, T)
    if BOUND_BASE not in ms.index or not np.isfinite([call, fla]).all():
        return []
    allow, base = fla / goal, float(ms[BOUND_BASE])
    lines = [f"- At T={T}, {BOUND_CALL} takes {call:.3f} ms (its recurrence {base:.3f} ms alone in the probe table); "
             f"{goal}x fla's {fla:.3f} ms (bf16, {who}) allows {allow:.3f} ms, "
             + (f"{allow - call:.3f} ms more than it takes." if call <= allow else
                f"so the call must lose {call - allow:.3f} ms ({1 - allow / call:.0%}).")]
    for label, design in BOUND_PROBES:
        if label not in ms.index:
            continue
        t = float(ms[label])
        total = call - base + t
        verdict = (f"{allow - total:.3f} ms inside the goal" if total <= allow else
                   f"still {total - allow:.3f} ms ({total / allow - 1:.0%}) past it")
        lines.append(f"- {design} (bound: {label}): {call:.3f} - {base:.3f} + {t:.3f} = {total:.3f} ms, {verdict}.")
    return lines


def _stage_ms(latency: pd.DataFrame, impl: str, T: int, stage: str, dtype: str = "fp32") -> float:
    r = latency[(latency["implementation"] == impl) & (latency["dtype"] == dtype) & (latency["T"] == T)
                & (latency["stage"] == stage)]["median_ms"]
    return float(r.iloc[0]) if len(r) else float("nan")


def describe_fp32_images(latency: pd.DataFrame, memory: pd.DataFrame, T: int, bound: float = 0.6) -> list[str]:
    """Generated lines on 21 -> 22 with fp32 inputs (:data:`FP32_IMAGE_IMPLS`) against the ladder row it changes
    (:data:`IMAGES_BASE`, 07 -> 19) at T: the two calls, what 22 saves against 19 and what 21 adds to 07 (both
    alone), and the images' workspace against fla's (bf16) and ``bound``. Empty where a time is missing."""
    a, b = FP32_IMAGES, IMAGES_BASE
    call, base = _ms(latency, a, T), _ms(latency, b, T)
    t21, t22, t07, t19 = (_stage_ms(latency, a, T, "21"), _stage_ms(latency, a, T, "22"),
                          _stage_ms(latency, b, T, "07"), _stage_ms(latency, b, T, "19"))
    if not np.isfinite([call, base, t21, t22, t07, t19]).all():
        return []
    seq = _ms(latency, f"{a} one after the other", T)
    how = latency[(latency["implementation"] == a) & (latency["T"] == T) & (latency["stage"] == "all")]
    side = bool(how["overlap"].iloc[0]) if "overlap" in how and len(how) and pd.notna(how["overlap"].iloc[0]) else False
    r = base / call
    lines = [f"- At T={T}, 21 → 22 on fp32 inputs takes {call:.3f} ms ({'side by side' if side else 'one after the other'})"
             + (f", {seq:.3f} ms one after the other" if np.isfinite(seq) else "")
             + f"; 07 → 19 takes {base:.3f} ms: {r:.2f}× its speed ({'faster' if r > 1 else 'slower'})."]
    saved, added = t19 - t22, t21 - t07
    lines.append(f"- 22 alone takes {t22:.3f} ms against 19's {t19:.3f} ms ({saved:.3f} ms less: 19's element-wise "
                 f"warpgroup's share of the recurrence); 21 alone takes {t21:.3f} ms against 07's {t07:.3f} ms "
                 f"({abs(added):.3f} ms {'more' if added >= 0 else 'less'}: the hi / lo images written). The images "
                 f"take back {max(added, 0) / saved:.0%} of what they save." if saved > 0 else
                 f"- 22 alone takes {t22:.3f} ms, no less than 19's {t19:.3f} ms; 21 alone {t21:.3f} ms against 07's "
                 f"{t07:.3f} ms.")
    m = memory[memory["T"] == T]
    ours = m[(m["implementation"] == a) & (m["dtype"] == "fp32")]["extra_bytes"]
    fla = m[(m["implementation"] == FLA) & (m["dtype"] == "bf16")]["extra_bytes"]
    if len(ours) and len(fla):
        ratio = float(ours.iloc[0]) / float(fla.iloc[0])
        lines.append(f"- Its workspace (07's words, the images, the ready flags) is {float(ours.iloc[0]) / 2**20:.0f} MiB, "
                     f"{ratio:.2f}× fla's (bf16) {float(fla.iloc[0]) / 2**20:.0f} MiB: "
                     + ("within" if ratio <= bound else "past") + f" the {bound}× bound.")
    return lines


#: what co-residency would hide: the fp32 call whose token-parallel half (29) would run on its recurrence's (30's) SMs
#: (its stages), and the pairs that did run side by side in notebook 13's table, each (label, dtype, token-parallel
#: stage, recurrence stage); :func:`describe_coresidency` sets a pair's call against "LABEL one after the other" where
#: that was timed, else against the two stages' sum, each timed alone
CORES_CALL, CORES_STEPS = "29+30", ("29", "30")
CORES_PAIRS = ((FP32_IMAGES, "fp32", "21", "22"), ("21+22 bf16 I/O", "bf16", "21", "22"))


def _blocks_beside(big: int, small: int, arch: str) -> tuple[int, dict]:
    """Blocks of ``small`` bytes of dynamic shared memory that fit on one SM beside one block of ``big`` (the largest
    carveout, each block's reserve, the allocation granularity: :mod:`attnlab.occupancy`'s ArchSpec), and the bytes
    the big block would have to shed for one and for two."""
    from .. import occupancy

    spec = occupancy.arch_spec(arch)
    alloc = lambda b: -(-(b + spec.smem_reserved_per_block) // spec.smem_granularity) * spec.smem_granularity
    room = spec.smem_per_sm - alloc(big)
    return max(room // alloc(small), 0), {n: max(n * alloc(small) - room, 0) for n in (1, 2)}


def coresident_layouts(K: int, V: int, BV: int, arch: str = "sm_90") -> pd.DataFrame:
    """Shared memory of each recurrence and the token-parallel kernel that would share its SMs (launch sizes from
    :mod:`.kernels`' layouts): 30 with 29 (fp32 inputs; ``CORES_CALL``), 22 with 21 on fp32 and on bf16 inputs
    (``CORES_PAIRS``, which ran side by side), and how many blocks of the second fit beside one of the first."""
    rows = []
    for call, dtype, big, small in (
            (CORES_CALL, "fp32", 4 * dk.tile_smem_words(K, V, BV), 4 * dk.prep_smem_words(K)),
            (CORES_PAIRS[0][0], "fp32", 4 * dk.pre_smem_words(K, V, BV, bf16=False),
             4 * dk.prep_smem_words(K, alias=dk.prep_alias(False, None, ops=True))),
            (CORES_PAIRS[1][0], "bf16", 4 * dk.pre_smem_words(K, V, BV, bf16=True),
             4 * dk.prep_smem_words(K, alias=dk.prep_alias(True, None, ops=True)))):
        fits, shed = _blocks_beside(big, small, arch)
        rows.append(dict(call=call, dtype=dtype, recurrence_bytes=big, token_parallel_bytes=small, fit_beside=fits,
                         shed_for_one=shed[1], shed_for_two=shed[2]))
    return pd.DataFrame(rows)


def describe_coresidency(latency: pd.DataFrame, T: int, K: int, V: int, BV: int, goal: float = 1.9,
                         arch: str = "sm_90") -> list[str]:
    """Generated lines on running 29 on 30's SMs (co-residency, the lever notebook 13 leaves unbuilt): whether a block
    of 29 fits beside one of 30 (:func:`coresident_layouts`), the call if 29 were hidden entirely (30 alone), and the
    call if 29 were hidden as much as 21 was beside 22 in this table (side by side against one after the other, or
    against the two stages' sum), each against ``goal``x fla (bf16, its faster call). These are bounds and scalings
    of recorded times, not measurements of such a kernel. Empty where 29 -> 30 or fla is missing."""
    call = _ms(latency, CORES_CALL, T)
    t29, t30 = (_stage_ms(latency, CORES_CALL, T, s) for s in CORES_STEPS)
    fla, who = fla_ms(latency, T)
    if not np.isfinite([call, t29, t30, fla]).all():
        return []
    allow = fla / goal
    verdict = lambda ms: f"{fla / ms:.2f}× fla, {goal:g}× {'met' if ms <= allow else 'missed'} (needs ≤ {allow:.3f} ms)"
    lay = coresident_layouts(K, V, BV, arch).set_index("call")
    r = lay.loc[CORES_CALL]
    lines = [f"- Shared memory at K={K}, BV={BV}: a block of 30 takes {r.recurrence_bytes} bytes, one of 29 "
             f"{r.token_parallel_bytes}; " + (f"{r.fit_beside} of 29 fit beside one of 30." if r.fit_beside else
             f"none of 29 fits beside one of 30: one would need 30 to shed {r.shed_for_one} bytes "
             f"({r.shed_for_one / r.recurrence_bytes:.0%} of its layout), two {r.shed_for_two} "
             f"({r.shed_for_two / r.recurrence_bytes:.0%})."),
             f"- At T={T}, fla takes {fla:.3f} ms (bf16, {who}) and 29 → 30 {call:.3f} ms: {verdict(call)}; 29 alone "
             f"{t29:.3f} ms, 30 alone {t30:.3f} ms. "
             f"With 29 hidden entirely the call would take 30's time: {verdict(t30)}."]
    for label, dtype, tp, rec in CORES_PAIRS:
        side, a, b = _ms(latency, label, T, dtype), *(_stage_ms(latency, label, T, s, dtype) for s in (tp, rec))
        seq = _ms(latency, f"{label} one after the other", T, dtype)
        ref, what = (seq, "one after the other") if np.isfinite(seq) else (a + b, f"{tp} and {rec} each alone")
        if not np.isfinite([side, a, ref]).all() or label not in lay.index:
            continue
        share, n = (ref - side) / a, int(lay.loc[label].fit_beside)
        est = call - share * t29
        need = int(r.shed_for_one if n == 1 else r.shed_for_two) if n in (1, 2) else None
        lines.append(f"- {label} ({n} of {tp}'s blocks beside each of {rec}'s): side by side "
                     f"{side:.3f} ms against {ref:.3f} ms ({what}), so "
                     + (f"{share:.0%} of {tp}'s {a:.3f} ms was hidden. 29 → 30 hiding that share of 29: "
                        if share >= 0 else f"side by side lost {-share:.0%} of {tp}'s {a:.3f} ms. 29 → 30 losing "
                                           f"that share of 29: ")
                     + f"{call:.3f} {'-' if share >= 0 else '+'} {abs(share):.2f} × {t29:.3f} = {est:.3f} ms, "
                     f"{verdict(est)}" + ("." if need is None else
                                          f"; with {n} of 29's blocks beside each of 30's, which needs 30 to shed "
                                          f"{need} bytes." if need else
                                          f"; with {n} of 29's blocks beside each of 30's, which 30's layout leaves room for."))
    return lines


def phase_summary(phases: pd.DataFrame) -> pd.DataFrame:
    """Per role and phase: the median over warps of the median cycles, and its share of the period."""
    m = phases.groupby(["role", "phase"], sort=False)["median_cycles"].median().reset_index()
    period = m[m["phase"] == "chunk period"].set_index("role")["median_cycles"]
    m["share_of_period"] = m["median_cycles"] / m["role"].map(period)
    return m


def _ms(latency: pd.DataFrame, impl: str, T: int, dtype: str = "fp32", col: str = "median_ms") -> float:
    if col not in latency:
        return float("nan")
    r = latency[(latency["implementation"] == impl) & (latency["dtype"] == dtype) & (latency["T"] == T)
                & (latency["stage"] == "all")][col]
    return float(r.iloc[0]) if len(r) else float("nan")


def _spread(latency: pd.DataFrame, impl: str, T: int, dtype: str = "fp32") -> str:
    """' (rel. IQR x %)' of a timing when it was recorded, else ''."""
    v = _ms(latency, impl, T, dtype, "rel_iqr")
    return f" (rel. IQR {100 * v:.1f} %)" if np.isfinite(v) else ""


def fla_ms(latency: pd.DataFrame, T: int, dtype: str = "bf16") -> tuple[float, str]:
    """fla's time at T and which call gave it: the faster of its eager call and its CUDA-graph replay (where both
    were timed), so that a ratio against fla never gains from Python's launch overhead on a slow host."""
    ms = {who: _ms(latency, who, T, dtype) for who in (FLA, FLA_GRAPH)}
    ms = {who: v for who, v in ms.items() if np.isfinite(v)}
    if not ms:
        return float("nan"), FLA
    who = min(ms, key=ms.get)
    return ms[who], who


def _fla_note(latency: pd.DataFrame, T: int, dtype: str = "bf16") -> str:
    """' (its CUDA graph; eager call x ms)' when the graph replay is the faster call to fla, else ''."""
    ms, who = fla_ms(latency, T, dtype)
    return f" (its CUDA graph; eager call {_ms(latency, FLA, T, dtype):.3f} ms)" if who == FLA_GRAPH else ""


def describe_fla_calls(latency: pd.DataFrame, host_bound: float = 1.1) -> list[str]:
    """Generated lines on fla's two calls (eager, CUDA-graph replay) per T and dtype: where the eager call takes
    ``host_bound``× the replay or more, Python's launches, not fla's kernels, set its time on this host."""
    whole = latency[latency["stage"] == "all"] if "stage" in latency else latency
    lines = []
    for dtype in ("bf16", "fp32"):
        pairs = [(int(T), _ms(whole, FLA, T, dtype), _ms(whole, FLA_GRAPH, T, dtype))
                 for T in sorted(whole[whole["implementation"] == FLA]["T"].unique())]
        pairs = [(T, e, g) for T, e, g in pairs if np.isfinite(e) and np.isfinite(g)]
        if not pairs:
            continue
        bound = [f"T={T} ({e:.3f} vs {g:.3f} ms)" for T, e, g in pairs if e >= host_bound * g]
        lines.append(f"- fla ({dtype}), eager call vs its CUDA-graph replay: "
                     + ", ".join(f"{e / g:.2f}× at T={T}" for T, e, g in pairs) + "; "
                     + (("the eager call is host-bound (launch overhead sets its time) at " + ", ".join(bound)
                         + ": the ratios against fla use the replay there.") if bound else
                        f"within {host_bound:g}× everywhere: the eager call is not host-bound."))
    return lines


def targets(latency: pd.DataFrame, accuracy: pd.DataFrame, memory: pd.DataFrame, checks: pd.DataFrame | None = None,
            T_big: int = 16384, T_small: int = 4096) -> pd.DataFrame:
    """Issue 13's targets as rows (key, target, value, threshold, met, detail), computed from the
    recorded tables; a target whose inputs were not measured says so (met = None, value NaN).
    The bf16-I/O target needs both speed (vs fla bf16) and an error no worse than fla's in bf16 on
    the same inputs (the accuracy table's rows)."""
    rows = []

    def add(key, target, value, threshold, meets, detail):
        """meets(value, threshold) -> bool; a value not measured is not evaluated (met = None)."""
        met = None if not np.isfinite(value) else bool(meets(value, threshold))
        rows.append(dict(key=key, target=target, value=value, threshold=threshold, met=met, detail=detail))

    at_least, below, at_most = (lambda v, t: v >= t), (lambda v, t: v < t), (lambda v, t: v <= t)

    best = fastest(latency, [x[0] for x in TC_IMPLS], T_big) or BEST       # the lab's fastest fp32 step
    best_bf = fastest(latency, [x[0] for x in BF16_IO_IMPLS], T_big, "bf16") or BF16_IO
    ours_big, ours_small = _ms(latency, best, T_big), _ms(latency, best, T_small)
    (fla_big, who_big), (fla_small, who_small) = fla_ms(latency, T_big), fla_ms(latency, T_small)
    rec_big = _ms(latency, RECURRENT, T_big)
    add("x_fla_bf16_t16384", f"fp32 I/O ≥ 1.9× fla chunk_kda (bf16) at T={T_big}", fla_big / ours_big, 1.9, at_least,
        f"fla bf16 {fla_big:.3f} ms{_spread(latency, who_big, T_big, 'bf16')}{_fla_note(latency, T_big)}, {best} "
        f"(fastest step) {ours_big:.3f} ms{_spread(latency, best, T_big)}")
    add("x_fla_bf16_t4096", f"fp32 I/O ≥ 1.5× fla chunk_kda (bf16) at T={T_small}", fla_small / ours_small, 1.5, at_least,
        f"fla bf16 {fla_small:.3f} ms{_spread(latency, who_small, T_small, 'bf16')}{_fla_note(latency, T_small)}, "
        f"{best} {ours_small:.3f} ms{_spread(latency, best, T_small)}")
    add("x_recurrent_t16384", f"fp32 I/O ≥ 13× our recurrent kernel at T={T_big}", rec_big / ours_big, 13.0, at_least,
        f"recurrent {rec_big:.3f} ms, {best} {ours_big:.3f} ms")
    bf_big = _ms(latency, best_bf, T_big, "bf16")
    acc = accuracy.set_index(["implementation", "dtype"])
    err = {who: (float(acc.loc[(who, "bf16"), ["rel_err_o", "rel_err_state"]].max())
                 if (who, "bf16") in acc.index else float("nan")) for who in (best_bf, FLA)}
    no_worse = bool(np.isfinite(err[best_bf]) and np.isfinite(err[FLA]) and err[best_bf] <= err[FLA])
    add("x_fla_bf16_t16384_bf16io", f"bf16 I/O ≥ 2.5× fla chunk_kda (bf16) at T={T_big}, error no worse than fla's",
        fla_big / bf_big, 2.5, lambda v, t: v >= t and no_worse,
        f"fla bf16 {fla_big:.3f} ms{_fla_note(latency, T_big)}, {best_bf} (fastest bf16-I/O path) {bf_big:.3f} ms"
        f"{_spread(latency, best_bf, T_big, 'bf16')}; worst error {err[best_bf]:.2e} vs fla bf16 {err[FLA]:.2e}"
        if np.isfinite(bf_big) else
        "not measured in this run (no bf16-I/O timing: the recording predates it, or torch is missing)")
    ours_acc = accuracy[~accuracy["implementation"].str.startswith("fla")
                        & accuracy["implementation"].isin([x[0] for x in TC_IMPLS + FP32_IMAGE_IMPLS])
                        & (accuracy["dtype"] == "fp32")]
    worst_t = float(np.nanmax(ours_acc[["rel_err_o", "rel_err_state"]].to_numpy())) if len(ours_acc) else float("nan")
    worst_grid = (float(np.nanmax(checks[["rel_err_o", "rel_err_state"]].to_numpy()))
                  if checks is not None and len(checks) else float("nan"))
    worst = float(np.nanmax([worst_t, worst_grid])) if np.isfinite([worst_t, worst_grid]).any() else float("nan")
    add("worst_rel_rms", "relative RMS error < 1e-4 vs float64 (o and final state, every checked input)", worst,
        REL_ERR_BOUND, below,
        f"target shape {worst_t:.2e}, small-shape grid {worst_grid:.2e} ({0 if checks is None else len(checks)} runs)")
    m = memory[memory["T"] == T_big]
    ours_mem = m[m["implementation"] == best]["extra_bytes"]
    if not len(ours_mem):   # an older recording measured 07+10's only (07 -> 13's workspace is the same T words)
        ours_mem = m[m["implementation"] == BEST]["extra_bytes"]
    fla_mem = m[(m["implementation"] == FLA) & (m["dtype"] == "bf16")]["extra_bytes"]
    ratio = (float(ours_mem.iloc[0]) / float(fla_mem.iloc[0])) if len(ours_mem) and len(fla_mem) else float("nan")
    add("mem_vs_fla_t16384", f"extra device memory ≤ 0.6× fla chunk_kda (bf16) at T={T_big}", ratio, 0.6, at_most,
        (f"{best} {float(ours_mem.iloc[0]) / 2**20:.0f} MiB, fla bf16 {float(fla_mem.iloc[0]) / 2**20:.0f} MiB"
         if np.isfinite(ratio) else "not measured"))
    return pd.DataFrame(rows)


def step_gains(latency: pd.DataFrame, T: int) -> pd.DataFrame:
    """Each implementation's time at T and its speed-up over the previous row of the ladder."""
    order = [THREE] + [x[0] for x in TC_IMPLS]
    rows, prev = [], None
    for impl in order:
        ms = _ms(latency, impl, T)
        rows.append(dict(implementation=impl, T=T, median_ms=ms,
                         gain_vs_previous=(prev / ms) if prev and np.isfinite(ms) else np.nan))
        prev = ms if np.isfinite(ms) else prev
    return pd.DataFrame(rows)


#: The roundings :func:`rounding_table` models: (label, bf16 inputs and o, products with one bf16 term)
ROUNDING_CASES = (("fp32 inputs, products exact (the model's floor; 3xBF16 is ~2^-16 from it)", False, ()),
                  ("bf16 inputs and o, three-term products (bf16 I/O of 10-16)", True, ()),
                  ("bf16 I/O, P1 one term", True, ("P1",)),
                  ("bf16 I/O, P2 one term", True, ("P2",)),
                  ("bf16 I/O, P4 one term", True, ("P4",)),
                  ("bf16 I/O, P1 and P4 one term (17)", True, ("P1", "P4")),
                  ("bf16 I/O, every product one term", True, ("P1", "P2", "P4")))
SINGLE_CASE = "bf16 I/O, P1 and P4 one term (17)"
BF16_IO_CASE = "bf16 inputs and o, three-term products (bf16 I/O of 10-16)"


def rounding_table(B: int = 1, T: int = 1024, H: int = 4, K: int = 128, V: int = 128, seed: int = 0,
                   cases=ROUNDING_CASES) -> pd.DataFrame:
    """Relative RMS error of o and of the final state, against the float64 recurrence on the fp32
    inputs, of the float64 chunk model with each case's roundings (:func:`.chunk.chunk_rounding_model`):
    what rounding the inputs and o to bf16 costs, and what each product taken as one bf16 term adds.
    CPU only (NumPy); lab inputs with an initial state."""
    from .chunk import chunk_rounding_model
    from .naive import random_inputs

    x = random_inputs(B, T, H, K, V, seed=seed, initial_state=True)
    d = {n: x[n] for n in ("q", "k", "v", "g", "beta", "initial_state")}
    ref_o, ref_s = kda_recurrent_fp64(**d, output_final_state=True)
    rows = []
    for label, bf, one in cases:
        o, s = chunk_rounding_model(**d, round_inputs=bf, one_term=one, round_output=bf)
        rows.append(dict(case=label, one_term=", ".join(one) or "none", rel_err_o=rel_error(o, ref_o),
                         rel_err_state=rel_error(s, ref_s), B=B, T=T, H=H, K=K, V=V))
    return pd.DataFrame(rows)


def describe_rounding(table: pd.DataFrame) -> str:
    """A generated sentence on :func:`rounding_table`: the worst of o / state error of the bf16-I/O
    path with three-term products, with 17's roundings and with every product one term."""
    worst = table.set_index("case")[["rel_err_o", "rel_err_state"]].max(axis=1)
    base, single = worst[BF16_IO_CASE], worst[SINGLE_CASE]
    every = worst["bf16 I/O, every product one term"]
    costly = table.set_index("case").loc[[c for c, _, one in ROUNDING_CASES if len(one) == 1]]
    top = costly[["rel_err_o", "rel_err_state"]].max(axis=1).idxmax()
    return (f"In the model, bf16 inputs and o alone cost {base:.2e} (worst of o and state); taking P1 and P4 as one "
            f"term (17) makes it {single:.2e} ({single / base:.2f}× that), every product one term {every:.2e} "
            f"({every / base:.2f}×); of the single products, '{top}' costs the most.")


def describe_bf16(latency: pd.DataFrame, T: int, goal: float = 2.5) -> list[str]:
    """Generated lines on the bf16-I/O paths at T: the fastest, its ratio to fla bf16 and what the goal
    asks of it, and where its time goes (07 and its recurrence, each timed alone in the same run)."""
    rows = latency[(latency["T"] == T) & (latency["dtype"] == "bf16")]
    labels = [x[0] for x in BF16_IO_IMPLS]
    best = fastest(latency, labels, T, "bf16")
    fla = fla_ms(latency, T)[0]
    if best is None:
        return []
    ms = _ms(latency, best, T, "bf16")
    lines = [f"- Fastest bf16-I/O path at T={T}: {best}, {ms:.3f} ms"
             + (f", {fla / ms:.2f}× fla bf16 ({fla:.3f} ms); {goal:g}× needs ≤ {fla / goal:.3f} ms." if np.isfinite(fla) else ".")]
    prep_step, rec_step = {lab: steps for lab, _, steps in BF16_IO_IMPLS}[best]
    rec = rows[(rows["implementation"] == best) & (rows["stage"] == rec_step)]["median_ms"]
    prep = rows[rows["stage"] == prep_step]["median_ms"]   # timed once, in the A2 form 13-17 read
    if len(rec) and len(prep):
        p_ms, r_ms = float(prep.iloc[0]), float(rec.iloc[0])
        lines.append(f"- Its parts, each alone: {prep_step} (bf16 inputs) {p_ms:.3f} ms, recurrence {rec_step} "
                     f"{r_ms:.3f} ms; their sum {p_ms + r_ms:.3f} ms against {ms:.3f} ms for the call.")
    return lines
