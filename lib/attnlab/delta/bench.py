"""Live measurements for notebook 07: correctness grid, latency vs T, chunk-size sweep, peak
memory, flash-linear-attention head-to-head, roofline points and the issue's targets.

Everything returns tidy DataFrames (one row per measurement) that the notebook records with
``attnlab.results.save_table`` and replays with ``load_table``. The functions that touch the GPU
import CuPy lazily; :func:`targets` and :func:`roofline_points` are pure and run in replay too.
"""

from __future__ import annotations

import time
from typing import Iterable

import numpy as np
import pandas as pd

from . import kernels as dk
from .kernels import DEFAULT_CHUNK, TC_CHUNK
from .model import chunk_cost, io_bytes, recurrent_cost, workspace_bytes
from ..arrays import rel_error as rel_err  # noqa: F401  (the name notebook 07 uses)
from .naive import kda_recurrent_fp64, random_inputs

#: Acceptance thresholds (issue 5): small shapes vs float64, and the target shape.
REL_ERR_SMALL = 1e-5
REL_ERR_TARGET = 1e-4
#: Latency rows of the chunked form with the fp32-FMA state pass (04), beside the default ("chunked").
CHUNKED_SIMT = "chunked, fp32-FMA state pass"


# ----------------------------------------------------------------------------- helpers

def fla_functions():
    """(chunk_kda, fused_recurrent_kda, version) from flash-linear-attention, or (None, None, why)."""
    try:
        from fla.ops.kda import chunk_kda, fused_recurrent_kda

        try:
            from importlib.metadata import version

            ver = version("fla-core")
        except Exception:  # noqa: BLE001
            import fla

            ver = getattr(fla, "__version__", "unknown")
        return chunk_kda, fused_recurrent_kda, str(ver)
    except Exception as exc:  # noqa: BLE001
        return None, None, f"not installed ({type(exc).__name__}: {exc})"


def device_inputs(B, T, H, K, V, *, seed, gate="logsigmoid", init=False):
    """Host float32 inputs and their CuPy copies (same numbers)."""
    import cupy as cp

    x = random_inputs(B, T, H, K, V, seed=seed, gate=gate, initial_state=init)
    return x, {n: cp.asarray(a) for n, a in x.items()}


# ----------------------------------------------------------------------------- correctness

def state_passes(chunk_size: int) -> tuple[str, ...]:
    """The state-pass kernels that run at this chunk size: tensor cores (05) where they can, fp32 FMA (04)."""
    return ("tc", "simt") if chunk_size in TC_CHUNK else ("simt",)


def correctness_cases(K_list=(64, 128), T_list=(1, 17, 64, 100, 300), B: int = 2, H: int = 2,
                      chunk_sizes=(16, 32, 64, 128)) -> list[dict]:
    """The grid of small shapes at the default chunk: every T with and without an initial state;
    g = -50, mixed and strong gates on two T; then every chunk size at the largest K (the sizes the
    sweep compiles anyway, so the check costs no extra compilation)."""
    cases = []
    for K in K_list:
        for T in T_list:
            for init in (False, True):
                cases.append(dict(B=B, T=T, H=H, K=K, V=K, gate="logsigmoid", init=init, chunk_size=DEFAULT_CHUNK))
        for gate in ("const", "mixed", "strong"):
            for T in (17, 300):
                cases.append(dict(B=B, T=T, H=H, K=K, V=K, gate=gate, init=True, chunk_size=DEFAULT_CHUNK))
    for C in chunk_sizes:
        cases.append(dict(B=1, T=333, H=H, K=max(K_list), V=max(K_list), gate="logsigmoid", init=True,
                          chunk_size=C))
    return cases


