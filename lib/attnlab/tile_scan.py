"""Notebook 05's tile scan: every (kernel, D, TILE_ROWS, TILE_KV) built, checked against the occupancy
calculator and the driver, timed, and the best tile per (kernel, D) written to the tuned-tile store
(:mod:`attnlab.tuned`, which the launchers read). A study: it sits above the attention family."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from .env import git_commit
from .seed import SEED_TILES as SEED_DEFAULTS
from .tuned import empty, load, lookup, record, save


# ---------------------------------------------------------------------- best tiles -> the store

def best_tiles_from_scan(scan_df, N: int | None = None):
    """Best tile per (kernel, D) of a scan table.

    ``scan_df`` needs columns kernel, D, N, tile_rows, tile_kv, median_ms (NaN = not run, e.g. the
    tile did not fit). With ``N`` given, the fastest tile at that N wins. Otherwise each tile gets
    a score = geometric mean over the scanned N of ``median_ms / best median_ms at that N`` and the
    lowest score wins (only tiles measured at every N compete), so one N cannot dominate just
    because its latencies are larger.

    Returns a DataFrame: kernel, D, tile_rows, tile_kv, median_ms, N (largest N scanned, the
    figure recorded), score, n_tiles (tiles that competed).
    """
    import numpy as np
    import pandas as pd

    need = {"kernel", "D", "N", "tile_rows", "tile_kv", "median_ms"}
    missing = need - set(scan_df.columns)
    if missing:
        raise ValueError(f"best_tiles_from_scan: scan table lacks column(s) {sorted(missing)}")
    df = scan_df.dropna(subset=["median_ms"])
    df = df[df["median_ms"] > 0]
    if N is not None:
        df = df[df["N"] == N]
    if df.empty:
        raise ValueError("best_tiles_from_scan: no measured rows" + (f" at N={N}" if N is not None else ""))
    # several repeats of one configuration: keep the median of medians
    df = df.groupby(["kernel", "D", "N", "tile_rows", "tile_kv"], as_index=False)["median_ms"].median()
    out = []
    for (kernel, D), g in df.groupby(["kernel", "D"], sort=True):
        ns = sorted(g["N"].unique())
        best_at = g.groupby("N")["median_ms"].min()
        g = g.assign(rel=g["median_ms"] / g["N"].map(best_at))
        per_tile = g.groupby(["tile_rows", "tile_kv"]).agg(
            n=("N", "nunique"), score=("rel", lambda r: float(np.exp(np.log(r).mean()))))
        per_tile = per_tile[per_tile["n"] == len(ns)]
        if per_tile.empty:
            raise ValueError(f"best_tiles_from_scan: no tile of {kernel} D={D} was measured at every N {ns}")
        # ties: smaller tiles first (less shared memory), deterministic
        per_tile = per_tile.reset_index().sort_values(["score", "tile_rows", "tile_kv"])
        best = per_tile.iloc[0]
        n_rec = max(ns)
        ms = float(g[(g["tile_rows"] == best["tile_rows"]) & (g["tile_kv"] == best["tile_kv"])
                     & (g["N"] == n_rec)]["median_ms"].iloc[0])
        out.append({"kernel": kernel, "D": int(D), "tile_rows": int(best["tile_rows"]),
                    "tile_kv": int(best["tile_kv"]), "median_ms": ms, "N": int(n_rec),
                    "score": float(best["score"]), "n_tiles": int(len(per_tile))})
    return pd.DataFrame(out)


def write_from_scan(gpu: str, best_df, *, date: str | None = None, commit: str | None = None,
                    tuned_dir: Path | None = None, merge: bool = True) -> Path:
    """Write :func:`best_tiles_from_scan`'s table to ``data/tuned/<gpu>.json`` (atomic).

    ``merge`` keeps entries for kernels / D that this scan did not cover."""
    date = date or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    commit = commit or git_commit()[0][:12]
    data = load(gpu, tuned_dir) if merge else empty(gpu)
    data = json.loads(json.dumps(data))  # a private copy; the cached one stays untouched
    for r in best_df.to_dict("records"):
        extra = {"score": float(r["score"])} if "score" in r and r["score"] == r["score"] else {}
        record(data, r["kernel"], int(r["D"]), int(r["tile_rows"]), int(r["tile_kv"]),
               float(r["median_ms"]), int(r["N"]), date, commit, **extra)
    return save(data, tuned_dir)



# ---------------------------------------------------------------------- the scan (notebook 05)

SCAN_TILE_ROWS = (1, 2, 4, 8, 16, 32)
SCAN_TILE_KV = (8, 16, 32, 64, 128)
SCAN_KEY = ["kernel", "D", "tile_rows", "tile_kv"]


def scan_configs(kernels, D_list, tile_rows_list=SCAN_TILE_ROWS, tile_kv_list=SCAN_TILE_KV,
                 arch: str = "sm_90"):
    """Every (kernel, D, TILE_ROWS, TILE_KV) of the scan with its launch geometry (from the
    launcher's spec) and whether its shared memory fits the architecture's opt-in limit."""
    import pandas as pd
    from .attention import get_spec
    from .occupancy import max_dynamic_smem

    top = max_dynamic_smem(arch)
    rows = []
    for k in kernels:
        spec = get_spec(k)
        if not spec.tiled:
            raise ValueError(f"scan_configs: {k!r} has no tiles to scan")
        for D in D_list:
            for tr in tile_rows_list:
                for kv in tile_kv_list:
                    smem = spec.smem_bytes(D, tr, kv)
                    rows.append({"kernel": k, "D": int(D), "tile_rows": int(tr), "tile_kv": int(kv),
                                 "block_threads": spec.block_threads(tr), "dynamic_smem": int(smem),
                                 "fits": smem <= top})
    return pd.DataFrame(rows)


def static_scan(configs, arch: str = "sm_90", workers: int | None = None):
    """Registers / static smem / spills of every fitting configuration from the CPU static build
    (one nvcc run per (kernel, D), run in parallel), with the occupancy model's columns."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    import pandas as pd
    from .attention import get_spec
    from .occupancy import with_theoretical
    from .static import static_build

    fit = configs[configs["fits"]].copy()
    groups = [g for _, g in fit.groupby(["kernel", "D"], sort=False)]
    if not groups:
        return fit.assign(regs=[], static_smem=[], spill_bytes=[], stack_bytes=[], arch=[])

    def build(g):
        spec = get_spec(g["kernel"].iloc[0])
        inst = [spec.template_args(int(r.D), int(r.tile_rows), int(r.tile_kv)) for r in g.itertuples()]
        reps = static_build(spec.source, spec.function, inst, arch)
        return g.assign(regs=[r.registers for r in reps], static_smem=[r.static_smem_bytes for r in reps],
                        spill_bytes=[r.spill_store_bytes + r.spill_load_bytes for r in reps],
                        stack_bytes=[r.stack_bytes for r in reps], arch=arch)

    # each nvcc run is single-threaded; the (kernel, D) groups are independent
    workers = workers or max(1, min(len(groups), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        parts = list(pool.map(build, groups))
    return with_theoretical(pd.concat(parts, ignore_index=True), arch)


def live_scan(configs, N_list, *, B: int, H: int, budget_s: float, seed: int, check: bool = True,
              progress=None):
    """Compile, check, ask the driver and time every configuration (live GPU).

    Returns (per_config, timing):

    * ``per_config``: one row per configuration: live registers / static smem / local memory,
      driver blocks/SM beside the model's (``agree``), limiter, theoretical occupancy, compile
      seconds, ``rel_err_fp64`` at the smallest N (output vs a float64 reference), or ``skipped``;
    * ``timing``: one row per (configuration, N) with the timing columns and TFLOP/s.
    """
    import time

    import numpy as np
    import pandas as pd

    import cupy as cp

    from .attention import get_kernel, run_attention
    from .attention.bench import random_qkv
    from .occupancy import device_arch, driver_blocks, kernel_resources, occupancy
    from .attention.reference import attention_flops, attention_fp64, rel_error
    from .timing import time_rows

    arch = device_arch()
    per_config, ok = [], []
    for c in configs.to_dict("records"):
        base = {k: c[k] for k in (*SCAN_KEY, "block_threads", "dynamic_smem")}
        base["arch"] = arch
        if not c.get("fits", True):
            per_config.append({**base, "skipped": "shared memory over the opt-in limit"})
            continue
        t0 = time.perf_counter()
        try:
            plan = get_kernel(c["kernel"], c["D"], c["tile_rows"], c["tile_kv"])
            res = kernel_resources(plan.kernel)       # forces the load
        except Exception as exc:  # noqa: BLE001 - record, keep scanning
            per_config.append({**base, "skipped": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"})
            continue
        compile_s = time.perf_counter() - t0
        drv = driver_blocks(plan.kernel, plan.block, plan.smem_bytes)
        occ = occupancy(arch, plan.block, res["regs"], res["static_smem"], plan.smem_bytes)
        row = {**base, "block_threads": plan.block, "dynamic_smem": plan.smem_bytes, "regs": res["regs"],
               "static_smem": res["static_smem"], "local_bytes": res["local_bytes"],
               "smem": res["static_smem"] + plan.smem_bytes, "driver_blocks": drv,
               "model_blocks": occ.blocks_per_sm, "agree": drv == occ.blocks_per_sm, "limiter": occ.limiter,
               "theo_occupancy": occ.occupancy, "active_warps": occ.active_warps, "compile_s": compile_s,
               "rel_err_fp64": np.nan, "skipped": ""}
        per_config.append(row)
        ok.append(row)
        if progress:
            progress(f"compiled {c['kernel']} D={c['D']} {c['tile_rows']}x{c['tile_kv']} in {compile_s:.2f} s")

    rng = np.random.default_rng(seed)
    timing = []
    by_key = {tuple(r[k] for k in SCAN_KEY): r for r in ok}
    n_check = min(N_list)
    for D in sorted({r["D"] for r in ok}):
        for N in N_list:
            q, k, v = random_qkv(B, H, N, D, rng)
            out = cp.empty_like(q)
            ref = attention_fp64(q, k, v) if check and N == n_check else None
            entries = []
            for key, r in by_key.items():
                if r["D"] != D:
                    continue
                name, _, tr, kv = key
                if ref is not None:
                    out.fill(np.nan)
                    run_attention(name, q, k, v, tr, kv, out=out)
                    r["rel_err_fp64"] = rel_error(out, ref)
                entries.append(({"kernel": name, "B": B, "H": H, "N": N, "D": D, "tile_rows": tr, "tile_kv": kv},
                                lambda name=name, tr=tr, kv=kv, qkv=(q, k, v), out=out:
                                run_attention(name, *qkv, tr, kv, out=out)))
            timing += time_rows(entries, budget_s=budget_s,
                                flops=attention_flops(B, H, N, D))
            del q, k, v, out, ref
    return pd.DataFrame(per_config), pd.DataFrame(timing)


def driver_check_table(per_config):
    """The recorded model-vs-driver comparison (``05_occupancy_scan__occupancy_check``)."""
    from .occupancy import DRIVER_CHECK_COLUMNS
    d = per_config[per_config["skipped"].fillna("") == ""]
    cols = [c for c in DRIVER_CHECK_COLUMNS if c in d.columns]
    return d[cols + [c for c in ("theo_occupancy", "active_warps") if c in d.columns]].reset_index(drop=True)


def heatmap_frame(timing, kernel: str, D: int, N: int, value: str = "median_ms"):
    """TILE_ROWS (rows) x TILE_KV (columns) of one kernel, D and N; NaN where not run."""
    g = timing[(timing["kernel"] == kernel) & (timing["D"] == D) & (timing["N"] == N)]
    return g.pivot_table(index="tile_rows", columns="tile_kv", values=value, aggfunc="median")


def plot_heatmaps(timing, kernel: str, N: int, D_list=None, value: str = "median_ms", best=None, seed_best=None,
                  title_suffix: str = ""):
    """One heatmap per D (log colour scale of latency), the optimum ringed in black, the seed's
    tile in white."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import LogNorm

    D_list = sorted(set(timing["D"])) if D_list is None else D_list
    fig, axes = plt.subplots(1, len(D_list), figsize=(4.6 * len(D_list), 3.8), squeeze=False)
    for ax, D in zip(axes[0], D_list):
        h = heatmap_frame(timing, kernel, D, N, value)
        if h.empty:
            ax.set_axis_off()
            continue
        data = h.to_numpy(dtype=float)
        im = ax.imshow(data, norm=LogNorm(vmin=np.nanmin(data), vmax=np.nanmax(data)), cmap="viridis_r",
                       aspect="auto")
        ax.set_xticks(range(len(h.columns)), [str(c) for c in h.columns])
        ax.set_yticks(range(len(h.index)), [str(i) for i in h.index])
        ax.set_xlabel("TILE_KV")
        ax.set_ylabel("TILE_ROWS")
        for i in range(data.shape[0]):
            for j in range(data.shape[1]):
                if np.isfinite(data[i, j]):
                    ax.text(j, i, f"{data[i, j]:.3g}", ha="center", va="center", fontsize=6,
                            color="white" if data[i, j] > np.nanmedian(data) else "black")
        for tiles, colour in ((best or {}).get(D), "black"), ((seed_best or {}).get(D), "white"):
            if tiles and tiles[0] in h.index and tiles[1] in h.columns:
                ax.add_patch(plt.Rectangle((list(h.columns).index(tiles[1]) - 0.5, list(h.index).index(tiles[0]) - 0.5),
                                           1, 1, fill=False, edgecolor=colour, lw=2.5))
        ax.set_title(f"{kernel}, D={D}, N={N}")
        fig.colorbar(im, ax=ax, shrink=0.8, label=value)
    fig.suptitle(f"{value} per tile (black: optimum here; white: seed's tile){title_suffix}", fontsize=9)
    fig.tight_layout()
    return fig


def verdict_tile_kv_shrinks(best_df):
    """The seed's finding "TILE_KV shrinks as D grows" (32 -> 16 -> 8 on the GTX 1660 Ti), per
    kernel on this GPU's best tiles. Holds for a kernel when its best TILE_KV never grows with D
    and is strictly smaller at the largest D than at the smallest. Returns (table, summary)."""
    import pandas as pd
    rows = []
    for kernel, g in best_df.sort_values("D").groupby("kernel", sort=False):
        kv = list(g["tile_kv"].astype(int))
        ds = list(g["D"].astype(int))
        non_increasing = all(b <= a for a, b in zip(kv, kv[1:]))
        holds = len(kv) >= 2 and non_increasing and kv[-1] < kv[0]
        rows.append({"kernel": kernel, "D": " / ".join(map(str, ds)), "best_tile_kv": " / ".join(map(str, kv)),
                     "best_tile_rows": " / ".join(map(str, g["tile_rows"].astype(int))),
                     "seed_tile_kv": " / ".join(str(SEED_DEFAULTS.get(d, (None, None))[1]) for d in ds),
                     "shrinks": holds})
    t = pd.DataFrame(rows)
    n = int(t["shrinks"].sum()) if len(t) else 0
    text = (f"'TILE_KV shrinks as D grows' holds for {n}/{len(t)} kernel(s) on this GPU: "
            + "; ".join(f"{r.kernel}: TILE_KV {r.best_tile_kv} for D {r.D} (seed: {r.seed_tile_kv})"
                        for r in t.itertuples()))
    return t, {"holds_for_all": bool(len(t) and t["shrinks"].all()), "holds_for_any": bool(n), "text": text}


def default_vs_tuned(kernels, D_list, gpu: str, tuned_dir=None, tuned_tiles=None):
    """(kernel, D) -> default tiles, tuned tiles (None when nothing tuned) and whether they differ.
    ``tuned_tiles`` ({(kernel, D): (tile_rows, tile_kv)}, e.g. a scan's optimum not yet written to
    the file) takes precedence over ``data/tuned/<gpu>.json``."""
    import pandas as pd
    rows = []
    for k in kernels:
        for D in D_list:
            t = (tuned_tiles or {}).get((k, int(D))) or lookup(gpu, k, D, tuned_dir)
            d = SEED_DEFAULTS[int(D)]
            rows.append({"kernel": k, "D": int(D), "default_rows": d[0], "default_kv": d[1],
                         "tuned_rows": t[0] if t else None, "tuned_kv": t[1] if t else None,
                         "differs": bool(t and tuple(t) != d)})
    return pd.DataFrame(rows)


def measure_gain(kernels, N_list, D_list, *, gpu: str, B: int, H: int, budget_s: float, seed: int,
                 tuned_dir=None, tuned_tiles=None):
    """Latency at the seed's default tiles and at the tuned tiles over the seed grid (live).
    Where both are the same tile it is timed once and the gain is exactly 1."""
    import numpy as np
    import pandas as pd
    from .attention import run_attention
    from .attention.bench import fresh_inputs
    from .timing import time_rows

    plan = default_vs_tuned(kernels, D_list, gpu, tuned_dir, tuned_tiles)
    rows = []
    for D, N, q, k, v, out in fresh_inputs(B, H, N_list, D_list, seed):   # default and tuned on the same inputs
        for r in plan[plan["D"] == D].itertuples():
            tiles = {"default": (int(r.default_rows), int(r.default_kv))}
            if r.tuned_rows is not None and not pd.isna(r.tuned_rows):
                tiles["tuned"] = (int(r.tuned_rows), int(r.tuned_kv))
            distinct = {w: t for w, t in tiles.items() if w == "default" or t != tiles["default"]}
            timed = time_rows([({"which": w}, lambda kernel=r.kernel, tr=tr, kv=kv, qkv=(q, k, v), out=out:
                                 run_attention(kernel, *qkv, tr, kv, out=out)) for w, (tr, kv) in distinct.items()],
                              budget_s=budget_s)
            ms = {row["which"]: row["median_ms"] for row in timed}
            if "tuned" in tiles and "tuned" not in ms:
                ms["tuned"] = ms["default"]   # the same tile: timed once, gain exactly 1
            rows.append({"kernel": r.kernel, "B": B, "H": H, "N": N, "D": D,
                         "default_tiles": f"{tiles['default'][0]}x{tiles['default'][1]}",
                         "tuned_tiles": f"{tiles['tuned'][0]}x{tiles['tuned'][1]}" if "tuned" in tiles else "",
                         "default_ms": ms["default"], "tuned_ms": ms.get("tuned", np.nan)})
        del q, k, v, out
    df = pd.DataFrame(rows)
    df["gain"] = df["default_ms"] / df["tuned_ms"]
    return df


def gain_summary(gain):
    """Per (kernel, D): tiles, geometric-mean and extreme gain of tuned over default tiles."""
    import numpy as np
    g = gain.dropna(subset=["gain"])
    out = g.groupby(["kernel", "D"]).agg(default_tiles=("default_tiles", "first"), tuned_tiles=("tuned_tiles", "first"),
                                          geomean_gain=("gain", lambda x: float(np.exp(np.log(x).mean()))),
                                          min_gain=("gain", "min"), max_gain=("gain", "max"), points=("gain", "size"))
    return out.reset_index()


# ---------------------------------------------------------------------- notebook 05's views

def seed_tiles_occupancy(archs=("sm_75", "sm_90")):
    """The seed's best tiles compiled for each arch (static build): registers, shared memory, blocks/SM,
    occupancy and what limits it, every limit beside."""
    import pandas as pd

    from .attention import get_spec
    from .occupancy import occupancy
    from .seed import seed_best_tiles
    from .static import static_build

    spec = get_spec("tiled")
    rows = []
    for r in seed_best_tiles().itertuples():
        smem = spec.smem_bytes(r.D, r.tile_rows, r.tile_kv)
        for arch in archs:
            rep = static_build(spec.source, spec.function, [spec.template_args(r.D, r.tile_rows, r.tile_kv)], arch)[0]
            o = occupancy(arch, spec.block_threads(r.tile_rows), rep.registers, rep.static_smem_bytes, smem)
            rows.append(dict(D=r.D, tile=f"{r.tile_rows}x{r.tile_kv}", seed_smem_KB=r.smem_kb,
                             our_smem_KB=round(smem / 1024, 2), arch=arch, regs=rep.registers,
                             block_threads=spec.block_threads(r.tile_rows), blocks_per_SM=o.blocks_per_sm,
                             active_warps=o.active_warps, occupancy=o.occupancy, limiter=o.limiter,
                             **{f"limit_{k.replace(' ', '_')}": v for k, v in o.limits.items()}))
    return pd.DataFrame(rows)


def describe_seed_occupancy(seed_occ, arch: str = "sm_75") -> str:
    """What limited occupancy at the seed's tiles on its GPU, generated from :func:`seed_tiles_occupancy`."""
    from .occupancy import ARCHS

    t = seed_occ[seed_occ["arch"] == arch]
    a = ARCHS[arch]
    parts = "; ".join(f"D={r.D} ({r.tile}): **{r.blocks_per_SM} blocks/SM, {100 * r.occupancy:.0f} % occupancy, "
                      f"limited by {r.limiter}**" for r in t.itertuples())
    smem_bound = sorted(set(t.loc[t["limiter"] == "shared memory", "D"]))
    tail = (f" Shared memory limited occupancy at D = {', '.join(map(str, smem_bound))}." if smem_bound else
            f" With {int(t['block_threads'].iloc[0]) // 32} warps per block and {a.max_warps_per_sm} warp slots per SM, "
            f"{a.max_warps_per_sm * 32 // int(t['block_threads'].iloc[0])} blocks is the warp ceiling, so at the seed's "
            "tiles shared memory was *not* what limited occupancy.")
    return f"On the seed's GPU ({arch}) the calculator gives {parts}.{tail}"


def occupancy_vs_latency(scan, configs):
    """Each timed configuration's latency relative to the best of its (kernel, D, N) beside its
    theoretical occupancy; per group, the rank correlation of occupancy with latency.
    Returns (joined rows, correlations, the fastest row per group)."""
    import numpy as np

    key = ["kernel", "D", "tile_rows", "tile_kv"]
    j = scan.merge(configs[key + ["theo_occupancy", "limiter", "regs", "smem"]], on=key, how="left")
    j["rel_latency"] = j["median_ms"] / j.groupby(["kernel", "D", "N"])["median_ms"].transform("min")
    corr = (j.groupby(["kernel", "D", "N"])[["theo_occupancy", "rel_latency"]]
            .apply(lambda g: g["theo_occupancy"].rank().corr(g["rel_latency"].rank())
                   if g["theo_occupancy"].nunique() > 1 else np.nan)
            .rename("spearman_occupancy_vs_latency").reset_index())
    best = j.loc[j.groupby(["kernel", "D", "N"])["median_ms"].idxmin()]
    return j, corr, best


def plot_occupancy_vs_latency(joined, label: str):
    import matplotlib.pyplot as plt

    Ns = sorted(set(joined["N"]))
    fig, axes = plt.subplots(1, len(Ns), figsize=(6 * len(Ns), 3.8), squeeze=False)
    for ax, (N, g) in zip(axes[0], joined.groupby("N")):
        for (kernel, D), gg in g.groupby(["kernel", "D"]):
            ax.scatter(gg["theo_occupancy"], gg["rel_latency"], s=14, alpha=0.7, label=f"{kernel} D={D}")
        ax.set(yscale="log", xlabel="theoretical occupancy", ylabel="latency / best latency", title=f"N={N}")
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(label, fontsize=9)
    plt.tight_layout()
    plt.show()
    return fig


def plot_gain(gain, label: str):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for (kernel, D), g in gain.groupby(["kernel", "D"]):
        g = g.sort_values("N")
        ax.plot(g["N"], g["gain"], "o-",
                label=f"{kernel} D={D} ({g['default_tiles'].iloc[0]} → {g['tuned_tiles'].iloc[0]})")
    ax.axhline(1, color="grey", lw=0.8)
    ax.set(xscale="log", xlabel="N", ylabel="default time / tuned time", title=f"tuned vs seed tiles — {label}")
    ax.legend(fontsize=7)
    plt.show()
    return fig


def scan_arch(mode, notebook: str = "05_occupancy_scan") -> str:
    """The architecture the scan is built for: the device's when live; in replay the recorded scan's
    (sm_90 when nothing is recorded)."""
    from .occupancy import device_arch
    from .results import has_table, load_table

    if mode.live:
        return device_arch()
    if has_table(notebook, "configs", mode.gpu):
        return str(load_table(notebook, "configs", mode.gpu)["arch"].dropna().iloc[0])
    return "sm_90"


def store_best(mode, profile: str, best_df) -> str:
    """Live with the full profile: write the scan's optimum to ``data/tuned/<gpu>.json`` (the tiles the
    launchers read). Other profiles and replay write nothing. Returns what was done, in a line."""
    from .results import CANONICAL_PROFILE

    if not mode.live:
        return f"replay: data/tuned/{mode.gpu}.json as recorded (nothing written)"
    if profile != CANONICAL_PROFILE:
        return f"profile {profile!r}: not writing data/tuned/{mode.gpu}.json (only the full profile does)"
    return f"wrote {write_from_scan(mode.gpu, best_df, commit=git_commit()[0])}"


def file_matches_scan(mode, profile: str) -> bool:
    """Whether ``data/tuned/<gpu>.json`` should hold this scan's optimum: in replay (the recorded scan
    wrote it) and after a live full-profile run (:func:`store_best` just wrote it)."""
    from .results import CANONICAL_PROFILE

    return (not mode.live) or profile == CANONICAL_PROFILE


def driver_agreement(occ_check, static=None, ran=None):
    """Calculator against driver on every scanned configuration, at recording time and re-checked with
    the current calculator; beside it, the static build's registers (nvcc here) against the live ones
    (NVRTC of the recording machine). Returns (summary table, % agreeing then, % now, rows that
    disagree now, a sentence on the registers or '')."""
    from .occupancy import recheck_recorded

    rechecked = recheck_recorded(occ_check)
    then = 100 * float(occ_check["agree"].astype(bool).mean())
    now = 100 * float(rechecked["agree_now"].mean())
    table = occ_check.groupby(["arch", "kernel", "limiter"]).agg(
        configs=("agree", "size"), agree=("agree", "sum"), blocks_min=("driver_blocks", "min"),
        blocks_max=("driver_blocks", "max"))
    regs = ""
    if static is not None and ran is not None:
        key = ["kernel", "D", "tile_rows", "tile_kv"]
        cmp = static[key + ["regs"]].merge(ran[key + ["regs"]], on=key, suffixes=("_static", "_live"))
        if len(cmp):
            diff = cmp["regs_live"] - cmp["regs_static"]
            regs = (f"registers, live minus static build: min {diff.min()}, max {diff.max()}, identical in "
                    f"{int((diff == 0).sum())}/{len(diff)} configurations")
    return table, then, now, rechecked[~rechecked["agree_now"]], regs


def describe_best(best) -> tuple:
    """The scan's best tiles beside the seed's: (comparison table, the 'TILE_KV shrinks' verdict table,
    its summary, a sentence on both of the seed's findings generated from ``best``)."""
    import pandas as pd

    seed = pd.DataFrame([{"D": d, "seed_tile_rows": r, "seed_tile_kv": kv} for d, (r, kv) in SEED_DEFAULTS.items()])
    table, shrink = verdict_tile_kv_shrinks(best)
    rows8 = best["tile_rows"].eq(8)
    text = (f"**{shrink['text']}.** The seed's other finding, TILE_ROWS = 8 everywhere: best TILE_ROWS here is 8 in "
            f"{int(rows8.sum())}/{len(best)} (kernel, D) cases "
            f"({', '.join(f'{r.kernel} D={r.D}: {r.tile_rows}' for r in best.itertuples())}).")
    return best.merge(seed, on="D", how="left"), table, shrink, text


def tuned_file_check(mode, profile: str, best_df):
    """The tuned-tile store against the scan's optimum (when it should hold it: :func:`file_matches_scan`)
    and what the launchers resolve now. Returns (the store as a table, rows that differ or None when
    not compared, one line per resolved (kernel, D))."""
    from .attention import resolve_tiles
    from .tuned import as_table

    stored = as_table(mode.gpu)
    differ = None
    if len(stored) and file_matches_scan(mode, profile):
        merged = best_df.merge(stored, on=["kernel", "D"], suffixes=("_scan", "_file"), how="left")
        same = (merged["tile_rows_scan"] == merged["tile_rows_file"]) & (merged["tile_kv_scan"] == merged["tile_kv_file"])
        differ = merged[~same]
    lines = [f"resolve_tiles({r.kernel!r}, D={r.D}, gpu={mode.gpu!r}) -> {resolve_tiles(r.kernel, r.D, gpu=mode.gpu)}"
             for r in best_df.itertuples()]
    return stored, differ, lines
