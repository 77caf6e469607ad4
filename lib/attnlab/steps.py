"""The cells notebooks 01–04 share: one seed-ladder step's parameters, correctness, alignment,
timing, speedup plot and counters, each recorded live or replayed through :func:`nb.record_or_replay`
and cut to the grid the notebook asked for (:func:`nb.requested`). A study (above ``bench`` and
``ladder``); the notebooks keep only their narrative, their step's own evidence and their verdicts.

The display helpers return the tables they show, so a notebook can assert on values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from . import ladder, nb
from .attention import SUPPORTED_HEAD_DIMS
from .attention.bench import EDGE_SHAPES, REL_ERR_FP64_MAX
from .env import Mode
from .timing import timing_problems  # noqa: F401  (re-exported for the notebooks)


@dataclass
class Step:
    """One seed-ladder notebook: its name, mode, profile and the grid it asked for."""

    notebook: str
    mode: Mode
    profile: str
    B: int
    H: int
    N_list: list[int]
    D_list: list[int]
    seed: int
    budget_s: float
    check_edge_shapes: bool = True
    tables: dict = field(default_factory=dict, repr=False)

    @property
    def grid_shapes(self) -> list[tuple[int, int, int, int]]:
        return [(self.B, self.H, n, d) for d in self.D_list for n in self.N_list]

    @property
    def check_shapes(self) -> list[tuple[int, int, int, int]]:
        edge = [(b, h, n, d) for d in self.D_list for (b, h, n) in EDGE_SHAPES] if self.check_edge_shapes else []
        return self.grid_shapes + edge

    def record(self, table: str, compute) -> pd.DataFrame:
        """A GPU table: measured now and recorded (live) or loaded (replay); kept in ``tables``."""
        df = nb.record_or_replay(compute, self.notebook, table, self.mode, self.profile)
        self.tables[table] = df
        return df

    def label(self, df: pd.DataFrame | None = None) -> str:
        return nb.source_label(self.mode, df)

    @property
    def gpu_label(self) -> str:
        t = self.tables.get("timing")
        if t is not None and "gpu_name" in t and len(t):
            return str(t["gpu_name"].iloc[0])
        return self.mode.gpu_name


def start(notebook: str, *, mode: str, gpu: str, profile: str, B, H, N_list, D_list, seed, budget_s,
          check_edge_shapes: bool = True) -> Step:
    """Check a seed-ladder notebook's parameters (one-line errors), resolve live/replay, show the banner."""
    nb.require_bool("check_edge_shapes", check_edge_shapes)
    step = Step(notebook, nb.start(mode, gpu), str(profile), nb.require_int("B", B, 1), nb.require_int("H", H, 1),
                nb.require_int_list("N_list", N_list),
                nb.require_int_list("D_list", D_list, allowed=SUPPORTED_HEAD_DIMS),
                nb.require_int("seed", seed), nb.require_positive("budget_s", budget_s), check_edge_shapes)
    print(f"grid: B={step.B}, H={step.H}, N in {step.N_list}, D in {step.D_list}")
    return step


# ---------------------------------------------------------------- correctness

CORRECTNESS_SUMMARY = dict(shapes=("passed", "size"), passed=("passed", "sum"), N_min=("N", "min"), N_max=("N", "max"),
                           BH_max=("BH", "max"), all_written=("all_written", "all"),
                           worst_rel_err_fp64=("rel_err_fp64", "max"), worst_rel_err_sdpa=("rel_err_sdpa", "max"))


def correctness_summary(checks: pd.DataFrame) -> pd.DataFrame:
    """One row per (kernel, D) of a correctness table: shapes checked and passed, the N and B·H
    range, whether every element was written, the worst errors against float64 and SDPA."""
    c = checks.assign(BH=checks["B"] * checks["H"])
    return c.groupby(["kernel", "D"]).agg(**CORRECTNESS_SUMMARY).reset_index()