def check_correctness(cases: Iterable[dict], seed: int = 0) -> pd.DataFrame:
    """Every kernel on each case — the recurrent one, and the chunked form with each value block
    and each state pass that runs at the case's chunk size: outputs poisoned with NaN, relative
    errors of o and the final state vs the float64 recurrent reference (NumPy)."""
    rows = []
    for i, c in enumerate(cases):
        x, d = device_inputs(c["B"], c["T"], c["H"], c["K"], c["V"], seed=seed + i, gate=c["gate"], init=c["init"])
        ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
        plans = [("recurrent", dk.prepare_recurrent(**d, output_final_state=True), None)]
        for state in state_passes(c["chunk_size"]):
            for bv in dk.SUPPORTED_BV:
                plans.append(("chunked", dk.prepare_chunk(**d, output_final_state=True, chunk_size=c["chunk_size"],
                                                          bv=bv, state=state), bv))
        for form, plan, bv in plans:
            plan.poison()
            o, s = plan.run()
            written = bool(np.isfinite(o.get()).all() and np.isfinite(s.get()).all())
            eo, es = rel_err(o.get(), ref_o), rel_err(s.get(), ref_s)
            rows.append(dict(form=form, B=c["B"], T=c["T"], H=c["H"], K=c["K"], V=c["V"],
                             chunk_size=c["chunk_size"] if form == "chunked" else np.nan,
                             bv=bv if bv else np.nan,
                             state_pass=getattr(plan, "state_kernel", ""),
                             gate={"const": "const-50"}.get(c["gate"], c["gate"]),
                             initial_state=c["init"], all_written=written, rel_err_o=eo, rel_err_state=es,
                             passed=written and eo < REL_ERR_SMALL and es < REL_ERR_SMALL))
    return pd.DataFrame(rows)


def target_accuracy(B: int, H: int, K: int, V: int, T: int, seed: int = 0, chunk_size: int = DEFAULT_CHUNK,
                    with_fla: bool = True) -> pd.DataFrame:
    """Relative RMS error of o vs a float64 reference computed on the GPU, at the target shape."""
    import cupy as cp

    _, d = device_inputs(B, T, H, K, V, seed=seed)
    ref, _ = kda_recurrent_fp64(**d)
    rows = []
    o, _ = dk.prepare_recurrent(**d).run()
    rows.append(dict(implementation="recurrent (01)", dtype="fp32", T=T, rel_err_o=rel_err(o, ref)))
    for state in state_passes(chunk_size):
        plan = dk.prepare_chunk(**d, chunk_size=chunk_size, state=state)
        plan.poison()
        o, _ = plan.run()
        stage3 = "05 tensor cores" if state == "tc" else "04 fp32 FMA"
        rows.append(dict(implementation=f"chunked (02, 03, {stage3}) C={chunk_size} BV={plan.bv}", dtype="fp32",
                         T=T, rel_err_o=rel_err(o, ref)))
        del plan
    chunk_kda, fused_recurrent_kda, _ = fla_functions()
    if with_fla and chunk_kda is not None:
        import torch

        for dtype, tdt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
            t = {n: torch.from_dlpack(a).to(tdt).contiguous() for n, a in d.items()}
            for name, fn in (("fla chunk_kda", chunk_kda), ("fla fused_recurrent_kda", fused_recurrent_kda)):
                try:
                    with torch.no_grad():
                        of, _ = fn(t["q"], t["k"], t["v"], t["g"], t["beta"])
                    e = rel_err(cp.from_dlpack(of.float().contiguous()), ref)
                except Exception as exc:  # noqa: BLE001
                    e = float("nan")
                    print(f"{name} {dtype} failed: {type(exc).__name__}: {exc}")
                rows.append(dict(implementation=name, dtype=dtype, T=T, rel_err_o=e))
    df = pd.DataFrame(rows)
    df["B"], df["H"], df["K"], df["V"] = B, H, K, V
    return df


# ----------------------------------------------------------------------------- timing

def _timed(fn, budget_s: float, **row):
    """One entry through the lab's timing loop (:func:`attnlab.timing.time_rows`), timed alone: the
    delta tables build their plans one at a time (a plan's workspace can be GiBs at T = 65536)."""
    from ..timing import time_rows

    return time_rows([(row, fn)], budget_s=budget_s, warmup=2, min_repeats=5, max_repeats=100)[0]


