"""The report runner: profiles, overrides, parameter checks, headlines, index; where runs go, failed
copies, user errors and ./lab help, with notebook execution faked."""

import json
import os
import shlex
import subprocess
import sys

import nbformat
import pytest

from attnlab import paths
from papermill.exceptions import PapermillExecutionError

import attnlab.report as report
from attnlab import env
from attnlab.nb import HEADLINE_MIME
from attnlab.paths import NOTEBOOKS_DIR, REPO_ROOT


def test_profiles_exist_and_merge_notebook_sections():
    assert {"quick", "full"} <= set(report.available_profiles())
    full = report.profile_parameters("full", "01_naive")
    assert full["profile"] == "full" and max(full["N_list"]) == 4096 and full["D_list"] == [32, 64, 128]
    assert report.profile_parameters("quick", "01_naive") == {"profile": "quick"}
    with pytest.raises(ValueError, match="unknown profile 'fastest'"):
        report.profile_parameters("fastest", "01_naive")


def test_overrides_parse_as_yaml():
    assert report.parse_overrides(["N_list=[64, 128]", "budget_s=1.0e-1", "check_edge_shapes=false"]) == {
        "N_list": [64, 128], "budget_s": 0.1, "check_edge_shapes": False}
    with pytest.raises(ValueError, match="key=value"):
        report.parse_overrides(["N_list"])


def test_unknown_parameters_stop_the_run():
    path = NOTEBOOKS_DIR / "01_naive.ipynb"
    report.check_parameters(path, {"N_list": [64], "mode": "replay"})
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['n_list'\]"):
        report.check_parameters(path, {"n_list": [64]})


def test_every_profile_names_only_declared_parameters():
    for profile in report.available_profiles():
        for path in report.list_notebooks():
            report.check_parameters(path, report.profile_parameters(profile, path.stem))


def test_only_selects_by_prefix_and_rejects_unknown():
    assert [p.stem for p in report.list_notebooks(["01"])] == ["01_naive"]
    with pytest.raises(ValueError, match="no notebook matches"):
        report.list_notebooks(["99"])


def test_headlines_are_collected_from_outputs():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [nbformat.v4.new_output("display_data", data={HEADLINE_MIME: {"tflops": 1.5}, "text/plain": "x"})]
    nb.cells.append(cell)
    assert report.collect_headlines(nb) == {"tflops": 1.5}


def test_index_lists_status_duration_mode_and_headlines(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "REPORTS_DIR", tmp_path)
    out = tmp_path / "gpu-x"
    out.mkdir()
    runs = [report.NotebookRun("01_naive", "passed", 12.5, "live", headlines={"best": 2.5}),
            report.NotebookRun("02_tiling", "failed", 3.0, "live", error="AssertionError: boom")]
    index = report.write_index(out, runs, "full", "live (X)")
    text = index.read_text()
    assert "| 01_naive | passed | 12.5 s | live | — | best: 2.5 |" in text          # no template: the figures
    assert "failed<br>**AssertionError: boom**" in text and "1/2 passed" in text
    assert json.loads((out / "runs.json").read_text())[1]["status"] == "failed"
    assert "gpu-x" in (tmp_path / "README.md").read_text()


def test_index_gives_one_generated_key_result_per_notebook():
    h = {"x_fla_bf16_t16384": 0.9953, "worst_rel_rms": 1.386e-05, "mem_vs_fla_t16384": 0.1111, "gpu": "G", "mode": "live"}
    line = report.key_result("13_fast_delta", h)
    assert line == "3xBF16 KDA 1.00× fla bf16 at T=16384, worst error 1.4e-05, extra memory 0.11× fla's"
    assert report.key_result("02_tiling", {"best_tiled_speedup": 2.3879, "at": "D=64 N=128",
                                           "worst_rel_err": "1.5e-06"}).startswith("tiling: up to 2.39×")
    # a missing or non-numeric figure falls back to the figures themselves, never gpu/mode
    assert report.key_result("13_fast_delta", {**h, "x_fla_bf16_t16384": None}).startswith("x_fla_bf16_t16384: None")
    assert report.key_result("99_new", {"gpu": "G", "mode": "live", "a": 1.0}) == "a: 1"
    assert report.key_result("99_new", {}) == "—"
    # every template names figures its notebook publishes (as recorded in reports/h200/runs.json)
    runs = json.loads((REPO_ROOT / "reports" / "h200" / "runs.json").read_text())
    for r in runs:
        if r["notebook"] in report.KEY_RESULTS and r["status"] == "passed":
            assert report.key_result(r["notebook"], r["headlines"]) != report.key_result("99_new", r["headlines"]), \
                r["notebook"]