def correctness(step: Step, kernels: Sequence[str], vs_naive: bool = True) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Check ``kernels`` on every grid and edge shape (fresh inputs, NaN-poisoned outputs, float64 and
    SDPA beside), and, with ``vs_naive``, the largest |kernel − naive| on identical inputs. Shows a
    summary per (kernel, D) and every failing row. Returns (checks, vs_naive or None)."""
    from .attention.bench import check_kernel

    checks = step.record("correctness", lambda: pd.concat([check_kernel(k, step.check_shapes, seed=step.seed)
                                                           for k in kernels], ignore_index=True))
    checks = nb.requested(checks, step.mode, D=step.D_list)
    _show(correctness_summary(checks))
    failing = checks[~checks["passed"].astype(bool)]
    if len(failing):
        _show(failing)
    print(f"{int(checks['passed'].sum())}/{len(checks)} kernel-shape checks pass; worst relative error vs "
          f"float64 {checks['rel_err_fp64'].max():.2e} (threshold {REL_ERR_FP64_MAX:g}) ({step.label(checks)})")
    diffs = None
    if vs_naive:
        shapes = [(step.B, step.H, n, d) for d in step.D_list for n in (63, 65, max(step.N_list))]
        diffs = step.record("vs_naive", lambda: ladder.compare_with_naive(list(kernels), shapes, seed=step.seed))
        diffs = nb.requested(diffs, step.mode, D=step.D_list)
        _show(diffs)
    return checks, diffs


def alignment(step: Step, kernels: Sequence[str]) -> pd.DataFrame:
    """A view 4 bytes past a 16-byte boundary: the float4 kernels must refuse it (one-line error),
    the scalar ones compute it. One row per (kernel, D)."""
    al = step.record("alignment", lambda: ladder.alignment_check(list(kernels), step.D_list, seed=step.seed))
    al = nb.requested(al, step.mode, D=step.D_list)
    _show(al[[c for c in ("kernel", "D", "q_ptr_mod_16", "needs_alignment", "refused", "rel_err_fp64", "message",
                          "passed") if c in al]])
    return al


# ---------------------------------------------------------------- timing

def timing(step: Step, kernels: Sequence[str], show: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Time ``kernels`` (this step's and the previous one, back to back on the same inputs) and torch
    SDPA over the grid; show the seed's section-7 layout per D, GTX 1660 Ti beside. Returns
    (the timing rows of the requested grid, their ladder table)."""
    from .attention.bench import time_grid

    t = step.record("timing", lambda: time_grid(list(kernels), step.B, step.H, step.N_list, step.D_list,
                                                budget_s=step.budget_s, seed=step.seed + 1))
    t = nb.requested(t, step.mode, N=step.N_list, D=step.D_list)
    table = ladder.ladder_table(t)
    from IPython.display import Markdown, display

    for d in sorted(set(table["D"])) if show else ():
        display(Markdown(f"**D = {d}** — {step.gpu_label} (B={step.B}, H={step.H}, fp32), median ms; the seed's "
                         f"GTX 1660 Ti beside — _{step.label(t)}_"))
        display(ladder.wide_table(table, d).round(4))
    return t, table


