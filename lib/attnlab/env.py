"""Live or replay, and where every measured figure came from.

* live: a CUDA device is usable, so kernels are compiled, checked and timed now;
* replay: no device, so the recorded results of a named GPU are loaded (default: the committed
  H200 run) while every CPU-side part (static build, NumPy models, maths, plots) runs for real.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass

from .paths import REPO_ROOT, RESULTS_DIR

MODES = ("auto", "live", "replay")
DEFAULT_REPLAY_GPU = "h200"


class MissingRecordedData(FileNotFoundError):
    """Replay was asked for figures that were never recorded."""


def gpu_slug(name: str) -> str:
    """'NVIDIA H200' -> 'h200'; 'NVIDIA GeForce GTX 1660 Ti' -> 'geforce-gtx-1660-ti'."""
    name = re.sub(r"^nvidia\s+", "", name.strip(), flags=re.IGNORECASE)
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not slug:
        raise ValueError(f"cannot make a folder name from GPU name {name!r}")
    return slug


@functools.lru_cache(maxsize=1)
def cuda_usable() -> bool:
    """True when CuPy can see a CUDA device and run a trivial operation on it."""
    try:
        import cupy as cp

        if not cp.cuda.is_available() or cp.cuda.runtime.getDeviceCount() < 1:
            return False
        (cp.arange(4, dtype=cp.float32) + 1).sum().item()
        return True
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device: all mean "not usable"
        return False


@functools.lru_cache(maxsize=1)
def device_name() -> str:
    import cupy as cp

    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def recorded_gpus() -> list[str]:
    if not RESULTS_DIR.is_dir():
        return []
    return sorted(p.name for p in RESULTS_DIR.iterdir() if p.is_dir() and any(p.glob("*.csv")))


def how_to_record(gpu: str) -> str:
    return (f"To record it, run the report live on a machine with that GPU "
            f"(`./lab report --profile full`), which writes data/results/{gpu}/; "
            f"recorded GPUs here: {', '.join(recorded_gpus()) or 'none'}.")


@dataclass(frozen=True)
class Mode:
    live: bool
    gpu: str          # results folder: the live device's slug, or the replayed GPU's
    gpu_name: str     # the device's own name in live mode; the slug in replay
    requested: str
    reason: str

    @property
    def name(self) -> str:
        return "live" if self.live else "replay"

    def __str__(self) -> str:
        return f"{self.name} ({self.gpu_name}): {self.reason}"


def resolve_mode(mode: str = "auto", gpu: str = DEFAULT_REPLAY_GPU) -> Mode:
    """Decide live or replay.

    ``mode='auto'`` is live when a CUDA device is usable, else replay of ``gpu``'s recorded
    results. ``'live'`` without a device and ``'replay'`` of a GPU with no recorded data raise.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not isinstance(gpu, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", gpu):
        raise ValueError(f"gpu must be a results folder name such as 'h200', got {gpu!r}")
    usable = cuda_usable() if mode != "replay" else False
    if mode == "live" and not usable:
        raise RuntimeError("mode='live' needs a usable CUDA device and CuPy; none was found "
                           "(use mode='auto' or 'replay' on this machine)")
    if usable:
        name = device_name()
        return Mode(True, gpu_slug(name), name, mode, "a CUDA device is usable: measuring now")
    if not (RESULTS_DIR / gpu).is_dir() or not any((RESULTS_DIR / gpu).glob("*.csv")):
        raise MissingRecordedData(f"no recorded results for GPU '{gpu}' in data/results/{gpu}/. "
                                  + how_to_record(gpu))
    why = "no usable CUDA device" if mode == "auto" else "replay requested"
    return Mode(False, gpu, gpu, mode, f"{why}: replaying the figures recorded on '{gpu}'")


# ---------------------------------------------------------------- provenance

def _run(cmd: list[str], cwd: str | os.PathLike | None = None) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20,
                              cwd=REPO_ROOT if cwd is None else cwd).stdout.strip()
    except Exception:  # noqa: BLE001
        return ""


#: The parts of the tree whose uncommitted state makes a measurement irreproducible from its commit.
CODE_DIRS = ("kernels", "lib", "notebooks")


def git_commit(repo: str | os.PathLike | None = None) -> tuple[str, bool]:
    """(commit, dirty) of ``repo`` (default: this repository).

    Dirty means a tracked file under kernels/, lib/ or notebooks/ differs from the commit, or an
    untracked file that git does not ignore lies there (a new kernel or module is code the commit
    does not hold, so it counts). ``ATTNLAB_GIT_COMMIT`` (and ``ATTNLAB_GIT_DIRTY=1``) override
    for copies of the tree without .git.
    """
    env = os.environ.get("ATTNLAB_GIT_COMMIT")
    if env:
        return env, os.environ.get("ATTNLAB_GIT_DIRTY", "0") == "1"
    commit = _run(["git", "rev-parse", "HEAD"], repo) or "unknown"
    dirty = bool(_run(["git", "status", "--porcelain", "--untracked-files=normal", "--", *CODE_DIRS], repo))
    return commit, dirty


