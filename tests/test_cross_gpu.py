"""attnlab.cross_gpu (notebook 12): every recorded GPU beside the others and the seed, on the
committed H200 tables and on made-up GPUs in a scratch results folder."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from attnlab import cross_gpu as xg
from attnlab import env, ladder, results
from attnlab import roofline as rl
from attnlab.paths import RESULTS_DIR, TUNED_DIR
from attnlab.seed import SEED_TILES

SEED = xg.Source(xg.SEED_KEY, "gtx-1660-ti", "", seed=True)
H200 = xg.Source("h200", "h200")


def test_sources_are_the_recorded_gpus_then_the_seed():
    srcs = xg.sources()
    assert [s.key for s in srcs][-1] == xg.SEED_KEY and srcs[-1].seed
    assert "h200" in [s.key for s in srcs] and all(s.profile == "full" for s in srcs[:-1])
    assert [s.key for s in xg.sources(gpus=[])] == [xg.SEED_KEY]


def test_each_gpu_is_measured_against_its_own_roof():
    c, where = xg.roof(H200)
    table = results.load_table("06_roofline", "ceilings", "h200")
    assert where.startswith("measured") and c.peak_flops == pytest.approx(
        float(table.loc[table["ceiling"] == "fp32_fma", "value"].median()))
    c, where = xg.roof(SEED)
    assert where.startswith("datasheet") and c.peak_flops == 5.44e12 and c.bandwidth == 288e9


def test_side_by_side_agrees_with_notebook_06s_placement():
    long = xg.side_by_side([H200, SEED])
    assert set(long["gpu"]) == {"h200", xg.SEED_KEY}
    assert set(long["kernel"]) == set(ladder.KERNEL_ORDER) and not (long["kernel"] == ladder.SDPA).any()
    # the seed's share of its roof is what roofline.seed_points (notebook 06) computes
    seed_pts = rl.seed_points().set_index(["kernel", "D", "N"])["pct_of_attainable"]
    mine = long[long["gpu"] == xg.SEED_KEY].set_index(["kernel", "D", "N"])["pct_of_roof"]
    assert np.allclose(mine.sort_index(), seed_pts.reindex(mine.index).sort_index())
    # latencies are the recorded ones: H200 naive from 02_tiling, vec_padded from 04_padding
    t02 = results.load_table("02_tiling", "timing", "h200")
    row = long[(long["gpu"] == "h200") & (long["kernel"] == "naive") & (long["D"] == 64) & (long["N"] == 4096)]
    assert float(row["median_ms"].iloc[0]) == float(t02[(t02.kernel == "naive") & (t02.D == 64) & (t02.N == 4096)]["median_ms"].iloc[0])
    assert (long["pct_of_roof"] >= long["pct_of_peak"] - 1e-9).all()
    grid = xg.common_grid(long)
    assert set(grid["D"]) == {32, 64, 128} and set(grid["N"]) == {64, 128, 256, 512, 1024, 2048, 4096}
    w = xg.wide(long)
    assert list(w.columns[:3]) == ["D", "N", "kernel"] and (w["N"] == 4096).all()
    assert w.set_index(["D", "kernel"]).loc[(32, "naive"), xg.SEED_KEY] == 289.52


def test_best_tiles_beside_the_seeds():
    best = xg.best_tiles([H200, SEED])
    seed = best[best["gpu"] == xg.SEED_KEY]
    assert {int(r.D): (int(r.tile_rows), int(r.tile_kv)) for r in seed.itertuples()} == SEED_TILES
    tuned = json.loads((TUNED_DIR / "h200.json").read_text())["entries"]
    h = best[best["gpu"] == "h200"].set_index(["kernel", "D"])
    for kernel, by_d in tuned.items():
        for d, e in by_d.items():
            assert (h.loc[(kernel, int(d)), "tile_rows"], h.loc[(kernel, int(d)), "tile_kv"]) == (e["tile_rows"], e["tile_kv"])
    wide = xg.best_tiles_wide(best)
    assert wide.set_index(["kernel", "D"]).loc[("tiled", 128), xg.SEED_KEY] == "8×8"


def test_the_seeds_conclusions_hold_on_its_own_figures():
    c = xg.conclusions([SEED]).set_index("claim")["holds"]
    for claim in ("tiling beats naive at D=32", "tiling gains at most ~1.4× over naive",
                  "at D=128 tiling is slower than naive", "TILE_ROWS=8 is best for every D", "TILE_KV shrinks as D grows"):
        assert c[claim] is True, claim
    assert all(v is True or v is False for v in c), "every claim is judged on the seed's data"


def test_conclusions_on_the_h200_match_notebook_04s_verdicts():
    c = xg.conclusions([H200]).set_index("claim")
    assert c.loc["tiling gains at most ~1.4× over naive", "holds"] is False     # 02's claim_1_holds
    assert c.loc["at D=128 tiling is slower than naive", "holds"] is False      # 02's claim_2_holds
    assert c.loc["TILE_KV shrinks as D grows", "holds"] is True
    wide = xg.conclusions_wide(xg.conclusions([H200, SEED]))
    assert list(wide.columns) == ["claim", "h200", xg.SEED_KEY] and len(wide) == len(xg.CLAIMS)
    assert set(wide["h200"]) <= {"holds", "does not hold", "—"}


# ---------------------------------------------------------------- made-up GPUs

@pytest.fixture
def store(tmp_path, monkeypatch):
    """data/results in tmp_path: the H200's ladder tables copied as two other GPUs."""
    root = tmp_path / "results"
    for g in ("h200",):
        (root / g).mkdir(parents=True)
        for p in (RESULTS_DIR / g).glob("*.csv"):
            shutil.copy(p, root / g)
    monkeypatch.setattr(results, "RESULTS_DIR", root)
    monkeypatch.setattr(env, "RESULTS_DIR", root)
    return root


