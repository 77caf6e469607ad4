"""The optimization ladder of seed 000 (notebooks 02–04): a NumPy model of the tiled online
softmax, the seed-style tables (latency, TFLOP/s, speedups, SDPA and the seed's GTX 1660 Ti
figures beside), verdicts on the seed's conclusions computed from data, and a recommendation
table per head dim.

Everything above the "live helpers" line is pure (pandas/NumPy, CPU) and unit-tested in
tests/test_ladder.py; the live helpers at the bottom need CuPy and a GPU.

Tables used here:

* a *timing* table as written by :func:`attnlab.bench.time_grid`: one row per
  (kernel, D, N) with at least ``kernel, B, H, N, D, median_ms`` (``tile_rows``, ``tile_kv``
  optional); torch SDPA rows have kernel ``"torch_sdpa"``;
* a *scan* table (tile sweep): ``kernel, D, N, tile_rows, tile_kv, median_ms``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from .attention import SEED_LADDER, SEED_TILED, get_spec
# The NumPy model of the online softmax lives in attention/models.py beside the naive one; the ladder
# notebooks reach it through this module.
from .attention.models import (SoftmaxState, empty_state, merge_states, softmax_attention,  # noqa: F401
                               tile_state, tiled_online_softmax)
from .attention.reference import attention_flops
from .seed import SEED_TILES, seed_slowdown

SDPA = "torch_sdpa"
#: The ladder in order, from the registry; double_buffer is the seed's side experiment revisited
#: (cp.async).
KERNEL_ORDER = SEED_LADDER
TILED_FAMILY = SEED_TILED
#: The step each kernel is measured against ("speedup vs previous step"): its registry predecessor.
PREVIOUS = {k: get_spec(k).predecessor for k in TILED_FAMILY}
LABELS = {**{k: get_spec(k).label for k in KERNEL_ORDER}, SDPA: "SDPA"}
#: Seed 000's advice table ("给开发者的建议"): kernel, TILE_ROWS, TILE_KV per head dim.
SEED_ADVICE = {32: ("tiled", 8, 32), 64: ("naive", None, None), 128: ("naive", None, None)}
SEED_ADVICE_TEXT = {32: "D ≤ 32: tiled, TILE_ROWS=8, TILE_KV=32",
                    64: "D = 64: naive is enough, tiling gains little",
                    128: "D ≥ 128: must use naive, tiling is 30 %+ slower"}


# ------------------------------------------------------------------ shapes, FLOPs, shared memory



def tflops(B, H, N, D, ms):
    return attention_flops(B, H, N, D) / (np.asarray(ms, dtype=float) * 1e-3) / 1e12


def smem_bytes(kernel: str, D: int, tile_rows: int, tile_kv: int) -> int:
    """Dynamic shared memory of a tiled kernel (the launcher's formula)."""
    from .attention import get_spec

    return get_spec(kernel).smem_bytes(D, tile_rows, tile_kv)


def kv_traffic_table(N_list: Sequence[int], D_list: Sequence[int], B: int = 2, H: int = 8,
                     tiles: Mapping[int, tuple[int, int]] | None = None,
                     l2_bytes: float | None = None) -> pd.DataFrame:
    """Modelled K/V bytes fetched from the memory system (L2 or DRAM) per launch.

    naive: every query row (one warp) reads all of K and V: B·H·N · N·D·4·2 bytes.
    tiled: every block of TILE_ROWS rows reads them once: B·H·⌈N/TILE_ROWS⌉ · N·D·4·2.
    ``unique_kv_bytes`` is K and V once (B·H·N·D·4·2); ``fits_in_l2`` compares it with
    ``l2_bytes`` — when it fits, the naive kernel's N-fold re-reads can be L2 hits (the seed's
    explanation of why tiling gained so little).
    """
    tiles = dict(tiles or SEED_TILES)
    rows = []
    for D in D_list:
        tr = tiles[D][0]
        for N in N_list:
            unique = B * H * N * D * 4 * 2
            naive = B * H * N * unique / (B * H)
            tiled = B * H * math.ceil(N / tr) * unique / (B * H)
            row = dict(D=D, N=N, tile_rows=tr, unique_kv_bytes=unique, naive_kv_bytes=naive,
                       tiled_kv_bytes=tiled, reduction=naive / tiled)
            if l2_bytes:
                row["fits_in_l2"] = unique <= l2_bytes
            rows.append(row)
    return pd.DataFrame(rows)


def copy_instruction_table(kernels: Sequence[str], D_list: Sequence[int],
                           tiles: Mapping[int, tuple[int, int]] | None = None) -> pd.DataFrame:
    """Per block and per full K/V tile: warp-level global load instructions of the cooperative
    copy, and loop trips per thread. Scalar copies (02) move 4 bytes per lane, float4 copies
    (03–05) 16, so the float4 kernels issue a quarter of the instructions for the same bytes."""
    from .banks import LAYOUTS

    tiles = dict(tiles or SEED_TILES)
    rows = []
    for kernel in kernels:
        vec = LAYOUTS[kernel]["copy_width"] // 4
        for D in D_list:
            tr, tkv = tiles[D]
            elems = tkv * D // vec               # floats or float4s per K (or V) tile
            rows.append(dict(kernel=kernel, D=D, tile_rows=tr, tile_kv=tkv, bytes_per_lane=4 * vec,
                             kv_tile_bytes=2 * tkv * D * 4,
                             warp_load_instructions=2 * math.ceil(elems / 32),
                             trips_per_thread=math.ceil(elems / (32 * tr))))
    return pd.DataFrame(rows)


def ptx_load_table(kernels: Sequence[str], D_list: Sequence[int], archs: Sequence[str] = ("sm_75", "sm_90"),
                   tiles: Mapping[int, tuple[int, int]] | None = None) -> pd.DataFrame:
    """Global/shared memory instructions in each kernel's PTX (static counts), from the static
    build (nvcc on the CPU): scalar vs 128-bit global loads, vector shared stores, cp.async."""
    import re

    from .attention import get_spec
    from .static import has_vector_global_loads, static_build

    tiles = dict(tiles or SEED_TILES)
    rows = []
    for kernel in kernels:
        spec = get_spec(kernel)
        args = [spec.template_args(D, *tiles[D]) for D in D_list]
        for arch in archs:
            for D, rep in zip(D_list, static_build(spec.source, spec.function, args, arch)):
                ptx = rep.ptx
                count = lambda pat: len(re.findall(pat, ptx))  # noqa: E731
                rows.append(dict(kernel=kernel, D=D, arch=arch,
                                 ld_global_f32=count(r"\bld\.global(?:\.nc)?\.f32\b"),
                                 ld_global_v4_f32=count(r"\bld\.global(?:\.nc)?\.v4\.f32\b"),
                                 st_shared_f32=count(r"\bst\.shared\.f32\b"),
                                 st_shared_v4_f32=count(r"\bst\.shared\.v4\.f32\b"),
                                 cp_async_16=count(r"\bcp\.async\.cg\.shared\.global\b"),
                                 cp_async_wait=count(r"\bcp\.async\.wait_group\b"),
                                 has_128bit_global_loads=bool(re.search(r"\bld\.global(?:\.nc)?\.v4\.", ptx)),
                                 vector_or_async_copies=has_vector_global_loads(ptx)))
    return pd.DataFrame(rows)


def with_occupancy(static: pd.DataFrame) -> pd.DataFrame:
    """Add theoretical occupancy (blocks/SM, warps, limiter) to a static-resources table
    (:func:`attnlab.bench.static_resources`), per architecture."""
    from .occupancy import occupancy

    out = static.copy()
    occ = [occupancy(r["arch"], 32 * max(int(r["tile_rows"]), 1), int(r["registers"]), int(r["static_smem_bytes"]),
                     int(r["dynamic_smem_bytes"])) for r in static.to_dict("records")]
    out["blocks_per_sm"] = [o.blocks_per_sm for o in occ]
    out["active_warps"] = [o.active_warps for o in occ]
    out["occupancy_pct"] = [100 * o.occupancy for o in occ]
    out["limiter"] = [o.limiter for o in occ]
    return out


def ncu_view(gpu: str, kernels: Sequence[str]) -> tuple[pd.DataFrame | None, str]:
    """The recorded Nsight Compute counters (data/results/<gpu>/06_roofline__ncu.csv, written by
    scripts/ncu_profile.py) for ``kernels``: DRAM and L2 bytes, shared-memory bank conflicts.
    Returns (table or None, a sentence saying what was found)."""
    from . import ncu
    from .results import has_table, load_table

    if not has_table("06_roofline", "ncu", gpu):
        return None, (f"No Nsight Compute counters are recorded for '{gpu}' (data/results/{gpu}/"
                      "06_roofline__ncu.csv is absent: ncu missing or counters not permitted on the "
                      "recording machine). The bank-conflict figures here are the model's only.")
    long = load_table("06_roofline", "ncu", gpu)
    w = ncu.counters_wide(long)
    w = w[w["kernel"].isin(kernels)]
    if w.empty:
        return None, f"The recorded ncu table for '{gpu}' has no rows for {', '.join(kernels)}."
    cols = [c for c in ("kernel", "N", "D", "tile_rows", "tile_kv", "dram__bytes.sum", "lts__t_bytes.sum",
                        "lts__t_sector_hit_rate.pct", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "gpu__time_duration.sum")
            if c in w.columns]
    w = w[cols].sort_values([c for c in ("D", "N", "kernel") if c in cols]).reset_index(drop=True)
    from .results import describe_provenance

    return w, (f"Nsight Compute counters recorded on '{gpu}' ({len(w)} profiled calls of these kernels; "
               f"{describe_provenance(long)}).")


# ------------------------------------------------------------------ seed-style tables

def _check_columns(df: pd.DataFrame, needed: Iterable[str], what: str) -> None:
    missing = sorted(set(needed) - set(df.columns))
    if missing:
        raise ValueError(f"{what} lacks column(s) {missing}; it has {sorted(df.columns)}")


def ordered_kernels(names: Iterable[str]) -> list[str]:
    names = set(names)
    return [k for k in KERNEL_ORDER if k in names] + sorted(names - set(KERNEL_ORDER) - {SDPA})


def seed_table() -> pd.DataFrame:
    """The seed's GTX 1660 Ti latencies with its speedups (vs naive and vs previous step)."""
    from .seed import seed_latency

    lat = seed_latency().rename(columns={"latency_ms": "median_ms"})
    return ladder_table(lat, include_seed=False)


def ladder_table(timing: pd.DataFrame, include_seed: bool = True) -> pd.DataFrame:
    """One row per (D, N, kernel) of the ladder: latency, TFLOP/s, speedup vs naive and vs the
    previous step, torch SDPA from the same run, and (``include_seed``) the seed's GTX 1660 Ti
    latency and speedups for the same kernel, D and N.

    ``speedup_vs_naive`` = naive_ms / ms (> 1: faster than naive); ``speedup_vs_prev`` likewise
    against :data:`PREVIOUS`; ``x_slower_than_sdpa`` = ms / sdpa_ms.
    """
    _check_columns(timing, ["kernel", "D", "N", "median_ms"], "timing table")
    t = timing.copy()
    for col, default in (("B", 2), ("H", 8)):
        if col not in t.columns:
            t[col] = default
    dup = t.duplicated(["kernel", "D", "N"], keep=False)
    if dup.any():
        raise ValueError("timing table has several rows for one (kernel, D, N): "
                         f"{t.loc[dup, ['kernel', 'D', 'N']].drop_duplicates().values.tolist()[:5]}; "
                         "pick one (see assemble_ladder)")
    ms = t.pivot(index=["D", "N"], columns="kernel", values="median_ms")
    shape = t.groupby(["D", "N"])[["B", "H"]].first()
    tiles = (t.set_index(["kernel", "D", "N"])[["tile_rows", "tile_kv"]]
             if {"tile_rows", "tile_kv"} <= set(t.columns) else None)
    seed_long = seed_table().set_index(["kernel", "D", "N"]) if include_seed else None
    rows = []
    for (D, N), r in ms.iterrows():
        B, H = int(shape.loc[(D, N), "B"]), int(shape.loc[(D, N), "H"])
        sdpa = r.get(SDPA, np.nan)
        for kernel in ordered_kernels(ms.columns):
            v = r[kernel]
            if pd.isna(v):
                continue
            prev = PREVIOUS.get(kernel)
            tr, tkv = (tiles.loc[(kernel, D, N)] if tiles is not None else (np.nan, np.nan))
            row = dict(D=int(D), N=int(N), kernel=kernel, B=B, H=H, tile_rows=tr, tile_kv=tkv, median_ms=float(v),
                       tflops=float(tflops(B, H, N, D, v)),
                       speedup_vs_naive=float(r["naive"] / v) if "naive" in r and pd.notna(r.get("naive")) else np.nan,
                       prev_kernel=prev or "",
                       speedup_vs_prev=float(r[prev] / v) if prev in r and pd.notna(r.get(prev)) else np.nan,
                       sdpa_ms=float(sdpa), sdpa_tflops=float(tflops(B, H, N, D, sdpa)) if pd.notna(sdpa) else np.nan,
                       x_slower_than_sdpa=float(v / sdpa) if pd.notna(sdpa) else np.nan)
            if seed_long is not None:
                key = (kernel, int(D), int(N))
                if key in seed_long.index:
                    s = seed_long.loc[key]
                    row.update(seed_ms=float(s["median_ms"]), seed_speedup_vs_naive=float(s["speedup_vs_naive"]),
                               seed_speedup_vs_prev=float(s["speedup_vs_prev"]))
                else:
                    row.update(seed_ms=np.nan, seed_speedup_vs_naive=np.nan, seed_speedup_vs_prev=np.nan)
            rows.append(row)
    return pd.DataFrame(rows)


def wide_table(long: pd.DataFrame, D: int, kernels: Sequence[str] | None = None,
               with_seed: bool = True) -> pd.DataFrame:
    """The seed's section-7 layout for one head dim: one row per N, each kernel's latency, SDPA,
    the best speedup of the tiled family over naive, and the seed's figures beside."""
    d = long[long["D"] == D]
    if d.empty:
        raise ValueError(f"no rows for D={D} in the ladder table (D present: {sorted(set(long['D']))})")
    kernels = list(kernels) if kernels else ordered_kernels(d["kernel"])
    out = pd.DataFrame(index=sorted(set(d["N"])))
    out.index.name = "N"
    for k in kernels:
        out[f"{LABELS.get(k, k)} ms"] = d[d["kernel"] == k].set_index("N")["median_ms"]
    out["SDPA ms"] = d.groupby("N")["sdpa_ms"].first()
    fam = d[d["kernel"].isin(TILED_FAMILY) & d["kernel"].isin(kernels)]
    with_naive = fam.dropna(subset=["speedup_vs_naive"])   # no naive in this table: no "best speedup"
    if not with_naive.empty:
        out["best speedup"] = with_naive.groupby("N")["speedup_vs_naive"].max()
        out["best kernel"] = with_naive.loc[with_naive.groupby("N")["speedup_vs_naive"].idxmax()].set_index("N")["kernel"]
    if with_seed and "seed_ms" in d.columns:
        for k in kernels:
            s = d[d["kernel"] == k].set_index("N")["seed_ms"]
            if s.notna().any():
                out[f"seed {LABELS.get(k, k)} ms"] = s
        sfam = fam[fam["seed_speedup_vs_naive"].notna()] if not fam.empty else fam
        if not sfam.empty:
            out["seed best speedup"] = sfam.groupby("N")["seed_speedup_vs_naive"].max()
    return out


def assemble_ladder(tables: Mapping[str, pd.DataFrame], owners: Mapping[str, str] | None = None) -> pd.DataFrame:
    """One timing table from several notebooks' recorded tables (e.g. 02, 03, 04 of one run).

    ``tables`` maps a notebook name to its timing table; a kernel measured by several notebooks
    is taken from its *owner* (``owners``: kernel -> notebook, e.g. tiled -> 02_tiling), else from
    the last table that has it. SDPA is taken from the last table that has it. Adds a ``source``
    column naming the notebook each row came from.
    """
    owners = dict(owners or {})
    frames = {nbname: t.assign(source=nbname) for nbname, t in tables.items()}
    picked = []
    kernels = set().union(*(set(t["kernel"]) for t in frames.values())) if frames else set()
    for kernel in kernels:
        have = [nbname for nbname, t in frames.items() if (t["kernel"] == kernel).any()]
        src = owners.get(kernel) if owners.get(kernel) in have else have[-1]
        picked.append(frames[src][frames[src]["kernel"] == kernel])
    if not picked:
        raise ValueError("no timing tables to assemble")
    return pd.concat(picked, ignore_index=True)


def same_grid(table: pd.DataFrame, like: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``table`` whose (B, H, D, N) occur in ``like`` (e.g. another notebook's recording
    restricted to this run's grid)."""
    keys = ["B", "H", "D", "N"]
    mask = pd.MultiIndex.from_frame(table[keys]).isin(pd.MultiIndex.from_frame(like[keys].drop_duplicates()))
    return table[mask]


def repeat_consistency(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Kernels measured in more than one notebook of the same run: the ratio of their medians, a
    direct estimate of run-to-run noise (1.00 = identical). ``both_converged`` says whether both
    timings met the timer's convergence rule (a table without a ``converged`` column counts as
    converged): only such pairs measure repeatability; the others (the shortest launches, whose
    spread is launch overhead) say how far an unconverged median can move."""
    rows = []
    names = list(tables)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            ta, tb = tables[a].set_index(["kernel", "D", "N"]), tables[b].set_index(["kernel", "D", "N"])
            common = ta.index.intersection(tb.index)
            for key in common:
                conv = all(bool(t.loc[key, "converged"]) if "converged" in t else True for t in (ta, tb))
                rows.append(dict(kernel=key[0], D=key[1], N=key[2], first=a, second=b,
                                 first_ms=float(ta.loc[key, "median_ms"]), second_ms=float(tb.loc[key, "median_ms"]),
                                 ratio=float(tb.loc[key, "median_ms"] / ta.loc[key, "median_ms"]),
                                 both_converged=conv))
    return pd.DataFrame(rows, columns=["kernel", "D", "N", "first", "second", "first_ms", "second_ms", "ratio",
                                       "both_converged"])


def describe_repeats(noise: pd.DataFrame, where: str) -> str:
    """One sentence on :func:`repeat_consistency`'s table: the converged pairs' median ratio and range,
    and how many pairs were left out as unconverged (with their range)."""
    good, bad = noise[noise["both_converged"]], noise[~noise["both_converged"]]
    parts = []
    if len(good):
        parts.append(f"Kernels timed {where}: over the {len(good)} pairs whose timings both converged, median ratio "
                     f"{good['ratio'].median():.3f}, range {good['ratio'].min():.3f}–{good['ratio'].max():.3f} "
                     "(1.000 = identical).")
    else:
        parts.append(f"Kernels timed {where}: no pair whose timings both converged.")
    if len(bad):
        parts.append(f"{len(bad)} pairs with an unconverged timing (the shortest launches) are left out; their ratios "
                     f"span {bad['ratio'].min():.3f}–{bad['ratio'].max():.3f}.")
    return " ".join(parts)


# ------------------------------------------------------------------ verdicts on the seed's claims

@dataclass
class Verdict:
    """A claim of the seed tested on data: ``holds``, the evidence table and a one-line summary.
    Unpacks as ``holds, evidence = verdict``."""

    claim: str
    holds: bool
    evidence: pd.DataFrame = field(repr=False)
    summary: str = ""

    def __iter__(self):
        return iter((self.holds, self.evidence))

    def row(self) -> dict:
        return {"claim": self.claim, "holds": self.holds, "evidence": self.summary}


def verdict_table(verdicts: Iterable[Verdict]) -> pd.DataFrame:
    return pd.DataFrame([v.row() for v in verdicts])


def verdict_tiling_gain(table: pd.DataFrame, limit: float = 1.4, tolerance: float = 0.05,
                        kernels: Sequence[str] = ("tiled",)) -> Verdict:
    """Seed: "tiling gains at most ~1.4× over naive, for any N and D".
    Holds when the largest speedup of ``kernels`` over naive is ≤ limit·(1 + tolerance)."""
    _check_columns(table, ["kernel", "D", "N", "speedup_vs_naive"], "ladder table")
    ev = table[table["kernel"].isin(kernels)][["kernel", "D", "N", "median_ms", "speedup_vs_naive"]]
    ev = ev.dropna(subset=["speedup_vs_naive"]).sort_values("speedup_vs_naive", ascending=False)
    if ev.empty:
        raise ValueError(f"no rows of {list(kernels)} with a naive baseline")
    top = ev.iloc[0]
    bound = limit * (1 + tolerance)
    holds = bool(top["speedup_vs_naive"] <= bound)
    summary = (f"largest speedup of {'/'.join(kernels)} over naive: {top['speedup_vs_naive']:.2f}× "
               f"({top['kernel']}, D={int(top['D'])}, N={int(top['N'])}); bound {limit}×·(1+{tolerance}) = {bound:.2f}×")
    return Verdict(f"tiling gains at most ~{limit}× over naive", holds, ev.reset_index(drop=True), summary)


def verdict_d128_tiling_slower(table: pd.DataFrame, D: int = 128, kernel: str = "tiled",
                               min_fraction: float = 1.0) -> Verdict:
    """Seed: "at D=128 tiling is slower than naive (25–45 %)". Holds when ``kernel`` is slower
    than naive at a fraction ≥ ``min_fraction`` of the N measured at this D."""
    _check_columns(table, ["kernel", "D", "N", "median_ms", "speedup_vs_naive"], "ladder table")
    ev = table[(table["kernel"] == kernel) & (table["D"] == D)].dropna(subset=["speedup_vs_naive"])
    if ev.empty:
        raise ValueError(f"no {kernel} rows with a naive baseline at D={D}")
    ev = ev[["N", "median_ms", "speedup_vs_naive"]].sort_values("N").reset_index(drop=True)
    ev["time_vs_naive"] = 1.0 / ev["speedup_vs_naive"]
    ev["slower_than_naive"] = ev["time_vs_naive"] > 1.0
    frac = float(ev["slower_than_naive"].mean())
    holds = bool(frac >= min_fraction)
    summary = (f"{kernel} slower than naive at {int(ev['slower_than_naive'].sum())}/{len(ev)} N at D={D}; "
               f"time vs naive {ev['time_vs_naive'].min():.2f}–{ev['time_vs_naive'].max():.2f}×")
    return Verdict(f"at D={D} tiling is slower than naive", holds, ev, summary)


def step_effect(table: pd.DataFrame, new: str, old: str) -> pd.DataFrame:
    """Per (D, N): the old and new kernel's latency, ``time_ratio`` = new/old, ``speedup`` = old/new."""
    _check_columns(table, ["kernel", "D", "N", "median_ms"], "ladder table")
    ms = table.pivot_table(index=["D", "N"], columns="kernel", values="median_ms")
    for k in (new, old):
        if k not in ms.columns:
            raise ValueError(f"the ladder table has no {k} rows")
    ev = pd.DataFrame({f"{old}_ms": ms[old], f"{new}_ms": ms[new]}).dropna().reset_index()
    ev["time_ratio"] = ev[f"{new}_ms"] / ev[f"{old}_ms"]
    ev["speedup"] = 1.0 / ev["time_ratio"]
    return ev


def _effect_stat(ev: pd.DataFrame, statistic: str) -> float:
    if statistic not in ("median", "max"):
        raise ValueError("statistic must be 'median' or 'max'")
    return float(getattr((ev["time_ratio"] - 1).abs(), statistic)())


def verdict_step_negligible(table: pd.DataFrame, new: str, old: str, threshold: float = 0.05,
                            statistic: str = "median") -> Verdict:
    """One ladder step changes (almost) nothing: the ``statistic`` of |t_new / t_old − 1| over
    (D, N) is ≤ ``threshold``."""
    ev = step_effect(table, new, old)
    stat = _effect_stat(ev, statistic)
    holds = bool(stat <= threshold)
    summary = (f"{statistic} |change| {old}→{new}: {100 * stat:.1f} % (threshold {100 * threshold:.0f} %); "
               f"time ratio {ev['time_ratio'].min():.2f}–{ev['time_ratio'].max():.2f}")
    return Verdict(f"{old} → {new} changes almost nothing", holds, ev, summary)


def verdict_float4_padding_negligible(table: pd.DataFrame, threshold: float = 0.05,
                                      statistic: str = "median") -> Verdict:
    """Seed: "float4 loads and padding add almost nothing". The effect of a step is
    |t_new / t_old − 1| per (D, N); holds when the ``statistic`` ('median' or 'max') of that
    effect is ≤ ``threshold`` for both steps (tiled→vec_load and vec_load→vec_padded)."""
    f4 = step_effect(table, "vec_load", "tiled")
    pad = step_effect(table, "vec_padded", "vec_load")
    stat = {"float4": _effect_stat(f4, statistic), "padding": _effect_stat(pad, statistic)}
    ev = f4[["D", "N", "time_ratio"]].rename(columns={"time_ratio": "vec_load_over_tiled"}).merge(
        pad[["D", "N", "time_ratio"]].rename(columns={"time_ratio": "vec_padded_over_vec_load"}), on=["D", "N"])
    holds = bool(all(v <= threshold for v in stat.values()))
    summary = (f"{statistic} |change| from float4: {100 * stat['float4']:.1f} %, from padding: "
               f"{100 * stat['padding']:.1f} % (threshold {100 * threshold:.0f} %); "
               f"float4 time ratio {f4['time_ratio'].min():.2f}–{f4['time_ratio'].max():.2f}, "
               f"padding {pad['time_ratio'].min():.2f}–{pad['time_ratio'].max():.2f}")
    return Verdict("float4 loads and padding add almost nothing", holds, ev, summary)


def verdict_double_buffer_pays(table: pd.DataFrame, min_speedup: float = 1.02) -> Verdict:
    """The seed's side experiment: ping-pong K/V buffers were *slower* on Turing (no cp.async; the
    published range is in data/reference/gtx1660ti_side_experiments.csv). Holds when the cp.async version's median speedup over vec_padded exceeds
    ``min_speedup`` — 2 % by default, above the timing spread (relative IQR ≲ 1–2 %), so a
    coin-flip difference does not count as paying."""
    ev = step_effect(table, "double_buffer", "vec_padded")
    lo, hi = seed_slowdown("double_buffer")
    med = float(ev["speedup"].median())
    holds = bool(med > min_speedup)
    summary = (f"double_buffer vs vec_padded: median speedup {med:.3f}× (range {ev['speedup'].min():.2f}–"
               f"{ev['speedup'].max():.2f}×, faster at {int((ev['speedup'] > 1).sum())}/{len(ev)} shapes); "
               f"seed on Turing: {100 / (100 + hi):.2f}–{100 / (100 + lo):.2f}× ({lo:g}–{hi:g} % slower)")
    return Verdict("ping-pong double buffering with cp.async pays", holds, ev, summary)


def verdict_tile_rows_best(scan: pd.DataFrame, tile_rows: int = 8, tolerance: float = 0.0) -> Verdict:
    """Seed: "TILE_ROWS=8 is best for every D". For each (kernel, D, N) of a tile scan, the best
    time with TILE_ROWS = ``tile_rows`` against the best time overall; holds when in every group
    the former is within ``tolerance`` of the latter (0 = it must be the best)."""
    _check_columns(scan, ["kernel", "D", "N", "tile_rows", "tile_kv", "median_ms"], "scan table")
    rows = []
    for (kernel, D, N), g in scan.groupby(["kernel", "D", "N"]):
        best = g.loc[g["median_ms"].idxmin()]
        mine = g[g["tile_rows"] == tile_rows]
        if mine.empty:
            raise ValueError(f"the scan has no TILE_ROWS={tile_rows} rows for {kernel}, D={D}, N={N}")
        m = mine.loc[mine["median_ms"].idxmin()]
        rows.append(dict(kernel=kernel, D=int(D), N=int(N), best_tile_rows=int(best["tile_rows"]),
                         best_tile_kv=int(best["tile_kv"]), best_ms=float(best["median_ms"]),
                         **{f"best_ms_tile_rows_{tile_rows}": float(m["median_ms"]),
                            f"tile_kv_at_tile_rows_{tile_rows}": int(m["tile_kv"])},
                         ratio=float(m["median_ms"] / best["median_ms"])))
    ev = pd.DataFrame(rows)
    ev["within_tolerance"] = ev["ratio"] <= 1 + tolerance
    holds = bool(ev["within_tolerance"].all())
    winners = ", ".join(f"D={r.D}: {r.best_tile_rows}×{r.best_tile_kv}" for r in ev.itertuples())
    summary = (f"best (TILE_ROWS×TILE_KV) per group: {winners}; TILE_ROWS={tile_rows} within "
               f"{100 * tolerance:.0f} % of the best in {int(ev['within_tolerance'].sum())}/{len(ev)} groups "
               f"(worst {ev['ratio'].max():.2f}×)")
    return Verdict(f"TILE_ROWS={tile_rows} is best for every D", holds, ev, summary)


# ------------------------------------------------------------------ recommendation

def recommendation_table(table: pd.DataFrame, scan: pd.DataFrame | None = None,
                         kernels: Sequence[str] = KERNEL_ORDER) -> pd.DataFrame:
    """Which kernel (and tile) to use per head dim on the measured GPU, beside the seed's advice.

    The kernel is chosen on the ladder table (each kernel at its measured tile) by the geometric
    mean over N of its time relative to the fastest ladder kernel at that N; ``wins`` counts the N
    where it was fastest. Its tile is the scan's best for that kernel and D when a scan is given
    (``tile_from`` says which), else the tile it was measured with. SDPA is shown for scale.
    """
    _check_columns(table, ["kernel", "D", "N", "median_ms"], "ladder table")
    rows = []
    for D, d in table[table["kernel"].isin(kernels)].groupby("D"):
        ms = d.pivot_table(index="N", columns="kernel", values="median_ms").dropna(axis=1)
        if ms.empty:
            continue
        rel = ms.div(ms.min(axis=1), axis=0)
        geo = np.exp(np.log(rel).mean())
        best = str(geo.idxmin())
        wins = int((ms.idxmin(axis=1) == best).sum())
        tr = tkv = None
        tile_from = "untiled"
        if best != "naive":
            measured = d[d["kernel"] == best]
            tile_from = "not recorded"
            if {"tile_rows", "tile_kv"} <= set(measured.columns) and measured[["tile_rows", "tile_kv"]].notna().all().all():
                tr, tkv = int(measured["tile_rows"].iloc[0]), int(measured["tile_kv"].iloc[0])
                tile_from = "as measured in the ladder grid"
            if scan is not None and not scan.empty:
                s = scan[(scan["kernel"] == best) & (scan["D"] == D)]
                if not s.empty:
                    b = s.loc[s["median_ms"].idxmin()]
                    tr, tkv = int(b["tile_rows"]), int(b["tile_kv"])
                    tile_from = f"tile scan at N={','.join(str(n) for n in sorted(set(s['N'])))}"
        seed_kernel, seed_tr, seed_tkv = SEED_ADVICE.get(int(D), (None, None, None))
        if "sdpa_ms" in table.columns:      # a ladder table: SDPA is a column
            sdpa = d[d["kernel"] == best].set_index("N")["sdpa_ms"]
        else:                               # a raw timing table: SDPA has rows of its own
            sdpa = table[(table["kernel"] == SDPA) & (table["D"] == D)].set_index("N")["median_ms"]
        vs_sdpa = (ms[best] / sdpa.reindex(ms.index)).dropna()
        vs_naive = (ms["naive"] / ms[best]) if "naive" in ms.columns else pd.Series(dtype=float)
        rows.append(dict(D=int(D), kernel=best, tile_rows=tr, tile_kv=tkv, tile_from=tile_from,
                         geo_mean_vs_fastest=float(geo[best]), wins=f"{wins}/{len(ms)}",
                         geo_speedup_vs_naive=float(np.exp(np.log(vs_naive).mean())) if len(vs_naive) else np.nan,
                         geo_x_slower_than_sdpa=float(np.exp(np.log(vs_sdpa).mean())) if len(vs_sdpa) else np.nan,
                         runner_up=str(geo.drop(best).idxmin()) if len(geo) > 1 else "",
                         runner_up_geo=float(geo.drop(best).min()) if len(geo) > 1 else np.nan,
                         seed_advice=SEED_ADVICE_TEXT.get(int(D), "—"),
                         same_family_as_seed=(seed_kernel is not None
                                              and (best == "naive") == (seed_kernel == "naive"))))
    return pd.DataFrame(rows)


def best_ladder_point(table: pd.DataFrame, kernels: Sequence[str] = KERNEL_ORDER) -> pd.Series:
    """The row with the highest TFLOP/s among the ladder kernels (SDPA of the same D, N beside)."""
    _check_columns(table, ["kernel", "tflops", "sdpa_tflops"], "ladder table")
    lad = table[table["kernel"].isin(kernels)].dropna(subset=["tflops"])
    if lad.empty:
        raise ValueError("no ladder rows with TFLOP/s")
    return lad.loc[lad["tflops"].idxmax()]


def peak_fractions(table: pd.DataFrame, peak_tflops: float, kernels: Sequence[str] = KERNEL_ORDER) -> dict:
    """The best ladder kernel's TFLOP/s as a fraction of an FP32 peak and of SDPA on the same inputs."""
    if not peak_tflops or peak_tflops <= 0:
        raise ValueError("peak_tflops must be positive")
    r = best_ladder_point(table, kernels)
    return dict(kernel=r["kernel"], D=int(r["D"]), N=int(r["N"]), tflops=float(r["tflops"]),
                sdpa_tflops=float(r["sdpa_tflops"]), peak_tflops=float(peak_tflops),
                fraction_of_peak=float(r["tflops"] / peak_tflops),
                fraction_of_sdpa=float(r["tflops"] / r["sdpa_tflops"]) if r["sdpa_tflops"] > 0 else np.nan)


# ------------------------------------------------------------------ live helpers (GPU only)

def compare_with_naive(kernels: Sequence[str], shapes: Iterable[tuple[int, int, int, int]], *, seed: int,
                       tiles: Mapping[tuple[str, int], tuple[int, int]] | None = None) -> pd.DataFrame:
    """Max |kernel − naive| on identical inputs, elementwise (0.0 = bit-identical outputs; the seed
    reported max_diff = 0 for naive vs tiled). Needs a GPU."""
    import cupy as cp

    from .attention import run_attention
    from .attention.bench import random_qkv

    rng = np.random.default_rng(seed)
    rows = []
    for B, H, N, D in shapes:
        q, k, v = random_qkv(B, H, N, D, rng)
        ref = run_attention("naive", q, k, v, gpu=None)
        for name in kernels:
            tr, tkv = (tiles or {}).get((name, D), (None, None))
            out = run_attention(name, q, k, v, tile_rows=tr, tile_kv=tkv, gpu=None)
            diff = cp.abs(out - ref)
            rows.append(dict(kernel=name, B=B, H=H, N=N, D=D, max_abs_diff_vs_naive=float(diff.max()),
                             identical_elements_pct=100.0 * float((diff == 0).mean())))
    return pd.DataFrame(rows)


def time_tile_scan(kernels: Sequence[str], D_list: Sequence[int], N: int, tile_rows_list: Sequence[int],
                   tile_kv_list: Sequence[int], *, B: int, H: int, budget_s: float, seed: int) -> pd.DataFrame:
    """Median latency of each kernel for every (TILE_ROWS, TILE_KV) at one N per head dim.
    Tiles whose shared memory exceeds the GPU's per-block limit are recorded as skipped."""
    import cupy as cp

    from .attention import get_kernel, run_attention
    from .attention.bench import random_qkv
    from .timing import time_rows

    rng = np.random.default_rng(seed)
    rows = []
    for D in D_list:
        q, k, v = random_qkv(B, H, N, D, rng)
        out = cp.empty_like(q)
        entries, flops = [], {}
        for name in kernels:
            for tr in tile_rows_list:
                for tkv in tile_kv_list:
                    base = dict(kernel=name, B=B, H=H, N=N, D=D, tile_rows=tr, tile_kv=tkv,
                                smem_bytes=smem_bytes(name, D, tr, tkv))
                    try:
                        plan = get_kernel(name, D, tr, tkv)
                    except ValueError as exc:
                        entries.append(({**base, "median_ms": np.nan, "skipped": str(exc)}, None))
                        continue
                    flops[len(entries)] = float(attention_flops(B, H, N, D))
                    entries.append(({**base, "registers": int(plan.kernel.num_regs), "skipped": ""},
                                    lambda name=name, tr=tr, tkv=tkv: run_attention(name, q, k, v, tr, tkv, out=out,
                                                                                    gpu=None)))
        rows += time_rows(entries, budget_s=budget_s, flops=flops)
    return pd.DataFrame(rows)


def alignment_check(kernels: Sequence[str], D_list: Sequence[int], *, seed: int,
                    shape: tuple[int, int, int] = (2, 2, 33)) -> pd.DataFrame:
    """Inputs whose data pointer is 4 bytes past a 16-byte boundary (a C-contiguous view into a
    larger buffer): the float4 kernels must refuse them with ValueError, the scalar ones must
    compute them correctly. One row per (kernel, D). Needs a GPU."""
    import cupy as cp

    from .attention import get_spec, run_attention
    from .attention.reference import attention_fp64, rel_error

    rng = np.random.default_rng(seed)
    B, H, N = shape
    rows = []
    for D in D_list:
        size = B * H * N * D
        buf = cp.empty(size + 4, dtype=cp.float32)
        off = (-(buf.data.ptr // 4)) % 4 + 1           # 1 float past a 16-byte boundary
        q = buf[off:off + size].reshape(B, H, N, D)
        q[...] = cp.asarray(rng.standard_normal((B, H, N, D), dtype=np.float32))
        k, v = (cp.asarray(rng.standard_normal((B, H, N, D), dtype=np.float32)) for _ in range(2))
        for name in kernels:
            needs = get_spec(name).vector_loads
            row = dict(kernel=name, D=D, B=B, H=H, N=N, q_ptr_mod_16=int(q.data.ptr % 16), needs_alignment=needs)
            try:
                out = run_attention(name, q, k, v, gpu=None)
                err = rel_error(out, attention_fp64(q, k, v))
                row.update(refused=False, message="", rel_err_fp64=err)
                row["passed"] = (not needs) and err < 1e-5
            except ValueError as exc:
                row.update(refused=True, message=str(exc)[:160], rel_err_fp64=np.nan)
                row["passed"] = needs
            rows.append(row)
    return pd.DataFrame(rows)
