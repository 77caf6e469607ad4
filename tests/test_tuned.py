"""data/tuned/<gpu>.json: round trip, validation, atomic writes, choice of the best tile."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from attnlab import tile_scan, tuned


def _scan():
    rows = []
    # D=64: (8,16) best at both N; (8,32) best at N=512 only by a hair but 2x slower at N=4096
    lat = {(8, 16): {512: 1.00, 4096: 10.0}, (8, 32): {512: 0.98, 4096: 20.0},
           (4, 16): {512: 1.50, 4096: 12.0}, (32, 128): {512: None, 4096: None}}
    for (tr, tk), by_n in lat.items():
        for n, ms in by_n.items():
            rows.append(dict(kernel="tiled", D=64, N=n, tile_rows=tr, tile_kv=tk, median_ms=ms))
    # D=128 for another kernel, one N only
    for (tr, tk), ms in {(8, 8): 3.0, (16, 8): 2.5}.items():
        rows.append(dict(kernel="vec_padded", D=128, N=512, tile_rows=tr, tile_kv=tk, median_ms=ms))
    return pd.DataFrame(rows)


def test_best_tiles_geometric_score():
    best = tile_scan.best_tiles_from_scan(_scan()).set_index(["kernel", "D"])
    t = best.loc[("tiled", 64)]
    assert (t.tile_rows, t.tile_kv) == (8, 16)
    assert t.N == 4096 and t.median_ms == 10.0
    # (8,16): rel 1.00/0.98 at 512, 1.0 at 4096 -> sqrt(1.0204) ~ 1.0102
    assert t.score == pytest.approx((1.0 / 0.98) ** 0.5)
    assert t.n_tiles == 3                   # the NaN tile did not compete
    v = best.loc[("vec_padded", 128)]
    assert (v.tile_rows, v.tile_kv, v.median_ms, v.score) == (16, 8, 2.5, 1.0)


def test_best_tiles_at_one_n():
    best = tile_scan.best_tiles_from_scan(_scan(), N=512).set_index(["kernel", "D"])
    assert tuple(best.loc[("tiled", 64)][["tile_rows", "tile_kv"]]) == (8, 32)


def test_best_tiles_errors():
    with pytest.raises(ValueError, match="lacks column"):
        tile_scan.best_tiles_from_scan(pd.DataFrame({"kernel": ["x"]}))
    with pytest.raises(ValueError, match="no measured rows"):
        tile_scan.best_tiles_from_scan(_scan(), N=999)
    # a tile measured at one N only cannot compete when two N were scanned
    df = pd.DataFrame([dict(kernel="k", D=32, N=512, tile_rows=8, tile_kv=8, median_ms=1.0),
                       dict(kernel="k", D=32, N=4096, tile_rows=8, tile_kv=16, median_ms=1.0)])
    with pytest.raises(ValueError, match="every N"):
        tile_scan.best_tiles_from_scan(df)


def test_round_trip_and_lookup(tmp_path):
    assert tuned.lookup("h200", "tiled", 64, tmp_path) is None          # no file: None
    best = tile_scan.best_tiles_from_scan(_scan())
    path = tile_scan.write_from_scan("h200", best, date="2026-11-29T08:00:00Z", commit="abc", tuned_dir=tmp_path)
    assert path == tmp_path / "h200.json"
    assert tuned.lookup("h200", "tiled", 64, tmp_path) == (8, 16)
    assert tuned.lookup("h200", "vec_padded", 128, tmp_path) == (16, 8)
    assert tuned.lookup("h200", "tiled", 128, tmp_path) is None
    assert tuned.lookup("h200", "naive", 64, tmp_path) is None
    data = json.loads(path.read_text())
    assert data["entries"]["tiled"]["64"]["commit"] == "abc"
    assert not list(tmp_path.glob(".*.tmp"))                             # no temp file left behind
    table = tuned.as_table("h200", tmp_path)
    assert set(table["kernel"]) == {"tiled", "vec_padded"}


def test_merge_keeps_other_entries(tmp_path):
    tile_scan.write_from_scan("h200", tile_scan.best_tiles_from_scan(_scan()), commit="a", tuned_dir=tmp_path)
    only = pd.DataFrame([dict(kernel="tiled", D=32, tile_rows=4, tile_kv=64, median_ms=1.0, N=512, score=1.0)])
    tile_scan.write_from_scan("h200", only, commit="b", tuned_dir=tmp_path)
    assert tuned.lookup("h200", "tiled", 64, tmp_path) == (8, 16)
    assert tuned.lookup("h200", "tiled", 32, tmp_path) == (4, 64)
    tile_scan.write_from_scan("h200", only, commit="c", tuned_dir=tmp_path, merge=False)
    assert tuned.lookup("h200", "tiled", 64, tmp_path) is None


def test_launcher_takes_tuned_tiles_then_the_seeds(tmp_path, monkeypatch):
    from attnlab import attention

    monkeypatch.setattr(tuned.paths, "TUNED_DIR", tmp_path)
    assert attention.resolve_tiles("tiled", 32, gpu="h200") == (8, 32, "default")
    assert attention.resolve_tiles("tiled", 128, gpu="h200") == (8, 8, "default")
    tile_scan.write_from_scan("h200", tile_scan.best_tiles_from_scan(_scan()), commit="a", tuned_dir=tmp_path)
    assert attention.resolve_tiles("vec_padded", 128, gpu="h200") == (16, 8, "tuned")
    assert attention.resolve_tiles("vec_padded", 128, 4, 16, gpu="h200") == (4, 16, "caller")
    assert attention.resolve_tiles("vec_padded", 128, gpu=None)[2] == "default"


def test_recorded_h200_tiles_are_what_the_launcher_uses():
    from attnlab import attention

    for kernel, per_d in tuned.load("h200")["entries"].items():
        for d, entry in per_d.items():
            assert attention.resolve_tiles(kernel, int(d), gpu="h200") == (entry["tile_rows"], entry["tile_kv"], "tuned")


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d.update(schema=2), "schema"),
    (lambda d: d.update(gpu=""), "gpu"),
    (lambda d: d.update(entries=[]), "entries"),
    (lambda d: d["entries"]["tiled"].update({"x64": d["entries"]["tiled"]["64"]}), "head dim"),
    (lambda d: d["entries"]["tiled"]["64"].pop("commit"), "missing field"),
    (lambda d: d["entries"]["tiled"]["64"].update(tile_kv=0), "tile_kv"),
    (lambda d: d["entries"]["tiled"]["64"].update(tile_rows=8.0), "tile_rows"),
    (lambda d: d["entries"]["tiled"]["64"].update(median_ms=-1), "median_ms"),
    (lambda d: d["entries"]["tiled"]["64"].update(median_ms=float("nan")), "median_ms"),
], ids=["schema", "gpu", "entries-list", "bad-D", "no-commit", "zero-kv", "float-rows", "neg-ms", "nan-ms"])
def test_validation_errors(tmp_path, mutate, match):
    tile_scan.write_from_scan("h200", tile_scan.best_tiles_from_scan(_scan()), commit="a", tuned_dir=tmp_path)
    path = tmp_path / "h200.json"
    data = json.loads(path.read_text())
    mutate(data)
    with pytest.raises(tuned.TunedFileError, match=match):
        tuned.validate(data)
    path.write_text(json.dumps(data))
    with pytest.raises(tuned.TunedFileError, match="h200.json"):
        tuned.lookup("h200", "tiled", 64, tmp_path)


def test_corrupt_json_and_wrong_gpu(tmp_path):
    (tmp_path / "h200.json").write_text("{not json")
    with pytest.raises(tuned.TunedFileError, match="not valid JSON"):
        tuned.lookup("h200", "tiled", 64, tmp_path)
    good = tuned.empty("a100")
    (tmp_path / "h200.json").write_text(json.dumps(good))
    with pytest.raises(tuned.TunedFileError, match="expected 'h200'"):
        tuned.load("h200", tmp_path)


def test_failed_save_leaves_old_file(tmp_path):
    tile_scan.write_from_scan("h200", tile_scan.best_tiles_from_scan(_scan()), commit="a", tuned_dir=tmp_path)
    before = (tmp_path / "h200.json").read_text()
    bad = tuned.empty("h200")
    bad["entries"] = {"tiled": {"64": {"tile_rows": 8}}}
    with pytest.raises(tuned.TunedFileError):
        tuned.save(bad, tmp_path)
    assert (tmp_path / "h200.json").read_text() == before


@pytest.mark.parametrize("slug", ["", "../x", ".hidden", "a/b"])
def test_bad_slug(slug):
    with pytest.raises(ValueError):
        tuned.tuned_path(slug)


# ------------------------------------------------------------------ scan helpers (notebook 05)

def test_scan_configs_geometry():
    c = tile_scan.scan_configs(["tiled", "vec_padded"], [32, 128])
    assert len(c) == 2 * 2 * 6 * 5
    r = c[(c.kernel == "tiled") & (c.D == 128) & (c.tile_rows == 32) & (c.tile_kv == 128)].iloc[0]
    assert r.block_threads == 1024 and r.dynamic_smem == (32 + 2 * 128) * 128 * 4 and r.fits
    p = c[(c.kernel == "vec_padded") & (c.D == 32) & (c.tile_rows == 8) & (c.tile_kv == 32)].iloc[0]
    assert p.dynamic_smem == (8 + 64) * 36 * 4                      # rows padded by 4 floats
    t75 = tile_scan.scan_configs(["tiled"], [128], arch="sm_75")
    # on Turing (64 KB per block) the large tiles do not fit
    assert not t75[(t75.tile_rows == 32) & (t75.tile_kv == 128)]["fits"].iloc[0]
    assert t75[(t75.tile_rows == 8) & (t75.tile_kv == 8)]["fits"].iloc[0]
    with pytest.raises(ValueError, match="no tiles"):
        tile_scan.scan_configs(["naive"], [64])


def _timing():
    rows = []
    for D, best_kv in ((32, 64), (64, 32), (128, 16)):
        for tr in (4, 8):
            for kv in (16, 32, 64):
                rows.append(dict(kernel="tiled", D=D, N=512, tile_rows=tr, tile_kv=kv,
                                 median_ms=1.0 + abs(kv - best_kv) / 64 + (tr == 4) * 0.5))
    return pd.DataFrame(rows)


def test_heatmap_and_verdict():
    t = _timing()
    h = tile_scan.heatmap_frame(t, "tiled", 64, 512)
    assert list(h.index) == [4, 8] and list(h.columns) == [16, 32, 64]
    assert h.loc[8, 32] == 1.0
    best = tile_scan.best_tiles_from_scan(t)
    assert list(best["tile_kv"]) == [64, 32, 16]
    table, s = tile_scan.verdict_tile_kv_shrinks(best)
    assert s["holds_for_all"] and bool(table["shrinks"].iloc[0])
    assert "64 / 32 / 16" in s["text"] and "32 / 16 / 8" in s["text"]         # seed beside
    flat = best.assign(tile_kv=[32, 32, 32])
    assert not tile_scan.verdict_tile_kv_shrinks(flat)[1]["holds_for_any"]
    grows = best.assign(tile_kv=[16, 32, 8])
    assert not tile_scan.verdict_tile_kv_shrinks(grows)[1]["holds_for_any"]


def test_plot_heatmaps_runs():
    import matplotlib
    matplotlib.use("Agg")
    fig = tile_scan.plot_heatmaps(_timing(), "tiled", 512, best={64: (8, 32)}, seed_best={64: (8, 16)})
    assert len(fig.axes) == 6          # 3 heatmaps + 3 colour bars
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_default_vs_tuned(tmp_path):
    tile_scan.write_from_scan("h200", pd.DataFrame([dict(kernel="tiled", D=64, tile_rows=16, tile_kv=32,
                                                     median_ms=1.0, N=512, score=1.0),
                                                dict(kernel="tiled", D=32, tile_rows=8, tile_kv=32,
                                                     median_ms=1.0, N=512, score=1.0)]),
                          commit="x", tuned_dir=tmp_path)
    d = tile_scan.default_vs_tuned(["tiled"], [32, 64, 128], "h200", tmp_path).set_index("D")
    assert bool(d.loc[64, "differs"]) and not bool(d.loc[32, "differs"])
    assert d.loc[128, "tuned_rows"] is None or pd.isna(d.loc[128, "tuned_rows"])


def test_driver_check_table():
    per = pd.DataFrame([dict(arch="sm_90", kernel="tiled", D=64, tile_rows=8, tile_kv=16, block_threads=256,
                             regs=32, static_smem=0, dynamic_smem=11264, smem=11264, driver_blocks=8,
                             model_blocks=8, agree=True, limiter="warps", occupancy=1.0, theo_occupancy=1.0,
                             skipped=""),
                        dict(kernel="tiled", D=128, tile_rows=32, tile_kv=128, skipped="too big")])
    t = tile_scan.driver_check_table(per)
    assert len(t) == 1 and t["driver_blocks"].iloc[0] == 8
    from attnlab.occupancy import recheck_recorded
    assert recheck_recorded(t)["agree_now"].all()


def test_default_vs_tuned_override_and_gain_summary(tmp_path):
    d = tile_scan.default_vs_tuned(["tiled"], [64], "h200", tmp_path, tuned_tiles={("tiled", 64): (4, 32)})
    assert (d["tuned_rows"].iloc[0], d["tuned_kv"].iloc[0], bool(d["differs"].iloc[0])) == (4, 32, True)
    gain = pd.DataFrame([dict(kernel="tiled", D=64, N=n, default_tiles="8x16", tuned_tiles="4x32",
                              default_ms=2.0 * f, tuned_ms=1.0 * f, gain=2.0 if n < 1000 else 0.5)
                         for n, f in ((256, 1), (4096, 10))])
    s = tile_scan.gain_summary(gain).iloc[0]
    assert s.geomean_gain == pytest.approx(1.0) and s.min_gain == 0.5 and s.max_gain == 2.0 and s.points == 2
