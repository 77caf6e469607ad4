"""Every recorded GPU side by side (notebook 12): the ladder's latencies and their share of each
GPU's own roof, the best tiles per GPU, and which of seed 000's conclusions hold where.

A *source* is one set of recorded figures: the full-profile tables of a GPU in
``data/results/<gpu>/`` (optionally a profile's folder ``data/results/<gpu>/<profile>/``), or the
seed's GTX 1660 Ti figures in ``data/reference/``. Each GPU is measured against its own roof: the
ceilings its notebook 06 measured (``06_roofline__ceilings``), else its datasheet
(``data/reference/gpu_specs.csv``); the seed's GPU has only its datasheet. Everything here reads
recorded tables, so it runs the same in live and replay mode, on any machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from . import ladder, results, tuned
from . import roofline as rl
from .env import recorded_gpus
from .seed import SEED_GPU, seed_best_tiles, seed_latency
from .tile_scan import verdict_tile_kv_shrinks

SEED_KEY = "gtx-1660-ti (seed 000)"
#: The ladder's timing tables and which one owns each kernel (as notebook 04 assembles them).
LADDER_NOTEBOOKS = ("01_naive", "02_tiling", "03_float4", "04_padding")
OWNERS = {"naive": "02_tiling", "tiled": "02_tiling", "vec_load": "03_float4", "vec_padded": "04_padding",
          "double_buffer": "04_padding", ladder.SDPA: "04_padding"}
CEILINGS = ("06_roofline", "ceilings")


@dataclass(frozen=True)
class Source:
    """One set of recorded figures: ``key`` labels it in every table ('h200', 'h200/quick',
    the seed's); ``gpu`` is its results folder; ``profile`` its table profile; ``seed`` marks the
    published GTX 1660 Ti figures."""

    key: str
    gpu: str
    profile: str = results.CANONICAL_PROFILE
    seed: bool = False


def sources(extra_profile: str | None = None, gpus: Sequence[str] | None = None) -> list[Source]:
    """Every recorded GPU's full-profile figures (``gpus``: those folders only), then each GPU's
    ``extra_profile`` folder where it holds tables (e.g. a live quick run), then the seed."""
    chosen = list(recorded_gpus() if gpus is None else gpus)
    out = [Source(g, g) for g in chosen]
    if extra_profile and extra_profile != results.CANONICAL_PROFILE:
        root = results.RESULTS_DIR
        # a GPU measured live with this profile only (no full run yet) joins here too
        every = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        for g in (every if gpus is None else chosen):
            folder = results.RESULTS_DIR / g / extra_profile
            if folder.is_dir() and any(folder.glob("*.csv")):
                out.append(Source(f"{g}/{extra_profile}", g, extra_profile))
    return out + [Source(SEED_KEY, "gtx-1660-ti", "", seed=True)]


def _load(src: Source, notebook: str, table: str) -> pd.DataFrame | None:
    if src.seed or not results.has_table(notebook, table, src.gpu, src.profile):
        return None
    return results.load_table(notebook, table, src.gpu, src.profile)


def gpu_name(src: Source) -> str:
    """The device name its tables record ('NVIDIA H200'), the seed's 'GTX 1660 Ti'."""
    if src.seed:
        return SEED_GPU
    for notebook in (*LADDER_NOTEBOOKS, CEILINGS[0]):
        folder = results.table_path(notebook, "x", src.gpu, src.profile).parent
        for path in sorted(folder.glob(f"{notebook}__*.csv")):
            head = pd.read_csv(path, nrows=1)
            if "gpu_name" in head.columns and len(head):
                return str(head["gpu_name"].iloc[0])
    return src.gpu


# ---------------------------------------------------------------- latencies and roofs

def ladder_timing(src: Source) -> pd.DataFrame | None:
    """One timing row per (kernel, D, N) of the ladder and torch SDPA (``median_ms``, B, H,
    tile_rows, tile_kv), assembled from notebooks 01–04 as notebook 04 does; the seed's section-7
    table for the seed (its TILE_ROWS is 8 throughout). None when nothing is recorded."""
    if src.seed:
        t = seed_latency().rename(columns={"latency_ms": "median_ms"})
        t["tile_rows"] = np.where(t["kernel"] == "naive", 0, rl.DEFAULT_TILE_ROWS)
        return t[["kernel", "B", "H", "N", "D", "tile_rows", "median_ms"]]
    tables = {n: t for n in LADDER_NOTEBOOKS if (t := _load(src, n, "timing")) is not None}
    if not tables:
        return None
    t = ladder.assemble_ladder(tables, owners=OWNERS).drop(columns=["source"])
    t = t[t["kernel"].isin((*ladder.KERNEL_ORDER, ladder.SDPA))].dropna(subset=["median_ms"])
    return t.drop_duplicates(["kernel", "D", "N"], keep="last").reset_index(drop=True)


def roof(src: Source) -> tuple[rl.Ceilings | None, str]:
    """(ceilings, where from): the GPU's measured ceilings (notebook 06), else its datasheet,
    else (None, why)."""
    name = gpu_name(src)
    if not src.seed:
        table = _load(src, *CEILINGS)
        if table is not None:
            try:
                return rl.ceilings_from_table(table, name.replace("NVIDIA ", "")), "measured (06_roofline__ceilings)"
            except ValueError:
                pass
    try:
        c = rl.datasheet_ceilings(name.replace("NVIDIA ", "").strip())
    except KeyError:
        return None, f"no ceilings: neither 06_roofline__ceilings nor a datasheet row for {name!r}"
    return c, "datasheet (data/reference/gpu_specs.csv)" + ("" if src.seed else "; 06 not recorded")


def side_by_side(srcs: Sequence[Source]) -> pd.DataFrame:
    """Every ladder kernel's latency on every source, placed under that GPU's own roof.

    One row per (gpu, kernel, D, N): median_ms, achieved TFLOP/s, ``pct_of_roof`` (% of the
    attainable FLOP/s at the kernel's modelled intensity: min(peak, bandwidth × intensity)),
    ``pct_of_peak`` (% of the FP32 peak), the bound the model puts it against, and where the roof
    came from. Kernels without a bytes model (none of the ladder) and SDPA are left out."""
    frames = []
    for src in srcs:
        t = ladder_timing(src)
        if t is None:
            continue
        t = t[t["kernel"].isin(ladder.KERNEL_ORDER)]
        ceilings, where = roof(src)
        if ceilings is not None:
            p = rl.place(t, ceilings)
            p = p.assign(pct_of_roof=p["pct_of_attainable"], roof_tflops=ceilings.peak_flops / 1e12,
                         roof_tbps=ceilings.bandwidth / 1e12, ridge=ceilings.ridge)
        else:
            p = t.assign(achieved_tflops=ladder.tflops(t["B"], t["H"], t["N"], t["D"], t["median_ms"]),
                         pct_of_roof=np.nan, pct_of_peak=np.nan, bound="", intensity=np.nan,
                         roof_tflops=np.nan, roof_tbps=np.nan, ridge=np.nan)
        frames.append(p.assign(gpu=src.key, gpu_name=gpu_name(src), roof_source=where))
    if not frames:
        raise ValueError("no ladder timings recorded for any source")
    cols = ["gpu", "gpu_name", "kernel", "D", "N", "median_ms", "achieved_tflops", "pct_of_roof", "pct_of_peak",
            "intensity", "bound", "roof_tflops", "roof_tbps", "ridge", "roof_source"]
    out = pd.concat(frames, ignore_index=True)[cols]
    out["D"], out["N"] = out["D"].astype(int), out["N"].astype(int)
    return out.sort_values(["D", "N", "kernel", "gpu"], key=_kernel_order).reset_index(drop=True)


def _kernel_order(col: pd.Series) -> pd.Series:
    if col.name == "kernel":
        return col.map({k: i for i, k in enumerate(ladder.KERNEL_ORDER)}).fillna(len(ladder.KERNEL_ORDER))
    return col


def common_grid(long: pd.DataFrame) -> pd.DataFrame:
    """The (D, N) points that every source in ``long`` recorded."""
    per = long.groupby("gpu")[["D", "N"]].apply(lambda g: set(map(tuple, g.drop_duplicates().to_numpy())))
    common = set.intersection(*per) if len(per) else set()
    return pd.DataFrame(sorted(common), columns=["D", "N"])


def wide(long: pd.DataFrame, value: str = "median_ms", N: int | None = None) -> pd.DataFrame:
    """One row per (D, kernel), one column per GPU, at ``N`` (default: the largest N all GPUs
    share at each D)."""
    grid = common_grid(long)
    rows = []
    for D, g in long.groupby("D"):
        ns = grid[grid["D"] == D]["N"]
        n = N if N is not None else (int(ns.max()) if len(ns) else int(g["N"].max()))
        sel = g[g["N"] == n]
        piv = sel.pivot_table(index="kernel", columns="gpu", values=value, aggfunc="first")
        piv = piv.reindex([k for k in ladder.KERNEL_ORDER if k in piv.index]).reset_index()
        piv.insert(0, "N", n)
        piv.insert(0, "D", int(D))
        rows.append(piv)
    out = pd.concat(rows, ignore_index=True)
    out.columns.name = None
    return out


# ---------------------------------------------------------------- best tiles

def best_tiles(srcs: Sequence[Source], tuned_dir: Path | None = None) -> pd.DataFrame:
    """The best (TILE_ROWS, TILE_KV) per (kernel, D) on every source: data/tuned/<gpu>.json
    (notebook 05's scan) for recorded GPUs, the seed's published best tiles (its tiled kernel)."""
    frames = []
    for src in srcs:
        if src.seed:
            t = seed_best_tiles().assign(kernel="tiled", source="seed 000 (gtx1660ti_best_tiles.csv)")
        else:
            if src.profile != results.CANONICAL_PROFILE:
                continue   # the tuned file is written by full-profile runs only
            t = tuned.as_table(src.gpu, tuned_dir)
            if t.empty:
                continue
            t = t.assign(source=f"data/tuned/{src.gpu}.json")
        frames.append(t.assign(gpu=src.key)[["gpu", "kernel", "D", "tile_rows", "tile_kv", "source"]])
    if not frames:
        return pd.DataFrame(columns=["gpu", "kernel", "D", "tile_rows", "tile_kv", "source"])
    out = pd.concat(frames, ignore_index=True)
    out[["D", "tile_rows", "tile_kv"]] = out[["D", "tile_rows", "tile_kv"]].astype(int)
    return out.sort_values(["kernel", "D", "gpu"]).reset_index(drop=True)


def best_tiles_wide(best: pd.DataFrame) -> pd.DataFrame:
    """(kernel, D) rows, one 'ROWS×KV' column per GPU."""
    if best.empty:
        return pd.DataFrame(columns=["kernel", "D"])
    b = best.assign(tile=best["tile_rows"].astype(str) + "×" + best["tile_kv"].astype(str))
    out = b.pivot_table(index=["kernel", "D"], columns="gpu", values="tile", aggfunc="first").reset_index()
    out.columns.name = None
    return out


# ---------------------------------------------------------------- the seed's conclusions, per GPU

def verdict_tiling_beats_naive(table: pd.DataFrame, D: int = 32, kernel: str = "tiled") -> ladder.Verdict:
    """Seed: "D ≤ 32: tiled" — at this head dim the tiled kernel is faster than naive at every
    recorded N. ``table`` is a :func:`attnlab.ladder.ladder_table`."""
    ev = table[(table["kernel"] == kernel) & (table["D"] == D)].dropna(subset=["speedup_vs_naive"])
    if ev.empty:
        raise ValueError(f"no {kernel} rows with a naive baseline at D={D}")
    ev = ev[["N", "median_ms", "speedup_vs_naive"]].sort_values("N").reset_index(drop=True)
    ev["faster_than_naive"] = ev["speedup_vs_naive"] > 1.0
    holds = bool(ev["faster_than_naive"].all())
    summary = (f"{kernel} faster than naive at {int(ev['faster_than_naive'].sum())}/{len(ev)} N at D={D}; "
               f"speedup {ev['speedup_vs_naive'].min():.2f}–{ev['speedup_vs_naive'].max():.2f}×")
    return ladder.Verdict(f"tiling beats naive at D={D}", holds, ev, summary)


def verdict_tile_rows(best: pd.DataFrame, tile_rows: int = 8) -> ladder.Verdict:
    """Seed: "TILE_ROWS=8 is best for every D" — on the best tiles of each (kernel, D)."""
    if best.empty:
        raise ValueError("no best tiles")
    ev = best[["kernel", "D", "tile_rows", "tile_kv"]].sort_values(["kernel", "D"]).reset_index(drop=True)
    ev["is_" + str(tile_rows)] = ev["tile_rows"] == tile_rows
    holds = bool(ev["is_" + str(tile_rows)].all())
    summary = "best TILE_ROWS " + "; ".join(f"{k}: {' / '.join(map(str, g['tile_rows']))} for D {' / '.join(map(str, g['D']))}"
                                            for k, g in ev.groupby("kernel"))
    return ladder.Verdict(f"TILE_ROWS={tile_rows} is best for every D", holds, ev, summary)


def verdict_tile_kv(best: pd.DataFrame) -> ladder.Verdict:
    """Seed: "TILE_KV shrinks as D grows" (:func:`attnlab.tile_scan.verdict_tile_kv_shrinks`),
    holding when it holds for every tuned kernel."""
    if best.empty:
        raise ValueError("no best tiles")
    ev, s = verdict_tile_kv_shrinks(best)
    return ladder.Verdict("TILE_KV shrinks as D grows", bool(s["holds_for_all"]), ev, s["text"])


def verdict_seed_advice(table: pd.DataFrame) -> ladder.Verdict:
    """Seed's advice per head dim (D ≤ 32 tiled; D = 64 and 128 naive): the kernel family it
    names is the fastest on this GPU at every recorded D (:func:`attnlab.ladder.recommendation_table`)."""
    rec = ladder.recommendation_table(table)
    rec = rec[rec["D"].isin(ladder.SEED_ADVICE)]
    if rec.empty:
        raise ValueError("no head dim of the seed's advice recorded")
    ev = rec[["D", "kernel", "geo_mean_vs_fastest", "seed_advice", "same_family_as_seed"]].reset_index(drop=True)
    holds = bool(ev["same_family_as_seed"].all())
    summary = "fastest: " + "; ".join(f"D={r.D}: {r.kernel}" for r in ev.itertuples()) + \
              f" — the seed's family at {int(ev['same_family_as_seed'].sum())}/{len(ev)} D"
    return ladder.Verdict("the seed's advice (D≤32 tiled, D≥64 naive) picks the fastest family", holds, ev, summary)


def verdict_compute_bound(src: Source, timing: pd.DataFrame, threshold: float = 50.0) -> ladder.Verdict:
    """Seed: "attention is compute-bound here, so saving bandwidth is the wrong direction"
    (:func:`attnlab.roofline.compute_bound_verdict` on this GPU's own roof; DRAM bytes from its
    recorded Nsight Compute counters where present, else the logical bytes)."""
    ceilings, _ = roof(src)
    if ceilings is None:
        raise ValueError(f"{src.key}: no roof to judge against")
    placed = rl.place(timing[timing["kernel"].isin(ladder.KERNEL_ORDER)], ceilings)
    counters = None
    ncu_long = _load(src, "06_roofline", "ncu")
    if ncu_long is not None:
        from . import ncu

        counters = rl.measured_vs_modelled(ncu.counters_wide(ncu_long))
    rows, s = rl.compute_bound_verdict(placed, ceilings, counters, threshold=threshold)
    return ladder.Verdict("attention is compute-bound (saving bandwidth is the wrong lever)", bool(s["claim_holds"]),
                          rows, s["text"])


#: (claim, what it needs, verdict function). Needs: 'ladder' (a ladder table), 'tiles' (best
#: tiles), 'timing' (the source and its raw timing).
CLAIMS: tuple[tuple[str, str, Callable], ...] = (
    ("tiling beats naive at D=32", "ladder", verdict_tiling_beats_naive),
    ("tiling gains at most ~1.4× over naive", "ladder", lambda t: ladder.verdict_tiling_gain(t)),
    ("at D=128 tiling is slower than naive", "ladder", ladder.verdict_d128_tiling_slower),
    ("float4 loads and padding add almost nothing", "ladder", lambda t: ladder.verdict_float4_padding_negligible(t)),
    ("the seed's advice (D≤32 tiled, D≥64 naive) picks the fastest family", "ladder", verdict_seed_advice),
    ("TILE_ROWS=8 is best for every D", "tiles", verdict_tile_rows),
    ("TILE_KV shrinks as D grows", "tiles", verdict_tile_kv),
    ("attention is compute-bound (saving bandwidth is the wrong lever)", "timing", verdict_compute_bound),
)


def conclusions(srcs: Sequence[Source], tuned_dir: Path | None = None, threshold: float = 50.0) -> pd.DataFrame:
    """Every claim of :data:`CLAIMS` judged on every source's own tables: one row per (claim, gpu)
    with ``holds`` (True / False, or None where the tables needed are not recorded) and the
    evidence in one line. ``threshold``: % of a ceiling that counts as "against that roof"."""
    best = best_tiles(srcs, tuned_dir)
    rows = []
    for src in srcs:
        timing = ladder_timing(src)
        table = ladder.ladder_table(timing, include_seed=False) if timing is not None else None
        tiles = best[best["gpu"] == src.key]
        for claim, needs, fn in CLAIMS:
            holds, evidence = None, ""
            try:
                if needs == "ladder" and table is not None:
                    v = fn(table)
                elif needs == "tiles" and not tiles.empty:
                    v = fn(tiles)
                elif needs == "timing" and timing is not None:
                    v = fn(src, timing, threshold)
                else:
                    v = None
                    evidence = "not recorded" if needs != "tiles" else "no tuned tiles recorded"
                if v is not None:
                    holds, evidence = bool(v.holds), v.summary
            except (ValueError, KeyError) as exc:   # a grid without that head dim, say
                evidence = f"cannot judge: {exc}"
            rows.append({"claim": claim, "gpu": src.key, "holds": holds, "evidence": evidence})
    out = pd.DataFrame(rows, columns=["claim", "gpu", "holds", "evidence"])
    out["holds"] = pd.Series([h if h is None else bool(h) for h in out["holds"]], index=out.index, dtype=object)
    return out


def conclusions_wide(long: pd.DataFrame) -> pd.DataFrame:
    """One row per claim, one column per GPU: 'holds', 'does not hold' or '—' (not recorded)."""
    word = long.assign(verdict=long["holds"].map({True: "holds", False: "does not hold"}).fillna("—"))
    out = word.pivot_table(index="claim", columns="gpu", values="verdict", aggfunc="first")
    out = out.reindex([c for c, _, _ in CLAIMS if c in out.index])[list(dict.fromkeys(long["gpu"]))]
    out.columns.name = None
    return out.reset_index()


# ---------------------------------------------------------------- plots

_STYLES = ("-", "--", ":", "-.")


def plot_latency(long: pd.DataFrame, value: str = "median_ms", ylabel: str = "latency (ms)"):
    """One panel per head dim: ``value`` against N, a colour per kernel, a line style per GPU."""
    import matplotlib.pyplot as plt

    Ds = sorted(set(long["D"]))
    gpus = list(dict.fromkeys(long["gpu"]))
    fig, axes = plt.subplots(1, len(Ds), figsize=(5.2 * len(Ds), 4.2), squeeze=False)
    for ax, D in zip(axes[0], Ds):
        d = long[long["D"] == D]
        for gi, gpu in enumerate(gpus):
            for kernel, g in d[d["gpu"] == gpu].groupby("kernel", sort=False):
                g = g.sort_values("N")
                ax.plot(g["N"], g[value], _STYLES[gi % len(_STYLES)], marker="o", ms=3,
                        color=rl.KERNEL_COLORS.get(kernel, "tab:gray"), label=f"{kernel} · {gpu}")
        ax.set(xscale="log", yscale="log", xlabel="N", ylabel=ylabel, title=f"D = {D}")
        ax.grid(True, which="both", alpha=0.2)
    axes[0][-1].legend(fontsize=6, loc="best", ncol=1 + len(gpus) // 2)
    fig.tight_layout()
    return fig