def test_reindex_rewrites_the_index_from_runs_json_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "REPORTS_DIR", tmp_path)
    out = tmp_path / "gpu-z"
    out.mkdir()
    report.write_index(out, [report.NotebookRun("01_naive", "passed", 1.0, "live", headlines={"best": 2.5},
                                                command="python -m attnlab.report --only 01", profile="full")],
                       "full", "live")
    before = (out / "runs.json").read_text()
    assert report.main(["--reindex", "--out", str(out)]) == 0
    text = (out / "README.md").read_text()
    assert "no notebook was run" in text and "| 01_naive | passed |" in text and "--only 01" in text
    assert (out / "runs.json").read_text() == before
    assert report.main(["--reindex", "--out", str(tmp_path / "empty")]) == 2


def test_index_keeps_notebooks_of_earlier_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "REPORTS_DIR", tmp_path)
    out = tmp_path / "gpu-y"
    out.mkdir()
    report.write_index(out, [report.NotebookRun("01_naive", "passed", 1.0, "live"),
                             report.NotebookRun("02_tiling", "failed", 1.0, "live")], "full", "live")
    report.write_index(out, [report.NotebookRun("02_tiling", "passed", 2.0, "live")], "full", "live")
    runs = json.loads((out / "runs.json").read_text())
    assert [(r["notebook"], r["status"]) for r in runs] == [("01_naive", "passed"), ("02_tiling", "passed")]


# ---------------------------------------------------------------- the runner end to end, faked
# Notebook execution is replaced by a function that writes a tiny executed notebook (or fails), and
# live mode by a fake GPU 'gpu-x', so these run in a second on any machine and never touch reports/.

LIVE_X = env.Mode(True, "gpu-x", "Fake GPU X", "auto", "a fake device for tests")


def _executed(headline: dict) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [nbformat.v4.new_output("display_data", data={HEADLINE_MIME: headline, "text/plain": "x"})]
    nb.cells.append(cell)
    return nb


class FakeExecution:
    """Stands in for papermill: records the parameters, writes an executed notebook, may fail."""

    def __init__(self):
        self.calls: list[dict] = []
        self.outcome = "pass"    # "pass", "fail" (an error cell, output written), "crash" (no output)

    def __call__(self, path, output, params, timeout):
        self.calls.append(dict(params))
        if self.outcome == "crash":
            raise RuntimeError("Kernel died before replying to kernel_info")
        nbformat.write(_executed({"outcome": self.outcome, "seed": params.get("seed")}), output)
        if self.outcome == "fail":
            raise PapermillExecutionError(1, 1, "x", "AssertionError", "boom", [])


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """reports/ in tmp_path, live on a fake GPU, faked execution, a fast HTML export."""
    monkeypatch.setattr(report, "REPORTS_DIR", tmp_path)
    monkeypatch.setattr(report, "resolve_mode", lambda mode, gpu: LIVE_X)
    monkeypatch.setattr(report, "export_html",
                        lambda ipynb, html=None: report.write_text_atomic(html, f"<html>{ipynb.read_text()}</html>"))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))   # main() edits it
    monkeypatch.delenv("ATTNLAB_PROG", raising=False)
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setattr(report, "DATA_DIR", data)       # a live run's staging folder goes here
    monkeypatch.setattr(paths, "DATA_DIR", data)
    fake = FakeExecution()
    monkeypatch.setattr(report, "execute_notebook", fake)
    return fake