def time_latency(B: int, H: int, K: int, V: int, T_list: Iterable[int], chunk_size: int = DEFAULT_CHUNK,
                 budget_s: float = 0.2, seed: int = 0, with_fla: bool = True) -> pd.DataFrame:
    """Median latency of the recurrent and chunked kernels (and fla, both dtypes) for each T."""
    rows = []
    chunk_kda, fused_recurrent_kda, _ = fla_functions()
    for T in T_list:
        _, d = device_inputs(B, T, H, K, V, seed=seed + T)
        rec = dk.prepare_recurrent(**d, check_gate=False)
        rows.append(_timed(rec.run, budget_s, implementation="recurrent", dtype="fp32", T=T,
                           config=f"RG={rec.rg}"))
        # The default chunked path, then (where the default is the tensor-core one) the same
        # with the fp32-FMA state pass.
        ch = dk.prepare_chunk(**d, chunk_size=chunk_size, check_gate=False)
        rows.append(_timed(ch.run, budget_s, implementation="chunked", dtype="fp32", T=T,
                           config=f"C={chunk_size} BV={ch.bv} state={ch.state_kernel}"))
        if ch.state_kernel != "simt":
            del ch
            ch = dk.prepare_chunk(**d, chunk_size=chunk_size, check_gate=False, state="simt")
            rows.append(_timed(ch.run, budget_s, implementation=CHUNKED_SIMT, dtype="fp32", T=T,
                               config=f"C={chunk_size} BV={ch.bv} state=simt"))
        del rec, ch
        if with_fla and chunk_kda is not None:
            import torch

            for dtype, tdt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
                t = {n: torch.from_dlpack(a).to(tdt).contiguous() for n, a in d.items()}
                args = (t["q"], t["k"], t["v"], t["g"], t["beta"])
                for name, fn in (("fla chunk_kda", chunk_kda), ("fla fused_recurrent_kda", fused_recurrent_kda)):
                    def call(fn=fn, args=args):
                        with torch.no_grad():
                            return fn(*args)
                    try:
                        rows.append(_timed(call, budget_s, implementation=name, dtype=dtype, T=T, config="default"))
                    except Exception as exc:  # noqa: BLE001
                        print(f"{name} {dtype} T={T} not timed: {type(exc).__name__}: {exc}")
                del t, args
    df = pd.DataFrame(rows)
    df["B"], df["H"], df["K"], df["V"] = B, H, K, V
    df["tokens_per_s"] = df["B"] * df["T"] / (df["median_ms"] * 1e-3)
    return df


def chunk_sweep(B: int, H: int, K: int, V: int, T: int, chunk_sizes=(16, 32, 64, 128), bvs=(16, 32),
                budget_s: float = 0.2, seed: int = 0) -> pd.DataFrame:
    """The chunked form for each chunk size, value block and state pass (tensor cores where they
    run, fp32 FMA everywhere): the three kernels together and each alone."""
    _, d = device_inputs(B, T, H, K, V, seed=seed)
    rows = []
    for C in chunk_sizes:
        for state in state_passes(C):
            for bv in bvs:
                plan = dk.prepare_chunk(**d, chunk_size=C, bv=bv, check_gate=False, state=state)
                plan.run()
                rows.append(_timed(plan.run, budget_s, chunk_size=C, bv=bv, state=state, stage="all"))
                for st, name in ((1, "intra"), (2, "solve"), (3, "state")):
                    rows.append(_timed(lambda p=plan, st=st: p.run(stages=(st,)), budget_s / 2,
                                       chunk_size=C, bv=bv, state=state, stage=name))
                del plan
    df = pd.DataFrame(rows)
    df["B"], df["T"], df["H"], df["K"], df["V"] = B, T, H, K, V
    return df


