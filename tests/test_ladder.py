"""The ladder's NumPy model, seed-style tables, verdicts and recommendation (lib/attnlab/ladder.py)."""

import math

import numpy as np
import pandas as pd
import pytest

from attnlab import ladder
from attnlab.seed import SEED_TILES
from attnlab.ladder import Verdict


# ------------------------------------------------------------------ the tiled online softmax model

SHAPES = [(1, 1, 1, 32, 8), (2, 3, 65, 32, 16), (1, 2, 63, 64, 16), (1, 1, 17, 128, 8), (2, 1, 64, 64, 64),
          (1, 1, 5, 32, 128), (1, 2, 100, 32, 1)]


def _qkv(B, H, N, D, seed=0, dtype=np.float64, scale=1.0):
    rng = np.random.default_rng(seed)
    return tuple((scale * rng.standard_normal((B, H, N, D))).astype(dtype) for _ in range(3))


@pytest.mark.parametrize("B,H,N,D,T", SHAPES, ids=[f"B{b}-H{h}-N{n}-D{d}-T{t}" for b, h, n, d, t in SHAPES])
@pytest.mark.parametrize("per_key", [False, True], ids=["tile-merge", "per-key"])
def test_tiled_online_softmax_equals_direct_softmax(B, H, N, D, T, per_key):
    q, k, v = _qkv(B, H, N, D, seed=N)
    ref = ladder.softmax_attention(q, k, v)
    out = ladder.tiled_online_softmax(q, k, v, tile_kv=T, per_key=per_key)
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


def test_float32_model_is_within_fp32_tolerance():
    q, k, v = _qkv(2, 2, 129, 64, seed=1, dtype=np.float32)
    ref = ladder.softmax_attention(q, k, v)
    out = ladder.tiled_online_softmax(q, k, v, tile_kv=16, dtype=np.float32, per_key=True)
    assert out.dtype == np.float32
    rel = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    assert rel < 1e-5


def test_large_scores_do_not_overflow():
    # scores of order 1e3: a softmax without the running max would overflow exp()
    q, k, v = _qkv(1, 1, 40, 32, seed=2, scale=30.0)
    out = ladder.tiled_online_softmax(q, k, v, tile_kv=8)
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, ladder.softmax_attention(q, k, v), rtol=1e-10, atol=1e-10)


def test_trace_has_one_entry_per_tile_and_max_is_monotone():
    q, k, v = _qkv(1, 1, 37, 32, seed=3)
    trace = []
    ladder.tiled_online_softmax(q, k, v, tile_kv=8, trace=trace)
    assert [t[0] for t in trace] == [0, 8, 16, 24, 32]
    ms = np.stack([t[1] for t in trace])
    assert np.all(np.diff(ms, axis=0) >= 0)


def test_merge_states_is_order_independent():
    q, k, v = _qkv(1, 2, 24, 32, seed=4)
    qs = q / math.sqrt(32)
    parts = [ladder.tile_state(qs, k[..., i:i + 8, :], v[..., i:i + 8, :]) for i in (0, 8, 16)]
    a = ladder.merge_states(ladder.merge_states(parts[0], parts[1]), parts[2])
    b = ladder.merge_states(parts[2], ladder.merge_states(parts[1], parts[0]))
    c = ladder.merge_states(ladder.empty_state(qs), a)
    ref = ladder.softmax_attention(q, k, v)
    for s in (a, b, c):
        np.testing.assert_allclose(s.output(), ref, rtol=1e-12, atol=1e-12)


def test_model_rejects_bad_input():
    q, k, v = _qkv(1, 1, 4, 32)
    with pytest.raises(ValueError):
        ladder.tiled_online_softmax(q, k, v, tile_kv=0)
    with pytest.raises(ValueError):
        ladder.tiled_online_softmax(q, k[..., :3, :], v, tile_kv=4)


