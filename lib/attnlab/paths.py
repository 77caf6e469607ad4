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


# ---------------------------------------------------------------- compile caches across processes

#: The root of every on-disk cache the lab keeps (static builds, arch-specific cubins, the CPU model's
#: binaries, and, through :func:`use_persistent_caches`, CuPy's NVRTC cache and Triton's kernel and
#: autotuning caches). ``ATTNLAB_CACHE_DIR`` moves it, e.g. onto a disk that outlives a cloud box.
CACHE_ENV = "ATTNLAB_CACHE_DIR"


def cache_dir(*parts: str) -> Path:
    """``$ATTNLAB_CACHE_DIR/<parts>`` (default ``~/.cache/attnlab/<parts>``); not created here."""
    root = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "attnlab"
    return Path(root, *parts)


#: what :func:`use_persistent_caches` points at the lab's cache root (variable -> sub-folder or value)
PERSISTENT_CACHE_ENV = {
    "CUPY_CACHE_DIR": "cupy",           # CuPy's NVRTC cubins (RawModule / RawKernel)
    "TRITON_CACHE_DIR": "triton",       # Triton's compiled kernels (flash-linear-attention)
}
#: Triton keeps each autotuned kernel's winning config in its cache dir, so a later process reuses
#: it instead of timing every config again (the bulk of fla's first call at a new shape)
TRITON_AUTOTUNE_CACHE = ("TRITON_CACHE_AUTOTUNING", "1")


def use_persistent_caches() -> dict[str, str]:
    """Point CuPy's and Triton's compile caches (and Triton's autotuning cache) under the lab's cache
    root, so a second notebook, report or process compiles and autotunes nothing it has done before.
    A variable the user already set is left alone. Returns what this call set."""
    chosen = {}
    for var, sub in PERSISTENT_CACHE_ENV.items():
        if not os.environ.get(var):
            chosen[var] = str(cache_dir(sub))
    var, value = TRITON_AUTOTUNE_CACHE
    if var not in os.environ:
        chosen[var] = value
    os.environ.update(chosen)
    return chosen


def compile_cache_entries() -> int:
    """How many builds the compile caches hold now: CuPy's and the arch-specific NVRTC cubins, the
    static builds' reports, Triton's compiled kernels (a folder each). The report runner counts them
    before and after a notebook, so its index can say how much that run compiled (0: all cached)."""
    def files(folder: Path, pattern: str) -> int:
        return sum(1 for _ in folder.glob(pattern)) if folder.is_dir() else 0

    cupy = Path(os.environ.get("CUPY_CACHE_DIR") or Path.home() / ".cupy" / "kernel_cache")
    triton = Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")
    return (files(cupy, "*.cubin") + files(cache_dir("cubin"), "*.cubin") + files(cache_dir("static"), "*.json")
            + (sum(1 for p in triton.iterdir() if p.is_dir()) if triton.is_dir() else 0))
