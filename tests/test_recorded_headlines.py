"""The index's headline figures (reports/<gpu>/runs.json) recomputed from the
recorded CSVs with the same library calls: a headline that its table does not give back is stale or
typed by hand."""

import json
import math

import pandas as pd
import pytest

from attnlab import flash
from attnlab.paths import REPO_ROOT

GPU = "h200"
RUNS = REPO_ROOT / "reports" / GPU / "runs.json"
RESULTS = REPO_ROOT / "data" / "results" / GPU


def _headlines(notebook: str) -> dict:
    runs = [r for r in json.loads(RUNS.read_text()) if r["notebook"] == notebook and r["status"] == "passed"]
    if not runs:
        pytest.skip(f"no passed run of {notebook} in {RUNS}")
    return runs[-1]["headlines"]


def _table(notebook: str, name: str) -> pd.DataFrame:
    return pd.read_csv(RESULTS / f"{notebook}__{name}.csv")


def _close(recorded: float, recomputed: float, digits: int = 4) -> bool:
    # the index rounds to 4 significant digits
    return math.isclose(recorded, float(f"{recomputed:.{digits}g}"), rel_tol=1e-9) or \
        math.isclose(recorded, recomputed, rel_tol=5e-4)


def test_notebook_09_headlines():
    nb = "09_tf32_tensor_cores"
    h, lat, chk = _headlines(nb), _table(nb, "latency"), _table(nb, "correctness")
    x3 = flash.min_ratio(lat, "3xtf32", "sdpa", D_list=[64, 128], N_list=[1024, 4096, 16384])
    assert _close(h["x_sdpa_fp32_min_3xtf32"], x3)
    # large logits are judged against a bound scaled with the scores (notebook 09), so left out here
    ok = chk[(chk["kernel"] == "3xtf32") & (chk["case"] != "large logits")]
    assert _close(h["worst_rel_err_3xtf32"], ok["rel_err_fp64"].max())
    assert h["x_sdpa_fp32_min_3xtf32"] >= 1.3 and h["worst_rel_err_3xtf32"] <= 2e-6   # issue 11's targets


def test_notebook_10_headlines():
    nb = "10_flash_bf16"
    h, lat, chk = _headlines(nb), _table(nb, "latency"), _table(nb, "correctness")
    kernels = [k for k in lat["kernel"].unique() if not k.startswith("sdpa")]
    best = flash.fastest(lat, kernels, [(d, n) for d in (64, 128) for n in (4096, 16384)])
    assert _close(h["x_sdpa_flash_min"], flash.min_ratio(lat, best, "sdpa_flash", D_list=[64, 128], N_list=[4096, 16384]))
    assert _close(h["x_cudnn_d128_n16384"], flash.min_ratio(lat, best, "sdpa_cudnn", D_list=[128], N_list=[16384]))
    assert _close(h["x_sdpa_flash_causal_min"], flash.min_ratio(lat, best, "sdpa_flash", D_list=[64, 128],
                                                                N_list=[4096, 16384], causal=True))
    mine = chk[(chk["kernel"] == best) & (chk["case"] != "large logits")]
    assert _close(h["err_vs_sdpa_max"], mine["err_vs_sdpa"].max())


def test_notebook_01_headlines():
    from attnlab.attention.bench import versus_sdpa

    nb = "01_naive"
    h, timing, chk = _headlines(nb), _table(nb, "timing"), _table(nb, "correctness")
    summary = versus_sdpa(timing, "naive", None)
    big = summary[summary["N"] == summary["N"].max()]
    assert _close(h["best_naive_tflops"], summary["naive_tflops"].max())
    assert _close(h["sdpa_speedup_at_max_N"], big["sdpa_speedup"].median())
    assert _close(h["worst_rel_err"], chk["rel_err_fp64"].max())
    assert h["shapes_checked"] == len(chk) and h["all_correct"] == bool(chk["passed"].all())


