"""Many GPUs on a machine without any (attnlab.cluster, ./lab report --gpus / --cluster).

* the scheduler with fake GPUs and a fake executor: one job per GPU at a time, longest (critical
  path) first, dependencies waited for, failures handed on, the index written by one thread;
* the local --gpus path end to end, its worker processes faked: CUDA_VISIBLE_DEVICES per process,
  never two notebooks on one GPU, the index records which GPU ran each;
* real notebooks in replay through the local parallel path and through a Ray local cluster with
  fake GPU resources give the reports a serial run gives;
* Ray workers killed mid-run or raising: the notebook is retried, or recorded as failed while the
  others go on, and never leaves half a table.

The Ray tests skip when Ray is not installed (pip install -e '.[ray]').
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import shutil
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

import attnlab.report as report
from attnlab import cluster, env
from attnlab.nb import HEADLINE_MIME
from attnlab.paths import REPO_ROOT, RESULTS_DIR

HAS_RAY = importlib.util.find_spec("ray") is not None
requires_ray = pytest.mark.skipif(not HAS_RAY, reason="Ray is not installed (pip install -e '.[ray]')")
FAKE_GPUS = [cluster.Gpu("0", "GPU-00000000-aaaa", "NVIDIA GPU X"), cluster.Gpu("1", "GPU-11111111-bbbb", "NVIDIA GPU X")]
LIVE_X = env.Mode(True, "gpu-x", "NVIDIA GPU X", "auto", "a fake device for tests")


@pytest.fixture(autouse=True)
def _no_ray_address(monkeypatch):
    """RAY_ADDRESS in the environment sends ./lab report to that Ray cluster: only where a test says so.
    (And report.main() edits PYTHONPATH: restored after each test.)"""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))


# ---------------------------------------------------------------- GPUs of this host

def test_gpu_selection():
    assert cluster.parse_gpu_selection(["all"]) is None
    assert cluster.parse_gpu_selection(["0", "1"]) == ["0", "1"]
    assert cluster.parse_gpu_selection(["2,0", "2"]) == ["2", "0"]
    for bad in ([], ["x"], ["all", "0"], ["-1"]):
        with pytest.raises(cluster.GpuSelectionError):
            cluster.parse_gpu_selection(bad)


def test_list_gpus_reads_nvidia_smi(monkeypatch):
    rows = [{"index": "0", "uuid": "GPU-a", "name": "NVIDIA H200"}, {"index": "1", "uuid": "GPU-b", "name": "NVIDIA H200"}]
    monkeypatch.setattr(env, "nvidia_smi_rows", lambda fields: [{f: r[f] for f in fields} for r in rows])
    assert [g.uuid for g in cluster.list_gpus()] == ["GPU-a", "GPU-b"]
    assert cluster.list_gpus(["1"]) == [cluster.Gpu("1", "GPU-b", "NVIDIA H200")]
    with pytest.raises(cluster.GpuSelectionError, match="no GPU 7"):
        cluster.list_gpus(["7"])
    monkeypatch.setattr(env, "nvidia_smi_rows", lambda fields: [])
    with pytest.raises(cluster.GpuSelectionError, match="lists no GPU"):
        cluster.list_gpus()


def test_a_pinned_process_sees_one_gpu_numbered_as_nvidia_smi_does():
    pinned = cluster.pinned_environment(FAKE_GPUS[1], {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert pinned == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    rc, out, _ = cluster.run_pinned([sys.executable, "-c", "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"],
                                    cluster.pinned_environment("1"))
    assert rc == 0 and out.strip() == "1"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_a_job_process_dies_with_the_thread_that_started_it(tmp_path):
    # a driver (or Ray worker) that dies must not leave a notebook running on a GPU handed to another job
    pid_file = tmp_path / "child.pid"
    code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    # a short-lived parent starts the job from a worker thread, then dies: the job must die with it
    parent = (f"import sys; sys.path.insert(0, {str(REPO_ROOT / 'lib')!r}); from attnlab import cluster; import threading, os\n"
              f"t = threading.Thread(target=cluster.run_pinned, args=([sys.executable, '-c', {code!r}], dict(os.environ)), daemon=True)\n"
              f"t.start()\nimport time\nwhile not os.path.exists({str(pid_file)!r}): time.sleep(0.05)\nos._exit(0)\n")
    rc, _, err = cluster.run_pinned([sys.executable, "-c", parent], dict(os.environ), timeout=60)
    assert rc == 0, err
    child = int(pid_file.read_text())
    for _ in range(100):
        if not Path(f"/proc/{child}").exists() or "zombie" in _proc_state(child):
            break
        time.sleep(0.05)
    else:
        os.kill(child, 9)
        pytest.fail("the job's process outlived its parent")


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].splitlines()[0].lower()
    except (OSError, IndexError):
        return "gone"


# ---------------------------------------------------------------- the scheduler, faked

def test_priorities_are_longest_first_along_the_critical_path():
    jobs = [cluster.Job("a", 10), cluster.Job("b", 30), cluster.Job("c", 5), cluster.Job("d", 1, frozenset({"c"}))]
    assert cluster.priorities(jobs) == {"a": 10, "b": 30, "c": 6, "d": 1}
    # an unmeasured job counts as the longest measured one: it starts early, not last
    assert cluster.priorities([cluster.Job("a", 10), cluster.Job("new")])["new"] == 10
    # a chain outranks a single job as long as any of its links
    chain = [cluster.Job("x", 20), cluster.Job("y", 5), cluster.Job("z", 25, frozenset({"y"}))]
    assert cluster.priorities(chain)["y"] == 30 > cluster.priorities(chain)["x"]
    with pytest.raises(ValueError, match="wait on each other"):
        cluster.priorities([cluster.Job("p", 1, frozenset({"q"})), cluster.Job("q", 1, frozenset({"p"}))])


class Recorder:
    """A fake executor: each job 'runs' for estimate × scale seconds on its slot; every start and end
    is recorded with the slot, so the tests can check what ran where and when."""

    def __init__(self, scale: float = 0.01, fail: set[str] = frozenset()):
        self.scale, self.fail = scale, set(fail)
        self.lock = threading.Lock()
        self.events: list[tuple[float, str, str, str]] = []   # (time, start|end, job, slot)
        self.running: dict[str, str] = {}
        self.clash = []

    def __call__(self, job, slot):
        with self.lock:
            if slot in self.running:
                self.clash.append((slot, self.running[slot], job.name))
            self.running[slot] = job.name
            self.events.append((time.perf_counter(), "start", job.name, slot))
        time.sleep((job.estimate_s or 1) * self.scale)
        with self.lock:
            del self.running[slot]
            self.events.append((time.perf_counter(), "end", job.name, slot))
        if job.name in self.fail:
            raise RuntimeError(f"{job.name} broke")
        return f"{job.name} ok"

    def starts(self) -> list[str]:
        return [j for _, kind, j, _ in self.events if kind == "start"]

    def max_parallel(self) -> int:
        now = best = 0
        for _, kind, _, _ in sorted(self.events):
            now += 1 if kind == "start" else -1
            best = max(best, now)
        return best


def test_one_job_per_gpu_longest_first_and_all_gpus_busy():
    jobs = [cluster.Job(n, e) for n, e in (("01", 3), ("02", 12), ("03", 5), ("04", 9), ("05", 1), ("06", 7))]
    fake, done, threads = Recorder(), [], set()
    cluster.run_on_slots(jobs, ["0", "1"], fake,
                         lambda job, slot, result, error: (done.append((job.name, slot, result, error)),
                                                           threads.add(threading.get_ident())))
    assert not fake.clash, f"two jobs on one GPU at once: {fake.clash}"
    assert fake.max_parallel() == 2
    assert fake.starts()[:2] == ["02", "04"] and fake.starts()[-1] == "05"   # longest first
    assert sorted(d[0] for d in done) == [j.name for j in jobs] and all(d[3] is None for d in done)
    assert threads == {threading.get_ident()}, "on_done ran outside the caller's thread (two index writers)"
    # every GPU ran jobs back to back, one at a time
    for slot in ("0", "1"):
        mine = [e for e in fake.events if e[3] == slot]
        assert [k for _, k, _, _ in mine] == ["start", "end"] * (len(mine) // 2)


def test_dependencies_wait_for_the_index_and_failures_release_them():
    jobs = [cluster.Job("01", 2), cluster.Job("02", 4), cluster.Job("03", 1),
            cluster.Job("04", 3, frozenset({"01", "02", "03"})), cluster.Job("06", 1, frozenset({"04", "99"}))]
    fake = Recorder(fail={"02"})
    handled: dict[str, float] = {}

    def on_done(job, slot, result, error):
        time.sleep(0.02)                       # writing the index takes a moment ...
        handled[job.name] = time.perf_counter()  # ... and dependents must start after it
        assert (error is not None) == (job.name == "02")

    cluster.run_on_slots(jobs, ["0", "1", "2"], fake, on_done)
    start = {j: t for t, kind, j, _ in fake.events if kind == "start"}
    assert start["04"] > max(handled["01"], handled["02"], handled["03"])   # "02" failed: 04 still runs
    assert start["06"] > handled["04"]        # "99" is not in the run: ignored
    assert set(handled) == {"01", "02", "03", "04", "06"}


def test_an_interrupt_stops_handing_out_jobs(monkeypatch):
    jobs = [cluster.Job(str(i), 1) for i in range(6)]
    fake = Recorder(scale=0.05)
    calls = []

    def on_done(job, slot, result, error):
        calls.append(job.name)
        if len(calls) == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cluster.run_on_slots(jobs, ["0", "1"], fake, on_done)
    assert 1 <= len(fake.starts()) <= 4 < len(jobs) and not fake.clash
    assert len(calls) == 1, "jobs stopped by the interrupt were recorded"


# ---------------------------------------------------------------- what travels to a worker

def test_pack_unpack_and_what_a_task_wrote(tmp_path):
    root = tmp_path / "root"
    (root / "lib" / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "lib" / "pkg" / "m.py").write_text("X = 1\n")
    (root / "lib" / "pkg" / "__pycache__" / "m.pyc").write_bytes(b"junk")
    (root / "data" / "results" / "g").mkdir(parents=True)
    (root / "data" / "results" / "g" / "old.csv").write_text("a\n1\n")
    out = tmp_path / "out"
    cluster.unpack(cluster.pack(root, ["lib", "data", "absent"]), out)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == \
        ["data/results/g/old.csv", "lib/pkg/m.py"]
    # a task: runs a command in its own copy, returns the files it left in out/ and the data it changed
    script = ("import pathlib; r = pathlib.Path('.');"
              "(r / 'data/results/g/new.csv').write_text('b\\n2\\n');"
              "(r / 'data/results/g/old.csv').write_text('a\\n1\\n');"     # rewritten, unchanged: not returned
              "(r / 'out/nb.ipynb').write_text('{}');"
              "print(open('job.json').read())")
    result = cluster.tree_task(cluster.pack(root, ["lib"]), cluster.pack(root, ["data"]), ["-c", script],
                               {"job.json": "root is {root}"}, {"X_ROOT": "{root}"})
    assert result["returncode"] == 0, result["stderr"]
    assert result["written"] == {"data/results/g/new.csv": b"b\n2\n"}
    assert result["outputs"] == {"nb.ipynb": b"{}"}
    task_root = result["stdout"].split("root is ")[1].strip()
    assert "attnlab-task-" in task_root and not Path(task_root).exists(), "the task's folder was left behind"


def test_returned_files_are_written_atomically_and_only_under_allowed_folders(tmp_path, monkeypatch):
    cluster.install_written(tmp_path, {"data/results/g/t.csv": b"x\n1\n"}, ["data/results"])
    assert (tmp_path / "data/results/g/t.csv").read_bytes() == b"x\n1\n"
    for bad in ("data/results/../../evil.csv", "/etc/passwd", "lib/attnlab/env.py"):
        with pytest.raises(ValueError, match="outside"):
            cluster.install_written(tmp_path, {"data/results/g/ok.csv": b"1", bad: b"x"}, ["data/results"])
        assert not (tmp_path / "data/results/g/ok.csv").exists(), "a rejected batch wrote part of itself"
    monkeypatch.setattr(cluster.os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        cluster.install_written(tmp_path, {"data/results/g/t.csv": b"new"}, ["data/results"])
    assert (tmp_path / "data/results/g/t.csv").read_bytes() == b"x\n1\n"
    assert [p.name for p in (tmp_path / "data/results/g").iterdir()] == ["t.csv"], "a temporary file was left"


# ---------------------------------------------------------------- ./lab report --gpus, workers faked

class FakeWorkers:
    """Stands in for the pinned worker processes of --gpus: reads the job file, records the
    environment and when it ran, writes an executed notebook and the result, as worker_main does."""

    def __init__(self, seconds: float = 0.3, die: set[str] = frozenset()):
        self.seconds, self.die = seconds, set(die)
        self.lock = threading.Lock()
        self.on_gpu: dict[str, str] = {}
        self.clash: list = []
        self.log: list[dict] = []

    def __call__(self, cmd, env_, cwd=None, timeout=None):
        assert cmd[1:4] == ["-m", "attnlab.report", "--worker"]
        spec = json.loads(Path(cmd[4]).read_text())
        stem, gpu = Path(spec["notebook"]).stem, env_["CUDA_VISIBLE_DEVICES"]
        t0 = time.perf_counter()
        with self.lock:
            if gpu in self.on_gpu:
                self.clash.append((gpu, self.on_gpu[gpu], stem))
            self.on_gpu[gpu] = stem
        time.sleep(self.seconds)
        with self.lock:
            del self.on_gpu[gpu]
            self.log.append({"notebook": stem, "gpu": gpu, "order": env_.get("CUDA_DEVICE_ORDER"),
                             "start": t0, "end": time.perf_counter()})
        if stem in self.die:
            return -9, "", "Killed"
        nb = nbformat.v4.new_notebook()
        cell = nbformat.v4.new_code_cell("x")
        cell.outputs = [nbformat.v4.new_output("display_data", data={HEADLINE_MIME: {"gpu_seen": gpu}, "text/plain": "x"})]
        nb.cells.append(cell)
        out = Path(spec["out_dir"])
        nbformat.write(nb, out / f"{stem}.ipynb")
        (out / f"{stem}.html").write_text("<html/>")
        run = report.NotebookRun(stem, "passed", self.seconds, "live", headlines={"gpu_seen": gpu},
                                 parameters=spec["params"], gpu_index=gpu, host="fake-host")
        Path(spec["result"]).write_text(json.dumps({"run": dataclasses.asdict(run), "mode": dataclasses.asdict(LIVE_X)}))
        return 0, "", ""


@pytest.fixture
def gpus_lab(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "REPORTS_DIR", tmp_path)
    monkeypatch.setattr(report, "resolve_mode", lambda mode, gpu: LIVE_X)
    smi = [{"index": g.index, "uuid": g.uuid, "name": g.name, "pci.bus_id": f"00000000:0{g.index}:00.0"} for g in FAKE_GPUS]
    monkeypatch.setattr(env, "nvidia_smi_rows", lambda fields: [{f: r[f] for f in fields} for r in smi])
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    monkeypatch.delenv("ATTNLAB_PROG", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    fake = FakeWorkers()
    monkeypatch.setattr(cluster, "run_pinned", fake)
    return fake


def test_gpus_pins_each_notebook_to_one_gpu_and_records_it(gpus_lab, tmp_path):
    out = tmp_path / "gpu-x-quick"
    out.mkdir()
    report.mark_local(out, "a quick run")
    # the last run's durations: 03 was the longest, 04 waits for 01-03
    (out / "runs.json").write_text(json.dumps([{"notebook": "01_naive", "status": "passed", "duration_s": 1.0},
                                               {"notebook": "02_tiling", "status": "passed", "duration_s": 2.0},
                                               {"notebook": "03_float4", "status": "passed", "duration_s": 100.0}]))
    assert report.main(["--only", "01", "02", "03", "04", "--profile", "quick", "--gpus", "all"]) == 0
    log = {r["notebook"]: r for r in gpus_lab.log}
    assert not gpus_lab.clash, f"two notebooks on one GPU at once: {gpus_lab.clash}"
    assert {r["gpu"] for r in log.values()} == {"0", "1"} and all(r["order"] == "PCI_BUS_ID" for r in log.values())
    first_two = sorted(gpus_lab.log, key=lambda r: r["start"])[:2]
    assert {r["notebook"] for r in first_two} == {"03_float4", "02_tiling"}, "not longest (critical path) first"
    assert log["04_padding"]["start"] >= max(log[n]["end"] for n in ("01_naive", "02_tiling", "03_float4"))
    runs = {r["notebook"]: r for r in json.loads((out / "runs.json").read_text())}
    assert set(runs) == {"01_naive", "02_tiling", "03_float4", "04_padding"}
    for name, r in runs.items():
        assert r["status"] == "passed" and r["gpu_index"] == log[name]["gpu"] == r["headlines"]["gpu_seen"]
        assert r["gpu_uuid"] == FAKE_GPUS[int(r["gpu_index"])].uuid and r["host"] == "fake-host"
    text = (out / "README.md").read_text()
    assert "| ran on |" in text and "2 GPU(s) in parallel (0, 1)" in text
    assert re.search(r"\| 03_float4 \| passed .*\| GPU \d · GPU-\d{8}… · fake-host \|", text)
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_gpus_a_worker_that_dies_fails_its_notebook_only(gpus_lab, tmp_path):
    gpus_lab.die = {"02_tiling"}
    assert report.main(["--only", "01", "02", "03", "--profile", "quick", "--gpus", "0", "1"]) == 1
    runs = {r["notebook"]: r for r in json.loads((tmp_path / "gpu-x-quick" / "runs.json").read_text())}
    assert runs["02_tiling"]["status"] == "failed" and "worker process exited with status -9" in runs["02_tiling"]["error"]
    assert runs["02_tiling"]["gpu_index"] in ("0", "1")
    assert runs["01_naive"]["status"] == runs["03_float4"]["status"] == "passed"


def test_gpus_one_gpu_runs_serially_pinned(gpus_lab, tmp_path):
    assert report.main(["--only", "01", "02", "--profile", "quick", "--gpus", "1"]) == 0
    assert {r["gpu"] for r in gpus_lab.log} == {"1"}
    a, b = sorted(gpus_lab.log, key=lambda r: r["start"])
    assert b["start"] >= a["end"]


@pytest.mark.parametrize("argv, message", [
    (["--gpus", "all", "--cluster", "auto"], "pick one"),
    (["--gpus", "7"], "no GPU 7 on this machine"),
    (["--gpus", "x"], "takes 'all' or GPU indices"),
    (["--gpus", "0", "--jobs", "2"], "leave it out with --gpus or --cluster"),
    (["--jobs", "2"], "--jobs is for replay"),                 # the fixture's mode is live
])
def test_gpus_user_errors(gpus_lab, capsys, argv, message):
    assert report.main(["--only", "01", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert not gpus_lab.log


def test_gpus_of_two_models_are_refused(gpus_lab, monkeypatch, capsys):
    monkeypatch.setattr(cluster, "list_gpus", lambda select=None: [FAKE_GPUS[0], cluster.Gpu("1", "GPU-c", "NVIDIA A100")])
    assert report.main(["--only", "01", "--gpus", "all"]) == 2
    assert "different models (gpu-x: 0; a100: 1)" in capsys.readouterr().err


# ---------------------------------------------------------------- real notebooks, replay: serial = parallel = Ray

# Two real notebooks whose replayed outputs do not depend on the thread count (02 and 09 compute
# float64 errors on the CPU whose last digits do, and a Ray worker runs with one thread).
NOTEBOOKS = ["01", "12"]


def _outputs(path: Path) -> list[str]:
    """The text of every output (images by size), papermill's run metadata, wall times and Styler
    table ids left out."""
    cells = json.loads(path.read_text())["cells"]
    lines = []
    for i, c in enumerate(cells):
        for o in c.get("outputs", []):
            if "text" in o:
                lines += [f"{i} {line}" for line in "".join(o["text"]).splitlines()]
            for kind, v in o.get("data", {}).items():
                text = "".join(v) if isinstance(v, list) else json.dumps(v, sort_keys=True)
                lines += [f"{i} {kind} {len(text)}"] if kind.startswith("image/") else \
                    [f"{i} {kind} {line}" for line in text.splitlines()]
    # pandas Styler tables carry a random id (T_1a2b3): the same table, named differently per run
    # and its plain-text form is its address
    return [re.sub(r" at 0x[0-9a-f]+>", " at 0x…>", re.sub(r"\bT_[0-9a-f]{5}", "T_id", line))
            for line in lines if "wall time" not in line]


def _same_reports(a: Path, b: Path) -> None:
    names = lambda d: sorted(p.name for p in d.iterdir() if p.suffix in (".ipynb", ".html"))  # noqa: E731
    assert names(a) == names(b)
    ra = {r["notebook"]: r for r in json.loads((a / "runs.json").read_text())}
    rb = {r["notebook"]: r for r in json.loads((b / "runs.json").read_text())}
    assert set(ra) == set(rb)
    for k in ra:
        assert (ra[k]["status"], ra[k]["headlines"], ra[k]["parameters"]) == \
            (rb[k]["status"], rb[k]["headlines"], rb[k]["parameters"]), k
        assert _outputs(a / f"{k}.ipynb") == _outputs(b / f"{k}.ipynb"), f"{k}: outputs differ"


@pytest.fixture(scope="module")
def serial_replay(tmp_path_factory):
    out = tmp_path_factory.mktemp("serial") / "h200-replay"
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("RAY_ADDRESS", raising=False)
        mp.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))   # main() edits it
        assert report.main(["--only", *NOTEBOOKS, "--mode", "replay", "--out", str(out)]) == 0
    return out


def test_real_notebooks_on_two_fake_gpus_match_a_serial_run(serial_replay, tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "list_gpus", lambda select=None: FAKE_GPUS)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = tmp_path / "h200-replay"
    assert report.main(["--only", *NOTEBOOKS, "--mode", "replay", "--gpus", "all", "--out", str(out)]) == 0
    _same_reports(serial_replay, out)
    runs = json.loads((out / "runs.json").read_text())
    assert {r["gpu_index"] for r in runs} <= {"0", "1"} and all(r["host"] for r in runs)


def test_a_replay_has_no_dependencies_a_live_run_has():
    """04 reads the tables 01-03 write in a live run, so it follows them; a replay writes no table."""
    plans = [(report.NOTEBOOKS_DIR / f"{n}.ipynb", {}) for n in ("01_naive", "02_tiling", "04_padding")]
    live = {j.name: j.after for j in report.plan_jobs(plans, [])}
    replay = {j.name: j.after for j in report.plan_jobs(plans, [], replay=True)}
    assert {"01_naive", "02_tiling"} <= live["04_padding"]
    assert all(not d for d in replay.values()) and set(replay) == set(live)


def test_a_negative_jobs_count_is_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        report.main(["--only", "01", "--jobs=-1"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1 and "give 1 or more notebooks" in err, err


def test_replay_jobs_run_side_by_side_without_a_gpu(tmp_path, monkeypatch, capsys):
    """--jobs 2: a replay's notebooks in two worker processes at once (run_on_gpus' path, which the
    real-notebook test above covers end to end), each seeing no GPU; the runs name the host, no GPU."""
    monkeypatch.setattr(report, "REPORTS_DIR", tmp_path)
    monkeypatch.delenv("ATTNLAB_PROG", raising=False)
    seen, lock, busy, most = [], threading.Lock(), [0], [0]

    def fake(cmd, env_, cwd=None, timeout=None):
        spec = json.loads(Path(cmd[4]).read_text())
        stem = Path(spec["notebook"]).stem
        with lock:
            busy[0] += 1
            most[0] = max(most[0], busy[0])
        time.sleep(0.2)
        with lock:
            busy[0] -= 1
            seen.append((stem, env_["CUDA_VISIBLE_DEVICES"], spec["mode"]))
        out = Path(spec["out_dir"])
        nbformat.write(nbformat.v4.new_notebook(), out / f"{stem}.ipynb")
        (out / f"{stem}.html").write_text("<html/>")
        mode = report.run_mode("replay", "h200")
        run = report.NotebookRun(stem, "passed", 0.2, mode.name, parameters=spec["params"], host="fake-host")
        Path(spec["result"]).write_text(json.dumps({"run": dataclasses.asdict(run), "mode": dataclasses.asdict(mode)}))
        return 0, "", ""

    monkeypatch.setattr(cluster, "run_pinned", fake)
    assert report.main(["--only", "01", "08", "09", "--mode", "replay", "--jobs", "2"]) == 0
    assert sorted(s[0] for s in seen) == ["01_naive", "08_register_tiling", "09_tf32_tensor_cores"]
    assert all(gpu == "" and mode == "replay" for _, gpu, mode in seen) and most[0] == 2
    out = capsys.readouterr().out
    assert "2 CPU slot(s) in parallel" in out and "on CPU slot" in out
    runs = json.loads(next(tmp_path.rglob("runs.json")).read_text())
    assert len(runs) == 3 and all(r["status"] == "passed" and r["host"] and not r["gpu_index"] for r in runs)
    assert [c.index for c in report.cpu_slots(3)] == ["0", "1", "2"] and 1 <= len(report.cpu_slots(0)) <= 4


# ---------------------------------------------------------------- a Ray local cluster with two fake GPUs

@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_gpus=2, num_cpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=100 * 2**20, namespace="attnlab-tests")
    yield ray
    ray.shutdown()


@requires_ray
def test_ray_tasks_see_one_gpu_each(ray_session):
    script = "import os; print(os.environ.get('CUDA_VISIBLE_DEVICES'))"
    jobs = [cluster.Job(f"j{i}", 1) for i in range(4)]
    seen = []
    empty = cluster.pack(REPO_ROOT, [])
    cluster.run_on_ray(jobs, lambda job: ((empty, empty, ["-c", script], {}, {}), {}),
                       lambda job, result, error: seen.append((result["stdout"].strip(), result["cuda_visible_devices"])),
                       num_gpus=1, max_retries=0)
    assert len(seen) == 4 and all(a == b and a in ("0", "1") for a, b in seen)


@requires_ray
def test_ray_replay_matches_a_serial_run(ray_session, serial_replay, tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = tmp_path / "h200-replay"
    assert report.main(["--only", *NOTEBOOKS, "--mode", "replay", "--cluster", "auto", "--out", str(out)]) == 0
    _same_reports(serial_replay, out)
    runs = json.loads((out / "runs.json").read_text())
    assert {r["gpu_index"] for r in runs} <= {"0", "1"} and all(r["host"] for r in runs)
    assert "on the Ray cluster at auto" in (out / "README.md").read_text()


# A notebook that records a table as a live run would, then (first attempt only) kills the Ray
# worker running it: kernel -> `report --worker` -> Ray worker.
FAKE_LIVE = '''
import os, pathlib
import pandas as pd
from attnlab import results
from attnlab.env import Mode
LIVE = Mode(True, "fake-gpu", "NVIDIA Fake GPU", "auto", "a stand-in for a live run")
results.save_table(pd.DataFrame({"N": range(5000), "median_ms": 0.5}), NAME, "timing", LIVE, profile)
if kill_worker and not pathlib.Path(marker).exists():
    pathlib.Path(marker).write_text("killed once")
    worker = int(pathlib.Path(f"/proc/{os.getppid()}/stat").read_text().rsplit(")", 1)[1].split()[1])
    os.kill(worker, 9)
    os._exit(0)
'''


def _fake_tree(root: Path) -> dict[str, Path]:
    """A tree with the real library and two notebooks that record tables; a recorded h200 table so
    that mode 'auto' resolves (to replay) on a machine without a GPU."""
    for name in ("lib", "kernels"):
        (root / name).mkdir(parents=True)
    (root / "lib" / "attnlab").symlink_to(REPO_ROOT / "lib" / "attnlab")
    (root / "kernels" / "common.cuh").write_text("// unused\n")
    (root / "data" / "results" / "h200").mkdir(parents=True)
    shutil.copy(RESULTS_DIR / "h200" / "06_roofline__ceilings.csv", root / "data" / "results" / "h200")
    (root / "notebooks").mkdir()
    paths = {}
    for name in ("98_ok", "99_killed"):
        nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"display_name": "Python 3", "language": "python",
                                                                "name": "python3"}, "language_info": {"name": "python"}})
        params = nbformat.v4.new_code_cell(f'mode = "auto"\ngpu = "h200"\nprofile = "quick"\nmarker = ""\n'
                                           f'kill_worker = False\nNAME = "{name}"')
        params.metadata["tags"] = ["parameters"]
        nb.cells += [params, nbformat.v4.new_code_cell(FAKE_LIVE)]
        paths[name] = root / "notebooks" / f"{name}.ipynb"
        nbformat.write(nb, paths[name])
    return paths


def _run_fake_cluster(root: Path, out: Path, marker: Path, retries: int, task=None):
    paths = _fake_tree(root)
    plans = [(paths["98_ok"], {"profile": "quick", "mode": "auto", "gpu": "h200"}),
             (paths["99_killed"], {"profile": "quick", "mode": "auto", "gpu": "h200", "marker": str(marker),
                                   "kill_worker": True})]
    args = SimpleNamespace(mode="auto", gpu="h200", timeout=120, retries=retries, out=str(out))
    index = report.ReportIndex("quick", {}, "test", str(out), "; test cluster")
    report.run_on_cluster(plans, None, args, index, task=task, root=root)
    return {r["notebook"]: r for r in json.loads((out / "runs.json").read_text())}


def _table(root: Path, name: str) -> Path:
    return root / "data" / "results" / "fake-gpu" / "quick" / f"{name}__timing.csv"


def _no_scratch(root: Path) -> None:
    left = [p for p in (root / "data").rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".")]
    assert not left, f"scratch files left: {left}"


@requires_ray
def test_ray_worker_killed_mid_run_without_retries_fails_that_notebook_only(ray_session, tmp_path):
    import pandas as pd

    root, out = tmp_path / "tree", tmp_path / "out"
    runs = _run_fake_cluster(root, out, tmp_path / "killed.marker", retries=0)
    assert (tmp_path / "killed.marker").exists(), "the worker was not killed"
    assert runs["99_killed"]["status"] == "failed" and "failed after 1 attempt" in runs["99_killed"]["error"]
    assert not _table(root, "99_killed").exists(), "a table of a task that never returned was written"
    assert runs["98_ok"]["status"] == "passed"
    assert len(pd.read_csv(_table(root, "98_ok"))) == 5000
    assert "failed after 1 attempt" in (out / "README.md").read_text()
    _no_scratch(root)


@requires_ray
def test_ray_worker_killed_or_raising_is_retried(ray_session, tmp_path):
    import pandas as pd

    raised = tmp_path / "raised.marker"

    def flaky(code, data, argv, files, env, **kw):   # pickled by value: a nested function
        import pathlib

        from attnlab import cluster as c

        if "98_ok" in files["job.json"] and not pathlib.Path(str(raised)).exists():
            pathlib.Path(str(raised)).write_text("raised once")
            raise RuntimeError("a node lost its scratch disk")
        return c.tree_task(code, data, argv, files, env, **kw)

    root, out = tmp_path / "tree", tmp_path / "out"
    runs = _run_fake_cluster(root, out, tmp_path / "killed.marker", retries=1, task=flaky)
    assert raised.exists() and (tmp_path / "killed.marker").exists()
    assert runs["98_ok"]["status"] == runs["99_killed"]["status"] == "passed"
    for name in ("98_ok", "99_killed"):
        table = pd.read_csv(_table(root, name))
        assert len(table) == 5000 and (table["gpu"] == "fake-gpu").all() and table["host"].notna().all()
        assert (out / f"{name}.ipynb").is_file()
    _no_scratch(root)


# ---------------------------------------------------------------- provenance: which card, which host

SMI_ROWS = [
    {"index": "0", "uuid": "GPU-aaaa0000-0000", "pci.bus_id": "00000000:19:00.0", "name": "NVIDIA H200",
     "driver_version": "580.1", "clocks.sm": "1980", "clocks.mem": "3201", "clocks.max.sm": "1980",
     "temperature.gpu": "30", "power.draw": "100"},
    {"index": "1", "uuid": "GPU-bbbb1111-1111", "pci.bus_id": "00000000:3B:00.0", "name": "NVIDIA H200",
     "driver_version": "580.1", "clocks.sm": "345", "clocks.mem": "1593", "clocks.max.sm": "1980",
     "temperature.gpu": "41", "power.draw": "75"},
]


def _fake_smi(bin_dir: Path, rows=SMI_ROWS) -> str:
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!{sys.executable}\nimport sys\nROWS = {rows!r}\n"
                      "q = [a for a in sys.argv[1:] if a.startswith('--query-gpu=')][0].split('=', 1)[1].split(',')\n"
                      "for r in ROWS:\n    print(', '.join(r[f] for f in q))\n")
    script.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


@pytest.mark.parametrize("visible, cuda_pci, expected", [
    (None, "", "GPU-aaaa0000-0000"),                  # nothing pinned: the first GPU, as before
    ("1", "", "GPU-bbbb1111-1111"),                    # pinned by index (PCI order)
    ("GPU-bbbb", "", "GPU-bbbb1111-1111"),             # pinned by UUID prefix
    ("0", "0000:3b:00.0", "GPU-bbbb1111-1111"),        # CuPy's own device wins over the variable
    ("MIG-xyz", "", "GPU-aaaa0000-0000"),              # cannot be told: the first GPU
])
def test_the_visible_gpu_is_the_one_this_process_uses(tmp_path, monkeypatch, visible, cuda_pci, expected):
    monkeypatch.setenv("PATH", _fake_smi(tmp_path / "bin"))
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(env, "_cuda_pci_bus_id", lambda: cuda_pci)
    assert env.visible_gpu()["uuid"] == expected
    clocks = env.nvidia_smi_query()
    row = next(r for r in SMI_ROWS if r["uuid"] == expected)
    assert clocks["clocks.sm"] == row["clocks.sm"] and clocks["temperature.gpu"] == row["temperature.gpu"]


def test_recorded_rows_name_the_card_and_the_host(tmp_path, monkeypatch):
    import socket

    monkeypatch.setenv("PATH", _fake_smi(tmp_path / "bin"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setattr(env, "_cuda_pci_bus_id", lambda: "")
    monkeypatch.setattr(env, "_static_provenance", lambda: {})
    info = env.provenance(env.Mode(True, "h200", "NVIDIA H200", "live", "test"))
    assert info["gpu_uuid"] == "GPU-bbbb1111-1111" and info["host"] == socket.gethostname()
    assert info["sm_clock_mhz"] == "345"
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    info = env.provenance(env.Mode(True, "h200", "NVIDIA H200", "live", "test"))
    assert info["gpu_uuid"] == "" and info["host"]
