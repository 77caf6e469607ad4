"""Where things live in the repository (one place, so nothing hard-codes a path)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

#: The repository root. ``ATTNLAB_ROOT`` overrides it (e.g. for an installed copy).
REPO_ROOT = Path(os.environ.get("ATTNLAB_ROOT", Path(__file__).resolve().parents[2]))
KERNELS_DIR = REPO_ROOT / "kernels"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
DATA_DIR = REPO_ROOT / "data"
RESULTS_DIR = DATA_DIR / "results"
REFERENCE_DIR = DATA_DIR / "reference"
TUNED_DIR = DATA_DIR / "tuned"
REPORTS_DIR = REPO_ROOT / "reports"


def write_atomic(path: Path, data: str | bytes) -> Path:
    """Write ``data`` beside ``path`` and rename it into place: a reader or a crash sees the old file
    or the new one, never half of it. The one atomic writer of the lab (tables, tuned tiles, reports,
    caches); the file gets the ordinary mode (0o666 less the umask)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    blob = data.encode("utf-8") if isinstance(data, str) else data
    try:
        with open(tmp, "xb") as fh:
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


# ---------------------------------------------------------------- staging a live notebook's records

#: While the report runner executes a live notebook it points this at a folder inside data/: every
#: table and tuned-tile file the notebook (or a script it starts) records is written there, and the
#: runner moves the whole set into data/ only when the notebook passed. A notebook that fails
#: half-way leaves the recorded set as it was (its partial tables go beside its FAILED report).
STAGE_ENV = "ATTNLAB_STAGE_DIR"


def staged(path: Path) -> Path:
    """Where a write to ``path`` goes: under the staging folder when one is set and ``path`` is in data/."""
    stage = os.environ.get(STAGE_ENV)
    if not stage:
        return Path(path)
    try:
        rel = Path(path).resolve().relative_to(DATA_DIR.resolve())
    except ValueError:
        return Path(path)
    return Path(stage) / rel


def readable(path: Path) -> Path:
    """Where to read ``path`` from: the staged copy when this run has recorded one, else ``path``."""
    s = staged(path)
    return s if s != Path(path) and s.is_file() else Path(path)


def promote(stage: Path, into: Path | None = None) -> list[Path]:
    """Move every file recorded under ``stage`` to its place in data/ (``into``), each an atomic rename;
    returns the destinations. The staging folder is removed."""
    into = Path(into or DATA_DIR)
    moved = []
    for f in sorted(p for p in Path(stage).rglob("*") if p.is_file() and not p.name.endswith(".tmp")):
        dest = into / f.relative_to(stage)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(f, dest)
        moved.append(dest)
    import shutil

    shutil.rmtree(stage, ignore_errors=True)
    return moved
