"""The report runner's pure parts: profiles, overrides, parameter checks, headlines, index."""

import json

import nbformat
import pytest

import attnlab.report as report
from attnlab.nb import HEADLINE_MIME
from attnlab.paths import NOTEBOOKS_DIR


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
    assert "| 01_naive | passed | 12.5 s | live | — | best: 2.5 |" in text
    assert "failed<br>**AssertionError: boom**" in text and "1/2 passed" in text
    assert json.loads((out / "runs.json").read_text())[1]["status"] == "failed"
    assert "gpu-x" in (tmp_path / "README.md").read_text()


def test_index_keeps_notebooks_of_earlier_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "REPORTS_DIR", tmp_path)
    out = tmp_path / "gpu-y"
    out.mkdir()
    report.write_index(out, [report.NotebookRun("01_naive", "passed", 1.0, "live"),
                             report.NotebookRun("02_tiling", "failed", 1.0, "live")], "full", "live")
    report.write_index(out, [report.NotebookRun("02_tiling", "passed", 2.0, "live")], "full", "live")
    runs = json.loads((out / "runs.json").read_text())
    assert [(r["notebook"], r["status"]) for r in runs] == [("01_naive", "passed"), ("02_tiling", "passed")]