def peak_memory(B: int, H: int, K: int, V: int, T_list: Iterable[int], chunk_size: int = DEFAULT_CHUNK, seed: int = 0,
                with_fla: bool = True) -> pd.DataFrame:
    """Device memory a call needs beyond its inputs: measured (CuPy pool / torch allocator) and modelled."""
    import cupy as cp

    pool = cp.get_default_memory_pool()
    rows = []
    chunk_kda, fused_recurrent_kda, _ = fla_functions()
    for T in T_list:
        _, d = device_inputs(B, T, H, K, V, seed=seed)
        out_bytes = 4 * B * T * H * V
        for form in ("recurrent", "chunked"):
            pool.free_all_blocks()
            before = pool.used_bytes()
            plan = (dk.prepare_recurrent(**d, check_gate=False) if form == "recurrent"
                    else dk.prepare_chunk(**d, chunk_size=chunk_size, check_gate=False))
            plan.run()
            cp.cuda.get_current_stream().synchronize()
            measured = pool.used_bytes() - before
            model = out_bytes + (workspace_bytes(B, T, H, K, V, chunk_size) if form == "chunked" else 0)
            rows.append(dict(implementation=form, dtype="fp32", T=T, extra_bytes=int(measured),
                             model_bytes=int(model)))
            del plan
        if with_fla and chunk_kda is not None:
            import torch

            for dtype, tdt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
                t = {n: torch.from_dlpack(a).to(tdt).contiguous() for n, a in d.items()}
                for name, fn in (("fla chunk_kda", chunk_kda), ("fla fused_recurrent_kda", fused_recurrent_kda)):
                    try:
                        torch.cuda.synchronize()
                        torch.cuda.reset_peak_memory_stats()
                        before = torch.cuda.memory_allocated()
                        with torch.no_grad():
                            fn(t["q"], t["k"], t["v"], t["g"], t["beta"])   # the peak is recorded inside
                        torch.cuda.synchronize()
                        measured = torch.cuda.max_memory_allocated() - before
                        rows.append(dict(implementation=name, dtype=dtype, T=T, extra_bytes=int(measured),
                                         model_bytes=np.nan))
                    except Exception as exc:  # noqa: BLE001
                        print(f"{name} {dtype} T={T}: memory not measured ({type(exc).__name__}: {exc})")
                del t
        pool.free_all_blocks()
    df = pd.DataFrame(rows)
    df["B"], df["H"], df["K"], df["V"] = B, H, K, V
    df["input_bytes"] = io_bytes(B, df["T"], H, K, V) - 4 * B * df["T"] * H * V
    return df


# ----------------------------------------------------------------------------- pure: replay too

def roofline_points(latency: pd.DataFrame, chunk_size: int = DEFAULT_CHUNK) -> pd.DataFrame:
    """Achieved FLOP/s and intensity of the project's kernels from the cost model and measured times."""
    rows = []
    for r in latency.itertuples():
        if r.implementation not in ("recurrent", "chunked", CHUNKED_SIMT):
            continue
        cost = recurrent_cost(r.K, r.V) if r.implementation == "recurrent" else chunk_cost(r.K, r.V, chunk_size)
        tokens = r.B * r.T * r.H
        secs = r.median_ms * 1e-3
        rows.append(dict(kernel=r.implementation, T=r.T, N=r.T, intensity=cost.intensity,
                         achieved_flops=cost.flops * tokens / secs,
                         achieved_bytes_per_s=cost.bytes * tokens / secs,
                         achieved_exps_per_s=cost.exps * tokens / secs))
    return pd.DataFrame(rows)


def targets(latency: pd.DataFrame, sweep: pd.DataFrame | None, accuracy: pd.DataFrame, T: int) -> pd.DataFrame:
    """The issue's three targets at sequence length T, each with its measured value and verdict.

    Speed uses the best chunked configuration measured at T (default chunk size in ``latency``
    or any row of ``sweep``); fla's throughput ratio is reported for each dtype fla was timed in.
    """
    rows = []
    lat = latency[latency["T"] == T]
    rec = lat[lat["implementation"] == "recurrent"]["median_ms"]
    chunk_candidates = list(lat[lat["implementation"] == "chunked"]["median_ms"])
    best_cfg = lat[lat["implementation"] == "chunked"]["config"].tolist()
    if sweep is not None and len(sweep):
        s = sweep[(sweep["T"] == T) & (sweep["stage"] == "all")]
        chunk_candidates += list(s["median_ms"])
        states = s["state"] if "state" in s else [None] * len(s)
        best_cfg += [f"C={int(a)} BV={int(b)}" + (f" state={st}" if isinstance(st, str) else "")
                     for a, b, st in zip(s["chunk_size"], s["bv"], states)]
    best = int(np.argmin(chunk_candidates)) if chunk_candidates else None
    c_ms = chunk_candidates[best] if best is not None else np.nan
    c_cfg = best_cfg[best] if best is not None else "not measured"
    if len(rec) and best is not None:
        ratio = float(rec.iloc[0]) / c_ms
        rows.append(dict(target="chunked ≥ 10× faster than the project's recurrent kernel", T=T,
                         value=ratio, threshold=10.0, met=bool(ratio >= 10.0),
                         detail=f"recurrent {float(rec.iloc[0]):.3f} ms, chunked {c_ms:.3f} ms ({c_cfg})"))
    fla = lat[lat["implementation"] == "fla chunk_kda"]
    if len(fla) == 0:
        rows.append(dict(target="chunked ≥ 0.5× the throughput of fla chunk_kda", T=T, value=np.nan, threshold=0.5,
                         met=None, detail="fla not installed in the measured run: not compared"))
    for f in fla.itertuples():
        ratio = f.median_ms / c_ms
        rows.append(dict(target=f"chunked (fp32) ≥ 0.5× the throughput of fla chunk_kda ({f.dtype})", T=T,
                         value=ratio, threshold=0.5, met=bool(ratio >= 0.5),
                         detail=f"fla {f.median_ms:.3f} ms ({f.dtype}), ours {c_ms:.3f} ms ({c_cfg}, fp32)"))
    acc = accuracy[accuracy["dtype"] == "fp32"]
    ours = acc[~acc["implementation"].str.startswith("fla")]
    worst = float(ours["rel_err_o"].max()) if len(ours) else np.nan
    rows.append(dict(target="relative RMS error vs float64 < 1e-4 (fp32 inputs)",
                     T=int(ours["T"].iloc[0]) if len(ours) else T, value=worst, threshold=REL_ERR_TARGET,
                     met=bool(worst < REL_ERR_TARGET) if len(ours) else None,
                     detail="; ".join(f"{r.implementation}: {r.rel_err_o:.2e}" for r in ours.itertuples())))
    return pd.DataFrame(rows)


