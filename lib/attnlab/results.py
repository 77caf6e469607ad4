"""The results store: tidy CSV per notebook per GPU, with provenance on every row.

``data/results/<gpu>/<notebook>__<table>.csv`` holds the ``full``-profile run that the report
replays; other profiles (quick, custom) go to ``data/results/<gpu>/<profile>/`` so a quick test run
on a GPU never overwrites the recorded full run. Writes go to a temporary file in the same folder
and are renamed into place, so a crash leaves the previous table intact, never half a table.
SCHEMA.md in data/results documents the columns.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from .env import Mode, MissingRecordedData, how_to_record, provenance
from .paths import RESULTS_DIR, readable, staged, write_atomic

PROVENANCE_COLUMNS = ("gpu_name", "gpu", "driver_version", "sm_clock_mhz", "mem_clock_mhz",
                      "max_sm_clock_mhz", "gpu_temp_c", "cupy_version", "cuda_runtime",
                      "cuda_driver_api", "torch_version", "torch_cuda", "git_commit", "git_dirty",
                      "timestamp_utc", "mode", "gpu_uuid", "host")
CANONICAL_PROFILE = "full"
_NAME = re.compile(r"[0-9]{2}_[a-z0-9_]+")
_TABLE = re.compile(r"[a-z0-9_]+")


def table_path(notebook: str, table: str, gpu: str, profile: str = CANONICAL_PROFILE) -> Path:
    if not _NAME.fullmatch(notebook):
        raise ValueError(f"notebook name must look like '01_naive', got {notebook!r}")
    if not _TABLE.fullmatch(table):
        raise ValueError(f"table name must be lower_snake_case, got {table!r}")
    folder = RESULTS_DIR / gpu
    if profile != CANONICAL_PROFILE:
        if not _TABLE.fullmatch(profile):
            raise ValueError(f"profile name must be lower_snake_case, got {profile!r}")
        folder = folder / profile
    return folder / f"{notebook}__{table}.csv"


def write_csv_atomic(df: pd.DataFrame, path: Path) -> Path:
    return write_atomic(path, df.to_csv(index=False))


def save_table(df: pd.DataFrame, notebook: str, table: str, mode: Mode,
               profile: str = CANONICAL_PROFILE) -> Path:
    """Stamp provenance on every row and write the table atomically (live mode only)."""
    if not mode.live:
        raise ValueError("replay mode never writes results: the recorded figures stay as recorded")
    if df.empty:
        raise ValueError(f"refusing to record an empty table {notebook}/{table}")
    clash = [c for c in PROVENANCE_COLUMNS if c in df.columns]
    if clash:
        raise ValueError(f"measurement columns clash with provenance columns: {clash}")
    stamped = df.copy()
    for key, value in provenance(mode).items():
        stamped[key] = value
    stamped["profile"] = profile
    # under the report runner, into its staging folder (data/ gets the set when the notebook passes)
    return write_csv_atomic(stamped, staged(table_path(notebook, table, mode.gpu, profile)))


def load_table(notebook: str, table: str, gpu: str, profile: str = CANONICAL_PROFILE) -> pd.DataFrame:
    """Load a recorded table; raise :class:`MissingRecordedData` saying how to record it."""
    path = readable(table_path(notebook, table, gpu, profile))
    if not path.is_file():
        raise MissingRecordedData(f"no recorded table '{table}' of notebook {notebook} for GPU '{gpu}' "
                                  f"({path.relative_to(RESULTS_DIR.parent.parent)}). " + how_to_record(gpu))
    return pd.read_csv(path)


def has_table(notebook: str, table: str, gpu: str, profile: str = CANONICAL_PROFILE) -> bool:
    return readable(table_path(notebook, table, gpu, profile)).is_file()


def describe_provenance(df: pd.DataFrame) -> str:
    """One line naming where a recorded table's figures come from."""
    if df.empty or "gpu_name" not in df.columns:
        return "no provenance recorded"
    first = df.iloc[0]
    commits = sorted(set(str(c)[:10] for c in df["git_commit"]))
    stamps = sorted(df["timestamp_utc"].astype(str))
    return (f"{first['gpu_name']} · driver {first['driver_version']} · CUDA runtime {first['cuda_runtime']} · "
            f"CuPy {first['cupy_version']} · torch {first['torch_version']} · commit {', '.join(commits)}"
            f"{' (dirty)' if str(first['git_dirty']) == 'True' else ''} · recorded {stamps[0]}"
            f"{' … ' + stamps[-1] if stamps[-1] != stamps[0] else ''} · profile {first.get('profile', '?')}")


def describe_recorded_gpu(gpu: str) -> str:
    """One line on everything recorded for ``gpu``: device, commits and time span of its tables."""
    folder = RESULTS_DIR / gpu
    firsts = [pd.read_csv(p, nrows=1) for p in sorted(folder.glob("*.csv"))]
    firsts = [f for f in firsts if "gpu_name" in f.columns]
    if not firsts:
        return f"no recorded tables in data/results/{gpu}/"
    df = pd.concat(firsts, ignore_index=True)
    commits = sorted(set(str(c)[:10] for c in df["git_commit"]))
    stamps = sorted(df["timestamp_utc"].astype(str))
    return (f"{df['gpu_name'].iloc[0]} · driver {df['driver_version'].iloc[0]} · {len(firsts)} tables "
            f"recorded {stamps[0]} … {stamps[-1]} · commits {', '.join(commits)}")


def select_requested(df: pd.DataFrame, **wanted) -> tuple[pd.DataFrame, list[dict]]:
    """Rows of a recorded table at the requested grid points (``N=[...]``, ``D=[...]``), and the
    requested points that were never recorded (for replay: say so instead of silently showing
    another grid)."""
    import itertools

    keys = [k for k, v in wanted.items() if v is not None]
    mask = pd.Series(True, index=df.index)
    for k in keys:
        mask &= df[k].isin(list(wanted[k]))
    have = set(map(tuple, df.loc[mask, keys].drop_duplicates().itertuples(index=False))) if keys else set()
    missing = [dict(zip(keys, combo)) for combo in itertools.product(*(list(wanted[k]) for k in keys))
               if tuple(combo) not in have]
    return df[mask], missing
