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