def _recorded_folder(root):
    """A committed-looking reports/gpu-x/ and reports/README.md; returns a snapshot to compare."""
    rec = root / "gpu-x"
    rec.mkdir()
    (rec / "01_naive.ipynb").write_text("recorded notebook")
    (rec / "01_naive.html").write_text("recorded page")
    (rec / "README.md").write_text("recorded index")
    (rec / "runs.json").write_text(json.dumps([{"notebook": "01_naive", "status": "passed"}]))
    (root / "README.md").write_text("top index")
    return _snapshot(root, ["gpu-x", "README.md"])


def _snapshot(root, names):
    files = [p for n in names for p in ([root / n] if (root / n).is_file() else sorted((root / n).rglob("*")))]
    return {str(p.relative_to(root)): p.read_bytes() for p in files if p.is_file()}


@pytest.mark.parametrize("argv, folder, table_profile", [
    (["--profile", "quick"], "gpu-x-quick", "quick"),
    (["-p", "seed=7"], "gpu-x-custom", "custom"),
    (["--profile", "quick", "-p", "seed=7", "-p", "N_list=[64, 128]"], "gpu-x-custom", "custom"),
])
def test_non_canonical_live_runs_never_touch_the_recorded_folder(lab, tmp_path, argv, folder, table_profile):
    before = _recorded_folder(tmp_path)
    assert report.main(["--only", "01", *argv]) == 0
    assert _snapshot(tmp_path, ["gpu-x", "README.md"]) == before, "the recorded folder or top index changed"
    out = tmp_path / folder
    assert (out / "01_naive.ipynb").is_file() and (out / "01_naive.html").is_file()
    # the notebooks' tables go to data/results/gpu-x/<table_profile>/, never the recorded full folder
    assert lab.calls[0]["profile"] == table_profile
    # the folder ignores itself (any profile name), and is left out of reports/README.md
    assert (out / ".gitignore").read_text().splitlines()[-1] == "*" and report.is_local_folder(out)
    command = "python -m attnlab.report " + shlex.join(["--only", "01", *argv])   # as a shell would take it
    run = json.loads((out / "runs.json").read_text())[0]
    expected_profile = argv[argv.index("--profile") + 1] if "--profile" in argv else "full"
    assert run["command"] == command and run["profile"] == expected_profile
    assert run["overrides"] == report.parse_overrides([a for a in argv[1:] if "=" in a])
    header = (out / "README.md").read_text().splitlines()[2]
    assert f"by `{command}` (profile `{expected_profile}`" in header and "--profile full`" not in header
    assert ("seed=7" in header) == ("seed=7" in argv)


def test_the_canonical_live_run_writes_the_recorded_folder_and_top_index(lab, tmp_path):
    local = tmp_path / "gpu-x-quick"
    local.mkdir()
    report.mark_local(local, "test")
    (local / "runs.json").write_text("[]")
    assert report.main(["--only", "01"]) == 0
    assert lab.calls[0]["profile"] == "full"
    rec = tmp_path / "gpu-x"
    assert not (rec / ".gitignore").exists() and (rec / "01_naive.ipynb").is_file()
    assert "by `python -m attnlab.report --only 01` (profile `full`, overrides: none)" in (rec / "README.md").read_text()
    top = (tmp_path / "README.md").read_text()
    assert "[gpu-x](gpu-x/README.md)" in top and "gpu-x-quick" not in top.split("\n\n", 2)[-1]


