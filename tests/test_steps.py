"""The library calls notebooks 01-08 stand on (attnlab.steps, and the views added to nb, timing,
tile_scan, occupancy, roofline, bench and delta.bench): each checked against a hand-made case or the
recorded H200 tables, so a notebook cell that only calls one is backed by a test that can fail."""

import numpy as np
import pandas as pd
import pytest

from attnlab import nb, occupancy, steps, tile_scan
from attnlab.attention import bench
from attnlab import roofline as rl
from attnlab.delta import bench as db
from attnlab.env import Mode
from attnlab.paths import REPO_ROOT
from attnlab.timing import TARGET_REL_IQR, timing_problems

RESULTS = REPO_ROOT / "data" / "results" / "h200"
REPLAY = Mode(False, "h200", "h200", "replay", "test")
LIVE = Mode(True, "testgpu", "NVIDIA TestGPU", "live", "test")


def _table(notebook, name):
    return pd.read_csv(RESULTS / f"{notebook}__{name}.csv")


# ---------------------------------------------------------------- timing_problems

def _timing_row(**over):
    row = dict(min_ms=0.9, q1_ms=0.99, median_ms=1.0, q3_ms=1.01, max_ms=1.2, converged=True, flops=2e9, tflops=2.0)
    row.update(over)
    return row


def test_a_sound_timing_has_no_problem():
    assert timing_problems(pd.DataFrame([_timing_row()])).empty


@pytest.mark.parametrize("over", [dict(q1_ms=1.02), dict(min_ms=1.0), dict(q3_ms=1.3), dict(min_ms=0.0, q1_ms=0.0),
                                  dict(converged=False), dict(q3_ms=1.05, max_ms=1.2), dict(tflops=2.2)])
def test_each_broken_timing_is_flagged(over):
    # unordered quartiles, a zero time, 'converged' that disagrees with the spread, a wrong TFLOP/s
    assert len(timing_problems(pd.DataFrame([_timing_row(), _timing_row(**over)]))) == 1


def test_converged_follows_the_target_spread():
    spread = TARGET_REL_IQR * 1.5
    row = _timing_row(q1_ms=1 - spread / 2, q3_ms=1 + spread / 2, converged=False)
    assert timing_problems(pd.DataFrame([row])).empty


@pytest.mark.parametrize("name", ["01_naive__timing", "04_padding__tile_scan", "07_delta_attention_chunking__latency",
                                  "10_flash_bf16__latency"])
def test_every_recorded_timing_is_sound(name):
    t = pd.read_csv(RESULTS / f"{name}.csv").dropna(subset=["median_ms"])
    assert len(t) and timing_problems(t).empty


# ---------------------------------------------------------------- nb helpers

def test_parameter_checks_name_the_parameter():
    assert nb.require_fraction("tol", 0.05) == 0.05 and nb.require_bool("x", False) is False
    assert nb.require_ints(B=2, H=8) == [2, 8]
    for call, match in ((lambda: nb.require_fraction("tol", 1.0), "tol must be a fraction"),
                        (lambda: nb.require_bool("run_ncu", "yes"), "run_ncu must be true or false"),
                        (lambda: nb.require_ints(B=2, H=0), "H must be an integer ≥ 1")):
        with pytest.raises(ValueError, match=match):
            call()


def _fake_store(monkeypatch):
    """results.save_table/load_table on a dict: saving stamps a provenance column, as the real one does."""
    store = {}
    monkeypatch.setattr(nb.results, "save_table", lambda df, n, t, mode, profile: store.__setitem__(
        (n, t, profile), df.assign(gpu_name=mode.gpu_name)))
    monkeypatch.setattr(nb.results, "load_table", lambda n, t, gpu, profile="full": store[(n, t, profile)].copy())
    monkeypatch.setattr(nb, "banner", lambda *a, **k: None)
    return store


def test_record_or_replay_many_records_every_table_live(monkeypatch):
    store = _fake_store(monkeypatch)
    frames = nb.record_or_replay_many(lambda: {"a": pd.DataFrame({"x": [1]}), "b": pd.DataFrame({"x": [1, 2]})},
                                      "05_occupancy_scan", ["a", "b"], LIVE, "quick")
    assert sorted(store) == [("05_occupancy_scan", "a", "quick"), ("05_occupancy_scan", "b", "quick")]
    assert list(frames) == ["a", "b"] and len(frames["b"]) == 2
    assert (frames["a"]["gpu_name"] == LIVE.gpu_name).all()     # what was saved, as a replay would load it
    with pytest.raises(ValueError, match="no table"):
        nb.record_or_replay_many(lambda: {"a": pd.DataFrame({"x": [1]})}, "05_occupancy_scan", ["a", "b"], LIVE)


