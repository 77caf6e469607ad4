"""Checking and timing attention kernels on a live GPU, as tidy tables.

Used by the ladder notebooks (01–05): every function returns a pandas DataFrame with one row
per (kernel, shape) so notebooks can record it with :func:`attnlab.results.save_table` and
replay it later.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from .kernels import get_kernel, get_spec, run_attention
from .reference import attention_flops, attention_fp64, attention_min_bytes, max_abs_error, rel_error

#: Shapes (B, H, N) that break naive indexing: one row, N not a multiple of any tile,
#: N past 4096, a single head, and many heads (B·H = 1000).
EDGE_SHAPES: tuple[tuple[int, int, int], ...] = (
    (1, 1, 1), (2, 8, 1), (2, 8, 63), (2, 8, 65), (1, 1, 4097), (1, 3, 4097), (1000, 1, 17), (2, 500, 64),
)
REL_ERR_FP64_MAX = 1e-5
SDPA_ATOL = SDPA_RTOL = 1e-2
SDPA = "torch_sdpa"


def random_qkv(B: int, H: int, N: int, D: int, rng: np.random.Generator):
    """Fresh standard-normal q, k, v on the GPU (float32, contiguous, 16-byte aligned)."""
    import cupy as cp

    return tuple(cp.asarray(rng.standard_normal((B, H, N, D), dtype=np.float32)) for _ in range(3))


def fresh_inputs(B: int, H: int, N_list: Sequence[int], D_list: Sequence[int], seed: int):
    """Fresh random q, k, v and an output buffer for every (D, N) of a grid (D outer), from one
    seeded generator: the inputs every kernel timed at that point shares."""
    from ..arrays import array_module

    rng = np.random.default_rng(seed)
    for D in D_list:
        for N in N_list:
            q, k, v = random_qkv(B, H, N, D, rng)
            yield D, N, q, k, v, array_module(q).empty_like(q)


def check_kernel(name: str, shapes: Iterable[tuple[int, int, int, int]], *, seed: int,
                 tile_rows: int | None = None, tile_kv: int | None = None,
                 gpu: str | None = None) -> pd.DataFrame:
    """Run ``name`` on fresh random inputs of each (B, H, N, D) and compare with float64 and SDPA.

    The output buffer is poisoned with NaN before each launch, so an element the kernel never
    wrote shows up as a failure rather than as stale data that happens to be right.
    """
    import cupy as cp
    import torch

    from .reference import attention_sdpa

    rng = np.random.default_rng(seed)
    rows = []
    for B, H, N, D in shapes:
        q, k, v = random_qkv(B, H, N, D, rng)
        out = cp.full((B, H, N, D), np.nan, dtype=cp.float32)
        run_attention(name, q, k, v, tile_rows=tile_rows, tile_kv=tile_kv, out=out, gpu=gpu)
        cp.cuda.get_current_stream().synchronize()
        ref = attention_fp64(q, k, v)
        sdpa = attention_sdpa(q, k, v)
        out_t = torch.from_dlpack(out)
        plan = get_kernel(name, D, tile_rows, tile_kv, gpu)
        row = dict(kernel=name, B=B, H=H, N=N, D=D,
                   tile_rows=plan.tile_rows if get_spec(name).tiled else 0,
                   tile_kv=plan.tile_kv if get_spec(name).tiled else 0,
                   all_written=bool(cp.isfinite(out).all()),
                   rel_err_fp64=rel_error(out, ref), max_abs_err_fp64=max_abs_error(out, ref),
                   rel_err_sdpa=rel_error(out_t, sdpa),
                   allclose_sdpa=bool(torch.allclose(out_t, sdpa, atol=SDPA_ATOL, rtol=SDPA_RTOL)))
        row["passed"] = bool(row["all_written"] and row["rel_err_fp64"] < REL_ERR_FP64_MAX
                             and row["allclose_sdpa"])
        rows.append(row)
    return pd.DataFrame(rows)


def _point(kernel: str, B, H, N, D, tile_rows, tile_kv, tiles_from) -> dict:
    """The columns of one timed entry of the seed grid, before its timing."""
    return dict(kernel=kernel, B=B, H=H, N=N, D=D, tile_rows=tile_rows, tile_kv=tile_kv, tiles_from=tiles_from)


def time_grid(kernels: Sequence[str], B: int, H: int, N_list: Sequence[int], D_list: Sequence[int], *,
              budget_s: float, seed: int, include_sdpa: bool = True,
              tiles: dict | None = None, gpu: str | None = None) -> pd.DataFrame:
    """Median latency of each kernel (and torch SDPA fp32) over the (N, D) grid, in one run.

    All kernels of one (N, D) share the same fresh inputs and are timed back to back
    (:func:`attnlab.timing.time_rows`), so drift in clocks or temperature touches every column of
    a row alike. ``tiles`` maps (kernel, D) -> (tile_rows, tile_kv) to override the defaults.
    """
    import torch
    import torch.nn.functional as F

    from ..timing import time_rows

    rows = []
    for D, N, q, k, v, out in fresh_inputs(B, H, N_list, D_list, seed):   # every kernel on the same inputs
        entries = []
        for name in kernels:
            tr, tkv = (tiles or {}).get((name, D), (None, None))
            plan = get_kernel(name, D, tr, tkv, gpu)
            tr, tkv = (plan.tile_rows, plan.tile_kv) if plan.spec.tiled else (None, None)
            entries.append((_point(name, B, H, N, D, tr or 0, tkv or 0, plan.tiles_from),
                            lambda name=name, tr=tr, tkv=tkv: run_attention(name, q, k, v, tr, tkv, out=out, gpu=gpu)))
        if include_sdpa:
            qt, kt, vt = (torch.from_dlpack(a) for a in (q, k, v))
            entries.append((_point(SDPA, B, H, N, D, 0, 0, "library"),
                            lambda qt=qt, kt=kt, vt=vt: F.scaled_dot_product_attention(qt, kt, vt)))
        flops = attention_flops(B, H, N, D)
        rows += time_rows(entries, budget_s=budget_s, flops=flops)
    df = pd.DataFrame(rows)
    if len(df):
        df["flops"] = attention_flops(B, H, df["N"], df["D"])
        df["min_bytes"] = attention_min_bytes(B, H, df["N"], df["D"])
        df["gbps_min"] = df["min_bytes"] / (df["median_ms"] * 1e-3) / 1e9
    return df


def sdpa_backend_note() -> str:
    """Which SDPA backends torch may pick for fp32 (flash attention has no fp32 path)."""
    import torch

    b = torch.backends.cuda
    return (f"flash={b.flash_sdp_enabled()} mem_efficient={b.mem_efficient_sdp_enabled()} "
            f"math={b.math_sdp_enabled()} tf32_matmul={torch.backends.cuda.matmul.allow_tf32}")


def static_resources(kernels: Sequence[str], head_dims: Sequence[int], archs: Sequence[str] = ("sm_75", "sm_90"),
                     tiles: dict | None = None) -> pd.DataFrame:
    """Registers, static shared memory, spills and stack of each kernel per head dim and arch, from
    the static build (no GPU). ``tiles`` maps (kernel, D) -> (tile_rows, tile_kv); default tiles
    otherwise. The dynamic shared memory the launcher asks for is added as ``dynamic_smem_bytes``."""
    from .kernels import resolve_tiles
    from ..static import has_vector_global_loads, static_build

    rows = []
    for name in kernels:
        spec = get_spec(name)
        args, meta = [], []
        for D in head_dims:
            tr, tkv = (tiles or {}).get((name, D), (None, None))
            tr, tkv, _ = resolve_tiles(name, D, tr, tkv)
            args.append(spec.template_args(D, tr, tkv))
            meta.append((D, tr, tkv))
        for arch in archs:
            for rep, (D, tr, tkv) in zip(static_build(spec.source, spec.function, args, arch), meta):
                rows.append(dict(kernel=name, D=D, tile_rows=tr if spec.tiled else 0,
                                 tile_kv=tkv if spec.tiled else 0, arch=arch, registers=rep.registers,
                                 static_smem_bytes=rep.static_smem_bytes,
                                 dynamic_smem_bytes=spec.smem_bytes(D, tr, tkv),
                                 spill_store_bytes=rep.spill_store_bytes, spill_load_bytes=rep.spill_load_bytes,
                                 stack_bytes=rep.stack_bytes, v4_global_loads=has_vector_global_loads(rep.ptx)))
    return pd.DataFrame(rows)


def versus_sdpa(timing: pd.DataFrame, kernel: str, peak_tflops: float | None = None) -> pd.DataFrame:
    """One row per (D, N): the kernel's latency and TFLOP/s beside torch SDPA fp32 from the same run.

    ``sdpa_speedup`` = kernel time / SDPA time (how many times faster the library is);
    ``pct_fp32_peak`` = achieved TFLOP/s over ``peak_tflops`` when given.
    """
    mine = timing[timing["kernel"] == kernel].set_index(["D", "N"])
    sdpa = timing[timing["kernel"] == SDPA].set_index(["D", "N"])
    out = pd.DataFrame({
        f"{kernel}_ms": mine["median_ms"],
        f"{kernel}_rel_iqr": mine["rel_iqr"],
        f"{kernel}_tflops": mine["tflops"],
        "sdpa_ms": sdpa["median_ms"].reindex(mine.index),
        "sdpa_tflops": sdpa["tflops"].reindex(mine.index),
    })
    out["sdpa_speedup"] = out[f"{kernel}_ms"] / out["sdpa_ms"]
    if peak_tflops:
        out["pct_fp32_peak"] = 100 * out[f"{kernel}_tflops"] / peak_tflops
    return out.reset_index()


def describe_naive(summary: pd.DataFrame, peak_tflops: float | None) -> str:
    """Notebook 01's reading of its :func:`versus_sdpa` table (with the seed's latency beside), each
    sentence generated from the rows: the best throughput, SDPA and the seed's GPU at the largest N,
    and the slope of latency in N over the two largest N."""
    big = summary[summary["N"] == summary["N"].max()]
    best = summary.loc[summary["naive_tflops"].idxmax()]
    lines = [f"- Best naive throughput: **{best['naive_tflops']:.2f} TFLOP/s** at N={int(best['N'])}, D={int(best['D'])}"
             + (f" ({best['pct_fp32_peak']:.1f} % of the datasheet FP32 peak)" if peak_tflops else "") + "."]
    for _, r in big.iterrows():
        lines.append(f"- N={int(r['N'])}, D={int(r['D'])}: naive {r['naive_ms']:.3f} ms vs SDPA {r['sdpa_ms']:.3f} ms — "
                     f"SDPA is **{r['sdpa_speedup']:.1f}×** faster"
                     + (f"; {r['speedup_vs_seed_gpu']:.0f}× faster than the seed's GTX 1660 Ti"
                        if pd.notna(r.get('seed_ms')) else "") + ".")
    if summary["N"].nunique() >= 2:
        for d, g in summary.groupby("D"):
            g = g.sort_values("N").tail(2)
            slope = np.log(g["naive_ms"].iloc[1] / g["naive_ms"].iloc[0]) / np.log(g["N"].iloc[1] / g["N"].iloc[0])
            lines.append(f"- D={d}: log-log slope of latency vs N over the two largest N = {slope:.2f} (2 = pure N² work).")
    return "\n".join(lines)


def plot_latency_vs_seed(timing: pd.DataFrame, gpu_label: str, title: str, kernel: str = "naive"):
    """Latency against N per D: ``kernel`` and torch SDPA (IQR bars), the seed's GTX 1660 Ti beside."""
    import matplotlib.pyplot as plt

    from ..seed import seed_latency

    Ds = sorted(set(timing["D"]))
    fig, axes = plt.subplots(1, len(Ds), figsize=(5 * len(Ds), 4), squeeze=False)
    seed_lat = seed_latency()
    for ax, d in zip(axes[0], Ds):
        for k, style in ((kernel, "o-"), (SDPA, "s--")):
            t = timing[(timing["kernel"] == k) & (timing["D"] == d)].sort_values("N")
            ax.errorbar(t["N"], t["median_ms"], yerr=[t["median_ms"] - t["q1_ms"], t["q3_ms"] - t["median_ms"]],
                        fmt=style, label=f"{k} ({gpu_label})", capsize=2)
        s = seed_lat[(seed_lat["kernel"] == kernel) & (seed_lat["D"] == d)].sort_values("N")
        ax.plot(s["N"], s["latency_ms"], "^:", color="grey", label=f"{kernel}, GTX 1660 Ti (seed 000)")
        ax.set(xscale="log", yscale="log", xlabel="N (sequence length)", ylabel="latency (ms)", title=f"D = {d}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    plt.tight_layout()
    plt.show()
    return fig
