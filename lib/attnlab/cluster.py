"""Many GPUs: jobs spread over one host's GPUs, or over the GPUs of a Ray cluster.

This module knows nothing of notebooks; :mod:`attnlab.report` makes one job per notebook and writes
what each job leaves behind. Two ways to run jobs:

* **one host** — :func:`run_on_slots`: one worker per GPU, each running one job at a time (a job
  never shares its GPU), taking from one queue the ready job with the longest remaining critical
  path (longest-first by the last recorded durations, jobs that others wait for first). A job is
  *ready* when the jobs it must follow (``Job.after``) have finished. The caller's thread hands
  every finished job to ``on_done``, so whatever it writes (the report index) has a single writer.
  :func:`run_pinned` starts a job's process with ``CUDA_VISIBLE_DEVICES`` set to its one GPU.
* **a Ray cluster** — :func:`run_on_ray`: each job is a Ray task with ``num_gpus=1`` (Ray pins it to
  one GPU through ``CUDA_VISIBLE_DEVICES``) running :func:`tree_task` on some node: the caller's code
  and its current ``data/`` travel with the task, a command runs in that private copy, and the task
  returns the files it produced and the data files it wrote, as bytes. Nothing is written on the
  caller's side until a task has returned whole; a worker that dies is retried (``max_retries``)
  and then reported as failed, while the other jobs go on. Ray is imported lazily (optional extra
  ``ray``).
"""

from __future__ import annotations

import hashlib
import io
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from . import env as _env
from .paths import write_atomic

# ---------------------------------------------------------------- GPUs of this host


@dataclass(frozen=True)
class Gpu:
    """One GPU a job can be pinned to: ``index`` as CUDA_VISIBLE_DEVICES takes it (nvidia-smi's
    index, PCI order), its UUID and name as nvidia-smi reports them."""

    index: str
    uuid: str = ""
    name: str = ""

    def __str__(self) -> str:
        return f"GPU {self.index}" + (f" ({self.name})" if self.name else "")


class GpuSelectionError(ValueError):
    """A --gpus selection that names no GPU of this host."""


def parse_gpu_selection(values: Sequence[str] | None) -> list[str] | None:
    """``['all']`` -> None (every GPU); ``['0', '1']``, ``['0,1']`` -> ['0', '1'] (order kept,
    duplicates dropped). Anything else raises :class:`GpuSelectionError`."""
    items = [v.strip() for value in (values or []) for v in str(value).split(",") if v.strip()]
    if not items:
        raise GpuSelectionError("--gpus needs 'all' or GPU indices, e.g. --gpus all or --gpus 0 1")
    if items == ["all"]:
        return None
    bad = [v for v in items if not v.isdigit()]
    if bad:
        raise GpuSelectionError(f"--gpus takes 'all' or GPU indices as nvidia-smi numbers them, not {bad}")
    return list(dict.fromkeys(items))


def list_gpus(select: Sequence[str] | None = None) -> list[Gpu]:
    """The GPUs of this host that nvidia-smi lists (``select``: indices to keep, None for all)."""
    rows = _env.nvidia_smi_rows(("index", "uuid", "name"))
    gpus = [Gpu(r["index"], r["uuid"], r["name"]) for r in rows]
    if not gpus:
        raise GpuSelectionError("--gpus: nvidia-smi lists no GPU on this machine (run without --gpus, "
                                "or on a host with NVIDIA GPUs)")
    if select is None:
        return gpus
    by_index = {g.index: g for g in gpus}
    unknown = [s for s in select if s not in by_index]
    if unknown:
        raise GpuSelectionError(f"--gpus {' '.join(select)}: no GPU {', '.join(unknown)} on this machine; "
                                f"it has {', '.join(by_index)}")
    return [by_index[s] for s in select]


