"""D-adaptive tile defaults: the best (tile_rows, tile_kv) per (GPU, kernel, head dim).

Notebook 05 scans the tiles on a GPU (:mod:`attnlab.tile_scan`) and writes ``data/tuned/<gpu>.json``
through this store, which imports no kernel family or study; the launchers call
:func:`lookup` when the caller gives no tile and fall back to the seed's defaults
(:data:`attnlab.seed.SEED_TILES`) when nothing was tuned for that GPU, kernel and D.

File format (``schema`` 1)::

    {
      "schema": 1,
      "gpu": "h200",
      "entries": {
        "vec_padded": {
          "64": {"tile_rows": 8, "tile_kv": 16, "median_ms": 1.23, "N": 4096,
                 "date": "2026-11-29T08:00:00Z", "commit": "abc1234", "score": 1.0}
        }
      }
    }

``median_ms``/``N`` are the measurement the choice came from (the largest N scanned);
``score`` is the geometric mean, over the scanned N, of latency relative to the best tile at
that N (1.0 = best at every N). Writes are atomic (temporary file in the same folder, then
``os.replace``), so a crash never leaves a half-written file for the launchers to read.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

from . import paths

SCHEMA = 1


REQUIRED_FIELDS = ("tile_rows", "tile_kv", "median_ms", "N", "date", "commit")


class TunedFileError(ValueError):
    """``data/tuned/<gpu>.json`` is malformed; the message names the file and the entry."""


def tuned_path(gpu: str, tuned_dir: Path | None = None) -> Path:
    if not gpu or not isinstance(gpu, str) or "/" in gpu or gpu.startswith("."):
        raise ValueError(f"bad GPU slug {gpu!r}: expected something like 'h200'")
    return Path(tuned_dir or paths.TUNED_DIR) / f"{gpu}.json"


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def validate_entry(entry: Mapping[str, Any], where: str = "entry") -> None:
    missing = [f for f in REQUIRED_FIELDS if f not in entry]
    if missing:
        raise TunedFileError(f"{where}: missing field(s) {', '.join(missing)}")
    for f in ("tile_rows", "tile_kv", "N"):
        if not _positive_int(entry[f]):
            raise TunedFileError(f"{where}: {f} must be a positive integer, got {entry[f]!r}")
    ms = entry["median_ms"]
    if not isinstance(ms, (int, float)) or isinstance(ms, bool) or not math.isfinite(ms) or ms <= 0:
        raise TunedFileError(f"{where}: median_ms must be a positive finite number, got {ms!r}")
    for f in ("date", "commit"):
        if not isinstance(entry[f], str) or not entry[f]:
            raise TunedFileError(f"{where}: {f} must be a non-empty string, got {entry[f]!r}")


def validate(data: Mapping[str, Any], source: str = "tuned data") -> None:
    """Raise :class:`TunedFileError` unless ``data`` follows the schema above."""
    if not isinstance(data, Mapping):
        raise TunedFileError(f"{source}: top level must be an object, got {type(data).__name__}")
    if data.get("schema") != SCHEMA:
        raise TunedFileError(f"{source}: schema must be {SCHEMA}, got {data.get('schema')!r}")
    if not isinstance(data.get("gpu"), str) or not data["gpu"]:
        raise TunedFileError(f"{source}: 'gpu' must be a non-empty string")
    entries = data.get("entries")
    if not isinstance(entries, Mapping):
        raise TunedFileError(f"{source}: 'entries' must be an object of kernel -> D -> entry")
    for kernel, by_d in entries.items():
        if not isinstance(by_d, Mapping):
            raise TunedFileError(f"{source}: entries[{kernel!r}] must be an object of D -> entry")
        for d, entry in by_d.items():
            if not str(d).isdigit() or int(d) <= 0:
                raise TunedFileError(f"{source}: entries[{kernel!r}] has bad head dim key {d!r}")
            validate_entry(entry, f"{source}: entries[{kernel!r}][{d!r}]")


def empty(gpu: str) -> dict:
    return {"schema": SCHEMA, "gpu": gpu, "entries": {}}


_CACHE: dict[Path, tuple[tuple[int, int, int], dict]] = {}


def load(gpu: str, tuned_dir: Path | None = None) -> dict:
    """The tuned data of ``gpu`` (an empty structure when no file exists). Cached by mtime."""
    path = paths.readable(tuned_path(gpu, tuned_dir))
    try:
        st = path.stat()
    except FileNotFoundError:
        return empty(gpu)
    # save() replaces the file (new inode), so (inode, size, mtime) changes on every write
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    hit = _CACHE.get(path)
    if hit and hit[0] == stamp:
        return hit[1]
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise TunedFileError(f"{path}: not valid JSON ({exc}); delete it or re-run notebook 05 live") from None
    validate(data, str(path))
    if data["gpu"] != gpu:
        raise TunedFileError(f"{path}: file says gpu={data['gpu']!r}, expected {gpu!r}")
    _CACHE[path] = (stamp, data)
    return data


def save(data: Mapping[str, Any], tuned_dir: Path | None = None) -> Path:
    """Validate and write atomically; returns the path."""
    validate(data)
    path = paths.staged(tuned_path(data["gpu"], tuned_dir))   # the report runner's staging folder, if any
    paths.write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    _CACHE.pop(path, None)
    return path


def lookup(gpu: str, kernel: str, D: int, tuned_dir: Path | None = None) -> tuple[int, int] | None:
    """``(tile_rows, tile_kv)`` tuned for this GPU, kernel and head dim, or ``None``."""
    entry = load(gpu, tuned_dir)["entries"].get(kernel, {}).get(str(int(D)))
    return None if entry is None else (entry["tile_rows"], entry["tile_kv"])


def record(data: dict, kernel: str, D: int, tile_rows: int, tile_kv: int, median_ms: float, N: int,
           date: str, commit: str, **extra: Any) -> dict:
    """Put one entry into ``data`` (in memory; call :func:`save` after)."""
    entry = {"tile_rows": int(tile_rows), "tile_kv": int(tile_kv), "median_ms": float(median_ms),
             "N": int(N), "date": str(date), "commit": str(commit), **extra}
    validate_entry(entry, f"{kernel} D={D}")
    data.setdefault("entries", {}).setdefault(kernel, {})[str(int(D))] = entry
    return data


# ---------------------------------------------------------------------------------- from a scan

def as_table(gpu: str, tuned_dir: Path | None = None):
    """The tuned file as a DataFrame (kernel, D, tile_rows, tile_kv, median_ms, N, date, commit)."""
    import pandas as pd
    data = load(gpu, tuned_dir)
    rows = [{"kernel": k, "D": int(d), **e} for k, by_d in data["entries"].items() for d, e in by_d.items()]
    cols = ["kernel", "D", "tile_rows", "tile_kv", "median_ms", "N", "date", "commit"]
    return pd.DataFrame(rows, columns=cols + sorted({c for r in rows for c in r} - set(cols)))