def test_a_live_table_is_read_back_as_recorded(monkeypatch):
    """Live, a notebook gets the recorded frame (provenance columns included), not the bare measurement:
    a cell that reads gpu_name works live as it does in replay (notebook 08 once failed live on that)."""
    _fake_store(monkeypatch)
    df = nb.record_or_replay(lambda: pd.DataFrame({"x": [1.0]}), "08_register_tiling", "ceilings", LIVE, "quick")
    assert df["gpu_name"].tolist() == [LIVE.gpu_name]


def test_record_or_replay_many_loads_the_recorded_tables(monkeypatch):
    monkeypatch.setattr(nb, "banner", lambda *a, **k: None)
    frames = nb.record_or_replay_many(lambda: pytest.fail("replay must not measure"), "05_occupancy_scan",
                                      ["configs", "scan"], REPLAY)
    assert len(frames["configs"]) and len(frames["scan"])


def test_requested_names_points_never_recorded(capsys):
    t = pd.DataFrame({"N": [64, 128], "D": [32, 32], "v": [1, 2]})
    got = nb.requested(t, REPLAY, N=[64, 256], D=[32])
    assert got["N"].tolist() == [64] and "N=256, D=32" in capsys.readouterr().out


# ---------------------------------------------------------------- steps

def test_correctness_summary_groups_per_kernel_and_head_dim():
    c = pd.DataFrame(dict(kernel=["a", "a", "a"], D=[32, 32, 64], B=[1, 2, 1], H=[1, 500, 1], N=[1, 64, 17],
                          all_written=[True, True, False], rel_err_fp64=[1e-7, 2e-7, np.nan], rel_err_sdpa=[1e-6] * 3,
                          passed=[True, True, False]))
    s = steps.correctness_summary(c).set_index("D")
    assert s.loc[32, "shapes"] == 2 and s.loc[32, "passed"] == 2 and s.loc[32, "BH_max"] == 1000
    assert s.loc[32, "worst_rel_err_fp64"] == 2e-7 and not s.loc[64, "all_written"] and s.loc[64, "passed"] == 0


def test_verdict_sentences_follow_the_rows():
    from attnlab.ladder import Verdict

    yes, no = Verdict("c1", True, pd.DataFrame(), "ev1"), Verdict("c1", False, pd.DataFrame(), "ev2")
    rows = steps.verdict_rows([(yes, no), (no, None)], "GPU")
    text = steps.describe_verdicts(rows, "GPU").splitlines()
    assert "holds on GPU — ev1. On the seed's data: does not hold." in text[0]
    assert "does NOT hold on GPU — ev2" in text[1] and "not in the seed's tables" in text[1]


def _full_ladder():
    from attnlab import ladder

    timing = _table("04_padding", "timing")
    sources = {n: ladder.same_grid(_table(n, "timing"), timing) for n in ("01_naive", "02_tiling", "03_float4")}
    sources["04_padding"] = timing
    return ladder.ladder_table(ladder.assemble_ladder(sources, owners=steps.OWNERS).drop(columns=["source"]))


def test_seed_claims_judge_every_claim_once_and_skip_d128_without_it():
    full, scan = _full_ladder(), _table("04_padding", "tile_scan").dropna(subset=["median_ms"])
    claims = steps.seed_claims(full, scan, gain_limit=1.4, tolerance=0.05, negligible=0.05)
    keys = [k for k, *_ in claims]
    assert keys == ["tiling_gain", "no_tiled_variant_gains_more", "d128_tiling_slower", "float4_padding_negligible",
                    "padding_negligible", "tile_rows_8_best", "double_buffer_pays"]
    assert claims[-1][3] is None and all(c[3] is not None for c in claims[:-1])   # the seed has no cp.async figures
    no128 = steps.seed_claims(full[full["D"] != 128], None, gain_limit=1.4, tolerance=0.05, negligible=0.05)
    assert "d128_tiling_slower" not in [k for k, *_ in no128] and "tile_rows_8_best" not in [k for k, *_ in no128]


def test_bank_counters_meet_the_models_zero_on_the_record():
    rates = steps.bank_counters("h200")
    assert set(rates["kernel"]) == {"tiled", "vec_load", "vec_padded", "double_buffer"}
    assert (rates[["ld_extra_pct", "st_extra_pct"]] < steps.BANK_TOLERANCE_PCT).all().all()
    assert "agree with it" in steps.describe_bank_counters(rates)
    assert "does not explain" in steps.describe_bank_counters(rates, tolerance_pct=0.1)
    assert steps.bank_counters("gpu-never-recorded") is None