def wall_clock(fn):
    """(result, seconds) of fn() — for the notebook's budget line."""
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


# ----------------------------------------------------------------------------- notebook 07's views (replay too)

#: the shapes on which the chunked form meets the recurrence in float64 (notebook 07): tails, a single
#: token, zero and very strong gates, β near 0 and near 1, with and without an initial state
REFERENCE_CASES = (
    # B, T, H, K, V, C, gate, initial_state, beta range
    (1, 1, 1, 16, 8, 16, "logsigmoid", False, (0.05, 0.95)),
    (2, 17, 2, 32, 16, 16, "logsigmoid", True, (0.05, 0.95)),
    (1, 100, 2, 32, 32, 32, "logsigmoid", True, (0.05, 0.95)),
    (1, 64, 2, 32, 16, 64, "zero", True, (0.05, 0.95)),
    (1, 70, 2, 32, 16, 16, "const", True, (0.05, 0.95)),
    (1, 40, 2, 16, 8, 16, "logsigmoid", True, (1e-6, 1e-5)),
    (1, 40, 2, 16, 8, 16, "logsigmoid", True, (0.999999, 1.0)),
)


def reference_agreement(seed: int = 0, cases=REFERENCE_CASES) -> pd.DataFrame:
    """The chunked form (float64) against the recurrence (float64), output and final state, and the
    kernels' stage model in fp32 against the recurrence, one row per case."""
    from .chunk import chunk_stages_model, kda_chunk_fp64

    rows = []
    for (b, t, h, k, v, c, gate, init, br) in cases:
        x = random_inputs(b, t, h, k, v, seed=seed + t, gate=gate, beta_range=br, initial_state=init, dtype=np.float64)
        o_r, s_r = kda_recurrent_fp64(**x, output_final_state=True)
        o_c, s_c = kda_chunk_fp64(**x, output_final_state=True, chunk_size=c)
        m32 = chunk_stages_model(**x, chunk_size=c, dtype=np.float32)
        rows.append(dict(B=b, T=t, H=h, K=k, V=v, C=c, gate="-50" if gate == "const" else gate,
                         beta=f"{br[0]:g}..{br[1]:g}", initial_state=init,
                         chunk_fp64_vs_recurrent=rel_err(o_c, o_r), state_fp64=rel_err(s_c, s_r),
                         kernel_model_fp32_vs_recurrent=rel_err(m32["o"], o_r)))
    return pd.DataFrame(rows)


