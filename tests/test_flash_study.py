"""The flash-kernel study (attnlab.flash): ratios, verdicts and tolerances are pure functions of
recorded tables, tested here without a GPU; the static build of every registered flash kernel too."""

import math

import pandas as pd
import pytest

from attnlab import flash
from attnlab.attention import get_spec
from attnlab.attention import KERNELS
from attnlab.results import select_requested


def _timing():
    rows = []
    for causal in (False, True):
        for D in (64, 128):
            for N in (1024, 4096):
                rows.append(dict(kernel="mine", causal=causal, D=D, N=N, median_ms=1.0, tflops=10.0))
                rows.append(dict(kernel="sdpa", causal=causal, D=D, N=N, median_ms=1.5 if N == 1024 else 2.0,
                                 tflops=5.0))
    return pd.DataFrame(rows)


def test_ratio_is_reference_time_over_kernel_time():
    r = flash.ratios(_timing(), "mine", "sdpa")
    assert len(r) == 8 and set(r["x"]) == {1.5, 2.0}
    assert (r["kernel"] == "mine").all() and (r["reference"] == "sdpa").all()


def test_min_ratio_needs_every_point():
    t = _timing()
    assert flash.min_ratio(t, "mine", "sdpa", D_list=[64, 128], N_list=[1024, 4096]) == 1.5
    assert flash.min_ratio(t, "mine", "sdpa", D_list=[128], N_list=[4096]) == 2.0
    # a point that was never measured makes the verdict 'not measured', never a pass
    assert math.isnan(flash.min_ratio(t, "mine", "sdpa", D_list=[64], N_list=[1024, 16384]))
    assert math.isnan(flash.min_ratio(t[t["kernel"] != "sdpa"], "mine", "sdpa", D_list=[64], N_list=[1024]))


@pytest.mark.parametrize("value, target, higher, status", [
    (1.4, 1.3, True, "met"), (1.2, 1.3, True, "missed"), (float("nan"), 1.3, True, "not measured"),
    (1e-6, 2e-6, False, "met"), (3e-6, 2e-6, False, "missed")])
def test_verdict(value, target, higher, status):
    v = flash.verdict("t", value, target, higher_is_better=higher)
    assert v["status"] == status
    if status != "not measured":
        assert (v["margin"] >= 1) == (status == "met")


def test_large_logit_tolerance_grows_with_the_largest_score():
    assert flash.large_logit_tolerance(1e-5, 5.0) == 1e-5
    assert flash.large_logit_tolerance(1e-5, 300.0) == pytest.approx(3e-4)


def test_select_requested_reports_missing_points():
    t = _timing()
    sel, missing = select_requested(t, N=[1024, 16384], D=[128])
    assert set(sel["N"]) == {1024} and set(sel["D"]) == {128}
    assert missing == [{"N": 16384, "D": 128}]


def test_unknown_sdpa_reference_is_named():
    with pytest.raises(ValueError, match="unknown reference 'sdpa_fast'"):
        flash.sdpa_call("sdpa_fast", None, None, None)


FLASH = sorted(n for n, s in KERNELS.items() if s.flash)


@pytest.mark.skipif(not FLASH, reason="no flash kernels registered")
def test_every_flash_instantiation_builds_without_spills():
    table = flash.static_table(FLASH, archs=("sm_75", "sm_90"))   # sm_75 only for kernels without min_cc
    assert len(table) > 0 and (table["registers"] > 0).all()
    allowed = table["kernel"].map(lambda k: get_spec(k).spill_bytes_allowed)   # 10h: its header says why
    assert (table["spill_bytes"] <= allowed).all(), table[table["spill_bytes"] > allowed]
    for name in FLASH:
        t = table[table["kernel"] == name]
        precision = KERNELS[name].precision
        if precision in ("tf32", "3xtf32"):
            assert (t["mma_tf32"] > 0).all(), f"{name}: no TF32 mma.sync in the PTX"
        if precision == "16-bit" and KERNELS[name].arch is None:
            assert (t["mma_bf16"] + t["mma_f16"] > 0).all(), f"{name}: no 16-bit mma.sync in the PTX"
        if KERNELS[name].arch == "sm_90a":   # the Hopper step: warpgroup MMAs fed by the copy engine
            assert (t["arch"] == "sm_90a").all() and len(t) == 8, t
            assert ((t["wgmma"] > 0) & (t["tma"] > 0) & (t["mbarrier"] > 0)).all(), f"{name}: no wgmma/TMA in the PTX"


def test_verdict_sentences_follow_the_numbers():
    t = flash.verdict_table([flash.verdict("speed", 0.86, 1.0), flash.verdict("error", 1e-6, 2e-6, higher_is_better=False),
                             flash.verdict("other", float("nan"), 1.0)])
    text = flash.describe_verdicts(t, "source line").splitlines()
    assert "0.86 against the required ≥ 1 — **missed** (86.0 % of the target)" in text[0]
    # a near miss never rounds up to the target
    near = flash.describe_verdicts(flash.verdict_table([flash.verdict("speed", 0.99968, 1.0)]), "s").splitlines()[0]
    assert "0.9997 against" in near and "(99.9 % of the target)" in near
    assert "1e-06 against the required ≤ 2e-06 — **met**" in text[1]
    assert "not measured" in text[2] and "met" not in text[2]
    assert text[-1] == "_source line_"


def test_step_gains_compare_each_step_with_its_predecessor():
    rows = [dict(kernel=k, causal=False, D=128, N=n, median_ms=ms, tflops=1.0)
            for k, n, ms in (("wgmma_tma", 4096, 1.0), ("wgmma_pipeline", 4096, 0.5), ("wgmma_tma", 16384, 2.0),
                             ("wgmma_pipeline", 16384, 4.0), ("sdpa_flash", 4096, 1.0))]
    g = flash.step_gains(pd.DataFrame(rows), ["wgmma_tma", "wgmma_pipeline"])
    assert list(g["kernel"]) == ["wgmma_pipeline"] * 2 and sorted(g["x"]) == [0.5, 2.0]
    text = flash.describe_step_gains(g)
    assert "11b wgmma_pipeline** against 11a wgmma_tma: 0.50–2.00× (median 1.25×, faster) over 2" in text


def test_loaded_kernels_that_spill_are_named():
    static = pd.DataFrame([dict(kernel=k, D=128, causal=False, params="BM=64", dtype="bfloat16", registers=r,
                                spill_bytes=0) for k, r in (("a", 200), ("b", 255))])
    loaded = pd.DataFrame([dict(kernel=k, step=s, D=128, causal=False, params="BM=64", dtype="bfloat16", registers=r,
                                local_bytes=lb, compiler="NVRTC 13.0 (CuPy 14.2.0)")
                           for k, s, r, lb in (("a", "10x", 200, 0), ("b", "10y", 255, 104))])
    cmp = flash.compare_loaded(static, loaded)
    assert list(cmp["static_registers"]) == [200, 255] and list(cmp["local_bytes"]) == [0, 104]
    text = flash.describe_loaded(cmp)
    assert "1 of 2" in text and "b D=128: 104 B of local memory at 255 registers" in text and "NVRTC 13.0" in text
    assert "no kernel uses local memory" in flash.describe_loaded(cmp[cmp["kernel"] == "a"])