def _copy_as(root, gpu, name, factor=None, tables=xg.LADDER_NOTEBOOKS, folder=None):
    dest = root / gpu / (folder or "")
    dest.mkdir(parents=True, exist_ok=True)
    for nb in tables:
        t = pd.read_csv(RESULTS_DIR / "h200" / f"{nb}__timing.csv")
        t["gpu_name"], t["gpu"] = name, gpu
        if factor:
            t["median_ms"] = [m * factor(k, d) for m, k, d in zip(t["median_ms"], t["kernel"], t["D"])]
        t.to_csv(dest / f"{nb}__timing.csv", index=False)


def test_a_gpu_without_ceilings_or_datasheet_is_shown_without_a_roof(store):
    # tiled made 1.5x slower than naive at D=128: the seed's D=128 claim holds on this one
    _copy_as(store, "fake-gpu", "NVIDIA Fake GPU",
             factor=lambda k, d: 1.0 if k == "naive" or d != 128 else 3.0)
    srcs = xg.sources()
    assert [s.key for s in srcs] == ["fake-gpu", "h200", xg.SEED_KEY]
    c, why = xg.roof(srcs[0])
    assert c is None and "no ceilings" in why
    long = xg.side_by_side(srcs)
    fake = long[long["gpu"] == "fake-gpu"]
    assert fake["pct_of_roof"].isna().all() and (fake["achieved_tflops"] > 0).all()
    assert (fake["gpu_name"] == "NVIDIA Fake GPU").all()
    v = xg.conclusions(srcs)
    mine = v[v["gpu"] == "fake-gpu"].set_index("claim")
    assert mine.loc["at D=128 tiling is slower than naive", "holds"] is True
    assert mine.loc["attention is compute-bound (saving bandwidth is the wrong lever)", "holds"] is None
    assert "no roof" in mine.loc["attention is compute-bound (saving bandwidth is the wrong lever)", "evidence"]
    assert mine.loc["TILE_KV shrinks as D grows", "holds"] is None      # no data/tuned/fake-gpu.json