def static_table(K: int, V: int, chunk_size: int, archs=("sm_75", "sm_90")) -> pd.DataFrame:
    """Registers, shared memory (static and the launcher's dynamic size) and spills of each KDA kernel
    the launchers use at (K, V, chunk_size), per arch (the tensor-core state pass from sm_80)."""
    from ..static import static_build

    dynamic = {"kda_chunk_state": dk.state_smem_floats, "kda_chunk_state_tc": dk.state_tc_smem_floats}
    rows = []
    for arch in archs:
        for source, function, args in dk.static_instantiations(K, V, chunk_sizes=(chunk_size,),
                                                               tensor_cores=arch != "sm_75"):
            (r,) = static_build(source, function, [args], arch)
            smem = dynamic.get(function)
            rows.append({**r.row(), "dynamic_smem_bytes": 4 * smem(K, V, args[2], args[3]) if smem else 0})
    return pd.DataFrame(rows)[["arch", "kernel", "registers", "static_smem_bytes", "dynamic_smem_bytes",
                               "spill_store_bytes", "spill_load_bytes", "stack_bytes"]]


def plot_latency(latency: pd.DataFrame, title: str):
    """Latency (with the IQR) and throughput against T, one series per (implementation, dtype)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(12, 4.2))
    for (impl, dtype), g in latency.groupby(["implementation", "dtype"]):
        g = g.sort_values("T")
        style = "o-" if not impl.startswith("fla") else ("s--" if dtype == "bf16" else "d:")
        ax[0].errorbar(g["T"], g["median_ms"], yerr=[g["median_ms"] - g["q1_ms"], g["q3_ms"] - g["median_ms"]],
                       fmt=style, capsize=2, label=f"{impl} ({dtype})")
        ax[1].plot(g["T"], g["tokens_per_s"] / 1e6, style, label=f"{impl} ({dtype})")
    ax[0].set(xscale="log", yscale="log", xlabel="T", ylabel="latency (ms)", title="latency")
    ax[1].set(xscale="log", xlabel="T", ylabel="M tokens / s (B·T / time)", title="throughput")
    for a in ax:
        a.grid(True, which="both", alpha=0.3)
    ax[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    plt.tight_layout()
    plt.show()
    return fig


def sweep_table(sweep: pd.DataFrame) -> pd.DataFrame:
    """The chunk-size sweep, one row per configuration, one column per stage (ms)."""
    keys = ["chunk_size", "bv", "state"] if "state" in sweep else ["chunk_size", "bv"]
    return sweep.pivot_table(index=keys, columns="stage", values="median_ms")[["all", "intra", "solve", "state"]]


def plot_sweep(sw: pd.DataFrame, title: str):
    """Stacked stage times of each sweep configuration, the three launches together marked."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 3.8))
    labels = [f"C={idx[0]}\nBV={idx[1]}" + (f"\n{idx[2]}" if len(idx) > 2 else "") for idx in sw.index]
    bottom = np.zeros(len(sw))
    for stage in ("intra", "solve", "state"):
        ax.bar(labels, sw[stage], bottom=bottom, label=stage)
        bottom += sw[stage].to_numpy()
    ax.plot(labels, sw["all"], "k^", label="all three launches")
    ax.set(ylabel="ms", title=title)
    ax.legend(fontsize=8)
    plt.tight_layout()
    plt.show()
    return fig


def describe_targets(verdicts: pd.DataFrame, T_goal: int, target_T: int, fla_note: str) -> str:
    """The targets table as sentences, generated from its rows."""
    lines = []
    for r in verdicts.itertuples():
        state = ("not evaluated" if r.met is None or (isinstance(r.met, float) and np.isnan(r.met))
                 else ("**met**" if r.met else "**missed**"))
        value = "—" if pd.isna(r.value) else (f"{r.value:.2e}" if r.threshold < 1e-2 else f"{r.value:.2f}×")
        lines.append(f"- {r.target} at T={r.T}: {value} (threshold {r.threshold:g}) — {state}. {r.detail}")
    if T_goal != target_T:
        lines.append(f"- Note: T={target_T} was not measured in this profile; targets evaluated at T={T_goal}.")
    lines.append(f"- {fla_note}.")
    return "\n".join(lines)


