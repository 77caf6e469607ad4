"""Nsight Compute (``ncu``) from Python: build the command line, parse ``--csv --page raw`` output
into a tidy table, normalise units.

The raw page in CSV form is *wide*: a header row (``"ID","Process ID",...,"Kernel Name",...``
then one column per metric), a second row holding each column's unit (empty under the
non-metric columns), then one row per profiled kernel launch. Lines ncu prints for itself start
with ``==PROF==`` / ``==WARNING==`` / ``==ERROR==`` and are skipped. Numbers may carry thousands
separators (``"1,234,567"``).

The tidy table has one row per (launch, metric): ``launch_id, kernel_name, function,
template_args, block_size, grid_size, metric, unit, value`` with units normalised to
``byte`` (from Kbyte/Mbyte/..., SI prefixes as ncu prints them), ``ns`` (from usecond/msecond/...),
``%`` and plain counts (``""``, inst, sector, warp, cycle ...).

``scripts/ncu_profile.py`` drives a whole profiling run; notebooks read its recorded table.
Notebook 06 reads ``06_roofline__ncu`` (:data:`METRICS`, :func:`counters_wide`; its plan is the study's,
:func:`attnlab.roofline.ncu_plan`);
the flash notebooks 08-10 read ``<notebook>__ncu`` (:func:`flash_metrics`: tensor and FMA pipes,
issue slots, occupancy, shared-memory bank conflicts, stall reasons) through
:func:`flash_counters`, which runs the script when asked and returns :func:`flash_summary`.
"""
from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterable, Sequence

#: The counters notebook 06 uses (DESIGN.md "Roofline").
METRICS: tuple[str, ...] = (
    "dram__bytes.sum",
    "lts__t_bytes.sum",
    "lts__t_sector_hit_rate.pct",
    # the L2 lookups themselves (issue 10): hits and misses of the same sectors, and the sectors
    # that reached this L2 slice over the fabric between the two L2 partitions
    "lts__t_sectors.sum",
    "lts__t_sectors_lookup_hit.sum",
    "lts__t_sectors_lookup_miss.sum",
    "lts__t_sectors_srcunit_ltcfabric.sum",
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "sm__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "sm__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    # the same, counted per SASS instruction (what the source view attributes to the kernel's own
    # loads and stores), beside the L1TEX pipe's totals above (issue 16: the two can differ)
    "smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "gpu__time_duration.sum",
)

#: Non-metric columns of the raw page (those present are kept as launch attributes).
INFO_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
                "Block Size", "Grid Size", "Device", "CC")

TIDY_COLUMNS = ["launch_id", "kernel_name", "function", "template_args", "block_size", "grid_size",
                "metric", "unit", "value"]


class NcuUnavailable(RuntimeError):
    """ncu is missing or could not read the performance counters; the message says why."""


# ------------------------------------------------------------------------------ finding ncu

def ncu_path() -> str | None:
    """The ncu executable: PATH, then $CUDA_HOME/bin, /usr/local/cuda/bin, /opt/nvidia/nsight-compute."""
    found = shutil.which("ncu")
    if found:
        return found
    candidates = []
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            candidates.append(Path(home) / "bin" / "ncu")
    candidates += sorted(Path("/opt/nvidia/nsight-compute").glob("*/ncu"), reverse=True)
    candidates += sorted(Path("/usr/local").glob("cuda*/bin/ncu"), reverse=True)
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return None


def ncu_version(ncu: str | None = None) -> str | None:
    ncu = ncu or ncu_path()
    if not ncu:
        return None
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"Version\s+([\w.\-() ]+)", out.stdout + out.stderr)
    return m.group(1).strip() if m else (out.stdout.strip().splitlines() or [None])[-1]


# ---------------------------------------------------------------------------- command line