def nvidia_smi_rows(fields: list[str] | tuple[str, ...]) -> list[dict[str, str]]:
    """One dict per GPU, in nvidia-smi's order (its index), of the ``--query-gpu`` fields ([] when
    nvidia-smi is absent, fails or prints something else)."""
    if not shutil.which("nvidia-smi"):
        return []
    out = _run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
    rows = [[v.strip() for v in line.split(",")] for line in out.splitlines() if line.strip()]
    if not rows or any(len(r) != len(fields) for r in rows):
        return []
    return [dict(zip(fields, r)) for r in rows]


#: What names a GPU to nvidia-smi: its index (PCI order), UUID and PCI bus id.
IDENTITY_FIELDS = ("index", "uuid", "pci.bus_id", "name")


def _pci_key(bus_id: str) -> tuple[int, ...] | None:
    """'00000000:3B:00.0' (nvidia-smi) and '0000:3b:00.0' (CUDA) -> (0, 0x3b, 0, 0)."""
    m = re.fullmatch(r"\s*([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)\s*", bus_id or "")
    return tuple(int(g, 16) for g in m.groups()) if m else None


def _cuda_pci_bus_id() -> str:
    """The PCI bus id of the device this process computes on, when CuPy is already in use here
    (live mode); '' otherwise (never imports CuPy or creates a context just to ask)."""
    cp = sys.modules.get("cupy")
    if cp is None:
        return ""
    try:
        return str(cp.cuda.Device().pci_bus_id)
    except Exception:  # noqa: BLE001 - no device, no context: unknown
        return ""


def _visible_row(identities: list[dict[str, str]]) -> int:
    """Which of nvidia-smi's GPUs this process uses (nvidia-smi ignores CUDA_VISIBLE_DEVICES and lists
    them all): the CUDA device's PCI bus id when CuPy runs here, else the first entry of
    CUDA_VISIBLE_DEVICES (a UUID or UUID prefix, or an index in PCI order), else the first GPU."""
    if not identities:
        return 0
    pci = _pci_key(_cuda_pci_bus_id())
    if pci is not None:
        for i, row in enumerate(identities):
            if _pci_key(row.get("pci.bus_id", "")) == pci:
                return i
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if first.startswith("GPU-"):
        hits = [i for i, row in enumerate(identities) if row.get("uuid", "").startswith(first)]
        if len(hits) == 1:
            return hits[0]
    elif first.isdigit():
        hits = [i for i, row in enumerate(identities) if row.get("index") == first]
        if hits:
            return hits[0]
    return 0


def visible_gpu() -> dict[str, str]:
    """index, uuid, pci.bus_id and name of the GPU this process uses, as nvidia-smi names it
    ({} without nvidia-smi). Two cards of one model differ in their UUID."""
    rows = nvidia_smi_rows(IDENTITY_FIELDS)
    return rows[_visible_row(rows)] if rows else {}


def nvidia_smi_query() -> dict[str, str]:
    """Driver version and clocks as nvidia-smi reports them now, of the GPU this process uses
    (:func:`visible_gpu`; the first GPU when that cannot be told) ({} when unreadable)."""
    fields = ["driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm", "temperature.gpu",
              "power.draw"]
    rows = nvidia_smi_rows(fields)
    if not rows:
        return {}
    which = _visible_row(nvidia_smi_rows(IDENTITY_FIELDS)) if len(rows) > 1 else 0
    return rows[which] if which < len(rows) else rows[0]


def host_name() -> str:
    return socket.gethostname()


@functools.lru_cache(maxsize=1)
def _static_provenance() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        import cupy as cp

        info["cupy_version"] = cp.__version__
        info["cuda_runtime"] = str(cp.cuda.runtime.runtimeGetVersion())
        info["cuda_driver_api"] = str(cp.cuda.runtime.driverGetVersion())
    except Exception:  # noqa: BLE001
        info.setdefault("cupy_version", "absent")
    try:
        import torch

        info["torch_version"] = torch.__version__
        info["torch_cuda"] = str(torch.version.cuda)
    except Exception:  # noqa: BLE001
        info["torch_version"] = "absent"
    return info


#: Provenance columns that say which card and which machine: tables recorded before they were
#: added lack them (read them with ``.get``).
IDENTITY_COLUMNS = ("gpu_uuid", "host")


def provenance(mode: Mode, repo: str | os.PathLike | None = None) -> dict[str, str]:
    """Columns stamped on every recorded row: which GPU, software, commit, clocks and when."""
    if not mode.live:
        raise ValueError("provenance is only taken in live mode: replay never records new figures")
    smi = nvidia_smi_query()
    commit, dirty = git_commit(repo)
    info = {
        "gpu_name": mode.gpu_name,
        "gpu": mode.gpu,
        # which card and machine: two GPUs of one model write the same folder, told apart here
        "gpu_uuid": visible_gpu().get("uuid", ""),
        "host": host_name(),
        "driver_version": smi.get("driver_version", "unknown"),
        "sm_clock_mhz": smi.get("clocks.sm", ""),
        "mem_clock_mhz": smi.get("clocks.mem", ""),
        "max_sm_clock_mhz": smi.get("clocks.max.sm", ""),
        "gpu_temp_c": smi.get("temperature.gpu", ""),
        **_static_provenance(),
        "git_commit": commit,
        "git_dirty": str(dirty),
        "timestamp_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "mode": "live",
    }
    return info