def what_the_numbers_say(latency: pd.DataFrame, sweep: pd.DataFrame | None, T_goal: int, chunk_size: int,
                         roof=None) -> tuple[str, dict]:
    """Notebook 07's reading of its tables at T_goal, every sentence generated from them: the two
    forms' times, the tensor-core state pass's gain, fla beside, two upper bounds on the ratio to the
    recurrent kernel (the chunk-parallel stages alone; the three kernels' modelled traffic at the
    measured bandwidth ``roof``) and the latency's slope in T. Returns (markdown, figures)."""
    lat_T = latency[latency["T"] == T_goal]

    def get(impl, dtype="fp32"):
        return lat_T[(lat_T["implementation"] == impl) & (lat_T["dtype"] == dtype)]["median_ms"]

    rec, chk = float(get("recurrent").iloc[0]), float(get("chunked").iloc[0])
    cfg = lat_T[lat_T["implementation"] == "chunked"]["config"].iloc[0]
    figures = {"recurrent_ms": rec, "chunked_ms": chk, "reached": rec / chk}
    facts = [f"- T={T_goal}: recurrent {rec:.3f} ms, chunked ({cfg}) {chk:.3f} ms → chunked is {rec / chk:.2f}× faster."]
    simt = get(CHUNKED_SIMT)
    if len(simt):
        facts.append(f"- The same with the fp32-FMA state pass (04): {simt.iloc[0]:.3f} ms → the tensor-core state "
                     f"pass makes the whole chunked form {simt.iloc[0] / chk:.2f}× faster.")
    if sweep is not None and "state" in sweep:
        st = sweep[(sweep["stage"] == "state") & (sweep["chunk_size"] == chunk_size)]
        pair = st.pivot_table(index="bv", columns="state", values="median_ms")
        if {"tc", "simt"} <= set(pair.columns):
            for bv, r in pair.iterrows():
                facts.append(f"- State pass alone at C={chunk_size}, BV={bv}, T={int(sweep['T'].iloc[0])}: fp32 FMA "
                             f"{r['simt']:.3f} ms, tensor cores {r['tc']:.3f} ms ({r['simt'] / r['tc']:.2f}×).")
    for dtype in ("bf16", "fp32"):
        f = get("fla chunk_kda", dtype)
        if len(f):
            facts.append(f"- fla chunk_kda ({dtype}): {f.iloc[0]:.3f} ms → ours reaches {f.iloc[0] / chk:.2f}× its throughput.")
        fr = get("fla fused_recurrent_kda", dtype)
        if len(fr):
            facts.append(f"- fla fused_recurrent_kda ({dtype}): {fr.iloc[0]:.3f} ms → our recurrent kernel is "
                         f"{fr.iloc[0] / rec:.2f}× its speed.")
    bounds = {}
    if sweep is not None and len(sweep) and int(sweep["T"].iloc[0]) == T_goal:
        at_c = sweep[sweep["chunk_size"] == chunk_size]
        par = at_c[at_c["stage"] == "intra"]["median_ms"].min() + at_c[at_c["stage"] == "solve"]["median_ms"].min()
        if np.isfinite(par):
            bounds["Bound 1"] = rec / par
            facts.append(f"- Bound 1: the chunk-parallel stages alone (intra + solve at C={chunk_size}) take {par:.3f} ms: "
                         f"even with a free state pass the ratio to the recurrent kernel would be at most {rec / par:.1f}×.")
    if roof is not None:
        r0 = lat_T.iloc[0]
        floor_ms = chunk_cost(int(r0["K"]), int(r0["V"]), chunk_size).bytes * int(r0["B"]) * T_goal * int(r0["H"]) \
            / roof.bandwidth * 1e3
        bounds["Bound 2"] = rec / floor_ms
        facts.append(f"- Bound 2: the three kernels' modelled fp32 traffic at {roof.bandwidth / 1e12:.2f} TB/s "
                     f"({roof.name}) takes at least {floor_ms:.3f} ms: at most {rec / floor_ms:.1f}× without fusing the stages.")
    if bounds:
        tight = min(bounds, key=bounds.get)
        reached = rec / chk
        facts.append(f"- Reached {reached:.2f}× against the tighter bound's {bounds[tight]:.1f}× ({tight}): "
                     + ("the chunked form is within 20 % of what these bounds allow." if reached >= 0.8 * bounds[tight] else
                        f"these bounds leave room for {bounds[tight] / reached:.1f}× more, so they are not what holds "
                        "the three-kernel form back at this T."))
    figures.update({k.lower().replace(" ", "_"): v for k, v in bounds.items()})
    if len(set(latency["T"])) >= 2:
        for impl in ("recurrent", "chunked"):
            g = latency[latency["implementation"] == impl].sort_values("T").tail(2)
            slope = np.log(g["median_ms"].iloc[1] / g["median_ms"].iloc[0]) / np.log(g["T"].iloc[1] / g["T"].iloc[0])
            facts.append(f"- {impl}: log-log slope of latency vs T over the two largest T = {slope:.2f} (1 = linear in T).")
    return "\n".join(facts), figures