def test_a_known_gpu_without_06_uses_its_datasheet(store):
    _copy_as(store, "h200-b", "NVIDIA H200")
    c, why = xg.roof(xg.Source("h200-b", "h200-b"))
    assert c.peak_flops == 67e12 and why.startswith("datasheet")


def test_a_gpu_with_other_tables_only_is_listed_but_not_judged(store):
    (store / "lonely").mkdir()
    shutil.copy(RESULTS_DIR / "h200" / "07_delta_attention_chunking__latency.csv", store / "lonely")
    srcs = xg.sources()
    assert "lonely" in [s.key for s in srcs] and xg.ladder_timing(xg.Source("lonely", "lonely")) is None
    assert "lonely" not in set(xg.side_by_side(srcs)["gpu"])
    v = xg.conclusions(srcs)
    assert v[v["gpu"] == "lonely"]["holds"].isna().all()
    assert (v[v["gpu"] == "lonely"]["evidence"].str.contains("recorded")).all()


def test_a_profile_folder_joins_as_its_own_source(store, tmp_path):
    _copy_as(store, "h200", "NVIDIA H200", factor=lambda k, d: 2.0, folder="quick")
    srcs = xg.sources(extra_profile="quick")
    assert [s.key for s in srcs] == ["h200", "h200/quick", xg.SEED_KEY]
    long = xg.side_by_side(srcs)
    a = long[long["gpu"] == "h200"].set_index(["kernel", "D", "N"])["median_ms"]
    b = long[long["gpu"] == "h200/quick"].set_index(["kernel", "D", "N"])["median_ms"]
    assert np.allclose(b.reindex(a.index), 2 * a)
    assert xg.roof(srcs[1])[1].startswith("datasheet")     # 06 of the quick profile was not recorded
    assert "h200/quick" not in set(xg.best_tiles(srcs, tuned_dir=tmp_path)["gpu"])


def test_best_tiles_of_a_tuned_file(store, tmp_path):
    from attnlab import tuned

    data = tuned.empty("fake-gpu")
    for D, (tr, kv) in {32: (16, 64), 64: (16, 64), 128: (8, 64)}.items():
        tuned.record(data, "tiled", D, tr, kv, 1.0, 4096, "2026-01-01T00:00:00Z", "abc")
    tuned.save(data, tmp_path)
    _copy_as(store, "fake-gpu", "NVIDIA Fake GPU")
    best = xg.best_tiles(xg.sources(gpus=["fake-gpu"]), tuned_dir=tmp_path)
    mine = best[best["gpu"] == "fake-gpu"]
    assert list(mine["tile_kv"]) == [64, 64, 64] and list(mine["source"].unique()) == ["data/tuned/fake-gpu.json"]
    assert xg.verdict_tile_kv(mine).holds is False and xg.verdict_tile_rows(mine).holds is False


def test_verdict_tiling_beats_naive():
    t = pd.DataFrame({"kernel": ["tiled"] * 3, "D": [32] * 3, "N": [64, 128, 256], "median_ms": [1.0, 2.0, 3.0],
                      "speedup_vs_naive": [1.2, 0.9, 1.5]})
    v = xg.verdict_tiling_beats_naive(t)
    assert v.holds is False and "2/3" in v.summary
    assert xg.verdict_tiling_beats_naive(t.assign(speedup_vs_naive=1.1)).holds is True
    with pytest.raises(ValueError, match="D=64"):
        xg.verdict_tiling_beats_naive(t, D=64)


def test_a_gpu_measured_with_a_profile_only_joins_a_live_run_of_that_profile(store):
    _copy_as(store, "a100", "NVIDIA A100", folder="quick")
    assert "a100" not in [s.key for s in xg.sources()]
    srcs = xg.sources(extra_profile="quick")
    assert [s.key for s in srcs] == ["h200", "a100/quick", xg.SEED_KEY]
    long = xg.side_by_side(srcs)
    assert (long[long["gpu"] == "a100/quick"]["gpu_name"] == "NVIDIA A100").all()
    assert xg.roof(srcs[1])[0] is None      # neither measured ceilings nor a datasheet row