def build_command(target: Sequence[str], *, metrics: Iterable[str] = METRICS, kernel_regex: str | None = None,
                  launch_count: int | None = None, launch_skip: int | None = None,
                  profile_from_start: bool = True, log_file: str | Path | None = None,
                  ncu: str | None = None, base_units: bool = True, extra: Sequence[str] = ()) -> list[str]:
    """The ncu command line (a list for ``subprocess``).

    * ``--clock-control none``: keep the GPU's own boost clocks, so counters and the latencies
      measured without ncu describe the same machine state (ncu otherwise locks base clocks);
    * ``--csv --page raw``: one wide row per launch with exactly the requested metrics;
    * ``--print-units base``: bytes and nanoseconds instead of auto-scaled Kbyte/usecond;
    * ``--profile-from-start off`` when the target brackets the launches of interest with
      ``cudaProfilerStart/Stop``; ``--kernel-name regex:...`` / ``--launch-count`` otherwise.
    """
    metrics = list(metrics)
    if not metrics:
        raise ValueError("build_command: no metrics")
    for m in metrics:
        if not re.fullmatch(r"[A-Za-z0-9_.]+", m):
            raise ValueError(f"bad metric name {m!r}")
    if launch_count is not None and launch_count < 1:
        raise ValueError("launch_count must be >= 1")
    if not target:
        raise ValueError("build_command: empty target command")
    cmd = [ncu or ncu_path() or "ncu", "--clock-control", "none", "--csv", "--page", "raw",
           "--metrics", ",".join(metrics)]
    if base_units:
        cmd += ["--print-units", "base"]
    if kernel_regex:
        cmd += ["--kernel-name", f"regex:{kernel_regex}"]
    if launch_skip:
        cmd += ["--launch-skip", str(int(launch_skip))]
    if launch_count is not None:
        cmd += ["--launch-count", str(int(launch_count))]
    if not profile_from_start:
        cmd += ["--profile-from-start", "off"]
    if log_file is not None:
        cmd += ["--log-file", str(log_file)]
    cmd += list(extra)
    return cmd + list(target)


# ---------------------------------------------------------------------------------- parsing

_BYTE_UNITS = {"byte": 1, "bytes": 1, "b": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
               "kibyte": 2**10, "mibyte": 2**20, "gibyte": 2**30}
_TIME_UNITS = {"nsecond": 1, "ns": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
               "second": 1e9, "s": 1e9}
_COUNT_PREFIX = {"k": 1e3, "m": 1e6, "g": 1e9}


def parse_number(text: str) -> float | None:
    """'1,234.5' -> 1234.5; 'n/a', '' -> None."""
    s = (text or "").strip().replace('"', "")
    if not s or s.lower() in ("n/a", "nan", "-"):
        return None
    if re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d*)?([eE][-+]?\d+)?", s):
        s = s.replace(",", "")
    try:
        return float(s)
    except ValueError:
        return None


def normalize_unit(value: float | None, unit: str) -> tuple[float | None, str]:
    """Scale ``value`` to base units: bytes ('byte'), nanoseconds ('ns'), '%', counts ('')."""
    u = (unit or "").strip()
    ul = u.lower()
    if value is None:
        return None, _canonical_unit(ul)
    if ul in _BYTE_UNITS:
        return value * _BYTE_UNITS[ul], "byte"
    if ul in _TIME_UNITS:
        return value * _TIME_UNITS[ul], "ns"
    if ul in ("%", "pct", "percent"):
        return value, "%"
    if ul.endswith("byte/second") or ul.endswith("byte/s"):
        prefix = ul[: -len("byte/second")] if ul.endswith("byte/second") else ul[: -len("byte/s")]
        return value * _BYTE_UNITS.get(prefix + "byte", 1), "byte/s"
    # counts, possibly auto-scaled ('Kinst', 'Msector', 'Gwarp', ...)
    m = re.fullmatch(r"([kmg])(inst|sector|sectors|warp|warps|cycle|cycles|request|requests|thread|threads)", ul)
    if m:
        return value * _COUNT_PREFIX[m.group(1)], ""
    return value, "" if ul in ("", "inst", "sector", "sectors", "warp", "warps", "cycle", "cycles",
                                "request", "requests", "thread", "threads", "block", "blocks") else u