def _parameters(notebook: str) -> dict:
    """The notebook's parameter defaults (its parameters cell) with the recorded run's overrides."""
    nbjson = json.loads((REPO_ROOT / "notebooks" / f"{notebook}.ipynb").read_text())
    cell = next(c for c in nbjson["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    values: dict = {}
    exec("".join(cell["source"]), {}, values)   # assignments of literals only
    run = [r for r in json.loads(RUNS.read_text()) if r["notebook"] == notebook][-1]
    return {**values, **run.get("parameters", {})}


def _ladder_common(nb: str, kernel: str):
    h, chk, vs = _headlines(nb), _table(nb, "correctness"), _table(nb, "vs_naive")
    assert h["all_correct"] == bool(chk["passed"].all())
    assert h["worst_rel_err"] == f"{chk['rel_err_fp64'].max():.1e}"
    assert h["max_diff_vs_naive"] == f"{vs['max_abs_diff_vs_naive'].max():.1e}"
    assert set(chk["kernel"]) == {kernel}
    return h


def test_notebook_02_headlines():
    from attnlab import ladder

    nb = "02_tiling"
    h, p = _ladder_common(nb, "tiled"), _parameters(nb)
    table = ladder.ladder_table(_table(nb, "timing"))
    best = table[table["kernel"] == "tiled"].sort_values("speedup_vs_naive").iloc[-1]
    assert _close(h["best_tiled_speedup"], float(best["speedup_vs_naive"]))
    assert h["at"] == f"D={int(best['D'])} N={int(best['N'])}"
    assert h["claim_1_holds"] == bool(ladder.verdict_tiling_gain(table, p["gain_limit"], p["tolerance"]).holds)
    assert h["claim_2_holds"] == bool(ladder.verdict_d128_tiling_slower(table).holds)


def test_notebook_03_headlines():
    from attnlab import ladder

    nb = "03_float4"
    h, p = _ladder_common(nb, "vec_load"), _parameters(nb)
    table = ladder.ladder_table(_table(nb, "timing"))
    mine = ladder.verdict_step_negligible(table, "vec_load", "tiled", threshold=p["negligible"])
    assert _close(h["median_speedup_over_tiled"], float(mine.evidence["speedup"].median()))
    assert h["float4_negligible"] == bool(mine.holds)
    alignment = _table(nb, "alignment")
    assert h["misaligned_refused"] == bool(alignment[alignment["kernel"] == "vec_load"]["refused"].all())


def test_notebook_04_headlines():
    """04 assembles the ladder from 01-03's timing tables and its own on one grid, then judges the seed's
    claims. Its share of the FP32 peak is left out: it divides by notebook 06's measured peak at 04's
    recording time, and 06 has been re-recorded since."""
    from attnlab import ladder, steps

    nb = "04_padding"
    h, p = _headlines(nb), _parameters(nb)
    chk = _table(nb, "correctness")
    assert h["all_correct"] == bool(chk["passed"].all()) and h["worst_rel_err"] == f"{chk['rel_err_fp64'].max():.1e}"
    timing = _table(nb, "timing")
    owners = steps.OWNERS
    sources = {name: ladder.same_grid(_table(name, "timing"), timing) for name in ("01_naive", "02_tiling", "03_float4")}
    sources[nb] = ladder.same_grid(timing, timing)
    full = ladder.ladder_table(ladder.assemble_ladder(sources, owners=owners).drop(columns=["source"]))
    frac = ladder.peak_fractions(full, 1.0)
    assert h["best_kernel"] == frac["kernel"] and _close(h["best_tflops"], frac["tflops"])
    assert _close(h["pct_of_sdpa"], 100 * frac["fraction_of_sdpa"])
    scan = _table(nb, "tile_scan").dropna(subset=["median_ms"])
    claims = steps.seed_claims(full, scan, gain_limit=p["gain_limit"], tolerance=p["tolerance"],
                               negligible=p["negligible"])
    assert len(claims) == 7
    for key, claim, mine, _ in claims:
        assert h[f"holds_{key}"] == bool(mine.holds), claim


def test_notebook_05_headlines():
    import numpy as np

    from attnlab import tile_scan

    nb = "05_occupancy_scan"
    h = _headlines(nb)
    configs, scan, occ, gain = (_table(nb, t) for t in ("configs", "scan", "occupancy_check", "gain"))
    ran = configs[configs["skipped"].astype(object).fillna("") == ""]
    assert h["configurations"] == len(ran)
    assert _close(h["calculator_agrees_pct"], 100 * float(occ["agree"].astype(bool).mean()))
    best = tile_scan.best_tiles_from_scan(scan)
    assert h["best_tiles"] == "; ".join(f"{r.kernel} D={r.D}: {r.tile_rows}x{r.tile_kv}" for r in best.itertuples())
    assert h["tile_kv_shrinks_with_D"] == bool(tile_scan.verdict_tile_kv_shrinks(best)[1]["holds_for_all"])
    assert _close(h["geomean_tuned_gain"], float(np.exp(np.log(gain["gain"]).mean())))


def test_notebook_06_headlines():
    """The measured roofs and their share of the datasheet; the seed ladder's tables (01-05) placed
    under them, and the seed's compute-bound claim judged with the recorded counters."""
    from attnlab import ncu
    from attnlab import roofline as rl
    from attnlab.env import Mode

    nb = "06_roofline"
    h, ceil = _headlines(nb), _table(nb, "ceilings")
    name = str(ceil["gpu_name"].iloc[0]).replace("NVIDIA ", "")
    measured, sheet = rl.ceilings_from_table(ceil, name), rl.datasheet_ceilings(name)
    pct = rl.ceilings_table(measured, sheet).set_index("ceiling")["pct_of_datasheet"]
    assert _close(h["fma_tflops"], measured.peak_flops / 1e12) and _close(h["copy_tbps"], measured.bandwidth / 1e12)
    assert _close(h["ridge"], measured.ridge)
    assert _close(h["fma_pct_datasheet"], pct["FP32 FMA peak"])
    assert _close(h["copy_pct_datasheet"], pct["DRAM bandwidth (copy)"])
    meas, _ = rl.collect_seed_measurements(Mode(False, GPU, GPU, "replay", "test"))
    placed = rl.place(meas, measured)
    assert h["points"] == len(placed)
    mvm = rl.measured_vs_modelled(ncu.counters_wide(_table(nb, "ncu")))
    assert h["counters"] is True
    _, verdict = rl.compute_bound_verdict(placed[~placed["table"].str.startswith("05_")], measured, mvm,
                                          threshold=_parameters(nb)["threshold_pct"])
    assert h["seed_claim_holds"] == verdict["claim_holds"]
    assert _close(h["median_pct_of_peak"], verdict["median_pct_of_peak"])


def test_notebook_08_headlines():
    nb = "08_register_tiling"
    h, lat, chk, ceil = (_headlines(nb), _table(nb, "latency"), _table(nb, "correctness"), _table(nb, "ceilings"))
    at = lambda k: float(lat[(lat["kernel"] == k) & (lat["D"] == 128) & (lat["N"] == 4096)]["median_ms"].iloc[0])
    mine = lat[(lat["kernel"] == "register_tiled") & (lat["D"] == 128) & (lat["N"] == 4096)]
    tflops = float(mine["tflops"].iloc[0])
    fma = float(ceil.loc[ceil["ceiling"] == "fp32_fma", "value"].iloc[0]) / 1e12
    assert _close(h["tflops_d128_n4096"], tflops)
    assert _close(h["x_sdpa_fp32_d128_n4096"], at("sdpa") / at("register_tiled"))
    assert _close(h["x_vec_padded_d128_n4096"], at("vec_padded") / at("register_tiled"))
    assert _close(h["pct_fma_peak_d128_n4096"], 100 * tflops / fma)
    assert _close(h["worst_rel_err"], chk[chk["kernel"] == "register_tiled"]["rel_err_fp64"].max())


def test_notebook_07_headlines():
    """Notebook 07's index figures from its tables: the chunked form against our recurrent kernel and
    fla's chunk_kda (bf16) at T = 16384, its worst error at the target shape, its correctness cases."""
    nb = "07_delta_attention_chunking"
    h, lat, acc, chk = (_headlines(nb), _table(nb, "latency"), _table(nb, "accuracy"), _table(nb, "correctness"))
    T = h["T"]
    at = lambda impl, dtype="fp32": float(lat[(lat["T"] == T) & (lat["implementation"] == impl)
                                             & (lat["dtype"] == dtype)]["median_ms"].iloc[0])
    assert _close(h["chunked_vs_recurrent"], at("recurrent") / at("chunked"))
    # against fla: the best chunked configuration measured at T (the default one, or any of the sweep's)
    sweep = _table(nb, "chunk_sweep")
    best = min(at("chunked"), sweep[(sweep["T"] == T) & (sweep["stage"] == "all")]["median_ms"].min())
    assert _close(h["chunked_vs_fla_chunk_bf16"], at("fla chunk_kda", "bf16") / best)
    ours = acc[~acc["implementation"].str.startswith("fla")]
    assert _close(h["worst_rel_err_target_shape"], ours["rel_err_o"].max())
    assert h["cases_checked"] == len(chk) and h["all_correct"] == bool(chk["passed"].all())


def test_notebook_11_headlines():
    nb = "11_hopper_wgmma"
    h, lat, chk = _headlines(nb), _table(nb, "latency"), _table(nb, "correctness")
    kernels = [k for k in chk["kernel"].unique()]
    best = flash.fastest(lat, kernels, [(128, 4096), (128, 16384)])
    assert _close(h["x_cudnn_d128_min"], flash.min_ratio(lat, best, "sdpa_cudnn", D_list=[128], N_list=[4096, 16384]))
    assert _close(h["x_nb10_best_d128_min"], flash.min_ratio(lat, best, "fa2_tuned", D_list=[128], N_list=[4096, 16384]))
    pt = lat[(lat["kernel"] == best) & (lat["D"] == 128) & (lat["N"] == 16384) & ~lat["causal"].astype(bool)]
    assert _close(h["tflops_d128_n16384"], float(pt["tflops"].iloc[0]), digits=4)
    # the Hopper step's targets, as recorded: >= 0.8x cuDNN and >= 1.3x notebook 10's best at D = 128
    assert h["x_cudnn_d128_min"] >= 0.8 and h["x_nb10_best_d128_min"] >= 1.3 and h["err_vs_sdpa_max"] <= 1.5


def test_notebook_13_headlines():
    """Issue 13's headline keys recomputed from notebook 13's recorded tables (attnlab.delta.fast.targets)."""
    from attnlab.delta import fast

    nb = "13_fast_delta"
    h = _headlines(nb)
    lat, acc, mem, chk = (_table(nb, t) for t in ("latency", "accuracy", "memory", "correctness"))
    v = fast.targets(lat, acc, mem, chk).set_index("key")["value"]
    for key in ("x_fla_bf16_t16384", "x_fla_bf16_t4096", "x_recurrent_t16384", "x_fla_bf16_t16384_bf16io",
                "worst_rel_rms", "mem_vs_fla_t16384"):
        assert _close(h[key], v[key]), key
    # the bf16-I/O row is timed and its error measured beside fla's on the same inputs
    assert (lat["implementation"] == fast.BF16_IO).any() and (acc["implementation"] == fast.BF16_IO).any()
    assert h["all_correct"] is bool(chk["passed"].all()) is True
    # what the record shows about issue 13: accuracy and memory met, the speed targets not yet
    assert h["worst_rel_rms"] < 1e-4 and h["mem_vs_fla_t16384"] <= 0.6