def difference_form_demo(seed: int = 0, C: int = 64, K: int = 8, g: float = -50.0):
    """One chunk with every gate at ``g``: how many entries of e^{G_i}·e^{-G_j} (the split form) and of
    e^{min(G_i - G_j, 0)} (the difference form the kernels use) stay finite over the causal pairs; then
    the kernels' fp32 stages on a sequence with that gate against the float64 recurrence.
    Returns (table, stages all finite, their relative error)."""
    from .chunk import chunk_stages_model

    G = np.cumsum(np.full((C, K), g, dtype=np.float32), axis=0)
    with np.errstate(over="ignore", invalid="ignore"):
        split = np.exp(G)[:, None, :] * np.exp(-G)[None, :, :]
    diff = np.exp(np.minimum(G[:, None, :] - G[None, :, :], 0))
    lower = np.tril(np.ones((C, C), bool))
    table = pd.DataFrame([dict(form=name, min_G=float(G.min()), pairs=int(lower.sum() * K),
                               nan=int(np.isnan(m[lower]).sum()), inf=int(np.isinf(m[lower]).sum()),
                               finite=int(np.isfinite(m[lower]).sum()))
                          for name, m in (("e^{G_i} · e^{-G_j}", split), ("e^{G_i - G_j}", diff))])
    x = random_inputs(1, 150, 2, 32, 16, seed=seed, gate="const", gate_value=g, initial_state=True)
    o_ref, _ = kda_recurrent_fp64(**x)
    m32 = chunk_stages_model(**x, chunk_size=C)
    return table, bool(np.isfinite(m32["o"]).all()), rel_err(m32["o"], o_ref)


def tf32_demo(chunk_size: int, K: int, seed: int = 0, cols: int = 32) -> pd.DataFrame:
    """A product of the state pass's shape, W (C×K) times a state block (K×cols), in fp32 FMA, TF32
    (operands truncated or rounded) and 3xTF32, each against float64."""
    from .tf32 import matmul_tf32

    rng = np.random.default_rng(seed)
    W = rng.standard_normal((chunk_size, K)).astype(np.float32) / np.sqrt(K)
    S = rng.standard_normal((K, cols)).astype(np.float32)
    exact = W.astype(np.float64) @ S.astype(np.float64)
    return pd.DataFrame([dict(method=name, MMAs_per_product=n, rel_err=rel_err(out, exact))
                         for name, n, out in [("fp32 FMA (04_chunk_state)", 0, W @ S),
                                              ("TF32, operands truncated", 1, matmul_tf32(W, S, passes=1)),
                                              ("TF32, operands rounded", 1, matmul_tf32(W, S, passes=1, round_operands=True)),
                                              ("3xTF32 (05_chunk_state_tc)", 3, matmul_tf32(W, S, passes=3))]])


def fla_note(latency: pd.DataFrame) -> str:
    """Whether fla was timed in the run that measured ``latency``."""
    rows = latency[latency["implementation"].str.startswith("fla")]
    return ("fla was not installed (or not asked for) when these figures were measured: no fla rows"
            if rows.empty else f"fla timed in the same run ({len(rows)} rows)")


def roofline_view(points: pd.DataFrame) -> pd.DataFrame:
    """:func:`roofline_points` in display units: TFLOP/s, TB/s and G exponentials per second."""
    return points.assign(TFLOPs=points["achieved_flops"] / 1e12, TBps=points["achieved_bytes_per_s"] / 1e12,
                         Gexp_per_s=points["achieved_exps_per_s"] / 1e9)[
        ["kernel", "T", "intensity", "TFLOPs", "TBps", "Gexp_per_s"]].round(3)