def test_the_cpu_models_meet_float64():
    assert (steps.online_model_check(0)["rel_err_fp64"] < 1e-5).all()
    m = steps.tiled_model_check(0)
    assert (m["rel_err_fp32_per_key"] < 1e-5).all() and (m["rel_err_fp64_per_tile"] < 1e-12).all()
    assert m["partial_last_tile"].any() and (m["N"] == 1).any()


# ---------------------------------------------------------------- 05: occupancy and the scan

def test_limiter_examples_show_their_limiter():
    ex = occupancy.limiter_examples()
    assert (ex["limiter"] == ex["expected"]).all() and set(ex["expected"]) == set(occupancy.LIMITERS)


def test_seed_occupancy_sentence_names_the_limiter():
    t = pd.DataFrame(dict(arch=["sm_75"] * 2, D=[32, 128], tile=["8x32", "8x8"], blocks_per_SM=[4, 4],
                          occupancy=[1.0, 1.0], limiter=["warps", "warps"], block_threads=[256, 256]))
    text = tile_scan.describe_seed_occupancy(t)
    assert "4 blocks is the warp ceiling" in text and "not* what limited" in text
    t.loc[1, "limiter"] = "shared memory"
    assert "Shared memory limited occupancy at D = 128" in tile_scan.describe_seed_occupancy(t)


def test_recorded_scan_agrees_with_the_store_and_the_driver():
    scan, configs = _table("05_occupancy_scan", "scan"), _table("05_occupancy_scan", "configs")
    best = tile_scan.best_tiles_from_scan(scan)
    stored, differ, lines = tile_scan.tuned_file_check(REPLAY, "full", best)
    assert len(stored) and differ is not None and differ.empty and len(lines) == len(best)
    assert tile_scan.file_matches_scan(REPLAY, "quick") and not tile_scan.file_matches_scan(LIVE, "quick")
    assert "nothing written" in tile_scan.store_best(REPLAY, "full", best)
    assert "not writing" in tile_scan.store_best(LIVE, "quick", best)
    _, then, now, bad, _ = tile_scan.driver_agreement(_table("05_occupancy_scan", "occupancy_check"))
    assert then == now == 100.0 and bad.empty
    joined, corr, winners = tile_scan.occupancy_vs_latency(scan, configs)
    assert (winners["rel_latency"] == 1).all() and (joined["rel_latency"] >= 1).all()


# ---------------------------------------------------------------- 06: the roofline

def test_notebook_06_places_only_the_seed_ladder():
    meas, skipped = rl.collect_seed_measurements(REPLAY)
    assert set(meas["table"].str[:3]) <= {"01_", "02_", "03_", "04_", "05_"} and not skipped
    sheet = rl.datasheet_ceilings("H200")
    measured = rl.Ceilings("H200", sheet.peak_flops * 0.9, sheet.bandwidth * 0.8, "measured")
    text = rl.describe_ceilings(measured, sheet)
    assert "= 90 %" in text and "= 80 %" in text


def test_seed_points_sentence_counts_the_points_above_the_roof():
    pts = rl.seed_points()
    text = rl.describe_seed_points(pts, rl.datasheet_ceilings("GTX 1660 Ti"))
    assert f"**{int((pts['pct_of_attainable'] > 100).sum())} of {len(pts)}**" in text


def test_l2_sweep_is_the_swept_head_dim():
    from attnlab import ncu

    mvm = rl.measured_vs_modelled(ncu.counters_wide(_table("06_roofline", "ncu")))
    l2q, sw = rl.l2_sweep(mvm, 60 * 2**20)
    assert sw["D"].nunique() == 1 and sw["N"].is_monotonic_increasing and len(sw) == l2q["D"].value_counts().max()
    assert f"N={int(sw['N'].iloc[0])}" in rl.describe_l2_question(sw, 60 * 2**20)


# ---------------------------------------------------------------- 01, 07: generated sentences

def test_naive_sentences_come_from_the_table():
    summary = bench.versus_sdpa(_table("01_naive", "timing"), "naive", 67.0)
    text = bench.describe_naive(summary, 67.0)
    best = summary.loc[summary["naive_tflops"].idxmax()]
    assert f"**{best['naive_tflops']:.2f} TFLOP/s**" in text and "log-log slope" in text


