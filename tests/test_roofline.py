"""Roofline maths, bytes models, placement, the seed's points and the compute-bound verdict."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnlab import roofline as rl


def test_attainable_and_ridge():
    peak, bw = 10e12, 1e12
    assert rl.ridge_point(peak, bw) == 10.0
    assert rl.attainable(5.0, peak, bw) == 5e12           # on the slope
    assert rl.attainable(10.0, peak, bw) == 10e12         # at the ridge
    assert rl.attainable(1000.0, peak, bw) == 10e12       # under the roof
    arr = rl.attainable(np.array([0.0, 1.0, 100.0]), peak, bw)
    assert list(arr) == [0.0, 1e12, 10e12]
    with pytest.raises(ValueError):
        rl.attainable(1.0, 0, bw)
    with pytest.raises(ValueError):
        rl.attainable(-1.0, peak, bw)
    with pytest.raises(ValueError):
        rl.ridge_point(peak, -1)


def test_seed_ridge_1660ti():
    c = rl.datasheet_ceilings("GTX 1660 Ti")
    assert c.ridge == pytest.approx(5.44e12 / 288e9)      # the seed's 18.9
    assert round(c.ridge, 1) == 18.9
    h = rl.datasheet_ceilings("h200")
    assert h.peak_flops == 67e12 and h.bandwidth == 4.8e12
    with pytest.raises(KeyError, match="gpu_specs"):
        rl.datasheet_ceilings("a100")


@pytest.mark.parametrize("B,H,N,D", [(2, 8, 64, 32), (2, 8, 512, 64), (1, 1, 4096, 128)],
                         ids=lambda v: str(v))
def test_models_closed_forms(B, H, N, D):
    f = rl.attention_flops(B, H, N, D)
    assert f == 4 * B * H * N * N * D
    assert rl.attention_flops(B, H, N, D, causal=True) == f / 2
    # ideal: AI = N/4 (the seed's AI_tiled)
    assert rl.ideal_bytes(B, H, N, D) == 16 * B * H * N * D
    assert rl.intensity("sdpa", B, H, N, D) == pytest.approx(N / 4)
    # naive: q + o + K,V per row
    assert rl.naive_bytes(B, H, N, D) == 4 * B * H * (2 * N * D + 2 * N * N * D)
    assert rl.intensity("naive", B, H, N, D) == pytest.approx(N / (2 * (N + 1)))
    # tiled with rows=8: K,V read N/8 times
    assert rl.tiled_bytes(B, H, N, D, 8) == 4 * B * H * (2 * N * D + (N // 8) * 2 * N * D)
    assert rl.intensity("vec_padded", B, H, N, D, tile_rows=8) == pytest.approx(4 * N / (2 + 2 * N / 8) / 4)


def test_tiled_partial_block_and_limits():
    # N=10 rows, 8 per block -> 2 blocks each reading K and V
    assert rl.tiled_bytes(1, 1, 10, 4, 8) == 4 * (2 * 10 * 4 + 2 * 2 * 10 * 4)
    # tile_rows=1 is the naive data flow; tile_rows=N reads K,V once (= ideal)
    assert rl.tiled_bytes(2, 8, 256, 64, 1) == rl.naive_bytes(2, 8, 256, 64)
    assert rl.tiled_bytes(2, 8, 256, 64, 256) == rl.ideal_bytes(2, 8, 256, 64)
    with pytest.raises(ValueError):
        rl.tiled_bytes(1, 1, 8, 8, 0)


def test_model_of_names():
    assert rl.model_of("naive") == "naive"
    assert rl.model_of("tiled") == rl.model_of("vec_load") == rl.model_of("double_buffer") == "tiled"
    assert rl.model_of("torch_sdpa") == rl.model_of("sdpa_fp32") == "ideal"
    assert rl.model_of("kda_chunk") is None
    with pytest.raises(ValueError, match="no bytes model"):
        rl.modelled_bytes("kda_chunk", 1, 1, 8, 8)


def test_intensity_ordering_and_table():
    t = rl.intensity_table([512, 4096], [64], ridge=18.9)
    for r in t.itertuples():
        assert r.naive < r.tiled_8 < r.ideal
    assert list(t["naive_bound"]) == ["memory", "memory"]
    assert list(t["ideal_bound"]) == ["compute", "compute"]


def test_place_percentages():
    c = rl.Ceilings("toy", peak_flops=10e12, bandwidth=1e12)
    N, D = 1024, 64
    f = rl.attention_flops(2, 8, N, D)
    df = pd.DataFrame([
        dict(kernel="sdpa", B=2, H=8, N=N, D=D, median_ms=f / 5e12 * 1e3),     # 5 TFLOP/s
        dict(kernel="naive", B=2, H=8, N=N, D=D, median_ms=f / 0.25e12 * 1e3),  # 0.25 TFLOP/s
        dict(kernel="tiled", B=2, H=8, N=N, D=D, median_ms=1.0),
        dict(kernel="kda", B=2, H=8, N=N, D=D, median_ms=1.0),                  # dropped: no model
    ])
    p = rl.place(df, c).set_index("kernel")
    assert "kda" not in p.index
    assert p.loc["sdpa", "pct_of_attainable"] == pytest.approx(50.0)           # 5 of 10
    assert p.loc["sdpa", "bound"] == "compute"
    i_naive = rl.intensity("naive", 2, 8, N, D)
    assert p.loc["naive", "attainable_flops"] == pytest.approx(1e12 * i_naive)
    assert p.loc["naive", "pct_of_attainable"] == pytest.approx(100 * 0.25e12 / (1e12 * i_naive))
    assert p.loc["naive", "bound"] == "memory"
    assert bool(p.loc["tiled", "tile_rows_assumed"]) and p.loc["tiled", "tile_rows"] == 8
    with pytest.raises(ValueError, match="lacks"):
        rl.place(df.drop(columns=["median_ms"]), c)


def test_seed_points():
    p = rl.seed_points()
    assert len(p) == 84                               # 4 kernels x 3 D x 7 N
    assert (p["pct_of_attainable"] > 0).all()
    # the tiled family stays under its (logical-bytes) roof on the 1660 Ti ...
    assert (p[p.model == "tiled"]["pct_of_attainable"] < 100).all()
    # the seed's naive at N=4096, D=64: 4*2*8*4096^2*64 FLOP in 356.36 ms = 0.193 TFLOP/s
    r = p[(p.kernel == "naive") & (p.N == 4096) & (p.D == 64)].iloc[0]
    assert r.achieved_tflops == pytest.approx(4 * 2 * 8 * 4096**2 * 64 / 0.35636 / 1e12, rel=1e-9)
    # ... which is above what 288 GB/s could feed at the naive model's ~0.5 FLOP/byte (0.144 TFLOP/s):
    # the L2 cache, not DRAM, serves the re-reads (the seed's "black box")
    assert r.attainable_tflops == pytest.approx(288e9 * rl.intensity("naive", 2, 8, 4096, 64) / 1e12)
    assert r.pct_of_attainable > 100


def test_fma_and_copy_accounting():
    assert rl.fma_flops(grid=10, block=256, iters=100, chains=8, unroll=16) == 2 * 10 * 256 * 100 * 8 * 16
    assert rl.copy_bytes(1000) == 32000
    m, d = rl.Ceilings("m", 60e12, 4.2e12), rl.Ceilings("d", 67e12, 4.8e12)
    t = rl.ceilings_table(m, d).set_index("ceiling")
    assert t.loc["FP32 FMA peak", "pct_of_datasheet"] == pytest.approx(100 * 60 / 67)
    assert t.loc["DRAM bandwidth (copy)", "pct_of_datasheet"] == pytest.approx(87.5)


def _counters():
    rows = []
    for N in (256, 1024, 4096, 16384):
        logical = rl.naive_bytes(2, 8, N, 64)
        rows.append({"kernel": "naive", "B": 2, "H": 8, "N": N, "D": 64, "tile_rows": np.nan,
                     "dram__bytes.sum": rl.ideal_bytes(2, 8, N, 64) * (1 if N < 16384 else 3),
                     "lts__t_bytes.sum": logical * 0.5, "lts__t_sector_hit_rate.pct": 99.0,
                     "sm__sass_thread_inst_executed_op_ffma_pred_on.sum": 2 * 8 * N * N * 64,
                     "sm__sass_thread_inst_executed_op_fadd_pred_on.sum": 10.0,
                     "sm__sass_thread_inst_executed_op_fmul_pred_on.sum": 5.0})
    return pd.DataFrame(rows)


def test_measured_vs_modelled_and_l2_question():
    m = rl.measured_vs_modelled(_counters())
    assert (m["flops_counted"] == 2 * m["sm__sass_thread_inst_executed_op_ffma_pred_on.sum"] + 15).all()
    assert m["dram_over_ideal"].tolist() == [1, 1, 1, 3]
    assert m["l2_over_logical"].tolist() == [0.5] * 4
    q = rl.l2_question(m, l2_bytes=60 * 2**20)
    assert list(q["N"]) == [256, 1024, 4096, 16384]
    assert q["kv_over_l2"].iloc[-1] == pytest.approx(2 * 16 * 16384 * 64 * 4 / (60 * 2**20))
    assert q["dram_over_ideal"].is_monotonic_increasing
    assert q["dram_over_logical"].iloc[-1] == pytest.approx(3 * rl.ideal_bytes(2, 8, 16384, 64)
                                                             / rl.naive_bytes(2, 8, 16384, 64))
    assert q["dram_over_reads"].tolist() == pytest.approx([4 / 3, 4 / 3, 4 / 3, 4])
    with pytest.raises(ValueError, match="naive"):
        rl.l2_question(m[m.kernel != "naive"], 1.0)


def test_describe_below_ideal_names_what_the_bytes_match():
    row = {"N": 256, "dram_over_ideal": 0.7518, "dram_over_reads": 0.7518 / 0.75}
    text = rl.describe_below_ideal(row)
    assert "N=256" in text and "1.002×" in text and "O's writes" in text
    # below the ideal but not the reads alone: no claim about O
    text = rl.describe_below_ideal({"N": 4096, "dram_over_ideal": 0.91, "dram_over_reads": 0.91 / 0.75})
    assert "1.21×" in text and "0.91×" in text and "O's writes, the other quarter" not in text
    assert rl.describe_below_ideal({"N": 16384, "dram_over_ideal": 1.02, "dram_over_reads": 1.36}) == ""


def test_classify():
    assert rl.classify(90, 10) == "compute"
    assert rl.classify(10, 80) == "memory"
    assert rl.classify(20, 30).startswith("neither")
    assert rl.classify(float("nan"), float("nan")).startswith("neither")


def _placed(peak_frac: float, bw_model_frac: float):
    """Rows whose achieved FLOP/s is peak_frac of peak, for a toy GPU."""
    c = rl.Ceilings("toy", 10e12, 1e12)
    rows = []
    for k in ("naive", "tiled"):
        for N in (512, 4096):
            f = rl.attention_flops(2, 8, N, 64)
            rows.append(dict(kernel=k, B=2, H=8, N=N, D=64, median_ms=f / (peak_frac * 10e12) * 1e3))
    return rl.place(pd.DataFrame(rows), c), c


def test_verdict_compute_bound_with_counters():
    placed, c = _placed(0.8, 0)
    counters = placed[["kernel", "B", "H", "N", "D"]].assign(dram_bytes=placed["flops"] / 1000)  # tiny DRAM
    rows, s = rl.compute_bound_verdict(placed, c, counters)
    assert s["bytes_source"] == "DRAM (ncu)"
    assert s["compute_bound"] and s["bandwidth_not_binding"] and s["claim_holds"]
    assert "HOLDS" in s["text"]
    assert (rows["bound_effective"] == "compute").all()


def test_verdict_neither_roof():
    placed, c = _placed(0.05, 0)
    counters = placed[["kernel", "B", "H", "N", "D"]].assign(dram_bytes=placed["flops"] / 1000)
    rows, s = rl.compute_bound_verdict(placed, c, counters)
    assert not s["claim_holds"] and s["bandwidth_not_binding"] and not s["compute_bound"]
    assert "HALF TRUE" in s["text"]


def test_verdict_memory_bound_without_counters():
    # logical bytes only: naive at 80 % of peak would need far more than 1 TB/s -> memory class
    placed, c = _placed(0.8, 0)
    rows, s = rl.compute_bound_verdict(placed, c)
    assert s["bytes_source"] == "logical (model)"
    assert (rows[rows.kernel == "naive"]["class"] == "memory").all()
    with pytest.raises(ValueError):
        rl.compute_bound_verdict(placed, c, min_N=10**6)


def test_collect_measurements(tmp_path):
    gdir = tmp_path / "h200"
    gdir.mkdir()
    pd.DataFrame([dict(kernel="naive", B=2, H=8, N=512, D=64, median_ms=0.5),
                  dict(kernel="kda", B=2, H=8, N=512, D=64, median_ms=0.5)]).to_csv(gdir / "01_naive__latency.csv", index=False)
    pd.DataFrame([dict(a=1)]).to_csv(gdir / "02_tiled__banks.csv", index=False)
    pd.DataFrame([dict(kernel="naive", B=2, H=8, N=512, D=64, median_ms=0.5)]).to_csv(gdir / "06_roofline__x.csv", index=False)
    df, skipped = rl.collect_measurements("h200", results_dir=tmp_path)
    assert list(df["kernel"]) == ["naive"] and list(df["table"]) == ["01_naive__latency"]
    assert any("02_tiled__banks" in s for s in skipped)
    empty, _ = rl.collect_measurements("nogpu", results_dir=tmp_path)
    assert empty.empty


def test_plot_roofline_runs():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    p = rl.seed_points()
    rl.plot_roofline(ax, rl.datasheet_ceilings("GTX 1660 Ti"), p, extra_ceilings=[rl.datasheet_ceilings("h200")])
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert len(ax.collections) == 4                   # one scatter per kernel
    plt.close(fig)


def test_ceilings_from_table():
    t = pd.DataFrame([dict(ceiling="fp32_fma", value=60e12), dict(ceiling="fp32_fma", value=62e12),
                      dict(ceiling="dram_copy", value=4.2e12)])
    c = rl.ceilings_from_table(t, "H200")
    assert (c.peak_flops, c.bandwidth, c.source) == (61e12, 4.2e12, "measured")
    with pytest.raises(ValueError, match="dram_copy"):
        rl.ceilings_from_table(t[t.ceiling == "fp32_fma"], "x")


def test_bench_kernels_static():
    """The bench kernels compile for sm_75 and sm_90 without spills; the FMA loop body holds
    FMA_CHAINS x FMA_UNROLL = 128 fma.rn.f32 and the copy uses 128-bit loads and stores."""
    from attnlab.static import has_vector_global_loads, nvcc_path, static_build
    if nvcc_path() is None:
        pytest.skip("no nvcc here: the static build needs the CUDA toolkit")
    for arch in ("sm_75", "sm_90"):
        fma = static_build(rl.FMA_SOURCE, "fma_peak", [()], arch)[0]
        assert not fma.spills and fma.registers <= 32
        assert fma.ptx.count("fma.rn.f32") == 8 * 16
        cp_ = static_build(rl.COPY_SOURCE, "copy_f4", [()], arch)[0]
        assert not cp_.spills
        assert has_vector_global_loads(cp_.ptx) and "st.global.v4.f32" in cp_.ptx
    # sm_90: the launch bound keeps the copy at 32 registers -> 8 blocks of 256 = full occupancy
    from attnlab.occupancy import occupancy
    r = static_build(rl.COPY_SOURCE, "copy_f4", [()], "sm_90")[0]
    assert occupancy("sm_90", rl.COPY_THREADS, r.registers, r.static_smem_bytes).occupancy == 1.0


def test_verdict_judges_only_counted_rows_when_counters_exist():
    placed, c = _placed(0.8, 0)
    counters = placed[["kernel", "B", "H", "N", "D"]].iloc[:1].assign(dram_bytes=1.0)
    rows, s = rl.compute_bound_verdict(placed, c, counters)
    assert len(rows) == 1 and s["rows"] == 1 and (rows["bytes_source"] == "DRAM (ncu)").all()
    # counters for other shapes only: fall back to the logical bytes on every row
    other = counters.assign(N=999)
    rows, s = rl.compute_bound_verdict(placed, c, other)
    assert len(rows) == len(placed) and s["bytes_source"] == "logical (model)"


def test_l2_hit_rate_from_lookup_counts_and_its_sentence():
    """The lookup-count hit rate cannot exceed 100 % where ncu's ratio metric did (issue 10), and
    the sentence about them is generated from the rows."""
    import pandas as pd

    from attnlab import roofline as rl

    df = pd.DataFrame({"lts__t_sectors_lookup_hit.sum": [90.0, 99.0, 0.0],
                       "lts__t_sectors_lookup_miss.sum": [10.0, 1.0, 0.0],
                       "lts__t_sectors.sum": [100.0, 100.0, 0.0],
                       "lts__t_sectors_srcunit_ltcfabric.sum": [20.0, 30.0, 0.0],
                       "lts__t_sector_hit_rate.pct": [90.0, 101.2, 0.0]})
    out = rl.l2_lookups(df)
    assert list(out["l2_hit_pct"].round(6))[:2] == [90.0, 99.0] and np.isnan(out["l2_hit_pct"].iloc[2])
    assert list(out["fabric_share"].round(6))[:2] == [0.2, 0.3]
    text = rl.describe_l2_hit_rates(out)
    assert "90.0–99.0 % over 2 launches" in text and "above 100 % for 1 of 3" in text and "20.0–30.0 %" in text
    assert rl.describe_l2_hit_rates(pd.DataFrame({"x": [1]})) == ""
    # without the lookup counters (older recordings) nothing is invented
    old = rl.l2_lookups(df[["lts__t_sector_hit_rate.pct"]])
    assert "l2_hit_pct" not in old and "no lookup counts were recorded" in rl.describe_l2_hit_rates(old)
