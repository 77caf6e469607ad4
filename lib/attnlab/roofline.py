"""Roofline: ceilings, modelled arithmetic intensity of each attention kernel, placement of
measurements under the roof, and the seed's "compute-bound" claim checked against data.

Units are SI throughout: FLOP/s, bytes/s, bytes, seconds (tables add TFLOP/s, TB/s columns for
reading). Attention forward FLOPs = 4·B·H·N²·D (two N×N×D matrix products, FlashAttention's
convention; the softmax's exp/max/sum are not counted), halved when causal.

Bytes models (fp32, 4 bytes per element, per (batch, head) then times B·H):

* **ideal**   — Q, K, V read once, O written once: ``4·N·D`` elements (``4·B·H·N·D·4`` bytes).
  Its intensity is ``N/4`` FLOP/byte, the seed's "AI_tiled". Used for torch SDPA, whose fused
  kernels keep the N×N scores on chip (a lower bound on its bytes).
* **naive**   — one query row per warp, K and V streamed from global memory for every row:
  ``2·N·D`` (Q in, O out) + ``2·N·N·D`` (K and V, N times). Intensity → 1/2 FLOP/byte.
* **tiled**   — K and V re-read once per block of ``tile_rows`` query rows:
  ``2·N·D + ceil(N/tile_rows)·2·N·D``. Intensity → tile_rows/2 FLOP/byte.

These are *logical* bytes (what the code asks of global memory). What reaches DRAM is less when
L2 catches re-reads; Nsight Compute's ``dram__bytes.sum`` measures that (see ``attnlab.ncu``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

from . import paths
from . import ncu
from .attention import SEED_LADDER, SEED_TILED

BYTES_FP32 = 4

#: kernel names of the ladder that share the tiled data flow (02–05)
TILED_KERNELS = SEED_TILED   # the seed ladder's tiled kernels (attention's registry)
#: default rows per block when a recorded table does not say (the seed's TILE_ROWS for every D)
DEFAULT_TILE_ROWS = 8


# ------------------------------------------------------------------------------- roofline maths

def attainable(intensity, peak_flops: float, bandwidth: float):
    """Attainable FLOP/s = min(peak, bandwidth × intensity). Vectorised over ``intensity``."""
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError(f"ceilings must be positive, got peak={peak_flops}, bandwidth={bandwidth}")
    i = np.asarray(intensity, dtype=float)
    if np.any(i < 0):
        raise ValueError("intensity must be >= 0")
    out = np.minimum(peak_flops, bandwidth * i)
    return float(out) if out.ndim == 0 else out


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """Intensity (FLOP/byte) where the bandwidth slope meets the compute roof."""
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError(f"ceilings must be positive, got peak={peak_flops}, bandwidth={bandwidth}")
    return peak_flops / bandwidth


def attention_flops(B: int, H: int, N: int, D: int, causal: bool = False) -> float:
    """reference.attention_flops (4·B·H·N²·D) as a float; a causal mask halves it."""
    from .attention.reference import attention_flops as full

    f = float(full(B, H, N, D))
    return f / 2 if causal else f


def ideal_bytes(B: int, H: int, N: int, D: int, elem: int = BYTES_FP32) -> float:
    return 4.0 * B * H * N * D * elem


def naive_bytes(B: int, H: int, N: int, D: int, elem: int = BYTES_FP32) -> float:
    return float(B * H) * (2.0 * N * D + 2.0 * N * N * D) * elem


def tiled_bytes(B: int, H: int, N: int, D: int, tile_rows: int, elem: int = BYTES_FP32) -> float:
    if tile_rows <= 0:
        raise ValueError(f"tile_rows must be positive, got {tile_rows}")
    blocks = math.ceil(N / tile_rows)
    return float(B * H) * (2.0 * N * D + blocks * 2.0 * N * D) * elem


def model_of(kernel: str) -> str | None:
    """Which bytes model a kernel name follows: 'naive', 'tiled', 'ideal' or None (unknown)."""
    k = kernel.lower()
    if "sdpa" in k or "flash" in k or k == "ideal":
        return "ideal"
    if k.startswith("naive"):
        return "naive"
    if any(k.startswith(t) for t in TILED_KERNELS):
        return "tiled"
    return None


def modelled_bytes(kernel: str, B: int, H: int, N: int, D: int, tile_rows: int | None = None) -> float:
    model = model_of(kernel)
    if model == "ideal":
        return ideal_bytes(B, H, N, D)
    if model == "naive":
        return naive_bytes(B, H, N, D)
    if model == "tiled":
        return tiled_bytes(B, H, N, D, tile_rows or DEFAULT_TILE_ROWS)
    raise ValueError(f"no bytes model for kernel {kernel!r} (known: naive, {', '.join(TILED_KERNELS)}, *sdpa*)")


def intensity(kernel: str, B: int, H: int, N: int, D: int, tile_rows: int | None = None,
              causal: bool = False) -> float:
    """Modelled arithmetic intensity, FLOP per logical byte."""
    return attention_flops(B, H, N, D, causal) / modelled_bytes(kernel, B, H, N, D, tile_rows)


def intensity_table(Ns: Iterable[int], Ds: Iterable[int], B: int = 2, H: int = 8,
                    tile_rows: int = DEFAULT_TILE_ROWS, ridge: float | None = None):
    """Modelled intensity of the three models over a grid, for a notebook table."""
    import pandas as pd
    rows = []
    for D in Ds:
        for N in Ns:
            f = attention_flops(B, H, N, D)
            r = {"D": D, "N": N, "flops": f,
                 "ideal": f / ideal_bytes(B, H, N, D), "naive": f / naive_bytes(B, H, N, D),
                 f"tiled_{tile_rows}": f / tiled_bytes(B, H, N, D, tile_rows)}
            if ridge is not None:
                for m in ("ideal", "naive", f"tiled_{tile_rows}"):
                    r[f"{m}_bound"] = "compute" if r[m] >= ridge else "memory"
            rows.append(r)
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------ ceilings

@dataclass(frozen=True)
class Ceilings:
    name: str
    peak_flops: float     # FLOP/s
    bandwidth: float      # bytes/s
    source: str = ""

    @property
    def ridge(self) -> float:
        return ridge_point(self.peak_flops, self.bandwidth)


def gpu_specs():
    import pandas as pd
    return pd.read_csv(paths.REFERENCE_DIR / "gpu_specs.csv")


def datasheet_ceilings(gpu: str) -> Ceilings:
    """Datasheet FP32 peak and DRAM bandwidth of a GPU named in data/reference/gpu_specs.csv
    (matched case-insensitively, 'h200' finds 'H200', 'gtx1660ti' finds 'GTX 1660 Ti')."""
    specs = gpu_specs()
    key = gpu.lower().replace(" ", "").replace("-", "").replace("_", "")
    for r in specs.to_dict("records"):
        if r["gpu"].lower().replace(" ", "").replace("-", "") == key:
            return Ceilings(r["gpu"], float(r["fp32_tflops_datasheet"]) * 1e12,
                            float(r["dram_gbps_datasheet"]) * 1e9, "datasheet")
    raise KeyError(f"{gpu!r} not in {paths.REFERENCE_DIR / 'gpu_specs.csv'} (has: {', '.join(specs['gpu'])})")


def fma_flops(grid: int, block: int, iters: int, chains: int, unroll: int) -> float:
    """FLOPs of one launch of kernels/bench/01_fma_peak.cu: 2 per FMA."""
    return 2.0 * grid * block * iters * chains * unroll


def copy_bytes(n_float4: int) -> float:
    """Bytes moved by one launch of kernels/bench/02_copy.cu: read + written."""
    return 2.0 * 16 * n_float4


def ceilings_table(measured: Ceilings, datasheet: Ceilings):
    """Measured vs datasheet, with % of datasheet, for a notebook table."""
    import pandas as pd
    return pd.DataFrame([
        {"ceiling": "FP32 FMA peak", "measured": measured.peak_flops / 1e12, "datasheet": datasheet.peak_flops / 1e12,
         "unit": "TFLOP/s", "pct_of_datasheet": 100 * measured.peak_flops / datasheet.peak_flops},
        {"ceiling": "DRAM bandwidth (copy)", "measured": measured.bandwidth / 1e12,
         "datasheet": datasheet.bandwidth / 1e12, "unit": "TB/s",
         "pct_of_datasheet": 100 * measured.bandwidth / datasheet.bandwidth},
        {"ceiling": "ridge point", "measured": measured.ridge, "datasheet": datasheet.ridge,
         "unit": "FLOP/byte", "pct_of_datasheet": 100 * measured.ridge / datasheet.ridge},
    ])


# ---------------------------------------------------------------------------- placing points

MEASUREMENT_COLUMNS = ("kernel", "B", "H", "N", "D", "median_ms")


def place(df, ceilings: Ceilings, *, causal: bool = False):
    """Put a measurement table on the roofline.

    ``df`` needs kernel, B, H, N, D, median_ms (``tile_rows`` optional; missing/NaN → 8 for tiled
    kernels). Rows whose kernel has no bytes model are dropped. Adds: model, flops, bytes_model,
    intensity, achieved_flops, attainable_flops, pct_of_attainable, pct_of_peak, bound
    ('memory' / 'compute', by modelled intensity vs ridge), achieved_bw_model (logical bytes/s),
    and TFLOP/s columns for reading.
    """
    missing = set(MEASUREMENT_COLUMNS) - set(df.columns)
    if missing:
        raise ValueError(f"place: table lacks column(s) {sorted(missing)}")
    out = df.copy()
    out["model"] = [model_of(str(k)) for k in out["kernel"]]
    out = out[out["model"].notna()].copy()
    if "tile_rows" not in out.columns:
        out["tile_rows"] = np.nan
    tr = out["tile_rows"].astype(float).where(lambda x: x > 0)   # recorded tables write 0 for "untiled"
    out["tile_rows_assumed"] = (out["model"] == "tiled") & tr.isna()
    out["tile_rows"] = np.where(out["tile_rows_assumed"], DEFAULT_TILE_ROWS, tr)
    recs = out.to_dict("records")
    out["flops"] = [attention_flops(r["B"], r["H"], r["N"], r["D"], causal) for r in recs]
    out["bytes_model"] = [modelled_bytes(r["kernel"], int(r["B"]), int(r["H"]), int(r["N"]), int(r["D"]),
                                         int(r["tile_rows"]) if r["tile_rows"] == r["tile_rows"] else None)
                          for r in recs]
    out["intensity"] = out["flops"] / out["bytes_model"]
    secs = out["median_ms"].astype(float) / 1e3
    out["achieved_flops"] = out["flops"] / secs
    out["attainable_flops"] = attainable(out["intensity"].to_numpy(), ceilings.peak_flops, ceilings.bandwidth)
    out["pct_of_attainable"] = 100 * out["achieved_flops"] / out["attainable_flops"]
    out["pct_of_peak"] = 100 * out["achieved_flops"] / ceilings.peak_flops
    out["bound"] = np.where(out["intensity"] >= ceilings.ridge, "compute", "memory")
    out["achieved_bw_model"] = out["bytes_model"] / secs
    out["achieved_tflops"] = out["achieved_flops"] / 1e12
    out["attainable_tflops"] = out["attainable_flops"] / 1e12
    return out


def collect_measurements(gpu: str, results_dir=None, exclude_prefixes: Iterable[str] = ("06_",)):
    """Every recorded attention measurement of a GPU: rows of ``data/results/<gpu>/*.csv`` with
    columns kernel, B, H, N, D, median_ms whose kernel has a bytes model. Adds ``table`` (file
    stem). Returns (DataFrame, list of skipped file names with the reason)."""
    import pandas as pd
    base = (results_dir or paths.RESULTS_DIR) / gpu
    frames, skipped = [], []
    for f in sorted(base.glob("*.csv")) if base.is_dir() else []:
        if any(f.name.startswith(p) for p in exclude_prefixes):
            continue
        try:
            t = pd.read_csv(f)
        except Exception as exc:  # noqa: BLE001 - report and go on
            skipped.append(f"{f.name}: unreadable ({exc})")
            continue
        missing = set(MEASUREMENT_COLUMNS) - set(t.columns)
        if missing:
            skipped.append(f"{f.name}: no {', '.join(sorted(missing))} column(s)")
            continue
        t = t[[model_of(str(k)) is not None for k in t["kernel"]]]
        t = t.dropna(subset=["median_ms"])
        if t.empty:
            skipped.append(f"{f.name}: no attention kernel rows")
            continue
        frames.append(t.assign(table=f.stem))
    if not frames:
        return pd.DataFrame(columns=[*MEASUREMENT_COLUMNS, "table"]), skipped
    return pd.concat(frames, ignore_index=True), skipped


def seed_points():
    """The seed's GTX 1660 Ti latencies (data/reference) placed on the 1660 Ti's datasheet roofline.
    The seed's tuned TILE_ROWS is 8 for every D, so the tiled models use 8."""
    import pandas as pd
    lat = pd.read_csv(paths.REFERENCE_DIR / "gtx1660ti_latency.csv")
    lat = lat.rename(columns={"latency_ms": "median_ms"})
    lat["tile_rows"] = DEFAULT_TILE_ROWS
    return place(lat, datasheet_ceilings("GTX 1660 Ti"))


# ------------------------------------------------------------------------ measured vs modelled

def measured_vs_modelled(ncu_df, kernels_meta=None):
    """Join Nsight Compute counters (wide table from ``attnlab.ncu.wide``: one row per launch with
    columns kernel, B, H, N, D, tile_rows and the metrics) with the models.

    Adds flops_model, flops_counted (2·FFMA + FADD + FMUL, thread-level), bytes_model, dram_bytes,
    l2_bytes, intensity_model, intensity_dram (= flops_model / dram bytes), dram_over_logical.
    """
    df = ncu_df.copy()
    for c in ("kernel", "B", "H", "N", "D"):
        if c not in df.columns:
            raise ValueError(f"measured_vs_modelled: counters table lacks {c!r}")
    if "tile_rows" not in df.columns:
        df["tile_rows"] = np.nan
    recs = df.to_dict("records")
    df["model"] = [model_of(str(r["kernel"])) for r in recs]
    df["flops_model"] = [attention_flops(r["B"], r["H"], r["N"], r["D"]) for r in recs]
    df["bytes_model"] = [modelled_bytes(r["kernel"], int(r["B"]), int(r["H"]), int(r["N"]), int(r["D"]),
                                        int(r["tile_rows"]) if r["tile_rows"] == r["tile_rows"] else None)
                         if model_of(str(r["kernel"])) else np.nan for r in recs]
    df["bytes_ideal"] = [ideal_bytes(r["B"], r["H"], r["N"], r["D"]) for r in recs]
    ffma = df.get("sm__sass_thread_inst_executed_op_ffma_pred_on.sum")
    if ffma is not None:
        df["flops_counted"] = (2 * ffma + df.get("sm__sass_thread_inst_executed_op_fadd_pred_on.sum", 0)
                               + df.get("sm__sass_thread_inst_executed_op_fmul_pred_on.sum", 0))
    if "dram__bytes.sum" in df.columns:
        df["dram_bytes"] = df["dram__bytes.sum"]
        df["intensity_dram"] = df["flops_model"] / df["dram_bytes"]
        df["dram_over_logical"] = df["dram_bytes"] / df["bytes_model"]
        df["dram_over_ideal"] = df["dram_bytes"] / df["bytes_ideal"]
    if "lts__t_bytes.sum" in df.columns:
        df["l2_bytes"] = df["lts__t_bytes.sum"]
        df["l2_over_logical"] = df["l2_bytes"] / df["bytes_model"]
    df = l2_lookups(df)
    df["intensity_model"] = df["flops_model"] / df["bytes_model"]
    return df


def l2_lookups(df):
    """The L2 hit rate from the lookup counts where they were recorded: l2_hit_pct = 100 · hits /
    (hits + misses), at most 100 by construction (ncu's ratio metric lts__t_sector_hit_rate has
    read above 100 on the H200), and fabric_share = sectors that came over the fabric between the
    two L2 partitions / all L2 sectors. Rows without those counters get NaN."""
    df = df.copy()
    hit, miss = "lts__t_sectors_lookup_hit.sum", "lts__t_sectors_lookup_miss.sum"
    if hit in df.columns and miss in df.columns:
        total = df[hit] + df[miss]
        df["l2_hit_pct"] = np.where(total > 0, 100.0 * df[hit] / total.where(total > 0, 1), np.nan)
    if "lts__t_sectors_srcunit_ltcfabric.sum" in df.columns and "lts__t_sectors.sum" in df.columns:
        df["fabric_share"] = df["lts__t_sectors_srcunit_ltcfabric.sum"] / df["lts__t_sectors.sum"].where(df["lts__t_sectors.sum"] > 0)
    return df


def describe_l2_hit_rates(df) -> str:
    """A sentence on the L2 hit rates of a set of launches, generated from the counters: the
    lookup-count rate's range where recorded, ncu's ratio metric beside it (and how many of its
    readings exceed 100 %), and the fabric's share of the sectors. Empty when neither is there."""
    parts = []
    lookups = "l2_hit_pct" in df and df["l2_hit_pct"].notna().any()
    if lookups:
        h = df["l2_hit_pct"].dropna()
        parts.append(f"L2 hit rate from the lookup counts (hits / (hits + misses)): {h.min():.1f}–{h.max():.1f} % "
                     f"over {len(h)} launches")
    if "lts__t_sector_hit_rate.pct" in df and df["lts__t_sector_hit_rate.pct"].notna().any():
        r = df["lts__t_sector_hit_rate.pct"].dropna()
        over = int((r > 100).sum())
        parts.append(f"ncu's ratio metric lts__t_sector_hit_rate: {r.min():.1f}–{r.max():.1f} %"
                     + (f", above 100 % for {over} of {len(r)}" if over else "")
                     + (" (the rate from the lookup counts cannot exceed 100 %: it is the one used here)"
                        if over and lookups else " (no lookup counts were recorded for these launches)" if over else ""))
    if "fabric_share" in df and df["fabric_share"].notna().any():
        f = df["fabric_share"].dropna()
        parts.append(f"sectors that reached their L2 slice over the fabric between the two partitions: "
                     f"{100 * f.min():.1f}–{100 * f.max():.1f} % of all L2 sectors")
    return "; ".join(parts) + "." if parts else ""


def l2_question(mvm, l2_bytes: float):
    """The seed's L2 question: for the naive kernel, how does real DRAM traffic compare with its
    logical traffic as N grows past the L2 size? ``mvm`` from :func:`measured_vs_modelled`.

    Returns one row per (N, D) with the K+V working set (all heads, and per head), its ratio to
    L2, logical bytes, DRAM bytes, L2 bytes, dram_over_logical, dram_over_ideal (1.0 = every
    input byte fetched from DRAM once and the output written once) and dram_over_reads (1.0 = the
    inputs' bytes alone)."""
    d = mvm[mvm["model"] == "naive"].copy()
    if d.empty or "dram_bytes" not in d.columns:
        raise ValueError("l2_question needs naive rows with dram__bytes.sum (record with scripts/ncu_profile.py)")
    d["kv_bytes_all_heads"] = 2.0 * d["B"] * d["H"] * d["N"] * d["D"] * BYTES_FP32
    d["kv_bytes_per_head"] = 2.0 * d["N"] * d["D"] * BYTES_FP32
    d["kv_over_l2"] = d["kv_bytes_all_heads"] / l2_bytes
    # the ideal's reads alone: Q, K and V once (3/4 of it; O's write is the other quarter)
    d["dram_over_reads"] = d["dram_bytes"] / (3.0 * d["B"] * d["H"] * d["N"] * d["D"] * BYTES_FP32)
    cols = ["N", "D", "kv_bytes_all_heads", "kv_bytes_per_head", "kv_over_l2", "bytes_model", "dram_bytes",
            "dram_over_logical", "dram_over_ideal", "dram_over_reads"] + (["l2_bytes", "l2_over_logical"] if "l2_bytes" in d else []) \
        + [c for c in ("l2_hit_pct", "lts__t_sector_hit_rate.pct", "fabric_share") if c in d]
    return d.sort_values(["D", "N"])[cols].reset_index(drop=True)


def describe_below_ideal(row, tol: float = 0.03) -> str:
    """A sentence for an ``l2_question`` row whose DRAM bytes are below the ideal (each input read
    once, the output written once): what they match instead. Empty when they are not below it."""
    if not row["dram_over_ideal"] < 1.0:
        return ""
    n, ratio = int(row["N"]), float(row["dram_over_reads"])
    if abs(ratio - 1.0) <= tol:
        return (f"Below the ideal at N={n} is not a miscount: DRAM carried {ratio:.3f}× the bytes of Q, K and V "
                f"alone (¾ of the ideal), so O's writes, the other quarter, had not left L2 when the kernel ended "
                f"(ncu counts the DRAM traffic inside the launch; L2 writes back later).")
    return (f"At N={n} DRAM carried {ratio:.2f}× the bytes of Q, K and V alone and {float(row['dram_over_ideal']):.2f}× "
            f"the ideal (inputs and O's write): part of the traffic the ideal counts did not cross DRAM during "
            f"the launch.")


def describe_l2_question(sw, l2_bytes: float) -> str:
    """What the naive kernel's DRAM bytes say about the L2 (one D of :func:`l2_question`, sorted by
    N), generated from the rows: the first and last N against the ideal, what a figure below the
    ideal matches, how DRAM traffic moves once K+V outgrow L2, and the L2 hit rates."""
    first, last = sw.iloc[0], sw.iloc[-1]
    inside, beyond = sw[sw["kv_over_l2"] < 1], sw[sw["kv_over_l2"] >= 1]
    D = int(first["D"])
    text = (f"Naive kernel, D={D}: at N={int(first.N)} DRAM served **{first.dram_over_ideal:.2f}×** the ideal bytes "
            f"({100 * first.dram_over_logical:.2f} % of its logical traffic); at N={int(last.N)}, where K+V of all heads is "
            f"{last.kv_over_l2:.1f}× the {l2_bytes / 2**20:.0f} MiB L2, **{last.dram_over_ideal:.2f}×** the ideal "
            f"({100 * last.dram_over_logical:.2f} % of logical).")
    below = describe_below_ideal(first)
    text += f" {below}" if below else ""
    if len(inside) and len(beyond):
        grow = beyond["dram_over_ideal"].max() / inside["dram_over_ideal"].max()
        if grow > 1.5:
            text += (f" Once K+V outgrow L2 the DRAM traffic climbs to {beyond['dram_over_ideal'].max():.1f}× ideal "
                     f"({grow:.1f}× the in-L2 figure): re-reads start to miss.")
        else:
            text += (f" Even past the L2 size DRAM traffic stays within {grow:.2f}× of its in-L2 figure: per head K+V is only "
                     f"{last.kv_bytes_per_head / 2**20:.0f} MiB and the grid walks rows of one head before the next, so the "
                     "heads in flight still fit in L2.")
    hit = "l2_hit_pct" if "l2_hit_pct" in sw and sw["l2_hit_pct"].notna().all() else "lts__t_sector_hit_rate.pct"
    if hit in sw:
        text += (f" Either way DRAM carries a small fraction of the logical bytes (L2 hit rate "
                 f"{sw[hit].min():.1f}–{sw[hit].max():.1f} %).")
    return text


def plot_l2_question(ax, sw, title: str) -> None:
    """Bytes per launch against N for one D of :func:`l2_question`: logical, L2 and DRAM traffic and
    the ideal, the region where K+V of all heads exceed L2 shaded."""
    ax.plot(sw["N"], sw["bytes_model"] / 1e9, "r--", label="logical bytes (naive model)")
    if "l2_bytes" in sw:
        ax.plot(sw["N"], sw["l2_bytes"] / 1e9, "s-", color="tab:orange", label="L2 traffic (ncu)")
    ax.plot(sw["N"], sw["dram_bytes"] / 1e9, "o-", color="tab:blue", label="DRAM bytes (ncu)")
    ax.plot(sw["N"], sw["dram_bytes"] / sw["dram_over_ideal"] / 1e9, "k:", label="ideal: each input once")
    cross = sw[sw["kv_over_l2"] >= 1]
    if len(cross):
        ax.axvspan(cross["N"].iloc[0], sw["N"].max(), color="grey", alpha=0.15, label="K+V of all heads > L2")
    ax.set(xscale="log", yscale="log", xlabel="N", ylabel="GB per launch", title=title)
    ax.legend(fontsize=7)


def plot_counted_intensity(ax, ceilings: Ceilings, mvm) -> None:
    """The profiled launches on the roofline: modelled intensity (filled) → DRAM intensity (hollow)."""
    pts = mvm.assign(intensity=mvm["intensity_model"],
                     achieved_flops=mvm["flops_model"] / (mvm["gpu__time_duration.sum"] * 1e-9))
    plot_roofline(ax, ceilings, pts, imin=float(min(pts["intensity"].min(), pts["intensity_dram"].min()) / 4),
                  imax=float(max(pts["intensity"].max(), pts["intensity_dram"].max()) * 4),
                  title="ncu-profiled launches: modelled intensity (filled) → DRAM intensity (hollow)")
    ax.scatter(pts["intensity_dram"], pts["achieved_flops"] / 1e12, facecolors="none", edgecolors="k", s=30, zorder=4)
    for r in pts.itertuples():
        ax.annotate("", (r.intensity_dram, r.achieved_flops / 1e12), (r.intensity, r.achieved_flops / 1e12),
                    arrowprops=dict(arrowstyle="->", color="gray", lw=0.5, alpha=0.6))


def recorded_roof(gpu: str, gpu_label: str, notebook: str = "06_roofline"):
    """(roof, datasheet) for a GPU: the ceilings ``notebook`` measured on ``gpu`` when recorded, else the
    datasheet's; the datasheet ceilings of ``gpu_label`` (None for a GPU not in gpu_specs.csv)."""
    from .results import has_table, load_table

    try:
        sheet = datasheet_ceilings(gpu_label.replace("NVIDIA ", "").split()[0])
    except KeyError:
        sheet = None
    if has_table(notebook, "ceilings", gpu):
        return ceilings_from_table(load_table(notebook, "ceilings", gpu), f"{gpu_label} measured"), sheet
    return sheet, sheet


def bench_static_table(archs=("sm_75", "sm_90")):
    """What the compiler made of the two ceiling benchmarks, per arch: registers, spills, the FMA
    loop's ``fma.rn.f32`` count per trip (128 expected) and the copy's 128-bit loads and stores."""
    import pandas as pd

    from .static import has_vector_global_loads, static_build

    rows = []
    for arch in archs:
        f = static_build(FMA_SOURCE, "fma_peak", [()], arch)[0]
        c = static_build(COPY_SOURCE, "copy_f4", [()], arch)[0]
        rows += [dict(kernel="fma_peak", arch=arch, registers=f.registers, spills=f.spills,
                      fma_rn_f32_in_ptx=f.ptx.count("fma.rn.f32")),
                 dict(kernel="copy_f4", arch=arch, registers=c.registers, spills=c.spills,
                      v4_loads=has_vector_global_loads(c.ptx), v4_stores="st.global.v4.f32" in c.ptx)]
    return pd.DataFrame(rows)


def plot_intensity_models(ax, Ns, measured: Ceilings, seed: Ceilings, D: int = 64) -> None:
    """Modelled intensity against N at one D: naive, tiled at three TILE_ROWS, the ideal, and two ridges."""
    for tr, style in ((1, ":"), (8, "-"), (32, "-.")):
        ax.plot(Ns, [intensity("tiled", 2, 8, n, D, tile_rows=tr) for n in Ns], style, label=f"tiled, TILE_ROWS={tr}")
    ax.plot(Ns, [intensity("naive", 2, 8, n, D) for n in Ns], "r--", label="naive")
    ax.plot(Ns, [intensity("sdpa", 2, 8, n, D) for n in Ns], "k-", lw=2, label="ideal (N/4)")
    ax.axhline(measured.ridge, color="tab:green", lw=1, label=f"ridge {measured.name} ({measured.source}) {measured.ridge:.1f}")
    ax.axhline(seed.ridge, color="tab:orange", lw=1, label=f"ridge {seed.name} ({seed.source}) {seed.ridge:.1f}")
    ax.set(xscale="log", yscale="log", xlabel="N", ylabel="FLOP / byte (logical)",
           title=f"modelled intensity, D={D} (independent of B·H)")
    ax.legend(fontsize=7)


def describe_seed_points(seed_pl, seed: Ceilings) -> str:
    """What the seed's own points say against its datasheet roof, generated from them."""
    over = seed_pl[seed_pl["pct_of_attainable"] > 100]
    tiled = seed_pl[seed_pl["model"] == "tiled"]
    text = f"On the seed's GPU, **{len(over)} of {len(seed_pl)}** points sit above their logical-bytes roof"
    if len(over):
        text += (f" — all {', '.join(sorted(set(over['kernel'])))}: up to {over['pct_of_attainable'].max():.0f} % of what "
                 f"{seed.bandwidth / 1e9:.0f} GB/s could feed at {over['intensity'].min():.2f}–{over['intensity'].max():.2f} "
                 "FLOP/byte. Only a cache can serve more bytes than DRAM: the seed's L2 'black box' made visible")
    return text + (f". The seed's tiled kernels reach {tiled['pct_of_peak'].max():.0f} % of the FP32 peak at best."
                   if len(tiled) else ".")


def describe_ceilings(measured: Ceilings, sheet: Ceilings) -> str:
    """The measured ceilings beside the datasheet's, in a sentence generated from them."""
    return (f"Measured on {measured.name}: FP32 FMA **{measured.peak_flops / 1e12:.1f} TFLOP/s = "
            f"{100 * measured.peak_flops / sheet.peak_flops:.0f} %** of the datasheet {sheet.peak_flops / 1e12:.0f}; copy "
            f"**{measured.bandwidth / 1e12:.2f} TB/s = {100 * measured.bandwidth / sheet.bandwidth:.0f} %** of "
            f"{sheet.bandwidth / 1e12:.1f}; ridge point **{measured.ridge:.1f} FLOP/byte** (datasheet {sheet.ridge:.1f}).")


def placement_summary(placed):
    """Per (table, kernel): points placed, their intensity range, best TFLOP/s and share of the attainable bound."""
    return placed.groupby(["table", "kernel"]).agg(
        points=("intensity", "size"), intensity_min=("intensity", "min"), intensity_max=("intensity", "max"),
        best_tflops=("achieved_tflops", "max"), median_pct_of_attainable=("pct_of_attainable", "median"),
        max_pct_of_attainable=("pct_of_attainable", "max")).round(2)


#: the columns notebook 06 shows of :func:`measured_vs_modelled` and of :func:`compute_bound_verdict`
COUNTER_VIEW = ["kernel", "N", "D", "tile_rows", "bytes_model", "dram_bytes", "dram_over_logical", "l2_bytes", "l2_hit_pct",
                "lts__t_sector_hit_rate.pct", "fabric_share", "intensity_model", "intensity_dram", "flops_counted",
                "flops_model", "sm__warps_active.avg.pct_of_peak_sustained_active", "gpu__time_duration.sum"]
VERDICT_VIEW = ["table", "kernel", "N", "D", "median_ms", "achieved_tflops", "pct_of_peak", "pct_of_bandwidth",
                "bytes_source", "bound", "bound_effective", "class"]


def l2_sweep(mvm, l2_bytes: float):
    """:func:`l2_question` for every profiled naive launch, and the rows of the D that was swept in N
    (the D with the most rows), sorted by N. Returns (all rows, the sweep)."""
    l2q = l2_question(mvm, l2_bytes)
    D = l2q["D"].value_counts().idxmax()
    return l2q, l2q[l2q["D"] == D].sort_values("N").reset_index(drop=True)


#: what scripts/ncu_profile.py launches for notebook 06, once each, in order
def ncu_plan(profile: str = "full", B: int = 2, H: int = 8) -> list[dict]:
    """What the worker launches, once each, in order.

    * ``grid``: every seed-ladder kernel (the registry's :data:`SEED_LADDER`) at its default tile for D in {32, 64, 128}, N in {512, 4096};
    * ``l2_sweep``: the naive kernel at D=64 for N from 256 to 16384 (its K+V for all heads
      grows from 2 MB to 134 MB, past the H200's 60 MB L2) — the seed's L2 question;
    * ``sdpa``: torch SDPA fp32 once per D at N=4096.
    The naive kernel's largest N goes last: it is the slowest launch under instrumentation.
    ``quick`` keeps a subset for a fast check.
    """
    if profile not in ("full", "quick"):
        raise ValueError(f"profile must be 'full' or 'quick', got {profile!r}")
    quick = profile == "quick"
    kernels = ("naive", "vec_padded") if quick else SEED_LADDER
    ds = (64,) if quick else (32, 64, 128)
    ns = (512, 4096)
    sweep = (1024, 4096, 16384) if quick else (256, 512, 1024, 2048, 4096, 8192, 16384)
    plan: dict[tuple, dict] = {}
    for k in kernels:
        for d in ds:
            for n in ns:
                plan[(k, n, d)] = {"kernel": k, "B": B, "H": H, "N": n, "D": d, "purpose": "grid"}
    for n in sweep:
        key = ("naive", n, 64)
        if key in plan:
            plan[key]["purpose"] = "grid+l2_sweep"
        else:
            plan[key] = {"kernel": "naive", "B": B, "H": H, "N": n, "D": 64, "purpose": "l2_sweep"}
    for d in ds:
        plan[(ncu.SDPA_LABEL, 4096, d)] = {"kernel": ncu.SDPA_LABEL, "B": B, "H": H, "N": 4096, "D": d, "purpose": "sdpa"}
    entries = sorted(plan.values(), key=lambda e: (e["kernel"] == "naive" and e["N"] == max(sweep),))
    return entries


#: the tables notebook 06 places under its roof: the seed ladder's notebooks (01–05); later notebooks
#: place their own kernels under their own roofs
SEED_NOTEBOOKS = ("01_", "02_", "03_", "04_", "05_")


def collect_seed_measurements(mode, profile: str | None = None):
    """The seed ladder's recorded measurements (notebooks 01–05) of ``mode.gpu`` and, when ``mode`` is
    live with another profile, that profile's tables beside them (``table`` suffixed with the profile).
    Returns (DataFrame, skipped files with the reason)."""
    import pandas as pd

    from .results import CANONICAL_PROFILE

    def only_seed(df, skipped):
        # a table without a latency (correctness, alignment, configs) is not a measurement to place
        keep = df["table"].str.startswith(SEED_NOTEBOOKS)
        return df[keep].reset_index(drop=True), [s for s in skipped if s.startswith(SEED_NOTEBOOKS)
                                                 and "median_ms" not in s]

    meas, skipped = only_seed(*collect_measurements(mode.gpu))
    if mode.live and profile and profile != CANONICAL_PROFILE:
        extra, more = only_seed(*collect_measurements(f"{mode.gpu}/{profile}"))
        if len(extra):
            meas = pd.concat([meas, extra.assign(table=extra["table"] + f" ({profile})")], ignore_index=True)
        skipped += more
    return meas, skipped


# ------------------------------------------------------------------------------------ verdicts

def classify(pct_peak: float, pct_bw: float, threshold: float = 50.0) -> str:
    """Which ceiling a measured kernel is against: 'compute' or 'memory' when its utilisation of
    that ceiling is the larger and at least ``threshold`` %, else 'neither (latency/issue)'."""
    top = max(pct_peak, pct_bw)
    if not np.isfinite(top) or top < threshold:
        return "neither (latency/issue)"
    return "compute" if pct_peak >= pct_bw else "memory"


def compute_bound_verdict(placed, ceilings: Ceilings, counters=None, *, min_N: int = 512,
                          threshold: float = 50.0):
    """The seed's claim, "attention is compute-bound here, so saving bandwidth is the wrong
    direction", checked on this GPU's data.

    ``placed``: :func:`place` output (measured latencies). ``counters``: optional
    :func:`measured_vs_modelled` output, whose DRAM bytes replace the logical bytes when present.
    Only rows with N ≥ ``min_N`` of naive/tiled kernels are judged (the seed's claim is about
    its own kernels, not SDPA).

    For each judged row: modelled bound (intensity vs ridge), % of FP32 peak, % of DRAM bandwidth
    (measured bytes where counters exist, else logical — an upper bound on DRAM use), and the
    class from :func:`classify`. Returns (rows DataFrame, summary dict) where the summary says
    whether each half of the claim holds:

    * ``compute_bound``: most judged rows sit against the compute roof;
    * ``bandwidth_not_binding``: in most judged rows DRAM utilisation is below ``threshold`` %
      (so cutting bytes cannot be what speeds them up);
    * ``claim_holds``: both.

    When ``counters`` match some rows, only those rows are judged (all with DRAM bytes).
    """
    d = placed[placed["model"].isin(["naive", "tiled"]) & (placed["N"] >= min_N)].copy()
    if d.empty:
        raise ValueError(f"compute_bound_verdict: no naive/tiled rows with N >= {min_N}")
    d["bytes_for_bw"] = d["bytes_model"]
    d["bytes_source"] = "logical (model)"
    if counters is not None and "dram_bytes" in counters.columns and len(counters):
        key = ["kernel", "B", "H", "N", "D"]
        c = counters.groupby(key, as_index=False)["dram_bytes"].median()
        d = d.merge(c, on=key, how="left")
        has = d["dram_bytes"].notna()
        if has.any():
            # judge only what was counted: mixing DRAM bytes for some rows with logical bytes (an
            # upper bound, off by up to N×) for others would blur the verdict
            d = d[has].copy()
            d["bytes_for_bw"] = d["dram_bytes"]
            d["bytes_source"] = "DRAM (ncu)"
    secs = d["median_ms"] / 1e3
    d["pct_of_bandwidth"] = 100 * d["bytes_for_bw"] / secs / ceilings.bandwidth
    d["intensity_effective"] = d["flops"] / d["bytes_for_bw"]
    d["bound_effective"] = np.where(d["intensity_effective"] >= ceilings.ridge, "compute", "memory")
    d["class"] = [classify(p, b, threshold) for p, b in zip(d["pct_of_peak"], d["pct_of_bandwidth"])]
    n = len(d)
    share = lambda mask: float(mask.sum()) / n  # noqa: E731
    summary = {
        "rows": n,
        "ridge": ceilings.ridge,
        "share_model_memory_bound": share(d["bound"] == "memory"),
        "share_effective_compute_bound": share(d["bound_effective"] == "compute"),
        "share_class_compute": share(d["class"] == "compute"),
        "share_class_memory": share(d["class"] == "memory"),
        "share_class_neither": share(d["class"].str.startswith("neither")),
        "median_pct_of_peak": float(d["pct_of_peak"].median()),
        "median_pct_of_bandwidth": float(d["pct_of_bandwidth"].median()),
        "bytes_source": "DRAM (ncu)" if (d["bytes_source"] == "DRAM (ncu)").any() else "logical (model)",
    }
    summary["compute_bound"] = summary["share_class_compute"] > 0.5
    summary["bandwidth_not_binding"] = share(d["pct_of_bandwidth"] < threshold) > 0.5
    summary["claim_holds"] = summary["compute_bound"] and summary["bandwidth_not_binding"]
    summary["text"] = verdict_text(summary)
    return d, summary


def verdict_text(s: Mapping) -> str:
    parts = [f"Judged {s['rows']} measurements (naive/tiled kernels); ridge {s['ridge']:.1f} FLOP/byte; "
             f"bytes from {s['bytes_source']}."]
    parts.append(f"By the logical-bytes model {100 * s['share_model_memory_bound']:.0f} % are memory-bound; "
                 f"with the bytes from {s['bytes_source']} {100 * s['share_effective_compute_bound']:.0f} % sit "
                 "right of the ridge.")
    parts.append(f"Median utilisation: {s['median_pct_of_peak']:.1f} % of FP32 peak, "
                 f"{s['median_pct_of_bandwidth']:.1f} % of DRAM bandwidth; "
                 f"{100 * s['share_class_compute']:.0f} % against the compute roof, "
                 f"{100 * s['share_class_memory']:.0f} % against the bandwidth roof, "
                 f"{100 * s['share_class_neither']:.0f} % near neither.")
    if s["claim_holds"]:
        parts.append("Verdict: the claim HOLDS here — the kernels run against the compute roof and DRAM "
                     "bandwidth is not what limits them.")
    elif s["bandwidth_not_binding"]:
        parts.append("Verdict: HALF TRUE — DRAM bandwidth is indeed not the limit (so saving bytes is the "
                     "wrong lever), but the kernels are not compute-bound either: they reach neither "
                     "roof, i.e. they are latency/instruction-issue bound.")
    elif s["compute_bound"]:
        parts.append("Verdict: the kernels are compute-bound, yet DRAM utilisation is high too; "
                     "saving bandwidth could still help.")
    else:
        parts.append("Verdict: the claim does NOT hold — the kernels are against the bandwidth roof, "
                     "so saving bandwidth is the right direction.")
    return " ".join(parts)


# ------------------------------------------------------------------------------------- plotting

KERNEL_COLORS = {"naive": "tab:red", "tiled": "tab:blue", "vec_load": "tab:orange",
                 "vec_padded": "tab:green", "double_buffer": "tab:purple", "sdpa": "black"}


def _color(kernel: str) -> str:
    k = kernel.lower()
    if "sdpa" in k:
        return KERNEL_COLORS["sdpa"]
    return KERNEL_COLORS.get(k, "tab:gray")


def plot_roofline(ax, ceilings: Ceilings, points=None, *, title: str | None = None,
                  extra_ceilings: Iterable[Ceilings] = (), imin: float | None = None,
                  imax: float | None = None, label_points: bool = False, size_by: str | None = "N"):
    """Log-log roofline on ``ax``: the roof of ``ceilings`` (and dashed ``extra_ceilings``, e.g. the
    datasheet), and the ``points`` from :func:`place` (x = intensity, y = achieved FLOP/s, in
    TFLOP/s), one colour per kernel, marker size growing with N."""
    ridge = ceilings.ridge
    xs = [ridge]
    if points is not None and len(points):
        xs += list(points["intensity"])
    lo = imin or max(min(xs) / 4, 1e-2)
    hi = imax or max(xs) * 4
    grid = np.logspace(np.log10(lo), np.log10(hi), 256)
    ax.plot(grid, attainable(grid, ceilings.peak_flops, ceilings.bandwidth) / 1e12, "k-", lw=2,
            label=f"{ceilings.name} roof ({ceilings.peak_flops / 1e12:.1f} TFLOP/s, "
                  f"{ceilings.bandwidth / 1e12:.2f} TB/s)")
    for c in extra_ceilings:
        ax.plot(grid, attainable(grid, c.peak_flops, c.bandwidth) / 1e12, "k--", lw=1, alpha=0.6,
                label=f"{c.name} ({c.source})")
    ax.axvline(ridge, color="gray", ls=":", lw=1)
    ax.annotate(f"ridge {ridge:.1f}", (ridge, ceilings.peak_flops / 1e12), textcoords="offset points",
                xytext=(4, -12), fontsize=8, color="gray")
    if points is not None and len(points):
        for kernel, g in points.groupby("kernel", sort=False):
            sizes = None
            if size_by and size_by in g:
                v = np.log2(g[size_by].astype(float).clip(lower=1))
                sizes = 10 + 60 * (v - v.min() + 1) / (v.max() - v.min() + 1)
            ax.scatter(g["intensity"], g["achieved_flops"] / 1e12, s=sizes, color=_color(str(kernel)),
                       alpha=0.75, edgecolor="k", linewidth=0.3, label=str(kernel), zorder=3)
            if label_points:
                for r in g.itertuples():
                    ax.annotate(f"N={r.N},D={r.D}", (r.intensity, r.achieved_flops / 1e12), fontsize=6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("TFLOP/s")
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=7, loc="lower right")
    if title:
        ax.set_title(title)
    return ax


# ------------------------------------------------------------------- live: measuring ceilings

FMA_SOURCE = "bench/01_fma_peak.cu"
COPY_SOURCE = "bench/02_copy.cu"
COPY_THREADS = 256     # kernels/bench/02_copy.cu's __launch_bounds__
FMA_THREADS = 256


def device_facts() -> dict:
    """SM count, L2 size, opt-in smem, memory and name of the current device (live only)."""
    import cupy as cp
    rt = cp.cuda.runtime
    dev = cp.cuda.Device()
    attr = lambda a: int(rt.deviceGetAttribute(a, dev.id))  # noqa: E731
    props = rt.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return {"name": name, "sms": attr(rt.cudaDevAttrMultiProcessorCount), "l2_bytes": attr(rt.cudaDevAttrL2CacheSize),
            "arch": f"sm_{dev.compute_capability}",
            "smem_optin": attr(rt.cudaDevAttrMaxSharedMemoryPerBlockOptin),
            "total_mem": int(props.get("totalGlobalMem", 0))}


def _resident_grid(kernel, threads: int, sms: int) -> tuple[int, int]:
    """One full wave: SMs × the driver's blocks/SM for this kernel."""
    from .occupancy import driver_blocks
    per_sm = max(1, driver_blocks(kernel, threads, 0))
    return sms * per_sm, per_sm


def measure_fma_peak(*, iters: int = 4096, budget_s: float = 0.5, defines=None) -> dict:
    """Run kernels/bench/01_fma_peak.cu on one full wave of resident blocks; FP32 FLOP/s."""
    import cupy as cp
    from .compile import load_kernel
    from .timing import time_gpu

    facts = device_facts()
    ker = load_kernel(FMA_SOURCE, "fma_peak", defines=defines)
    cfg_k = load_kernel(FMA_SOURCE, "fma_peak_config", defines=defines)
    cfg = cp.zeros(2, dtype=cp.int32)
    cfg_k((1,), (1,), (cfg,))
    chains, unroll = (int(x) for x in cfg.get())
    grid, per_sm = _resident_grid(ker, FMA_THREADS, facts["sms"])
    out = cp.empty(grid * FMA_THREADS, dtype=cp.float32)
    args = (out, np.float32(0.999), np.float32(1e-3), np.int32(iters))
    t = time_gpu(lambda: ker((grid,), (FMA_THREADS,), args), budget_s=budget_s, flush_l2=False)
    if not bool(cp.isfinite(out).all()):
        raise RuntimeError("fma_peak produced non-finite values: the chains diverged")
    flops = fma_flops(grid, FMA_THREADS, iters, chains, unroll)
    return {"ceiling": "fp32_fma", "flops": flops, "median_ms": t.median_ms, "q1_ms": t.q1_ms,
            "q3_ms": t.q3_ms, "repeats": t.repeats, "value": flops / (t.median_ms * 1e-3),
            "unit": "FLOP/s", "grid": grid, "block": FMA_THREADS, "blocks_per_sm": per_sm,
            "iters": iters, "chains": chains, "unroll": unroll, "registers": int(ker.num_regs),
            "sms": facts["sms"]}


MMA_SOURCE = "bench/03_mma_peak.cu"
MMA_THREADS = 256
#: kernels/bench/03_mma_peak.cu's KIND template argument and FLOPs per mma.sync instruction.
MMA_KINDS = {"tf32_mma": (0, 2 * 16 * 8 * 8), "bf16_mma": (1, 2 * 16 * 8 * 16), "fp16_mma": (2, 2 * 16 * 8 * 16)}


def mma_flops(kind: str, grid: int, threads: int, iters: int, chains: int, unroll: int) -> int:
    """FLOPs of one launch of kernels/bench/03_mma_peak.cu: every warp issues
    iters·unroll·chains MMAs of ``kind``."""
    return MMA_KINDS[kind][1] * (grid * threads // 32) * iters * chains * unroll


def measure_mma_peak(kind: str = "bf16_mma", *, iters: int = 2048, budget_s: float = 0.5) -> dict:
    """Run kernels/bench/03_mma_peak.cu (one mma.sync kind) on a full wave; FLOP/s of that kind."""
    import cupy as cp
    from .compile import load_kernel
    from .timing import time_gpu

    if kind not in MMA_KINDS:
        raise ValueError(f"unknown MMA kind {kind!r}: choose from {', '.join(MMA_KINDS)}")
    facts = device_facts()
    ker = load_kernel(MMA_SOURCE, "mma_peak", (MMA_KINDS[kind][0],))
    cfg_k = load_kernel(MMA_SOURCE, "mma_peak_config")
    cfg = cp.zeros(2, dtype=cp.int32)
    cfg_k((1,), (1,), (cfg,))
    chains, unroll = (int(x) for x in cfg.get())
    grid, per_sm = _resident_grid(ker, MMA_THREADS, facts["sms"])
    out = cp.empty(grid * MMA_THREADS, dtype=cp.float32)
    t = time_gpu(lambda: ker((grid,), (MMA_THREADS,), (out, np.int32(iters))), budget_s=budget_s, flush_l2=False)
    if not bool(cp.isfinite(out).all()):
        raise RuntimeError("mma_peak produced non-finite values")
    flops = mma_flops(kind, grid, MMA_THREADS, iters, chains, unroll)
    return {"ceiling": kind, "flops": flops, "median_ms": t.median_ms, "q1_ms": t.q1_ms,
            "q3_ms": t.q3_ms, "repeats": t.repeats, "value": flops / (t.median_ms * 1e-3),
            "unit": "FLOP/s", "grid": grid, "block": MMA_THREADS, "blocks_per_sm": per_sm,
            "iters": iters, "chains": chains, "unroll": unroll, "registers": int(ker.num_regs),
            "sms": facts["sms"]}


def measure_copy_bandwidth(*, nbytes: int | None = None, budget_s: float = 0.5, check: bool = True) -> dict:
    """Run kernels/bench/02_copy.cu over buffers ≥ 8× L2 (default: max(8·L2, 1 GiB), capped at a
    quarter of free memory); bytes/s counting read + written."""
    import cupy as cp
    from .compile import load_kernel
    from .timing import time_gpu

    facts = device_facts()
    if nbytes is None:
        free, _ = cp.cuda.runtime.memGetInfo()
        nbytes = min(max(8 * facts["l2_bytes"], 1 << 30), free // 4)
    n4 = int(nbytes) // 16
    src = cp.arange(n4 * 4, dtype=cp.float32).reshape(n4, 4)
    dst = cp.empty_like(src)
    ker = load_kernel(COPY_SOURCE, "copy_f4")
    grid, per_sm = _resident_grid(ker, COPY_THREADS, facts["sms"])
    args = (src, dst, np.int64(n4))
    t = time_gpu(lambda: ker((grid,), (COPY_THREADS,), args), budget_s=budget_s, flush_l2=False)
    if check:
        if not bool((dst == src).all()):
            raise RuntimeError("copy_f4 did not copy its input exactly")
    moved = copy_bytes(n4)
    del src, dst
    return {"ceiling": "dram_copy", "bytes": moved, "median_ms": t.median_ms, "q1_ms": t.q1_ms,
            "q3_ms": t.q3_ms, "repeats": t.repeats, "value": moved / (t.median_ms * 1e-3),
            "unit": "bytes/s", "grid": grid, "block": COPY_THREADS, "blocks_per_sm": per_sm,
            "buffer_bytes": n4 * 16, "l2_bytes": facts["l2_bytes"], "registers": int(ker.num_regs),
            "sms": facts["sms"]}


def ceilings_from_table(table, name: str) -> Ceilings:
    """Ceilings from a recorded ``06_roofline__ceilings`` table (rows ceiling=fp32_fma / dram_copy)."""
    v = table.groupby("ceiling")["value"].median()
    missing = {"fp32_fma", "dram_copy"} - set(v.index)
    if missing:
        raise ValueError(f"ceilings table lacks row(s) {sorted(missing)}")
    return Ceilings(name, float(v["fp32_fma"]), float(v["dram_copy"]), "measured")