def test_delta_demos_and_sentences():
    demo, finite, err = db.difference_form_demo()
    assert demo.loc[0, "finite"] < demo.loc[0, "pairs"] == demo.loc[1, "finite"] and finite and err < 1e-5
    e = dict(zip(*db.tf32_demo(32, 128)[["method", "rel_err"]].values.T))
    assert e["TF32, operands rounded"] > 1e-4 > 1e-6 > e["3xTF32 (05_chunk_state_tc)"]
    lat, sweep = _table("07_delta_attention_chunking", "latency"), _table("07_delta_attention_chunking", "chunk_sweep")
    roof = rl.ceilings_from_table(_table("06_roofline", "ceilings"), "H200")
    text, figs = db.what_the_numbers_say(lat, sweep, 16384, 32, roof)
    rec = lat[(lat["T"] == 16384) & (lat["implementation"] == "recurrent")]["median_ms"].iloc[0]
    chk = lat[(lat["T"] == 16384) & (lat["implementation"] == "chunked")]["median_ms"].iloc[0]
    assert figs["reached"] == pytest.approx(rec / chk) and "Bound 1" in text and "Bound 2" in text
    assert figs["bound_1"] > figs["reached"]
    assert "fla timed in the same run" in db.fla_note(lat)
    assert "no fla rows" in db.fla_note(lat[~lat["implementation"].str.startswith("fla")])


# ---------------------------------------------------------------- one arrays module (issue 9)

def test_host_data_is_computed_with_numpy_and_bfloat16_widens_exactly():
    import torch

    from attnlab import arrays

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert arrays.array_module(x) is np and arrays.array_module([1.0, 2.0]) is np
    xp, view = arrays.float_view(torch.from_numpy(x).to(torch.bfloat16))
    assert xp is np and view.dtype == np.float32 and (view == x).all()      # small integers are exact in bf16
    assert arrays.float_view([1.0, 2.0])[1].tolist() == [1.0, 2.0]


def test_no_module_sniffs_array_types_but_arrays():
    """The one place that asks what kind of array it was given (issue 9, item 5)."""
    import re

    lib = REPO_ROOT / "lib" / "attnlab"
    sniff = re.compile(r"__module__\)?\.startswith\(")
    offenders = [str(p.relative_to(lib)) for p in lib.rglob("*.py") if p.name != "arrays.py" and sniff.search(p.read_text())]
    assert not offenders, offenders


def test_time_grid_times_every_kernel_on_the_same_fresh_inputs(monkeypatch):
    """The seed ladder's timing loop on the CPU: fresh inputs per (D, N) from one seeded generator,
    shared by every kernel and SDPA of that point; one tidy row each, in grid order."""
    import types

    from attnlab import timing
    from attnlab.attention import bench as ab

    monkeypatch.setattr(ab, "random_qkv", lambda B, H, N, D, rng: tuple(
        rng.standard_normal((B, H, N, D)).astype(np.float32) for _ in range(3)))
    seen = []
    monkeypatch.setattr(ab, "run_attention", lambda name, q, k, v, *a, out=None, gpu=None: seen.append((name, q, out)))
    spec = types.SimpleNamespace(tiled=False)
    monkeypatch.setattr(ab, "get_kernel", lambda *a: types.SimpleNamespace(spec=spec, tile_rows=0, tile_kv=0,
                                                                          tiles_from="untiled"))
    monkeypatch.setattr(timing, "time_gpu", lambda fn, budget_s: (fn(), timing.summarize([1.0, 1.0, 1.0]))[1])
    t = ab.time_grid(["naive", "tiled"], 1, 2, [3, 5], [32], budget_s=0.1, seed=7)
    assert list(zip(t["kernel"], t["N"])) == [("naive", 3), ("tiled", 3), ("torch_sdpa", 3),
                                              ("naive", 5), ("tiled", 5), ("torch_sdpa", 5)]
    assert seen[0][1] is seen[1][1] and seen[0][2] is seen[1][2] and seen[2][1] is not seen[0][1]
    again = [d[2] for d in ab.fresh_inputs(1, 2, [3, 5], [32], 7)]   # q of each point
    assert np.array_equal(again[0], seen[0][1]) and np.array_equal(again[1], seen[2][1])   # reproducible
    assert timing_problems(t).empty


@pytest.mark.parametrize("v, shown", [(310.0, "310"), (3153408.0, "3,153,408"), (4.355092, "4.355"), (0.6387, "0.6387"),
                                      (1.506e-06, "1.51e-06"), (12345.6, "12346"), (2.5e7 + 0.5, "25,000,000"),
                                      (float("nan"), "nan")])
def test_table_numbers_are_formatted_by_kind(v, shown):
    assert nb.format_number(v) == shown