def test_the_command_line_shown_is_the_one_typed(lab, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_PROG", "./lab report")
    assert report.main(["--only", "01", "--profile", "quick"]) == 0
    assert "by `./lab report --only 01 --profile quick`" in (tmp_path / "gpu-x-quick" / "README.md").read_text()


@pytest.mark.parametrize("argv", [["--profile", "quick"], ["-p", "seed=7"]])
def test_out_cannot_aim_a_non_canonical_run_at_a_recorded_folder(lab, tmp_path, capsys, argv):
    before = _recorded_folder(tmp_path)
    assert report.main(["--only", "01", "--out", str(tmp_path / "gpu-x"), *argv]) == 2
    assert "holds a recorded run" in capsys.readouterr().err and not lab.calls
    assert _snapshot(tmp_path, ["gpu-x", "README.md"]) == before
    assert report.main(["--only", "01", "--out", str(tmp_path), *argv]) == 2


def test_a_failure_keeps_the_last_good_copy_and_a_success_clears_the_failed_one(lab, tmp_path):
    out = tmp_path / "gpu-x-quick"
    good_ipynb, good_html = report.report_files(out, "01_naive")
    bad_ipynb, bad_html = report.report_files(out, "01_naive", failed=True)
    assert report.main(["--only", "01", "--profile", "quick"]) == 0
    good = good_ipynb.read_bytes(), good_html.read_bytes()

    lab.outcome = "fail"
    assert report.main(["--only", "01", "--profile", "quick"]) == 1
    assert (good_ipynb.read_bytes(), good_html.read_bytes()) == good, "the good copy was overwritten"
    assert bad_ipynb.name == "01_naive.FAILED.ipynb" and bad_html.name == "01_naive.FAILED.html"
    assert "fail" in bad_ipynb.read_text() and bad_html.is_file()
    passed_at = json.loads((out / "runs.json").read_text())[0]
    assert passed_at["status"] == "failed" and passed_at["last_passed_utc"]
    row = next(line for line in (out / "README.md").read_text().splitlines() if line.startswith("| 01_naive"))
    assert "failed<br>**AssertionError: boom**" in row
    assert "last good (" in row and "[ipynb](01_naive.ipynb) · [html](01_naive.html)" in row
    assert "FAILED: [ipynb](01_naive.FAILED.ipynb) · [html](01_naive.FAILED.html)" in row
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")], "scratch files left behind"

    lab.outcome = "pass"
    assert report.main(["--only", "01", "--profile", "quick"]) == 0
    assert not bad_ipynb.exists() and not bad_html.exists()
    assert "pass" in good_ipynb.read_text() and "FAILED" not in (out / "README.md").read_text()


def test_a_crash_without_output_keeps_the_good_copy_and_drops_a_stale_failed_one(lab, tmp_path):
    out = tmp_path / "gpu-x-quick"
    assert report.main(["--only", "01", "--profile", "quick"]) == 0
    lab.outcome = "fail"
    assert report.main(["--only", "01", "--profile", "quick"]) == 1
    good = report.report_files(out, "01_naive")[0].read_bytes()
    lab.outcome = "crash"
    assert report.main(["--only", "01", "--profile", "quick"]) == 1
    assert report.report_files(out, "01_naive")[0].read_bytes() == good
    assert not any(p.exists() for p in report.report_files(out, "01_naive", failed=True))
    assert "RuntimeError: Kernel died" in (out / "README.md").read_text()


def test_an_interrupted_notebook_leaves_the_good_copy_and_no_scratch(lab, tmp_path, monkeypatch, capsys):
    out = tmp_path / "gpu-x-quick"
    assert report.main(["--only", "01", "--profile", "quick"]) == 0
    good = report.report_files(out, "01_naive")[0].read_bytes()

    def interrupted(path, output, params, timeout):
        output.write_text('{"cells": [')   # papermill saves as it goes: half a notebook
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "execute_notebook", interrupted)
    assert report.main(["--only", "01", "--profile", "quick"]) == 130
    assert report.report_files(out, "01_naive")[0].read_bytes() == good
    assert sorted(p.name for p in out.iterdir()) == [".gitignore", "01_naive.html", "01_naive.ipynb", "01_naive.summary.html",
                                                     "README.md", "runs.json"]
    assert capsys.readouterr().err.strip().startswith("interrupted")