def _canonical_unit(ul: str) -> str:
    if ul in _BYTE_UNITS:
        return "byte"
    if ul in _TIME_UNITS:
        return "ns"
    return "%" if ul in ("%", "pct", "percent") else ""


_NAME = re.compile(r"^(?:void\s+)?(?P<func>[A-Za-z_][\w:]*)\s*(?:<(?P<targs>.*)>)?\s*(?:\((?P<params>.*)\))?\s*$")


def demangle_kernel(name: str) -> tuple[str, tuple[str, ...]]:
    """'void attn_tiled<64, 8, 16>(const float *, ...)' -> ('attn_tiled', ('64', '8', '16')).

    Names ncu could not demangle (or with nested templates it cannot split) come back whole with
    no template arguments."""
    n = (name or "").strip()
    m = _NAME.match(n)
    if not m:
        return n, ()
    targs = m.group("targs")
    if not targs:
        return m.group("func"), ()
    parts, depth, cur = [], 0, ""
    for ch in targs:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    return m.group("func"), tuple(p for p in parts if p)


def _csv_lines(text: str) -> list[str]:
    """Keep the CSV part of ncu output: drop ==PROF==/==WARNING== lines and anything before the
    header (a target program's own prints when no --log-file was used)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith('"ID"'):
            return [l for l in lines[i:] if l.strip() and not l.startswith("==")]
    return []


def parse_raw_csv(text: str):
    """Tidy DataFrame (:data:`TIDY_COLUMNS`) from ``ncu --csv --page raw`` output.

    Raises :class:`NcuUnavailable` with ncu's own error lines when the text holds no CSV table.
    """
    import pandas as pd

    lines = _csv_lines(text)
    if not lines:
        raise NcuUnavailable("no CSV table in ncu output: " + (diagnose(text) or "empty output"))
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header = rows[0]
    body = rows[1:]
    units = [""] * len(header)
    col = {h: i for i, h in enumerate(header)}
    metric_cols = [i for i, h in enumerate(header) if h not in INFO_COLUMNS and "__" in h]
    # the units row: its ID cell is empty (launch rows carry an integer ID) and no metric cell
    # holds a number
    if body and body[0] and body[0][0].strip() == "" and not any(
            i < len(body[0]) and parse_number(body[0][i]) is not None for i in metric_cols):
        units = body[0] + [""] * (len(header) - len(body[0]))
        body = body[1:]
    out = []
    for r in body:
        if not r or not r[0].strip():
            continue
        r = r + [""] * (len(header) - len(r))
        name = r[col["Kernel Name"]] if "Kernel Name" in col else ""
        func, targs = demangle_kernel(name)
        base = {"launch_id": int(parse_number(r[col["ID"]]) or 0), "kernel_name": name, "function": func,
                "template_args": ",".join(targs),
                "block_size": r[col["Block Size"]] if "Block Size" in col else "",
                "grid_size": r[col["Grid Size"]] if "Grid Size" in col else ""}
        for i in metric_cols:
            value, unit = normalize_unit(parse_number(r[i]), units[i])
            out.append({**base, "metric": header[i], "unit": unit, "value": value})
    return pd.DataFrame(out, columns=TIDY_COLUMNS)


def wide(tidy, index: Sequence[str] = ("launch_id", "kernel_name", "function", "template_args")):
    """One row per launch (or per ``index`` group), one column per metric."""
    index = [c for c in index if c in tidy.columns]
    # groupby(...).first() keeps NaN readings as NaN without building a cartesian product
    w = tidy.groupby([*index, "metric"], sort=False, dropna=False)["value"].first().unstack("metric")
    w.columns.name = None
    return w.reset_index()


def aggregate_launches(tidy, duration_metric: str = "gpu__time_duration.sum"):
    """Combine several launches (e.g. the kernels one torch SDPA call issues) into one set of
    metrics: ``.sum`` counters and durations add; percentages, ``.avg``/``.pct`` values and
    ``.ratio`` metrics (e.g. stall reasons per issued instruction) are averaged weighted by each
    launch's duration; ``launch__*`` attributes (registers, shared memory, grid) are the longest
    launch's. Returns a tidy frame without launch columns (metric, unit, value, n_kernels,
    kernel_names)."""
    import pandas as pd

    if tidy.empty:
        return pd.DataFrame(columns=["metric", "unit", "value", "n_kernels", "kernel_names"])
    dur = tidy[tidy["metric"] == duration_metric].set_index("launch_id")["value"]
    names = " | ".join(dict.fromkeys(tidy.sort_values("launch_id")["kernel_name"]))
    n = int(tidy["launch_id"].nunique())
    rows = []
    for metric, g in tidy.groupby("metric", sort=False):
        unit = g["unit"].iloc[0]
        vals = g.set_index("launch_id")["value"].astype(float)
        if metric.startswith("launch__") and len(vals) > 1:
            # launch geometry (registers, shared memory, grid) does not add up: the main kernel's
            main = dur.reindex(vals.index).astype(float)
            value = float(vals.loc[main.idxmax()]) if main.notna().any() else float(vals.iloc[0])
        elif (unit == "%" or metric.endswith(".pct") or metric.endswith(".ratio") or ".avg" in metric
                or "pct_of" in metric):
            # weighted over the launches that reported a value (n/a stays missing, never 0)
            w = dur.reindex(vals.index).astype(float)
            ok = vals.notna()
            if ok.any() and w[ok].notna().all() and w[ok].sum() > 0:
                value = float((vals[ok] * w[ok]).sum() / w[ok].sum())
            else:
                value = float(vals.mean())
        else:
            value = float(vals.sum(min_count=1))
        rows.append({"metric": metric, "unit": unit, "value": value, "n_kernels": n, "kernel_names": names})
    return pd.DataFrame(rows)


def split_by_marker(tidy, marker_function: str) -> list[list[int]]:
    """Launch IDs grouped by marker launches: the worker launches a tiny marker kernel after each
    measured call, so group i holds the kernels of call i (markers themselves dropped)."""
    ids = tidy.drop_duplicates("launch_id").sort_values("launch_id")[["launch_id", "function"]]
    groups, cur = [], []
    for lid, func in ids.itertuples(index=False):
        if func == marker_function:
            groups.append(cur)
            cur = []
        else:
            cur.append(int(lid))
    if cur:
        groups.append(cur)
    return groups


# ------------------------------------------------------------------------------- diagnostics

_PERM = ("ERR_NVGPUCTRPERM", "permission to access NVIDIA GPU Performance Counters")


def diagnose(output: str, returncode: int | None = None) -> str | None:
    """Why ncu gave no counters, in one line, or None when nothing looks wrong."""
    text = output or ""
    if any(p in text for p in _PERM):
        return ("the GPU's performance counters are restricted to admin users (ERR_NVGPUCTRPERM); "
                "see https://developer.nvidia.com/ERR_NVGPUCTRPERM")
    errs = [l.strip() for l in text.splitlines() if l.startswith("==ERROR==")]
    if errs:
        return "; ".join(errs[:3])
    if "No kernels were profiled" in text:
        return "ncu profiled no kernels (filters matched nothing, or profiling windows were empty)"
    if returncode not in (None, 0):
        return f"ncu exited with status {returncode}"
    return None


# ------------------------------------------------------------------ profiling plan and result

#: the marker kernel launched (in its own profiling window) after each measured call
MARKER_SOURCE = "bench/01_fma_peak.cu"
MARKER_FUNCTION = "fma_peak_config"
SDPA_LABEL = "torch_sdpa"
LABEL_COLUMNS = ["kernel", "B", "H", "N", "D", "tile_rows", "tile_kv", "purpose"]


def assemble(tidy, manifest: Sequence[dict], marker_function: str = MARKER_FUNCTION,
             label_columns: Sequence[str] = LABEL_COLUMNS):
    """Join parsed ncu output with the worker's manifest (the entries it launched, in order).

    Launch groups are split at the marker kernels; group i belongs to the i-th launched entry.
    Raises ValueError when the counts disagree (then no row can be trusted to its label).
    Returns the long table: ``label_columns`` (notebook 06's LABEL_COLUMNS by default, the flash
    notebooks' FLASH_LABEL_COLUMNS) + ncu_kernels, n_kernels, metric, unit, value.
    """
    import pandas as pd

    label_columns = list(label_columns)

    launched = [e for e in manifest if e.get("status") == "launched"]
    groups = split_by_marker(tidy, marker_function)
    # a trailing empty group appears when the last marker closes the run
    while groups and not groups[-1] and len(groups) > len(launched):
        groups.pop()
    if len(groups) != len(launched):
        raise ValueError(f"ncu captured {len(groups)} call(s) between markers but the worker launched "
                         f"{len(launched)}: cannot tell which counters belong to which kernel")
    frames = []
    for entry, ids in zip(launched, groups):
        if not ids:
            raise ValueError(f"no kernel captured for {entry}")
        agg = aggregate_launches(tidy[tidy["launch_id"].isin(ids)])
        for c in label_columns:
            agg[c] = entry.get(c)
        frames.append(agg.rename(columns={"kernel_names": "ncu_kernels"}))
    out = pd.concat(frames, ignore_index=True)
    return out[label_columns + ["ncu_kernels", "n_kernels", "metric", "unit", "value"]]


def counters_wide(long_table):
    """One row per profiled call (LABEL_COLUMNS), one column per metric: the form
    ``attnlab.roofline.measured_vs_modelled`` takes."""
    idx = [c for c in LABEL_COLUMNS + ["ncu_kernels", "n_kernels"] if c in long_table.columns]
    t = long_table.copy()
    for c in idx:
        t[c] = t[c].fillna(-1) if c in ("tile_rows", "tile_kv") else t[c]
    w = t.groupby([*idx, "metric"], sort=False)["value"].first().unstack("metric")
    w.columns.name = None
    w = w.reset_index()
    for c in ("tile_rows", "tile_kv"):
        if c in w:
            w[c] = w[c].where(w[c] >= 0)
    return w


# ------------------------------------------------------- flash notebooks (08, 09, 10): counters

#: Warp stall reasons read as ``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio``
#: (Nsight Compute's WarpStateStats section: warps stalled for that reason per issued
#: instruction). ``selected`` (the warp that issued) is not a stall and is left out.
STALL_REASONS: tuple[str, ...] = (
    "barrier", "long_scoreboard", "short_scoreboard", "mio_throttle", "math_pipe_throttle", "wait",
    "not_selected", "dispatch_stall", "lg_throttle", "tex_throttle", "no_instruction", "branch_resolving",
    "membar", "drain", "sleeping", "misc", "imc_miss")
#: Hopper only (sm_90: warps waiting on wgmma); other GPUs reject the name, so it is asked for on 9.x.
HOPPER_STALL_REASONS: tuple[str, ...] = ("gmma",)


def stall_metric(reason: str) -> str:
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


#: What each flash-summary column reads (first metric that has a value wins).
TENSOR_PIPE = ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",      # every tensor op
               "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active")  # mma.sync f16/bf16/tf32
HMMA_INST = "sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active"
FMA_PIPE = "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"
ISSUE = "sm__inst_issued.avg.pct_of_peak_sustained_active"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
DURATION = "gpu__time_duration.sum"
#: the shared-memory data pipe: wavefronts of every LSU shared access (LDS, STS, ldmatrix), % of
#: its peak (one wavefront per cycle per SM) over the elapsed cycles
SMEM_PIPE = "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed"
#: shared memory: (bank conflicts, wavefronts) per access kind. ld/st are the L1 hardware counters
#: of LDS/STS; ldsm is ldmatrix, counted by SASS instrumentation (the MemoryWorkloadAnalysis
#: tables' "Shared Load Matrix" row).
SMEM = {
    "ld": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
           "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"),
    "st": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
           "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"),
    "ldsm": ("smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum",
             "smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ldsm.sum"),
}

#: The counters the flash notebooks record (besides launch__* attributes ncu reports anyway).
FLASH_METRICS: tuple[str, ...] = (
    DURATION, *TENSOR_PIPE, HMMA_INST, FMA_PIPE, ISSUE, OCCUPANCY, SMEM_PIPE,
    *(m for pair in SMEM.values() for m in pair),
    *(stall_metric(r) for r in STALL_REASONS),
)
#: launch attributes kept in the flash tables (ncu's raw page carries ~250 columns; these explain
#: occupancy: registers, shared memory, waves, the theoretical occupancy)
FLASH_LAUNCH_METRICS: tuple[str, ...] = (
    "launch__registers_per_thread", "launch__shared_mem_per_block", "launch__block_size", "launch__grid_size",
    "launch__waves_per_multiprocessor", "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps", "sm__maximum_warps_per_active_cycle_pct")
#: one flash call's label: what the worker launched (``params``: the template parameters, as in
#: the notebooks' latency tables; ``library`` for SDPA), ``purpose`` 'kernel' or 'reference'
FLASH_LABEL_COLUMNS = ["kernel", "step", "dtype", "causal", "B", "H", "N", "D", "params", "purpose"]
FLASH_TABLE = "ncu"


def flash_metrics(compute_capability: str | int | None = None) -> tuple[str, ...]:
    """:data:`FLASH_METRICS`, plus the Hopper-only stall reasons on a 9.x device ('90', 90)."""
    cc = str(compute_capability or "")
    extra = tuple(stall_metric(r) for r in HOPPER_STALL_REASONS) if cc.startswith("9") else ()
    return FLASH_METRICS + extra


def unknown_metrics(output: str, metrics: Iterable[str]) -> list[str]:
    """The requested metrics ncu refused (``==ERROR== Failed to find metric regex:^name...``):
    a tool version or GPU without one of them profiles nothing, so the driver drops these and runs
    again. Matched on the metric's base name (before the first dot)."""
    lines = "\n".join(l for l in (output or "").splitlines() if "Failed to find metric" in l)
    if not lines:
        return []
    out = []
    for m in metrics:
        base = m.split(".")[0]
        if re.search(r"(?<![A-Za-z0-9_])" + re.escape(base) + r"(?![A-Za-z0-9_])", lines):
            out.append(m)
    return out


def keep_metrics(long_table, metrics: Iterable[str], extra: Iterable[str] = FLASH_LAUNCH_METRICS):
    """Rows of ``metrics`` and ``extra`` only (the raw page's device attributes and the
    .min/.max/.sum siblings ncu adds are dropped)."""
    wanted = set(metrics) | set(extra)
    return long_table[long_table["metric"].isin(wanted)].reset_index(drop=True)


def flash_wide(long_table):
    """One row per profiled call of a flash table (FLASH_LABEL_COLUMNS + ncu_kernels, n_kernels),
    one column per metric, in the order the calls were made. Works on the recorded CSV too
    (provenance columns are ignored; empty labels such as SDPA's step read back as '')."""
    import pandas as pd

    idx = [c for c in FLASH_LABEL_COLUMNS + ["ncu_kernels", "n_kernels"] if c in long_table.columns]
    t = long_table.copy()
    for c in idx:
        if not pd.api.types.is_numeric_dtype(t[c]) and not pd.api.types.is_bool_dtype(t[c]):
            t[c] = t[c].astype(object).where(t[c].notna(), "")
    t["_order"] = t.groupby(idx, sort=False, dropna=False).ngroup()
    w = t.groupby(["_order", *idx, "metric"], sort=True, dropna=False)["value"].first().unstack("metric")
    w.columns.name = None
    return w.reset_index().drop(columns="_order")


#: the flash summary's columns, in order
FLASH_SUMMARY_COLUMNS = [
    "kernel", "step", "dtype", "causal", "B", "H", "N", "D", "params", "n_kernels", "ncu_kernels",
    "duration_us", "tensor_pipe_pct", "hmma_inst_pct", "fma_pipe_pct", "issue_pct", "occupancy_pct",
    "smem_pipe_pct", "smem_ld_conflicts", "smem_ld_conflicts_per_wavefront", "smem_st_conflicts",
    "smem_st_conflicts_per_wavefront",
    "ldsm_conflicts", "ldsm_conflicts_per_wavefront", "stall_per_issue",
    "stall_1", "stall_1_share", "stall_2", "stall_2_share", "stall_3", "stall_3_share"]


def _short_kernel_names(joined) -> str:
    if not isinstance(joined, str) or not joined:
        return ""
    return " | ".join(demangle_kernel(n)[0].split("::")[-1] for n in joined.split(" | "))


def flash_summary(long_table):
    """One row per labelled call of a flash ncu table (:data:`FLASH_SUMMARY_COLUMNS`).

    * ``duration_us``: gpu__time_duration under ncu (clocks not locked);
    * ``tensor_pipe_pct``: tensor-pipe cycles active, % of peak over active SM cycles (every
      tensor op; mma.sync's HMMA cycles where the all-tensor metric is n/a); ``hmma_inst_pct``:
      HMMA instructions issued, % of the pipe's peak; ``fma_pipe_pct``: FMA-pipe cycles active;
      ``issue_pct``: issue slots busy; ``occupancy_pct``: achieved occupancy (warps active);
      ``smem_pipe_pct``: shared-memory wavefronts (LDS, STS, ldmatrix), % of one per SM cycle;
    * ``smem_{ld,st}_conflicts``: shared-memory bank conflicts of LDS/STS (L1 hardware
      counters), ``ldsm_conflicts`` of ldmatrix (SASS counters), each with ``_per_wavefront``:
      conflicts / wavefronts (0 = conflict-free; 0.5 = half the wavefronts are extra);
    * ``stall_per_issue``: the stall ratios summed (warp cycles spent stalled per issued
      instruction, over the reasons read); ``stall_k`` / ``stall_k_share``: the k-th largest
      reason and its share of that sum.

    A call whose torch SDPA issued several kernels is one row (``n_kernels`` > 1): counters
    (``.sum``) add, percentages and ratios are means weighted by each kernel's duration (what
    :func:`assemble` records). Counters a GPU or ncu version reports as n/a (or not at all) come
    out NaN, never 0.
    """
    import math

    import pandas as pd

    if long_table is None or len(long_table) == 0:
        return pd.DataFrame(columns=FLASH_SUMMARY_COLUMNS)
    w = flash_wide(long_table)

    def get(row, *names):
        for n in names:
            v = row.get(n)
            if v is not None and not (isinstance(v, float) and math.isnan(v)):
                return float(v)
        return float("nan")

    def per(a, b):
        if math.isnan(a):
            return float("nan")
        if a == 0:
            return 0.0
        return a / b if b and not math.isnan(b) else float("nan")

    stall_names = STALL_REASONS + HOPPER_STALL_REASONS
    rows = []
    for row in w.to_dict("records"):
        out = {c: row.get(c) for c in FLASH_LABEL_COLUMNS + ["n_kernels"] if c != "purpose"}
        out["ncu_kernels"] = _short_kernel_names(row.get("ncu_kernels"))
        out["duration_us"] = get(row, DURATION) / 1e3
        out["tensor_pipe_pct"] = get(row, *TENSOR_PIPE)
        out["hmma_inst_pct"] = get(row, HMMA_INST)
        out["fma_pipe_pct"] = get(row, FMA_PIPE)
        out["issue_pct"] = get(row, ISSUE)
        out["occupancy_pct"] = get(row, OCCUPANCY)
        out["smem_pipe_pct"] = get(row, SMEM_PIPE)
        for kind, (conf, wave) in SMEM.items():
            name = "ldsm" if kind == "ldsm" else f"smem_{kind}"
            c, wv = get(row, conf), get(row, wave)
            out[f"{name}_conflicts"] = c
            out[f"{name}_conflicts_per_wavefront"] = per(c, wv)
        stalls = {r: get(row, stall_metric(r)) for r in stall_names}
        stalls = {r: v for r, v in stalls.items() if not math.isnan(v)}
        total = sum(stalls.values())
        out["stall_per_issue"] = total if stalls else float("nan")
        top = sorted(stalls.items(), key=lambda kv: -kv[1])[:3]
        for k in range(3):
            if k < len(top) and total > 0:
                out[f"stall_{k + 1}"], out[f"stall_{k + 1}_share"] = top[k][0], top[k][1] / total
            else:
                out[f"stall_{k + 1}"], out[f"stall_{k + 1}_share"] = None, float("nan")
        rows.append(out)
    return pd.DataFrame(rows, columns=FLASH_SUMMARY_COLUMNS)


#: the notebook whose counters scripts/ncu_profile.py records by default (the seed ladder's plan)
SEED_NOTEBOOK = "06_roofline"


def flash_counters(notebook: str, mode, profile: str = "full", run: bool = False, timeout: int = 420, *,
                   summary: bool = True, echo: bool = True):
    """A flash notebook's Nsight Compute counters in one call: ``(table or None, note)``.

    When ``run`` is true and ``mode`` is live, ``scripts/ncu_profile.py --notebook <notebook>
    --profile <profile> --timeout <timeout>`` runs first (its output echoed when ``echo``); it
    writes ``data/results/<gpu>/[<profile>/]<notebook>__ncu.csv`` or says why it could not. Then
    the table is loaded: live mode reads this GPU's table of ``profile`` ('full' or 'quick'; other
    profiles read 'quick', as the script records only those two), replay reads the recorded
    'full' table of ``mode.gpu``. ``table`` is :func:`flash_summary` of it (the long table itself
    with ``summary=False``); ``None`` when nothing is recorded, and ``note`` then says why. The
    note always names where the figures come from (or what went wrong), so the notebook prints it.
    """
    import sys
    import time

    from .paths import REPO_ROOT
    from .results import describe_provenance, has_table, load_table, table_path

    prof = profile if profile in ("full", "quick") else "quick"
    said = ""
    if run and mode.live:
        # notebook 06's plan is the script's default; every other notebook is named
        cmd = [sys.executable, str(REPO_ROOT / "scripts" / "ncu_profile.py"),
               *(["--notebook", notebook] if notebook != SEED_NOTEBOOK else []),
               "--profile", prof, "--timeout", str(int(timeout))]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=int(timeout) + 120, cwd=REPO_ROOT)
            lines = [l for l in proc.stdout.splitlines() if l.startswith("[ncu_profile]")]
            if echo:   # the script's own status lines (its table dump is the notebook's to show)
                print("\n".join(lines[-20:]))
                if proc.returncode:
                    print(proc.stderr[-3000:])
            last = lines[-1].removeprefix("[ncu_profile]").strip() if lines else \
                ((proc.stderr.strip().splitlines() or ["no output"])[-1])
            said = (f" This run: scripts/ncu_profile.py exited with status {proc.returncode} after "
                    f"{time.perf_counter() - t0:.0f} s ({last}).")
        except subprocess.TimeoutExpired:
            said = f" This run: scripts/ncu_profile.py did not finish within {int(timeout) + 120} s."
    load_profile = prof if mode.live else "full"
    path = table_path(notebook, FLASH_TABLE, mode.gpu, load_profile)
    try:
        shown = path.relative_to(REPO_ROOT)
    except ValueError:
        shown = path
    if not has_table(notebook, FLASH_TABLE, mode.gpu, load_profile):
        return None, (f"Nsight Compute counters not available for '{mode.gpu}': {shown} is absent "
                      f"(record it on the GPU with `python scripts/ncu_profile.py"
                      f"{'' if notebook == SEED_NOTEBOOK else ' --notebook ' + notebook}"
                      f"{'' if load_profile == 'full' else ' --profile ' + load_profile}`, "
                      "which needs Nsight Compute and access to the performance counters)." + said)
    long = load_table(notebook, FLASH_TABLE, mode.gpu, load_profile)
    table = flash_summary(long) if summary else long
    calls = len(flash_wide(long))
    return table, (f"Nsight Compute counters of {calls} profiled calls ({shown}): {describe_provenance(long)}."
                   + said)