def plot_speedup(step: Step, table: pd.DataFrame, kernels: Sequence[str], against: str = "prev"):
    """Speedup of each kernel over naive (``against='naive'``) or over its predecessor, per D, with
    the seed's figures dotted beside. Returns the figure."""
    import matplotlib.pyplot as plt

    col = f"speedup_vs_{against}"
    seed_tab = ladder.seed_table()
    Ds = sorted(set(table["D"]))
    fig, axes = plt.subplots(1, len(Ds), figsize=(5 * len(Ds), 3.8), squeeze=False)
    for ax, d in zip(axes[0], Ds):
        for k, marker in zip(kernels, "osd^v"):
            t = table[(table["kernel"] == k) & (table["D"] == d)].sort_values("N")
            line, = ax.plot(t["N"], t[col], marker + "-", label=f"{k} ({step.gpu_label})")
            s = seed_tab[(seed_tab["kernel"] == k) & (seed_tab["D"] == d)].sort_values("N")
            if len(s):
                ax.plot(s["N"], s[col], marker + ":", color=line.get_color(), alpha=0.5, label=f"{k} (GTX 1660 Ti, seed)")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set(xscale="log", xlabel="N (sequence length)", ylabel=f"speedup over {against if against == 'naive' else 'previous step'}",
               title=f"D = {d}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    over = "naive" if against == "naive" else ", ".join(f"{k} over {ladder.PREVIOUS.get(k)}" for k in kernels)
    fig.suptitle(f"{over} (>1 = faster) — {step.label(step.tables.get('timing'))}", fontsize=10)
    plt.tight_layout()
    plt.show()
    return fig


def counters(step: Step, kernels: Sequence[str]) -> pd.DataFrame | None:
    """The Nsight Compute counters notebook 06 recorded for ``kernels``, or a sentence saying why none."""
    table, msg = ladder.ncu_view(step.mode.gpu, list(kernels))
    print(msg)
    if table is not None:
        _show(table)
    return table


def verdict_rows(verdicts: Sequence[tuple], gpu_label: str) -> pd.DataFrame:
    """One row per seed claim, from (here, seed's) verdict pairs or :func:`seed_claims`' tuples: whether
    it holds here (with the evidence) and on the seed's own data."""
    rows = []
    for v in verdicts:
        key, claim, mine, theirs = v if len(v) == 4 else (None, v[0].claim, v[0], v[1])
        rows.append({"claim (seed 000)": claim, f"holds on {gpu_label}": bool(mine.holds), "evidence": mine.summary,
                     "holds on the seed's data": (bool(theirs.holds) if theirs is not None
                                                  else "— (not in the seed's tables)"), "key": key})
    return pd.DataFrame(rows).dropna(axis=1, how="all")


def describe_verdicts(rows: pd.DataFrame, gpu_label: str) -> str:
    """The verdict table as sentences, generated from its rows."""
    col, seed_col = f"holds on {gpu_label}", "holds on the seed's data"
    lines = []
    for _, r in rows.iterrows():
        theirs = r[seed_col]
        theirs = theirs if isinstance(theirs, str) else ("holds" if theirs else "does not hold")
        lines.append(f"- **{r['claim (seed 000)']}**: {'holds' if r[col] else 'does NOT hold'} on {gpu_label} — "
                     f"{r['evidence']}. On the seed's data: {theirs}.")
    return "\n".join(lines)


def _show(df: pd.DataFrame) -> None:
    from IPython.display import display

    display(df.round(4) if isinstance(df, pd.DataFrame) else df)


# ---------------------------------------------------------------- the seed's claims (notebook 04)

def seed_claims(full: pd.DataFrame, scan: pd.DataFrame | None, *, gain_limit: float, tolerance: float,
                negligible: float) -> list[tuple[str, str, ladder.Verdict, ladder.Verdict | None]]:
    """Seed 000's conclusions judged on ``full`` (the ladder assembled from 01–04) and ``scan`` (04's tile
    scan), and on the seed's own figures where they allow it: (headline key, claim, here, seed's data)."""
    from . import seed as seedref

    seed_tab = ladder.seed_table()
    seed_scan = seedref.seed_occupancy_scan().rename(columns={"latency_ms": "median_ms"})
    lo, hi = seedref.seed_slowdown("double_buffer")
    claims = [
        ("tiling_gain", "tiling gains at most ~1.4× (tiled over naive)",
         lambda t: ladder.verdict_tiling_gain(t, gain_limit, tolerance), full, seed_tab),
        ("no_tiled_variant_gains_more", "… and no tiled variant gains more",
         lambda t: ladder.verdict_tiling_gain(t, gain_limit, tolerance, kernels=ladder.TILED_FAMILY), full, seed_tab),
        ("d128_tiling_slower", "at D=128 tiling is slower than naive", ladder.verdict_d128_tiling_slower, full, seed_tab),
        ("float4_padding_negligible", "float4 and padding add almost nothing",
         lambda t: ladder.verdict_float4_padding_negligible(t, threshold=negligible), full, seed_tab),
        ("padding_negligible", "padding alone adds almost nothing",
         lambda t: ladder.verdict_step_negligible(t, "vec_padded", "vec_load", threshold=negligible), full, seed_tab),
        ("tile_rows_8_best", "TILE_ROWS=8 is best for every D",
         lambda t: ladder.verdict_tile_rows_best(t, 8, tolerance), scan, seed_scan),
        ("double_buffer_pays", f"cp.async double buffering pays (seed: {lo:g}–{hi:g} % slower on Turing)",
         ladder.verdict_double_buffer_pays, full, None),
    ]
    out = []
    for key, claim, fn, data, seed_data in claims:
        if data is None or (key == "d128_tiling_slower" and 128 not in set(full["D"])):
            continue
        out.append((key, claim, fn(data), fn(seed_data) if seed_data is not None else None))
    return out


OWNERS = {"naive": "02_tiling", "tiled": "02_tiling", "vec_load": "03_float4", "vec_padded": "04_padding",
          "double_buffer": "04_padding", "torch_sdpa": "04_padding"}


def assemble(step: Step, timing: pd.DataFrame, earlier: Sequence[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Notebook 04's full ladder: each kernel from the notebook that introduced it (:data:`OWNERS`),
    the ``earlier`` notebooks' recorded timing tables (01–03) cut to this run's grid; live, a kernel whose table is missing is measured
    here (``timing_fallback``). Shows each source's provenance and, for kernels timed twice, the
    run-to-run ratio. Returns (the ladder table, the sources' provenance)."""
    from IPython.display import Markdown, display

    from . import results
    from .attention.bench import time_grid

    owners = dict(OWNERS)
    profile = step.profile if step.mode.live else results.CANONICAL_PROFILE
    sources = {name: results.load_table(name, "timing", step.mode.gpu, profile)
               for name in earlier
               if results.has_table(name, "timing", step.mode.gpu, profile)}
    sources[step.notebook] = timing
    sources = {k: ladder.same_grid(t, timing) for k, t in sources.items()}
    missing = [k for k in ("naive", "tiled", "vec_load") if not any((t["kernel"] == k).any() for t in sources.values())]
    if missing and step.mode.live:
        extra = step.record("timing_fallback", lambda: time_grid(missing, step.B, step.H, step.N_list, step.D_list,
                                                                  budget_s=step.budget_s, seed=step.seed + 1,
                                                                  include_sdpa=False))
        sources[step.notebook + " (fallback)"] = extra
        owners.update({k: step.notebook + " (fallback)" for k in missing})
    elif missing:
        raise ValueError(f"no recorded timing of {missing} for '{step.mode.gpu}' on this grid: "
                         "record notebooks 02 and 03 first")
    prov = pd.DataFrame([{"notebook": k, "kernels": ", ".join(sorted(set(t["kernel"]))), "rows": len(t),
                          "recorded": (f"{t['timestamp_utc'].min()} … {t['timestamp_utc'].max()}"
                                       if "timestamp_utc" in t else "now"),
                          "commit": ", ".join(sorted({str(c)[:10] for c in t["git_commit"]})) if "git_commit" in t else ""}
                         for k, t in sources.items()])
    display(prov)
    full = ladder.ladder_table(ladder.assemble_ladder(sources, owners=owners).drop(columns=["source"]))
    noise = ladder.repeat_consistency(sources)
    if not noise.empty:
        commits = {c for s in prov["commit"] for c in s.split(", ") if c}
        where = ("in two notebooks of one run (one commit)" if len(commits) <= 1 else
                 f"in two notebooks, recorded at {len(commits)} different commits (the table above)")
        display(Markdown(ladder.describe_repeats(noise, where)))
    for d in sorted(set(full["D"])):
        display(Markdown(f"**D = {d}** — {step.gpu_label}, B={step.B}, H={step.H}, fp32; GTX 1660 Ti (seed 000) beside"))
        display(ladder.wide_table(full, d).round(4))
    return full, prov


def plot_ladder(step: Step, full: pd.DataFrame):
    """TFLOP/s of every ladder kernel and of torch SDPA against N, one panel per D."""
    import matplotlib.pyplot as plt

    Ds = sorted(set(full["D"]))
    fig, axes = plt.subplots(1, len(Ds), figsize=(5 * len(Ds), 4), squeeze=False)
    for ax, d in zip(axes[0], Ds):
        sub = full[full["D"] == d]
        for k in ladder.KERNEL_ORDER:
            t = sub[sub["kernel"] == k].sort_values("N")
            ax.plot(t["N"], t["tflops"], "o-", label=k)
        s = sub.groupby("N")["sdpa_tflops"].first()
        ax.plot(s.index, s.values, "k--", label="torch SDPA fp32")
        ax.set(xscale="log", xlabel="N", ylabel="TFLOP/s (4·B·H·N²·D / t)", title=f"D = {d}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"The ladder on {step.gpu_label} — {step.label(step.tables.get('timing'))}", fontsize=10)
    plt.tight_layout()
    plt.show()
    return fig


def peak_share(step: Step, full: pd.DataFrame) -> tuple[dict, bool, str]:
    """The best ladder point as a share of the FP32 peak — notebook 06's measured FMA peak when recorded
    for this GPU, else the datasheet (labelled) — and of torch SDPA. Returns (fractions, measured?, label)."""
    from . import results, roofline
    from . import seed as seedref

    if results.has_table("06_roofline", "ceilings", step.mode.gpu):
        ceil = results.load_table("06_roofline", "ceilings", step.mode.gpu)
        peak = roofline.ceilings_from_table(ceil, step.gpu_label).peak_flops / 1e12
        measured, label = True, f"measured FP32 FMA peak (notebook 06; {results.describe_provenance(ceil)})"
    else:
        peak = float(seedref.datasheet(step.gpu_label)["fp32_tflops_datasheet"])
        measured = False
        label = "datasheet FP32 peak (data/reference/gpu_specs.csv; notebook 06 has no recorded ceilings)"
    return ladder.peak_fractions(full, peak), measured, label


def bank_counters(gpu: str, kernels: Sequence[str] = ladder.SEED_TILED) -> pd.DataFrame | None:
    """Notebook 06's recorded shared-memory bank conflicts of the tiled kernels as a share of the
    wavefronts the kernels need (the bank model's count): per (query row, key) a warp reads its K and
    V rows as 2·D/32 one-wavefront loads, and each block stores the K and V tiles once per key tile,
    2·D/32 wavefronts per key row whatever the copy width. ``ld_extra_pct`` / ``st_extra_pct`` are the
    counted conflicts over those; the model (attnlab.banks) predicts 0. None without counters."""
    from . import ncu, results, roofline

    if not results.has_table("06_roofline", "ncu", gpu):
        return None
    m = roofline.measured_vs_modelled(ncu.counters_wide(results.load_table("06_roofline", "ncu", gpu)))
    ld, st = ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
              "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum")
    if ld not in m or st not in m:
        return None
    m = m[m["kernel"].isin(list(kernels))].copy()
    per_row = 2 * m["D"] / 32
    m["ld_wavefronts"] = m["B"] * m["H"] * m["N"] * m["N"] * per_row
    m["st_wavefronts"] = m["B"] * m["H"] * -(-m["N"] // m["tile_rows"]) * m["N"] * per_row
    m["ld_conflicts"], m["st_conflicts"] = m[ld], m[st]
    m["ld_extra_pct"] = 100 * m[ld] / m["ld_wavefronts"]
    m["st_extra_pct"] = 100 * m[st] / m["st_wavefronts"]
    m["model_extra_pct"] = 0.0
    cols = ["kernel", "D", "N", "ld_wavefronts", "ld_conflicts", "ld_extra_pct", "st_wavefronts", "st_conflicts",
            "st_extra_pct", "model_extra_pct"]
    return m[cols].sort_values(["kernel", "D", "N"]).reset_index(drop=True)


BANK_TOLERANCE_PCT = 1.5   # counted conflicts within this share of the needed wavefronts = the model's zero


def describe_bank_counters(rates: pd.DataFrame, tolerance_pct: float = BANK_TOLERANCE_PCT) -> str:
    """Sentences comparing the counted conflicts with the model's zero, generated from ``rates``."""
    worst = rates.groupby("kernel")[["ld_extra_pct", "st_extra_pct"]].max()
    agree = bool((rates[["ld_extra_pct", "st_extra_pct"]] < tolerance_pct).all().all())
    lines = [f"- **{k}**: counted conflicts add at most {r.ld_extra_pct:.2f} % to the load wavefronts the kernel "
             f"needs and {r.st_extra_pct:.2f} % to the store wavefronts." for k, r in worst.iterrows()]
    verdict = (f"Every kernel is within {tolerance_pct:g} % of the model's zero, so the counters agree with it "
               "(the counted conflicts grow with N², as the wavefronts do)."
               if agree else f"Some kernel exceeds {tolerance_pct:g} % of its wavefronts: the model's zero does not "
               "explain the counters.")
    return "\n".join(lines + ["", verdict])


def static(step: Step, kernels: Sequence[str], occupancy: bool = True) -> pd.DataFrame:
    """``nvcc -Xptxas -v`` of ``kernels`` at the launcher's tiles for each D of the step, for sm_75 and
    sm_90 (no GPU needed), with the occupancy calculator's columns; shown and returned."""
    from .attention.bench import static_resources

    s = static_resources(list(kernels), step.D_list)
    s = ladder.with_occupancy(s) if occupancy else s
    _show(s)
    return s


# ---------------------------------------------------------------- the algorithms on the CPU (both modes)

ONLINE_CASES = ((1, 1, 1, 32), (1, 2, 65, 32), (2, 1, 33, 64), (1, 1, 17, 128))
TILED_CASES = ((1, 1, 1, 32, 32), (1, 2, 65, 32, 32), (2, 1, 63, 64, 16), (1, 1, 17, 128, 8), (1, 1, 100, 64, 128))


def online_model_check(seed: int, cases=ONLINE_CASES) -> pd.DataFrame:
    """Notebook 01's loop in NumPy (one key per step, fp32) against float64 and torch SDPA on the CPU."""
    import torch

    from .attention.models import online_softmax_attention
    from .attention.reference import attention_fp64, attention_sdpa, rel_error

    rng = np.random.default_rng(seed)
    rows = []
    for (b, h, n, d) in cases:
        q, k, v = (rng.standard_normal((b, h, n, d), dtype=np.float32) for _ in range(3))
        out = online_softmax_attention(q, k, v)
        sdpa = attention_sdpa(*(torch.from_numpy(a) for a in (q, k, v)))
        rows.append(dict(B=b, H=h, N=n, D=d, rel_err_fp64=rel_error(out, attention_fp64(q, k, v)),
                         allclose_sdpa=bool(torch.allclose(torch.from_numpy(out), sdpa, atol=1e-2, rtol=1e-2))))
    return pd.DataFrame(rows)


def tiled_model_check(seed: int, cases=TILED_CASES) -> pd.DataFrame:
    """The tiled kernels' algorithm in NumPy: keys in tiles of TILE_KV, the online-softmax state carried
    from tile to tile, folded key by key in fp32 (the kernels' order) and tile by tile in float64."""
    from .attention.reference import attention_fp64, rel_error

    rng = np.random.default_rng(seed)
    rows = []
    for (b, h, n, d, t) in cases:
        q, k, v = (rng.standard_normal((b, h, n, d), dtype=np.float32) for _ in range(3))
        ref = attention_fp64(q, k, v)
        per_key = ladder.tiled_online_softmax(q, k, v, tile_kv=t, dtype=np.float32, per_key=True)
        per_tile = ladder.tiled_online_softmax(q, k, v, tile_kv=t, dtype=np.float64)
        rows.append(dict(B=b, H=h, N=n, D=d, TILE_KV=t, tiles=-(-n // t), partial_last_tile=n % t != 0,
                         rel_err_fp32_per_key=rel_error(per_key, ref), rel_err_fp64_per_tile=rel_error(per_tile, ref)))
    return pd.DataFrame(rows)


def kv_traffic(step: Step) -> tuple[pd.DataFrame, str]:
    """Notebook 02's traffic model on the step's grid (MB/GB), and a line on which (D, N) fit in this GPU's L2."""
    from . import seed as seedref

    spec = seedref.datasheet(step.mode.gpu_name)    # the device in live mode, the replayed GPU otherwise
    t = ladder.kv_traffic_table(step.N_list, step.D_list, step.B, step.H, l2_bytes=float(spec["l2_mb"]) * 2**20)
    show = t.assign(unique_kv_MB=t["unique_kv_bytes"] / 2**20, naive_kv_GB=t["naive_kv_bytes"] / 2**30,
                    tiled_kv_GB=t["tiled_kv_bytes"] / 2**30)
    seed_l2 = seedref.datasheet(seedref.SEED_GPU)["l2_mb"]
    line = (f"L2 of {spec['gpu']}: {spec['l2_mb']} MB (datasheet); K+V fit in L2 for {int(t['fits_in_l2'].sum())}/{len(t)} "
            f"(D, N) of this grid (seed GPU: {seed_l2} MB)")
    cols = ["D", "N", "tile_rows", "unique_kv_MB", "naive_kv_GB", "tiled_kv_GB", "reduction", "fits_in_l2"]
    return show[cols + [c for c in t.columns if c not in cols and c in ("naive_kv_bytes", "tiled_kv_bytes")]], line