def test_writes_are_atomic(tmp_path, monkeypatch):
    target = tmp_path / "README.md"
    report.write_text_atomic(target, "old")
    monkeypatch.setattr(report.os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        report.write_text_atomic(target, "new")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["README.md"]


def test_index_names_rows_left_from_earlier_commands(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "REPORTS_DIR", tmp_path)
    out = tmp_path / "gpu-z"
    out.mkdir()
    report.write_index(out, [report.NotebookRun("01_naive", "passed", 1.0, "live", profile="quick",
                                                command="./lab report --profile quick")], "quick", "live",
                       command="./lab report --profile quick")
    report.write_index(out, [report.NotebookRun("02_tiling", "passed", 1.0, "live", profile="quick",
                                                overrides={"seed": 7}, command="./lab report -p seed=7")],
                       "quick", "live", command="./lab report -p seed=7", overrides={"seed": 7})
    text = (out / "README.md").read_text()
    assert "by `./lab report -p seed=7` (profile `quick`, overrides: `seed=7`)" in text
    assert "Listed from an earlier run: 01_naive, by `./lab report --profile quick` (profile `quick`, overrides: none)" in text


# ---------------------------------------------------------------- user errors: one line, exit 2

USER_ERRORS = [
    (["--only", "01", "--mode", "live"], "--mode live needs a usable CUDA device"),
    (["--only", "99"], "no notebook matches ['99']"),
    (["--only", "01", "-p", "N_list=[64,"], "not valid YAML"),
    (["--only", "01", "-p", "N_list"], "must look like key=value"),
    (["--only", "01", "-p", "n_list=[64]"], "unknown parameter(s) ['n_list']"),
    (["--only", "01", "-p", "mode=live"], "use --mode live instead"),
    (["--only", "01", "-p", "profile=quick"], "use --profile quick instead"),
    (["--only", "01", "--profile", "fastest"], "unknown profile 'fastest'"),
    (["--only", "01", "--gpu", "never-recorded"], "no recorded results for GPU 'never-recorded'"),
    (["--only", "01", "--gpu", "H200"], "gpu must be a results folder name"),
    (["--mode", "bogus"], "invalid choice: 'bogus'"),
    (["--timeout", "0"], "give a number of seconds above 0"),
    (["--no-such-option"], "unrecognized arguments"),
]


@pytest.mark.parametrize("argv, message", USER_ERRORS, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_user_errors_are_one_line_and_exit_2(argv, message, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(report, "REPORTS_DIR", tmp_path)
    monkeypatch.setattr(env, "cuda_usable", lambda: False)   # as on a machine without a GPU
    try:
        rc = report.main(argv)
    except SystemExit as exc:   # argparse's own errors
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and message in err, err
    assert not list(tmp_path.iterdir()), "a rejected run wrote something"


@pytest.mark.skipif(env.cuda_usable(), reason="--mode live is not an error on a GPU machine")
@pytest.mark.parametrize("argv", [["--only", "01", "--mode", "live"], ["--only", "99"]])
def test_user_errors_print_no_traceback_from_the_command_line(argv):
    proc = subprocess.run([sys.executable, "-m", "attnlab.report", *argv], capture_output=True, text=True,
                          timeout=120, cwd=REPO_ROOT,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "lib")})
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr


# ---------------------------------------------------------------- ./lab help

@pytest.mark.parametrize("args", [[], ["help"], ["--help"]])
def test_lab_help_is_the_header_comment_only(args):
    proc = subprocess.run(["bash", str(REPO_ROOT / "lab"), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == ""
    lines = proc.stdout.rstrip("\n").splitlines()
    assert lines[0].startswith("attnlab's one entry point") and "./lab report" in proc.stdout
    assert "set -euo pipefail" not in proc.stdout and not any(line.startswith("#") for line in lines)
    assert lines[-1].startswith("ATTNLAB_TORCH_INDEX")


def test_lab_unknown_command_is_one_line():
    proc = subprocess.run(["bash", str(REPO_ROOT / "lab"), "bogus"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- many GPUs: order, worker processes, the index

def test_notebooks_run_after_the_ones_whose_tables_they_read():
    deps = report.notebook_dependencies(report.list_notebooks())
    assert deps["01_naive"] == deps["02_tiling"] == deps["03_float4"] == frozenset()   # '01_naive.cu' is a kernel
    assert deps["04_padding"] == {"01_naive", "02_tiling", "03_float4"}                # and 06's ceilings of the last run
    assert deps["06_roofline"] == {"01_naive", "02_tiling", "03_float4", "04_padding", "05_occupancy_scan"}
    assert "06_roofline" in deps["07_delta_attention_chunking"]
    # 12 reads every recorded table of the notebooks before it (13 reads nothing of 12's, nor 12 of 13's)
    assert deps["12_cross_gpu"] == {p.stem for p in report.list_notebooks() if p.stem < "12_cross_gpu"}
    # a subset: only the notebooks of this run count
    assert report.notebook_dependencies(report.list_notebooks(["04", "07"])) == {"04_padding": frozenset(),
                                                                                 "07_delta_attention_chunking": frozenset()}


def test_recorded_durations_come_from_the_first_folder_that_lists_a_notebook(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "runs.json").write_text(json.dumps([{"notebook": "01_naive", "duration_s": 5.0}]))
    (b / "runs.json").write_text(json.dumps([{"notebook": "01_naive", "duration_s": 50.0},
                                             {"notebook": "02_tiling", "duration_s": 7}]))
    assert report.recorded_durations([tmp_path / "none", a, b]) == {"01_naive": 5.0, "02_tiling": 7.0}
    (a / "runs.json").write_text("{not json")
    assert report.recorded_durations([a]) == {}


def test_index_says_which_gpu_and_host_ran_each_notebook(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "REPORTS_DIR", tmp_path)
    out = tmp_path / "gpu-w"
    out.mkdir()
    report.write_index(out, [report.NotebookRun("01_naive", "passed", 1.0, "live", gpu_index="3",
                                                gpu_uuid="GPU-5c1f0e2a-aaaa-bbbb", host="node-7"),
                             report.NotebookRun("02_tiling", "passed", 1.0, "live")], "full", "live")
    text = (out / "README.md").read_text()
    assert "| files | ran on |" in text
    assert "| GPU 3 · GPU-5c1f0e2a… · node-7 |" in text
    assert next(line for line in text.splitlines() if line.startswith("| 02_tiling")).endswith("| — |")
    assert json.loads((out / "runs.json").read_text())[0]["gpu_uuid"] == "GPU-5c1f0e2a-aaaa-bbbb"


def test_concurrent_index_writers_lose_no_entry(tmp_path, monkeypatch):
    import threading

    monkeypatch.setattr(report, "REPORTS_DIR", tmp_path)
    out = tmp_path / "gpu-v"
    out.mkdir()
    names = [f"{i:02d}_nb" for i in range(1, 13)]
    threads = [threading.Thread(target=report.write_index, args=(out, [report.NotebookRun(n, "passed", 1.0, "live")],
                                                                  "full", "live")) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r["notebook"] for r in json.loads((out / "runs.json").read_text())] == names
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


def test_the_worker_runs_one_notebook_and_reports_where(lab, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    out, result, spec = tmp_path / "w", tmp_path / "result.json", tmp_path / "job.json"
    spec.write_text(json.dumps({"notebook": str(NOTEBOOKS_DIR / "01_naive.ipynb"), "out_dir": str(out),
                                "result": str(result), "params": {"profile": "quick", "seed": 3}, "timeout": 60,
                                "mode": "auto", "gpu": "h200"}))
    assert report.main(["--worker", str(spec)]) == 0
    answer = json.loads(result.read_text())
    assert answer["mode"]["gpu"] == "gpu-x" and answer["mode"]["live"] is True
    run = answer["run"]
    assert run["status"] == "passed" and run["gpu_index"] == "5" and run["host"] and run["headlines"]["seed"] == 3
    assert (out / "01_naive.ipynb").is_file() and not (out / "runs.json").exists(), "a worker wrote an index"


def test_cluster_needs_ray_and_rays_address_selects_it(monkeypatch, capsys, tmp_path):
    from attnlab import cluster

    monkeypatch.setattr(report, "REPORTS_DIR", tmp_path)

    def no_ray():
        raise cluster.RayUnavailable("running on a Ray cluster needs Ray: pip install -e '.[ray]'")

    monkeypatch.setattr(cluster, "import_ray", no_ray)
    assert report.main(["--only", "01", "--cluster", "auto"]) == 2
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    assert report.main(["--only", "01", "--mode", "replay"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("needs Ray" in line for line in err)
    assert not list(tmp_path.iterdir())


@pytest.fixture(autouse=True)
def _no_ray_address(monkeypatch):
    """RAY_ADDRESS in the environment sends ./lab report to that Ray cluster: not in these tests."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def test_a_kernel_that_fails_to_start_is_started_again_and_a_cell_error_is_not(monkeypatch, tmp_path):
    """execute_notebook retries only jupyter_client's start-up failures (no cell has run), at most
    start_attempts times; any other error reaches the caller at once."""
    import papermill

    calls = []

    def flaky_start(*args, **kwargs):
        calls.append(kwargs)
        if len(calls) < 3:
            raise RuntimeError("Kernel died before replying to kernel_info")

    monkeypatch.setattr(papermill, "execute_notebook", flaky_start)
    report.execute_notebook(tmp_path / "a.ipynb", tmp_path / "b.ipynb", {}, 60)
    assert len(calls) == 3 and calls[0]["start_timeout"] == 120

    calls.clear()

    def never_starts(*args, **kwargs):
        calls.append(kwargs)
        raise RuntimeError("Kernel didn't respond in 120 seconds")

    monkeypatch.setattr(papermill, "execute_notebook", never_starts)
    with pytest.raises(RuntimeError, match="didn't respond"):
        report.execute_notebook(tmp_path / "a.ipynb", tmp_path / "b.ipynb", {}, 60, start_attempts=2)
    assert len(calls) == 2

    calls.clear()

    def cell_fails(*args, **kwargs):
        calls.append(kwargs)
        raise RuntimeError("a cell raised")

    monkeypatch.setattr(papermill, "execute_notebook", cell_fails)
    with pytest.raises(RuntimeError, match="a cell raised"):
        report.execute_notebook(tmp_path / "a.ipynb", tmp_path / "b.ipynb", {}, 60)
    assert len(calls) == 1


def test_a_failed_live_notebook_leaves_the_recorded_tables_as_they_were(lab, tmp_path, monkeypatch):
    """Tables a live notebook records go to a staging folder (paths.STAGE_ENV); data/ gets them only
    when the notebook passes. Half-way failures put theirs beside the FAILED report instead."""
    data = tmp_path / "data"
    table = data / "results" / "gpu-x" / "01_naive__timing.csv"
    table.parent.mkdir(parents=True)
    table.write_text("the last good table")
    seen = {}

    def records_then(outcome):
        def run(path, output, params, timeout):
            target = paths.staged(table)             # what results.save_table does under the runner
            seen["staged"] = target
            paths.write_atomic(target, f"from a run that will {outcome}")
            assert paths.readable(table).read_text() == f"from a run that will {outcome}"   # it reads its own
            lab.outcome = outcome
            lab(path, output, params, timeout)
        return run

    monkeypatch.setattr(report, "execute_notebook", records_then("fail"))
    assert report.main(["--only", "01"]) == 1
    assert table.read_text() == "the last good table" and seen["staged"] != table
    partial = report.failed_tables_dir(tmp_path / "gpu-x", "01_naive")
    assert (partial / "results" / "gpu-x" / "01_naive__timing.csv").read_text() == "from a run that will fail"
    run = json.loads((tmp_path / "gpu-x" / "runs.json").read_text())[0]
    assert run["status"] == "failed" and "01_naive.FAILED.tables" in run["error"]
    assert not list(data.glob(".stage-*")) and paths.STAGE_ENV not in os.environ

    monkeypatch.setattr(report, "execute_notebook", records_then("pass"))
    assert report.main(["--only", "01"]) == 0
    assert table.read_text() == "from a run that will pass" and not partial.exists()
    assert not list(data.glob(".stage-*")) and paths.STAGE_ENV not in os.environ


def test_staging_maps_only_data_and_promotes_atomically(tmp_path, monkeypatch):
    data = tmp_path / "data"
    monkeypatch.setattr(paths, "DATA_DIR", data)
    inside, outside = data / "tuned" / "g.json", tmp_path / "reports" / "x.html"
    monkeypatch.delenv(paths.STAGE_ENV, raising=False)
    assert paths.staged(inside) == inside and paths.readable(inside) == inside
    stage = data / ".stage-test"
    monkeypatch.setenv(paths.STAGE_ENV, str(stage))
    assert paths.staged(inside) == stage / "tuned" / "g.json" and paths.staged(outside) == outside
    assert paths.readable(inside) == inside                     # nothing staged yet: the recorded file
    paths.write_atomic(paths.staged(inside), "new")
    assert paths.readable(inside) == stage / "tuned" / "g.json"
    assert paths.promote(stage) == [inside] and inside.read_text() == "new" and not stage.exists()


# ---------------------------------------------------------------- compile caches across processes

def test_compile_caches_live_under_the_lab_cache_root_unless_set(tmp_path, monkeypatch):
    for var in ("CUPY_CACHE_DIR", "TRITON_CACHE_DIR", "TRITON_CACHE_AUTOTUNING"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ATTNLAB_CACHE_DIR", str(tmp_path))
    chosen = paths.use_persistent_caches()
    assert chosen == {"CUPY_CACHE_DIR": str(tmp_path / "cupy"), "TRITON_CACHE_DIR": str(tmp_path / "triton"),
                      "TRITON_CACHE_AUTOTUNING": "1"}
    assert all(os.environ[k] == v for k, v in chosen.items())
    # what a user set stays, including turning Triton's autotuning cache off
    monkeypatch.setenv("CUPY_CACHE_DIR", "/elsewhere/cupy")
    monkeypatch.setenv("TRITON_CACHE_AUTOTUNING", "0")
    monkeypatch.delenv("TRITON_CACHE_DIR")
    assert paths.use_persistent_caches() == {"TRITON_CACHE_DIR": str(tmp_path / "triton")}
    assert os.environ["CUPY_CACHE_DIR"] == "/elsewhere/cupy" and os.environ["TRITON_CACHE_AUTOTUNING"] == "0"


def test_importing_the_lab_sets_the_caches_for_every_process_it_starts():
    code = "import os, attnlab; print(os.environ['CUPY_CACHE_DIR'], os.environ['TRITON_CACHE_AUTOTUNING'])"
    env = {k: v for k, v in os.environ.items() if k not in ("CUPY_CACHE_DIR", "TRITON_CACHE_AUTOTUNING")}
    env["ATTNLAB_CACHE_DIR"] = "/some/root"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split() == ["/some/root/cupy", "1"]


def test_the_runner_counts_what_a_notebook_added_to_the_caches(lab, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "cache" / "cupy"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache" / "triton"))
    cupy = tmp_path / "cache" / "cupy"
    cupy.mkdir(parents=True)
    (cupy / "old.cubin").write_bytes(b"x")
    compiled = {"n": 2}

    def compiling(path, output, params, timeout):
        for i in range(compiled["n"]):
            (cupy / f"{path.stem}-{i}.cubin").write_bytes(b"x")
        (tmp_path / "cache" / "triton" / f"{path.stem}-kernel").mkdir(parents=True, exist_ok=True)
        nbformat.write(_executed({"outcome": "pass"}), output)

    monkeypatch.setattr(report, "execute_notebook", compiling)
    assert report.main(["--only", "01"]) == 0
    run = json.loads((tmp_path / "gpu-x" / "runs.json").read_text())[0]
    assert run["new_builds"] == 3
    assert "(3 new cache entries)" in (tmp_path / "gpu-x" / "README.md").read_text()
    compiled["n"] = 0   # the same notebook again: everything it builds is there already
    monkeypatch.setattr(report, "execute_notebook",
                        lambda path, output, params, timeout: nbformat.write(_executed({"outcome": "pass"}), output))
    assert report.main(["--only", "01"]) == 0
    assert json.loads((tmp_path / "gpu-x" / "runs.json").read_text())[0]["new_builds"] == 0
    assert "(all from cache)" in (tmp_path / "gpu-x" / "README.md").read_text()