def pinned_environment(gpu: Gpu | str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a process that may use ``gpu`` only: CUDA_VISIBLE_DEVICES names it, and
    CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA number GPUs as nvidia-smi does."""
    index = gpu.index if isinstance(gpu, Gpu) else str(gpu)
    return {**(os.environ if base is None else base), "CUDA_VISIBLE_DEVICES": index,
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def _die_with_parent_hook():
    """Linux: a job's process gets SIGKILL when the thread that started it dies (a driver or Ray
    worker killed mid-run must not leave a notebook timing on a GPU that is handed to another job;
    the notebook's kernel notices its parent is gone and exits too)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    PR_SET_PDEATHSIG = 1

    kill = int(signal.SIGKILL)

    def hook() -> None:   # runs in the child between fork and exec: no imports
        prctl(PR_SET_PDEATHSIG, kill)

    return hook


_DIE_WITH_PARENT = _die_with_parent_hook()
_CHILDREN: set[subprocess.Popen] = set()
_CHILDREN_LOCK = threading.Lock()


def run_pinned(cmd: Sequence[str], env: Mapping[str, str], cwd: str | os.PathLike | None = None,
               timeout: float | None = None) -> tuple[int, str, str]:
    """Run one job's process to the end; (exit status, stdout, stderr). Tracked, so that
    :func:`terminate_children` can stop it when the run is interrupted."""
    proc = subprocess.Popen(list(cmd), env=dict(env), cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_DIE_WITH_PARENT)
    with _CHILDREN_LOCK:
        _CHILDREN.add(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        out, err = proc.communicate()
        err = (err or "") + f"\nkilled after {timeout} s"
    finally:
        with _CHILDREN_LOCK:
            _CHILDREN.discard(proc)
    return proc.returncode, out or "", err or ""


def _kill(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGINT to the job's process group (papermill stops its kernel and cleans up), then SIGKILL."""
    for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def terminate_children() -> None:
    """Stop every job process this module started that is still running (an interrupted run)."""
    with _CHILDREN_LOCK:
        procs = list(_CHILDREN)
    threads = [threading.Thread(target=_kill, args=(p,), daemon=True) for p in procs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# ---------------------------------------------------------------- jobs and their order


@dataclass
class Job:
    """One unit of work: ``after`` names jobs that must finish first (names not in the run are
    ignored); ``estimate_s`` is its last recorded duration (None: unknown)."""

    name: str
    estimate_s: float | None = None
    after: frozenset[str] = frozenset()
    payload: Any = None


def check_jobs(jobs: Sequence[Job]) -> None:
    names = [j.name for j in jobs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"jobs named twice: {dup}")
    known = set(names)
    state: dict[str, int] = {}
    by_name = {j.name: j for j in jobs}

    def visit(n: str, path: list[str]) -> None:
        state[n] = 1
        for d in sorted(by_name[n].after & known):
            if state.get(d) == 1:
                raise ValueError("jobs wait on each other: " + " -> ".join(path + [n, d]))
            if not state.get(d):
                visit(d, path + [n])
        state[n] = 2

    for n in names:
        if not state.get(n):
            visit(n, [])


def priorities(jobs: Sequence[Job]) -> dict[str, float]:
    """Each job's longest path to the end of the run: its own estimate plus the longest path among
    the jobs that wait for it. Without dependencies this is longest-first. Unknown estimates count
    as the longest known one (an unmeasured job is started early rather than last)."""
    check_jobs(jobs)
    known = [j.estimate_s for j in jobs if j.estimate_s is not None and j.estimate_s >= 0]
    default = max(known) if known else 1.0
    names = {j.name for j in jobs}
    waiting: dict[str, list[str]] = {j.name: [] for j in jobs}
    for j in jobs:
        for d in j.after & names:
            waiting[d].append(j.name)
    est = {j.name: (j.estimate_s if j.estimate_s is not None and j.estimate_s >= 0 else default) for j in jobs}
    memo: dict[str, float] = {}

    def rank(n: str) -> float:
        if n not in memo:
            memo[n] = est[n] + max((rank(w) for w in waiting[n]), default=0.0)
        return memo[n]

    return {j.name: rank(j.name) for j in jobs}


def _ordered(jobs: Iterable[Job], prio: Mapping[str, float], order: Mapping[str, int]) -> list[Job]:
    # highest priority first; ties keep the caller's order (the serial order of the notebooks)
    return sorted(jobs, key=lambda j: (-prio[j.name], order[j.name]))


def _is_ready(job: Job, finished: set[str], names: set[str]) -> bool:
    return all(d in finished for d in job.after if d in names)


def run_on_slots(jobs: Sequence[Job], slots: Sequence[Any], execute: Callable[[Job, Any], Any],
                 on_done: Callable[[Job, Any, Any, BaseException | None], None],
                 on_start: Callable[[Job, Any], None] | None = None) -> None:
    """Run ``jobs`` on ``slots`` (one worker thread per slot, e.g. per GPU), at most one job per
    slot at a time. ``execute(job, slot)`` runs in the slot's worker and returns a result;
    ``on_done(job, slot, result, error)`` and ``on_start(job, slot)`` run in the calling thread,
    one at a time, in the order things happen. A job's dependents start only after ``on_done`` of
    that job has returned (whatever it wrote is there for them); a failed job releases them too,
    as in a serial run. KeyboardInterrupt stops handing out jobs and is re-raised once the running
    ones have been stopped (:func:`terminate_children`); those are not handed to ``on_done``."""
    if not slots:
        raise ValueError("no slots to run jobs on")
    prio = priorities(jobs)
    order = {j.name: i for i, j in enumerate(jobs)}
    names = set(order)
    pending = {j.name: j for j in jobs}
    finished: set[str] = set()
    cond = threading.Condition()
    events: queue.Queue = queue.Queue()
    stop = threading.Event()

    def take() -> Job | None:
        with cond:
            while True:
                if stop.is_set() or not pending:
                    return None
                ready = [j for j in pending.values() if _is_ready(j, finished, names)]
                if ready:
                    job = _ordered(ready, prio, order)[0]
                    del pending[job.name]
                    return job
                cond.wait()

    def worker(slot: Any) -> None:
        while True:
            job = take()
            if job is None:
                events.put(("exit", None, slot, None, None))
                return
            events.put(("start", job, slot, None, None))
            try:
                result, error = execute(job, slot), None
            except BaseException as exc:  # noqa: BLE001 - handed to on_done, the run goes on
                result, error = None, exc
            events.put(("done", job, slot, result, error))

    threads = [threading.Thread(target=worker, args=(s,), name=f"attnlab-slot-{i}", daemon=True)
               for i, s in enumerate(slots)]
    for t in threads:
        t.start()
    alive = len(threads)
    interrupted = False
    while alive:
        try:
            kind, job, slot, result, error = events.get()
            if kind == "exit":
                alive -= 1
            elif kind == "start":
                if on_start and not interrupted:
                    on_start(job, slot)
            else:
                try:
                    if not interrupted:   # a job stopped by the interrupt is not a result to record
                        on_done(job, slot, result, error)
                finally:
                    with cond:
                        finished.add(job.name)
                        cond.notify_all()
        except KeyboardInterrupt:
            interrupted = True
            stop.set()
            with cond:
                cond.notify_all()
            terminate_children()   # the running jobs' processes, so their workers return
    if interrupted:
        raise KeyboardInterrupt


# ---------------------------------------------------------------- a tree that travels to a worker

#: Never packed: caches, checkpoints and scratch files.
_SKIP = re.compile(r"(^|/)(__pycache__|\.ipynb_checkpoints|[^/]*\.egg-info)(/|$)|\.(pyc|tmp)$")


def pack(root: Path, names: Iterable[str]) -> bytes:
    """A gzip tarball of ``root/<name>`` for each name that exists (files or folders), paths
    relative to ``root``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for name in names:
            top = Path(root) / name
            if not top.exists():
                continue
            paths = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
            for p in paths:
                rel = p.relative_to(root).as_posix()
                if not _SKIP.search(rel) and not p.is_symlink():
                    tar.add(p, arcname=rel, recursive=False)
    return buf.getvalue()


def unpack(blob: bytes, dest: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        for m in tar.getmembers():
            if not m.isfile() or m.name.startswith("/") or ".." in Path(m.name).parts:
                raise ValueError(f"refusing to unpack {m.name!r}: only plain files below the tree")
        try:
            tar.extractall(dest, filter="data")
        except TypeError:   # a Python without extraction filters: the members were checked above
            tar.extractall(dest)  # noqa: S202


def fingerprints(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder``, by path relative to it."""
    if not folder.is_dir():
        return {}
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not _SKIP.search(p.name)}


def tree_task(code: bytes, data: bytes, argv: Sequence[str], files: Mapping[str, str],
              env: Mapping[str, str], data_dir: str = "data", out_dir: str = "out",
              timeout: float | None = None) -> dict:
    """Run on a worker: unpack ``code`` and ``data`` into a private folder, write ``files`` there
    (e.g. a job description), run ``sys.executable`` with ``argv`` in it ("{root}" in an argument
    is replaced by the folder) with ``env`` added (CUDA_VISIBLE_DEVICES is Ray's), and return::

        {"returncode", "stdout", "stderr" (tails), "host", "cuda_visible_devices",
         "outputs": {name: bytes} of every file the command left in <root>/<out_dir>,
         "written": {"data/...": bytes} of every file under <root>/<data_dir> that is new or changed}

    The folder is removed whatever happens; nothing is written outside it."""
    root = Path(tempfile.mkdtemp(prefix="attnlab-task-"))
    try:
        unpack(code, root)
        unpack(data, root)
        (root / out_dir).mkdir(parents=True, exist_ok=True)
        for rel, text in files.items():
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text.replace("{root}", str(root)))
        before = fingerprints(root / data_dir)
        full_env = {**os.environ, **{k: v.replace("{root}", str(root)) for k, v in env.items()}}
        if full_env.get("CUDA_VISIBLE_DEVICES"):
            full_env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        cmd = [sys.executable, *(a.replace("{root}", str(root)) for a in argv)]
        rc, out, err = run_pinned(cmd, full_env, cwd=root, timeout=timeout)
        after = fingerprints(root / data_dir)
        written = {f"{data_dir}/{rel}": (root / data_dir / rel).read_bytes()
                   for rel, digest in after.items() if before.get(rel) != digest}
        outputs = {p.name: p.read_bytes() for p in sorted((root / out_dir).iterdir())
                   if p.is_file() and not p.name.startswith(".")}
        return {"returncode": rc, "stdout": out[-4000:], "stderr": err[-4000:], "host": socket.gethostname(),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                "outputs": outputs, "written": written}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def write_bytes_atomic(path: Path, blob: bytes) -> Path:
    """Write beside ``path`` and rename into place (:func:`attnlab.paths.write_atomic`)."""
    return write_atomic(path, blob)


def install_written(root: Path, written: Mapping[str, bytes], allowed: Sequence[str]) -> list[Path]:
    """Write a task's data files under ``root``, each atomically; every path must lie below one of
    the ``allowed`` folders (relative to root), checked before anything is written."""
    root = Path(root)
    targets = []
    for rel, blob in written.items():
        parts = Path(rel).parts
        if Path(rel).is_absolute() or ".." in parts or not any(
                parts[:len(Path(a).parts)] == Path(a).parts for a in allowed):
            raise ValueError(f"a task returned {rel!r}, outside {', '.join(allowed)}")
        targets.append((root / rel, blob))
    return [write_bytes_atomic(p, b) for p, b in targets]


# ---------------------------------------------------------------- Ray


class RayUnavailable(RuntimeError):
    """Ray is not installed (the optional extra ``ray``)."""


def import_ray():
    try:
        import ray
    except ImportError:
        raise RayUnavailable("running on a Ray cluster needs Ray: pip install -e '.[ray]' "
                             "(on the driver and on every node)") from None
    return ray


def connect(address: str | None = None, **init_kwargs):
    """(ray, started_here): the running Ray session, or a new connection to ``address``
    ('auto', 'ray://host:10001', 'host:6379'; None: RAY_ADDRESS)."""
    ray = import_ray()
    if ray.is_initialized():
        return ray, False
    ray.init(address=address or os.environ.get("RAY_ADDRESS") or "auto", log_to_driver=False, **init_kwargs)
    return ray, True


class TaskFailure(RuntimeError):
    """A Ray task that did not return: its worker died or it raised, on every attempt."""

    def __init__(self, job: str, attempts: int, cause: str = ""):
        super().__init__(f"cluster task failed after {attempts} attempt(s): {cause}")
        self.job, self.attempts, self.cause = job, attempts, cause


def run_on_ray(jobs: Sequence[Job], submit: Callable[[Job], tuple[tuple, dict]],
               on_done: Callable[[Job, dict | None, BaseException | None], None], *,
               num_gpus: float = 1, max_retries: int = 2, task: Callable = tree_task,
               on_submit: Callable[[Job], None] | None = None) -> None:
    """Run ``jobs`` as Ray tasks of ``task`` with ``num_gpus`` each.

    A job is submitted once the jobs it must follow have finished and ``on_done`` has handled
    them, so ``submit(job)`` -> (args, kwargs) can pack the data they wrote. Ready jobs are
    submitted in priority order (see :func:`priorities`); Ray runs them as GPUs free up. A task
    whose worker dies, or that raises, is retried up to ``max_retries`` times; after that
    ``on_done`` gets a :class:`TaskFailure` and the run goes on. ``on_done`` runs in this thread,
    one job at a time."""
    ray = import_ray()
    prio = priorities(jobs)
    order = {j.name: i for i, j in enumerate(jobs)}
    names = set(order)
    remote = ray.remote(task).options(num_gpus=num_gpus, max_retries=max_retries, retry_exceptions=True,
                                      name="attnlab-job")
    pending = {j.name: j for j in jobs}
    finished: set[str] = set()
    inflight: dict[Any, Job] = {}
    try:
        while pending or inflight:
            ready = [j for j in pending.values() if _is_ready(j, finished, names)]
            for job in _ordered(ready, prio, order):
                args, kwargs = submit(job)
                inflight[remote.remote(*args, **kwargs)] = job
                del pending[job.name]
                if on_submit:
                    on_submit(job)
            if not inflight:
                raise RuntimeError(f"jobs can never start: {sorted(pending)}")
            done, _ = ray.wait(list(inflight), num_returns=1)
            ref = done[0]
            job = inflight.pop(ref)
            try:
                result, error = ray.get(ref), None
            except Exception as exc:  # noqa: BLE001 - worker died / task raised on every attempt
                cause = " ".join(str(exc).split())
                result, error = None, TaskFailure(job.name, max_retries + 1, cause[-400:])
            try:
                on_done(job, result, error)
            finally:
                finished.add(job.name)
    except BaseException:
        for ref in inflight:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001
                pass
        raise


def cluster_gpus(ray) -> float:
    """GPUs the connected cluster offers (0 on a CPU-only cluster)."""
    try:
        return float(ray.cluster_resources().get("GPU", 0))
    except Exception:  # noqa: BLE001
        return 0.0