def test_model_matches_core_naive_model():
    from attnlab.attention.models import online_softmax_attention

    q, k, v = _qkv(1, 1, 20, 32, seed=5, dtype=np.float32)
    core = online_softmax_attention(q, k, v)
    mine = ladder.tiled_online_softmax(q, k, v, tile_kv=8, dtype=np.float32, per_key=True)
    np.testing.assert_allclose(mine, core, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ FLOPs and shared memory

def test_flops_and_tflops():
    assert ladder.attention_flops(2, 8, 1024, 64) == 4 * 2 * 8 * 1024 ** 2 * 64
    assert ladder.tflops(2, 8, 1024, 64, 1.0) == pytest.approx(4 * 2 * 8 * 1024 ** 2 * 64 / 1e-3 / 1e12)


@pytest.mark.parametrize("kernel,D,tr,tkv,expected", [
    ("tiled", 32, 8, 32, (8 + 64) * 32 * 4), ("vec_load", 64, 8, 16, (8 + 32) * 64 * 4),
    ("vec_padded", 128, 8, 8, (8 + 16) * 132 * 4), ("double_buffer", 64, 8, 16, (8 + 64) * 68 * 4)],
    ids=["tiled-D32", "vec_load-D64", "vec_padded-D128", "double_buffer-D64"])
def test_smem_bytes_match_kernel_layouts(kernel, D, tr, tkv, expected):
    assert ladder.smem_bytes(kernel, D, tr, tkv) == expected


# ------------------------------------------------------------------ synthetic timing tables

def timing(ms: dict, B=2, H=8, tiles=True) -> pd.DataFrame:
    """{(kernel, D, N): ms} -> a timing table like bench.time_grid writes."""
    rows = []
    for (k, D, N), t in ms.items():
        tr, tkv = SEED_TILES[D] if (tiles and k in ladder.TILED_FAMILY) else (0, 0)
        rows.append(dict(kernel=k, B=B, H=H, D=D, N=N, tile_rows=tr, tile_kv=tkv, median_ms=t))
    return pd.DataFrame(rows)


def grid(factors: dict, Ds=(32, 64, 128), Ns=(64, 128, 256), naive=1.0, sdpa=0.1):
    """Every kernel's time = naive * factor[kernel] (factor may be a dict per D)."""
    ms = {}
    for D in Ds:
        for N in Ns:
            base = naive * N / 64
            ms[("naive", D, N)] = base
            ms[(ladder.SDPA, D, N)] = sdpa * base
            for k, f in factors.items():
                ms[(k, D, N)] = base * (f[D] if isinstance(f, dict) else f)
    return timing(ms)


def test_ladder_table_speedups_and_seed_columns():
    t = ladder.ladder_table(grid({"tiled": 0.8, "vec_load": 0.4, "vec_padded": 0.5}))
    r = t[(t["kernel"] == "vec_load") & (t["D"] == 64) & (t["N"] == 128)].iloc[0]
    assert r["speedup_vs_naive"] == pytest.approx(2.5)
    assert r["prev_kernel"] == "tiled" and r["speedup_vs_prev"] == pytest.approx(2.0)
    assert r["x_slower_than_sdpa"] == pytest.approx(4.0)
    assert r["tflops"] == pytest.approx(4 * 2 * 8 * 128 ** 2 * 64 / (0.8e-3) / 1e12)
    # the seed's GTX 1660 Ti figure for vec_load, D=64, N=128 is 0.34 ms vs naive 0.45 ms
    assert r["seed_ms"] == pytest.approx(0.34)
    assert r["seed_speedup_vs_naive"] == pytest.approx(0.45 / 0.34)
    assert set(t["kernel"]) == {"naive", "tiled", "vec_load", "vec_padded"}   # SDPA is a column, not a row
    assert t[t["kernel"] == "naive"]["speedup_vs_naive"].eq(1.0).all()


def test_ladder_table_refuses_duplicates():
    t = grid({"tiled": 0.8})
    with pytest.raises(ValueError, match="several rows"):
        ladder.ladder_table(pd.concat([t, t]))


def test_seed_table_reproduces_the_seeds_speedups():
    s = ladder.seed_table()
    assert len(s) == 4 * 3 * 7
    r = s[(s["kernel"] == "vec_padded") & (s["D"] == 32) & (s["N"] == 4096)].iloc[0]
    assert r["speedup_vs_naive"] == pytest.approx(289.52 / 220.16)   # the seed prints 1.32x
    assert r["speedup_vs_prev"] == pytest.approx(223.26 / 220.16)


def test_wide_table_has_the_seed_layout():
    long = ladder.ladder_table(grid({"tiled": 0.8, "vec_load": 0.7, "vec_padded": 0.75}, Ns=(64, 128)))
    w = ladder.wide_table(long, 32)
    assert list(w.index) == [64, 128]
    for col in ("Naive ms", "Tiled ms", "VecLoad ms", "VecPad ms", "SDPA ms", "best speedup", "seed Naive ms",
                "seed best speedup"):
        assert col in w.columns
    assert w.loc[64, "best speedup"] == pytest.approx(1 / 0.7)
    assert w.loc[64, "best kernel"] == "vec_load"
    assert w.loc[128, "seed best speedup"] == pytest.approx(0.39 / 0.28)
    with pytest.raises(ValueError):
        ladder.wide_table(long, 256)
    # a table without naive (notebook 03: tiled + vec_load) has no "best speedup" column
    no_naive = ladder.ladder_table(grid({"tiled": 0.8, "vec_load": 0.7}).query("kernel != 'naive'"))
    w2 = ladder.wide_table(no_naive, 64)
    assert "best speedup" not in w2.columns and "VecLoad ms" in w2.columns


def test_assemble_ladder_takes_each_kernel_from_its_owner():
    a = timing({("naive", 64, 64): 1.0, ("tiled", 64, 64): 0.8})
    b = timing({("tiled", 64, 64): 0.9, ("vec_load", 64, 64): 0.7})
    t = ladder.assemble_ladder({"02_tiling": a, "03_float4": b}, owners={"tiled": "02_tiling"})
    assert len(t) == 3
    assert t.set_index("kernel").loc["tiled", "median_ms"] == 0.8
    assert t.set_index("kernel").loc["tiled", "source"] == "02_tiling"
    t2 = ladder.assemble_ladder({"02_tiling": a, "03_float4": b})
    assert t2.set_index("kernel").loc["tiled", "median_ms"] == 0.9   # no owner: the last table wins
    small = timing({("tiled", 64, 64): 0.9, ("tiled", 64, 128): 1.0, ("tiled", 32, 64): 1.0})
    assert len(ladder.same_grid(small, a)) == 1
    rc = ladder.repeat_consistency({"02_tiling": a, "03_float4": b})
    assert len(rc) == 1 and rc["ratio"].iloc[0] == pytest.approx(0.9 / 0.8)


# ------------------------------------------------------------------ verdicts: True and False cases

def test_verdict_tiling_gain():
    ok = ladder.ladder_table(grid({"tiled": 1 / 1.3}))
    v = ladder.verdict_tiling_gain(ok)
    assert isinstance(v, Verdict) and v.holds and "1.30" in v.summary
    holds, evidence = v                      # unpacks as (holds, evidence)
    assert holds and len(evidence) == 9
    big = ladder.ladder_table(grid({"tiled": {32: 1 / 1.3, 64: 1 / 2.0, 128: 1.2}}))
    v = ladder.verdict_tiling_gain(big)
    assert not v.holds and "D=64" in v.summary
    # tolerance: 1.45x passes with 5 % slack (1.47), 1.5x does not
    assert ladder.verdict_tiling_gain(ladder.ladder_table(grid({"tiled": 1 / 1.45}))).holds
    assert not ladder.verdict_tiling_gain(ladder.ladder_table(grid({"tiled": 1 / 1.5}))).holds
    # the family variant looks at every tiled kernel
    fam = ladder.ladder_table(grid({"tiled": 1 / 1.2, "vec_load": 1 / 1.6}))
    assert ladder.verdict_tiling_gain(fam).holds
    assert not ladder.verdict_tiling_gain(fam, kernels=ladder.TILED_FAMILY).holds


def test_verdict_d128_tiling_slower():
    slow = ladder.ladder_table(grid({"tiled": {32: 0.8, 64: 1.0, 128: 1.3}}))
    assert ladder.verdict_d128_tiling_slower(slow).holds
    fast = ladder.ladder_table(grid({"tiled": {32: 0.8, 64: 1.0, 128: 0.7}}))
    v = ladder.verdict_d128_tiling_slower(fast)
    assert not v.holds and not v.evidence["slower_than_naive"].any()
    mixed = grid({"tiled": {32: 0.8, 64: 1.0, 128: 1.3}})
    mixed.loc[(mixed["kernel"] == "tiled") & (mixed["D"] == 128) & (mixed["N"] == 64), "median_ms"] = 0.5
    mixed = ladder.ladder_table(mixed)
    assert not ladder.verdict_d128_tiling_slower(mixed).holds
    assert ladder.verdict_d128_tiling_slower(mixed, min_fraction=0.6).holds


def test_verdict_float4_padding_negligible():
    flat = ladder.ladder_table(grid({"tiled": 0.8, "vec_load": 0.8 * 1.02, "vec_padded": 0.8 * 1.02 * 0.99}))
    assert ladder.verdict_float4_padding_negligible(flat).holds
    float4_helps = ladder.ladder_table(grid({"tiled": 0.8, "vec_load": 0.6, "vec_padded": 0.6}))
    v = ladder.verdict_float4_padding_negligible(float4_helps)
    assert not v.holds and "25.0 %" in v.summary
    padding_hurts = ladder.ladder_table(grid({"tiled": 0.8, "vec_load": 0.8, "vec_padded": 0.9}))
    assert not ladder.verdict_float4_padding_negligible(padding_hurts).holds
    assert ladder.verdict_float4_padding_negligible(padding_hurts, threshold=0.2).holds
    with pytest.raises(ValueError):
        ladder.verdict_float4_padding_negligible(ladder.ladder_table(grid({"tiled": 0.8})))


def scan(best: dict) -> pd.DataFrame:
    """A tile scan where (tile_rows, tile_kv) = best[D] is fastest (1.0 ms), others slower."""
    rows = []
    for D, (btr, btkv) in best.items():
        for tr in (2, 4, 8, 16):
            for tkv in (8, 16, 32):
                t = 1.0 if (tr, tkv) == (btr, btkv) else 1.1 + 0.01 * tr + 0.001 * tkv
                rows.append(dict(kernel="vec_padded", D=D, N=1024, tile_rows=tr, tile_kv=tkv, median_ms=t))
    return pd.DataFrame(rows)


def test_verdict_tile_rows_8_best():
    assert ladder.verdict_tile_rows_best(scan({32: (8, 32), 64: (8, 16), 128: (8, 8)})).holds
    v = ladder.verdict_tile_rows_best(scan({32: (8, 32), 64: (4, 16), 128: (8, 8)}))
    assert not v.holds
    assert v.evidence.set_index("D").loc[64, "best_tile_rows"] == 4
    assert not v.evidence.set_index("D").loc[64, "within_tolerance"]
    # 8 is within 20 % of the best everywhere
    assert ladder.verdict_tile_rows_best(scan({32: (8, 32), 64: (4, 16), 128: (8, 8)}), tolerance=0.2).holds


def test_verdicts_on_the_seeds_own_data():
    """The seed's claims, tested on the seed's own GTX 1660 Ti figures, must come out as it says."""
    from attnlab.seed import seed_occupancy_scan

    s = ladder.seed_table()
    assert ladder.verdict_tiling_gain(s).holds                                  # tiled max 1.30x
    assert ladder.verdict_tiling_gain(s, kernels=ladder.TILED_FAMILY).holds     # best variant 1.39x
    assert ladder.verdict_d128_tiling_slower(s).holds
    occ = seed_occupancy_scan().rename(columns={"latency_ms": "median_ms"})
    assert ladder.verdict_tile_rows_best(occ).holds


def test_verdict_table():
    t = ladder.verdict_table([ladder.verdict_tiling_gain(ladder.seed_table())])
    assert list(t.columns) == ["claim", "holds", "evidence"] and bool(t["holds"].iloc[0])


# ------------------------------------------------------------------ recommendation and peak

def test_recommendation_table_picks_fastest_per_head_dim_and_compares_with_seed():
    t = ladder.ladder_table(grid({"tiled": {32: 0.7, 64: 1.2, 128: 1.3}, "vec_load": {32: 0.75, 64: 1.1, 128: 1.2},
                                  "vec_padded": {32: 0.8, 64: 1.1, 128: 0.9}}))
    rec = ladder.recommendation_table(t).set_index("D")
    assert rec.loc[32, "kernel"] == "tiled" and (rec.loc[32, "tile_rows"], rec.loc[32, "tile_kv"]) == (8, 32)
    assert rec.loc[64, "kernel"] == "naive" and rec.loc[64, "tile_from"] == "untiled"
    assert rec.loc[128, "kernel"] == "vec_padded"
    assert rec.loc[32, "same_family_as_seed"] and rec.loc[64, "same_family_as_seed"]
    assert not rec.loc[128, "same_family_as_seed"]
    assert rec.loc[32, "wins"] == "3/3" and rec.loc[32, "geo_mean_vs_fastest"] == pytest.approx(1.0)
    assert rec.loc[32, "geo_x_slower_than_sdpa"] == pytest.approx(7.0)
    # with a tile scan, the tile comes from the scan
    sc = scan({32: (4, 16), 64: (8, 16), 128: (16, 8)}).assign(kernel="tiled")
    rec2 = ladder.recommendation_table(t, scan=sc).set_index("D")
    assert (rec2.loc[32, "tile_rows"], rec2.loc[32, "tile_kv"]) == (4, 16)
    assert rec2.loc[32, "tile_from"].startswith("tile scan")


def test_peak_fractions():
    t = ladder.ladder_table(grid({"tiled": 0.5}))
    p = ladder.peak_fractions(t, peak_tflops=65.0)
    best = t[t["kernel"].isin(ladder.KERNEL_ORDER)]["tflops"].max()
    assert p["tflops"] == pytest.approx(best) and p["kernel"] == "tiled"
    assert p["fraction_of_peak"] == pytest.approx(best / 65.0)
    assert p["fraction_of_sdpa"] == pytest.approx(0.1 / 0.5)
    with pytest.raises(ValueError):
        ladder.peak_fractions(t, 0)


def test_step_effect_and_step_verdict():
    t = ladder.ladder_table(grid({"tiled": 0.8, "vec_load": 0.78}))
    ev = ladder.step_effect(t, "vec_load", "tiled")
    assert ev["time_ratio"].round(6).eq(round(0.78 / 0.8, 6)).all() and len(ev) == 9
    assert ladder.verdict_step_negligible(t, "vec_load", "tiled").holds          # 2.5 % change
    assert not ladder.verdict_step_negligible(t, "vec_load", "tiled", threshold=0.01).holds
    with pytest.raises(ValueError):
        ladder.step_effect(t, "vec_padded", "vec_load")


def test_verdict_double_buffer_pays():
    pays = ladder.ladder_table(grid({"vec_padded": 0.8, "double_buffer": 0.7}))
    assert ladder.verdict_double_buffer_pays(pays).holds
    slower = ladder.ladder_table(grid({"vec_padded": 0.8, "double_buffer": 0.8 * 1.08}))
    v = ladder.verdict_double_buffer_pays(slower)
    assert not v.holds and (v.evidence["speedup"] < 1).all()


# ------------------------------------------------------------------ CPU-side evidence helpers

def test_kv_traffic_table():
    t = ladder.kv_traffic_table([64, 4096], [32, 128], B=2, H=8, l2_bytes=60 * 2**20).set_index(["D", "N"])
    assert t.loc[(32, 64), "unique_kv_bytes"] == 2 * 8 * 64 * 32 * 4 * 2
    assert t.loc[(32, 64), "naive_kv_bytes"] == 64 * t.loc[(32, 64), "unique_kv_bytes"]
    assert (t["reduction"] == 8).all()
    assert t.loc[(32, 4096), "fits_in_l2"] and not t.loc[(128, 4096), "fits_in_l2"]   # 64 MiB > 60 MiB
    odd = ladder.kv_traffic_table([65], [64], tiles={64: (8, 16)}).iloc[0]
    assert odd["tiled_kv_bytes"] == 9 * odd["unique_kv_bytes"]   # ceil(65/8) = 9 blocks per head read K, V


def test_copy_instruction_table():
    t = ladder.copy_instruction_table(["tiled", "vec_load", "vec_padded"], [32, 64, 128]).set_index(["kernel", "D"])
    # the seed's tiles hold 1024 floats = 256 float4 per K (or V) tile: one float4 per thread
    assert (t.loc["vec_load", "trips_per_thread"] == 1).all() and (t.loc["tiled", "trips_per_thread"] == 4).all()
    assert (t.loc["tiled", "warp_load_instructions"] == 4 * t.loc["vec_load", "warp_load_instructions"]).all()
    assert (t.loc["vec_padded", "bytes_per_lane"] == 16).all()


def test_with_occupancy_adds_limits():
    static = pd.DataFrame([dict(kernel="tiled", D=64, tile_rows=8, tile_kv=16, arch="sm_90", registers=32,
                                static_smem_bytes=0, dynamic_smem_bytes=10240),
                           dict(kernel="naive", D=64, tile_rows=0, tile_kv=0, arch="sm_75", registers=40,
                                static_smem_bytes=0, dynamic_smem_bytes=0)])
    t = ladder.with_occupancy(static)
    assert t.loc[0, "blocks_per_sm"] == 8 and t.loc[0, "occupancy_pct"] == 100.0   # 2048 threads / 256
    assert t.loc[1, "blocks_per_sm"] == 16 and t.loc[1, "limiter"] == "blocks"      # 32-thread blocks on Turing


def test_ncu_view_says_when_nothing_is_recorded():
    view, msg = ladder.ncu_view("no-such-gpu", ["tiled"])
    assert view is None and "No Nsight Compute counters" in msg


def test_repeat_consistency_separates_unconverged_pairs():
    a = timing({("tiled", 64, 64): 1.0, ("tiled", 64, 4096): 2.0})
    b = timing({("tiled", 64, 64): 2.5, ("tiled", 64, 4096): 2.02})
    b.loc[b["N"] == 64, "converged"] = False
    rc = ladder.repeat_consistency({"02_tiling": a, "03_float4": b})
    assert list(rc["both_converged"]) == [False, True] or list(rc["both_converged"]) == [True, False]
    text = ladder.describe_repeats(rc, "in two notebooks")
    assert "over the 1 pairs whose timings both converged, median ratio 1.010" in text
    assert "1 pairs with an unconverged timing" in text and "2.500" in text
    assert "no pair whose timings both converged" in ladder.describe_repeats(rc[~rc["both_converged"]], "x")
