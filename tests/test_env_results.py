"""Modes, provenance and the results store."""

import pandas as pd
import pytest

import attnlab.env as env
import attnlab.results as results
from attnlab.env import Mode, MissingRecordedData, gpu_slug, resolve_mode

LIVE = Mode(True, "testgpu", "NVIDIA TestGPU", "auto", "test")
REPLAY = Mode(False, "testgpu", "testgpu", "auto", "test")


@pytest.mark.parametrize("name,slug", [("NVIDIA H200", "h200"), ("NVIDIA GeForce GTX 1660 Ti", "geforce-gtx-1660-ti"),
                                       ("NVIDIA H100 80GB HBM3", "h100-80gb-hbm3")])
def test_gpu_slug(name, slug):
    assert gpu_slug(name) == slug


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="mode must be one of"):
        resolve_mode("fast")
    with pytest.raises(ValueError, match="results folder name"):
        resolve_mode("replay", "../etc")


def test_replay_of_unrecorded_gpu_says_how_to_record():
    with pytest.raises(MissingRecordedData, match="To record it"):
        resolve_mode("replay", "gpu-that-was-never-recorded")


def test_replay_of_recorded_h200_resolves():
    m = resolve_mode("replay", "h200")
    assert not m.live and m.gpu == "h200" and "replay" in str(m)


@pytest.mark.skipif(env.cuda_usable(), reason="this machine has a GPU")
def test_live_without_gpu_is_an_error():
    with pytest.raises(RuntimeError, match="needs a usable CUDA device"):
        resolve_mode("live")


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(env, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(results, "provenance", lambda mode: {
        "gpu_name": mode.gpu_name, "gpu": mode.gpu, "driver_version": "1.0", "git_commit": "abc",
        "git_dirty": "False", "timestamp_utc": "2026-01-01T00:00:00+00:00", "mode": "live",
        "cuda_runtime": "13000", "cupy_version": "14", "torch_version": "2"})
    return tmp_path


def test_save_and_load_round_trip_with_provenance(store):
    df = pd.DataFrame({"kernel": ["naive"], "N": [64], "median_ms": [0.5]})
    path = results.save_table(df, "01_naive", "timing", LIVE)
    assert path == store / "testgpu" / "01_naive__timing.csv"
    back = results.load_table("01_naive", "timing", "testgpu")
    assert back["median_ms"].tolist() == [0.5] and back["gpu_name"].tolist() == ["NVIDIA TestGPU"]
    assert back["profile"].tolist() == ["full"]
    assert "NVIDIA TestGPU" in results.describe_provenance(back)


def test_non_full_profiles_never_overwrite_the_recorded_run(store):
    df = pd.DataFrame({"x": [1]})
    results.save_table(df, "01_naive", "timing", LIVE)
    quick = results.save_table(pd.DataFrame({"x": [2]}), "01_naive", "timing", LIVE, profile="quick")
    assert quick.parent.name == "quick"
    assert results.load_table("01_naive", "timing", "testgpu")["x"].tolist() == [1]


def test_replay_never_writes(store):
    with pytest.raises(ValueError, match="replay mode never writes"):
        results.save_table(pd.DataFrame({"x": [1]}), "01_naive", "timing", REPLAY)


def test_refuses_empty_tables_and_bad_names(store):
    with pytest.raises(ValueError, match="empty"):
        results.save_table(pd.DataFrame(), "01_naive", "timing", LIVE)
    with pytest.raises(ValueError, match="notebook name"):
        results.save_table(pd.DataFrame({"x": [1]}), "naive", "timing", LIVE)
    with pytest.raises(ValueError, match="clash"):
        results.save_table(pd.DataFrame({"gpu_name": [1]}), "01_naive", "timing", LIVE)


def test_missing_table_names_the_file_and_how_to_record(store):
    with pytest.raises(MissingRecordedData, match="01_naive__timing.csv.*To record"):
        results.load_table("01_naive", "timing", "testgpu")


def test_failed_write_keeps_the_previous_table(store, monkeypatch):
    results.save_table(pd.DataFrame({"x": [1]}), "01_naive", "timing", LIVE)

    def boom(self, *a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_csv", boom)
    with pytest.raises(OSError):
        results.save_table(pd.DataFrame({"x": [2]}), "01_naive", "timing", LIVE)
    monkeypatch.undo()
    folder = store / "testgpu"
    assert sorted(p.name for p in folder.iterdir()) == ["01_naive__timing.csv"], "temporary file left behind"
    assert pd.read_csv(folder / "01_naive__timing.csv")["x"].tolist() == [1]


def test_recorded_gpu_summary_names_device_commits_and_span(store):
    assert "no recorded tables" in results.describe_recorded_gpu("testgpu")
    results.save_table(pd.DataFrame({"x": [1]}), "01_naive", "timing", LIVE)
    results.save_table(pd.DataFrame({"x": [1]}), "02_tiling", "timing", LIVE)
    line = results.describe_recorded_gpu("testgpu")
    assert "NVIDIA TestGPU" in line and "2 tables" in line and "commits abc" in line
