"""The 3xBF16 delta kernels (kernels/delta/06-13) on the CPU model of tests/ladder_emu/ladder_emu.h.

tests/delta_emu/harness_06.cpp runs 06 (one kernel) and 07 -> 08, 09, 10, 11, 12 and 07<A2> -> 13, 14 on
the same inputs; the model defers every cp.async copy and every wgmma to the wait that retires it,
delivers 14's multicast bulk copies when a block waits on their mbarrier,
runs named barriers with their thread counts, and accumulates bf16 MMAs (warp and warpgroup) as
the tensor core does. Each output is compared with the
float64 recurrence (attnlab.delta.kda_recurrent_fp64): edge lengths (T = 1, tails), every gate
family the lab generates (g = -50 per step takes the exact path of 06 / 07), initial state on and
off, both value-block widths and both head sizes. 09 and 10 must reproduce 08 bit for bit (same
arithmetic, different schedules).
"""

from __future__ import annotations

import re
import shutil
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from attnlab.delta import chunk_rounding_model, kda_recurrent_fp64, random_inputs
from attnlab.delta.tf32 import round_bf16

import emu_build  # tests/emu_build.py: g++ builds cached by content

ROOT = Path(__file__).resolve().parents[1]
GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(GXX is None, reason="g++ (C++20) is needed to build the CPU model")

#: The relative RMS error the 3xBF16 kernels reach on these inputs is ~5e-6..1e-5 (bf16 pairs keep
#: 16 significant bits); 3e-5 catches any indexing, barrier or split mistake (those give O(1) or
#: at least 1e-3) while leaving room for rounding. The issue's bound for every input is 1e-4.
TOL = 3e-5

#: bf16 output vs the float64 result rounded to bf16: only elements whose value sits near a rounding
#: boundary may differ, by one bf16 ulp (~1e-4 relative RMS here); a wrong element type, a missed
#: conversion or a stale chunk gives 1e-3 or more (unrounded fp32 output alone is ~1e-3 away)
BF16_O_TOL = 5e-4

#: 17 (P1 and P4 as one bf16 term) vs the float64 model of those roundings: ties and summation order
#: only (~1e-4 relative RMS at most in these cases); the three-term kernels sit >= 9e-4 from the
#: model's final state here, a dropped or misplaced operand O(1)
SINGLE_TOL = 5e-4

CONFIGS = [(64, 64, 16), (64, 64, 32), (128, 128, 32)]
CASES = [  # B, T, H, gate, initial state
    (2, 1, 2, "logsigmoid", True),
    (2, 17, 2, "logsigmoid", False),
    (1, 100, 2, "const", True),        # g = -50: the exact path of the pair products
    (1, 70, 2, "mixed", True),
    (2, 33, 1, "strong", False),
    (1, 64, 2, "zero", True),
]


def _script(name: str):
    """A module of scripts/ (a probe's forms and defines, imported as the script itself uses them)."""
    import importlib
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "scripts"))


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if not np.all(np.isfinite(a)):
        return float("inf")
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    out = tmp_path_factory.mktemp("delta_tc_emu")
    built = {}

    def get(K, V, BV, defines=()):   # defines: a probe build's (-DNAME=1 ...), beside ATTNLAB_EMU_DEFINES
        key = (K, V, BV, tuple(defines))
        if key not in built:
            exe = out / f"harness_06_{K}_{V}_{BV}_{len(built)}"
            cmd = [GXX, "-std=c++20", "-O1", "-pthread", "-include", str(ROOT / "tests/ladder_emu/ladder_emu.h"),
                   "-I", str(ROOT / "kernels"), f"-DEMU_K={K}", f"-DEMU_V={V}", f"-DEMU_BV={BV}",
                   *os.environ.get("ATTNLAB_EMU_DEFINES", "").split(),   # e.g. "-DKDA_P1_LDA=1": a probe build's variant
                   *defines, str(ROOT / "tests/delta_emu/harness_06.cpp"), "-o", str(exe)]
            res = emu_build.run(cmd)
            assert res.returncode == 0, f"build failed:\n{' '.join(cmd)}\n{res.stderr[-4000:]}"
            built[key] = exe
        return built[key]

    return get


@pytest.mark.parametrize("K, V, BV", CONFIGS, ids=[f"K{k}V{v}BV{b}" for k, v, b in CONFIGS])
@pytest.mark.parametrize("B, T, H, gate, init", CASES, ids=[f"T{c[1]}-{c[3]}-h0{int(c[4])}" for c in CASES])
def test_tensor_core_kernels_match_float64(harness, tmp_path, K, V, BV, B, T, H, gate, init):
    if K == 128 and T > 64:
        T = 64   # the CPU model runs a thread per CUDA thread: keep the largest head short
    x = random_inputs(B, T, H, K, V, seed=T + 7 * K + BV, gate=gate, initial_state=init)
    for n in ("q", "k", "v", "g", "beta"):
        x[n].astype(np.float32).tofile(tmp_path / n)
    if init:
        x["initial_state"].astype(np.float32).tofile(tmp_path / "h0")
    scale = K ** -0.5
    res = subprocess.run([str(harness(K, V, BV)), str(tmp_path), str(B), str(T), str(H), str(scale), str(int(init))],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    ref_o, ref_s = kda_recurrent_fp64(x["q"], x["k"], x["v"], x["g"], x["beta"], scale, x.get("initial_state"), True)
    read = lambda name, shape: np.fromfile(tmp_path / name, np.float32).reshape(shape)
    out = {}
    for tag, label in (("fz", "06"), ("ts", "07->08"), ("ws", "07->09"), ("ln", "07->10"), ("rg", "07->12"),
                       ("r2", "07->12 (two roles)"), ("wg", "07<A2>->13 (wgmma)"),
                       ("dt", "07<A2>->15 (WG_E on fewer instructions)"),
                       ("rs", "07<A2>->16 (the chain turned around, A operands from registers)")):
        o, s = read(f"{tag}_o", (B, T, H, V)), read(f"{tag}_ht", (B, H, K, V))
        out[tag] = (o, s)
        assert rel(o, ref_o) < TOL, f"{label}: o error {rel(o, ref_o):.2e}"
        assert rel(s, ref_s) < TOL, f"{label}: final state error {rel(s, ref_s):.2e}"
    for tag, label in (("ws", "09"), ("ln", "10")):
        assert np.array_equal(out[tag][0], out["ts"][0]) and np.array_equal(out[tag][1], out["ts"][1]), \
            f"{label} must reproduce 08 bit for bit"
    # 19 is 15 with P1's A rounded to its bf16 hi / lo words by WG_E (stored as the wgmma's MN-major
    # tile) instead of by WG_C (A fragments): the same words, the same products in the same order
    o, s = read("tl_o", (B, T, H, V)), read("tl_ht", (B, H, K, V))
    assert np.array_equal(o, out["dt"][0]) and np.array_equal(s, out["dt"][1]), "07<A2>->19 must reproduce 15 bit for bit"
    # 24 is 19 with P4's A fragments loaded by ldmatrix (off the chain) in place of read by each wgmma: the same
    # words, products and order (a fragment of the wrong channels, tokens or hi / lo half is 1e-3 or more away)
    o24, s24 = read("kr_o", (B, T, H, V)), read("kr_ht", (B, H, K, V))
    assert np.array_equal(o24, o) and np.array_equal(s24, s), "07<A2>->24 must reproduce 19 bit for bit"
    # 25: 24 in the WY form (W an fp32 FMA sum, U in P1, o's product behind P4): the float64 bound
    o, s = read("wy_o", (B, T, H, V)), read("wy_ht", (B, H, K, V))
    assert rel(o, ref_o) < TOL and rel(s, ref_s) < TOL, f"07->25: errors {rel(o, ref_o):.2e}, {rel(s, ref_s):.2e}"
    # 20 is 19 with each channel's running products split over two threads (four at K = 64) and joined:
    # the float64 recurrence's bound, and 19's values to the rounding of those products' order
    o, s = read("wd_o", (B, T, H, V)), read("wd_ht", (B, H, K, V))
    assert rel(o, ref_o) < TOL and rel(s, ref_s) < TOL, f"07<A2>->20: errors {rel(o, ref_o):.2e}, {rel(s, ref_s):.2e}"
    assert rel(o, out["dt"][0]) < 3e-6 and rel(s, out["dt"][1]) < 3e-6, \
        f"07<A2>->20 should match 19 to rounding: {rel(o, out['dt'][0]):.2e}, {rel(s, out['dt'][1]):.2e}"
    # 23: 19's operands, the chain turned around with each value column's hi and lo terms as a row pair: the
    # products of the same words plus their lo x lo term, in another order (the float64 bound, 19's values to
    # rounding; a dropped or misplaced hi / lo row is 1e-3 or more away). It runs 32 value columns a block only.
    o, s = read("hl_o", (B, T, H, V)), read("hl_ht", (B, H, K, V))
    if BV == 32:
        assert rel(o, ref_o) < TOL and rel(s, ref_s) < TOL, f"07<A2>->23: errors {rel(o, ref_o):.2e}, {rel(s, ref_s):.2e}"
        assert rel(o, out["dt"][0]) < 1e-5 and rel(s, out["dt"][1]) < 1e-5, \
            f"07<A2>->23 should match 19 to rounding: {rel(o, out['dt'][0]):.2e}, {rel(s, out['dt'][1]):.2e}"
    else:
        assert np.isnan(o).all() and np.isnan(s).all(), "23 is not run at 16 value columns a block"
    # 21 -> 22 on fp32 inputs: 19's three-term chain on 21's hi / lo images, whose Kg, Qg and Kd come from
    # 13's running sums (2^G, 2^(G_L - G)) in place of 15's running products: the float64 recurrence's bound,
    # and 19's values to the rounding of those exponentials (a wrong tile, a missing lo word or a stale chunk
    # is 1e-3 or more away)
    o, s = read("pr_o", (B, T, H, V)), read("pr_ht", (B, H, K, V))
    assert rel(o, ref_o) < TOL and rel(s, ref_s) < TOL, f"21->22 (fp32): errors {rel(o, ref_o):.2e}, {rel(s, ref_s):.2e}"
    assert rel(o, out["dt"][0]) < 3e-6 and rel(s, out["dt"][1]) < 3e-6, \
        f"21->22 (fp32) should match 19 to rounding: {rel(o, out['dt'][0]):.2e}, {rel(s, out['dt'][1]):.2e}"
    # 14 is 13 with its inputs multicast to a cluster (all of a head's value blocks, or pairs of them):
    # the same arithmetic on the same values
    for tag, how in (("mc", "one cluster per head"), ("m2", "pairs"), ("m1", "no cluster, plain bulk copies"),
                     ("mt", "WG_C's copies as bulk copies too"), ("tm", "TMA tensor copies"),
                     ("t2", "TMA tensor copies, WG_C's too"), ("t3", "TMA tensor copies, three Kd^T buffers")):
        o, s = read(f"{tag}_o", (B, T, H, V)), read(f"{tag}_ht", (B, H, K, V))
        assert np.array_equal(o, out["wg"][0]) and np.array_equal(s, out["wg"][1]), \
            f"07<A2>->14 ({how}) must reproduce 13 bit for bit"
    # 12 with two roles runs 12's arithmetic, operation for operation, split over two warps
    assert np.array_equal(out["r2"][0], out["rg"][0]) and np.array_equal(out["r2"][1], out["rg"][1]), \
        "12 with two consumer roles must reproduce 12 bit for bit"
    # 11 (a head's value blocks as one cluster) sums the gates in other groups: 10 to rounding
    o, s = read("cl_o", (B, T, H, V)), read("cl_ht", (B, H, K, V))
    assert rel(o, ref_o) < TOL and rel(s, ref_s) < TOL, f"07->11: errors {rel(o, ref_o):.2e}, {rel(s, ref_s):.2e}"
    assert rel(o, out["ln"][0]) < 3e-6 and rel(s, out["ln"][1]) < 3e-6, "11 should match 10 to rounding"
    # bf16 I/O (07 -> 10 with bf16 q, k, v, g, beta and o): against the float64 recurrence on the
    # inputs rounded to bf16, o must be that result rounded to bf16 (up to a rare last-bit tie: the
    # kernels' own error is ~1e-5 of o), the fp32 final state fp32-accurate
    xb = {n: round_bf16(np.asarray(x[n], np.float32)) for n in ("q", "k", "v", "g", "beta")}
    ref_ob, ref_sb = kda_recurrent_fp64(xb["q"], xb["k"], xb["v"], xb["g"], xb["beta"], scale,
                                        x.get("initial_state"), True)
    for tag, label in (("bf", "07->10"), ("rb", "07->12"), ("wb", "07<A2>->13"), ("dtb", "07<A2>->15"), ("rsb", "07<A2>->16")):
        o, s = read(f"{tag}_o", (B, T, H, V)), read(f"{tag}_ht", (B, H, K, V))
        assert rel(o, round_bf16(ref_ob.astype(np.float32))) < BF16_O_TOL, f"{label} bf16 I/O: o error {rel(o, ref_ob):.2e}"
        assert rel(s, ref_sb) < TOL, f"{label} bf16 I/O: final state error {rel(s, ref_sb):.2e}"
    # 17 (bf16 inputs only) rounds P1's and P4's operands to one bf16 term: it is held to the float64
    # model of exactly those roundings (attnlab.delta.chunk_rounding_model), where only rounding ties
    # and summation order differ (~1e-4 here); against the model 15's three-term products sit 1e-3 or
    # more away in the state, so the bound tells a single-term kernel from a three-term one
    mo, ms = chunk_rounding_model(xb["q"], xb["k"], xb["v"], xb["g"], xb["beta"], scale, x.get("initial_state"),
                                  one_term=("P1", "P4"), round_output=True)
    o, s = read("sgb_o", (B, T, H, V)), read("sgb_ht", (B, H, K, V))
    assert rel(o, mo) < SINGLE_TOL, f"07<A2>->17 bf16 I/O: o vs the rounding model {rel(o, mo):.2e}"
    assert rel(s, ms) < SINGLE_TOL, f"07<A2>->17 bf16 I/O: final state vs the rounding model {rel(s, ms):.2e}"
    # 19 on bf16 inputs: 17's one-term products, P1's A from WG_E's tile: 17's words, bit for bit
    o19, s19 = read("tlb_o", (B, T, H, V)), read("tlb_ht", (B, H, K, V))
    assert np.array_equal(o19, o) and np.array_equal(s19, s), "07<A2>->19 bf16 I/O must reproduce 17 bit for bit"
    # 24 on bf16 inputs: 19's one-term chain, P4's A (Kd^T hi) from registers: 19's words, bit for bit
    o24, s24 = read("krb_o", (B, T, H, V)), read("krb_ht", (B, H, K, V))
    assert np.array_equal(o24, o19) and np.array_equal(s24, s19), "07<A2>->24 bf16 I/O must reproduce 19 bit for bit"
    # 20 on bf16 inputs: 19's one-term products with the running products split: the same rounding model
    o20, s20 = read("wdb_o", (B, T, H, V)), read("wdb_ht", (B, H, K, V))
    assert rel(o20, mo) < SINGLE_TOL, f"07<A2>->20 bf16 I/O: o vs the rounding model {rel(o20, mo):.2e}"
    assert rel(s20, ms) < SINGLE_TOL, f"07<A2>->20 bf16 I/O: final state vs the rounding model {rel(s20, ms):.2e}"
    # 21 -> 22: 19's one-term chain on operands made by 21 (13's running sums in place of 15's products): the same
    # rounding model (the harness also checks 21's T / A2 words against 07<A2>'s, bit for bit)
    o22, s22 = read("prb_o", (B, T, H, V)), read("prb_ht", (B, H, K, V))
    assert rel(o22, mo) < SINGLE_TOL, f"21->22 bf16 I/O: o vs the rounding model {rel(o22, mo):.2e}"
    assert rel(s22, ms) < SINGLE_TOL, f"21->22 bf16 I/O: final state vs the rounding model {rel(s22, ms):.2e}"
    # 18 rounds P1a, W and P4 to one bf16 term (P1b = W V' keeps three): not 17's roundings, so held to
    # the float64 recurrence like 17 is, within a quarter of 17's own error (the CPU model has 18's state
    # and o within 1.25x of 17's in every case here, o mostly below it; a dropped product or a stale
    # chunk is O(1))
    o1, s1 = read("ahb_o", (B, T, H, V)), read("ahb_ht", (B, H, K, V))
    ref_or = round_bf16(ref_ob.astype(np.float32))
    assert rel(s1, ref_sb) < 1.25 * rel(s, ref_sb) + 1e-5, f"07<A2>->18 one-term: state {rel(s1, ref_sb):.2e} vs 17's {rel(s, ref_sb):.2e}"
    assert rel(o1, ref_or) < 1.25 * rel(o, ref_or) + 1e-4, f"07<A2>->18 one-term: o {rel(o1, ref_or):.2e} vs 17's {rel(o, ref_or):.2e}"
    # 13 with two staging tiles and 14 on the bf16 path: 13's arithmetic on the same values
    wb = (read("wb_o", (B, T, H, V)), read("wb_ht", (B, H, K, V)))
    for tag, label in (("w2", "13 with two staging tiles"), ("mb", "14"), ("m1b", "14 with no cluster"),
                       ("mtb", "14 with no cluster, WG_C's copies as bulk copies"), ("tmb", "14's TMA form"),
                       ("t2b", "14's TMA form with WG_C's copies as tensor copies"),
                       ("t3b", "14's TMA form with three Kd^T buffers")):
        o, s = read(f"{tag}_o", (B, T, H, V)), read(f"{tag}_ht", (B, H, K, V))
        assert np.array_equal(o, wb[0]) and np.array_equal(s, wb[1]), f"{label} (bf16 I/O) must reproduce 13 bit for bit"


@pytest.mark.parametrize("K, V, BV", [(64, 64, 16), (128, 128, 32)], ids=["K64V64BV16", "K128V128BV32"])
def test_register_operand_probe_builds_reproduce_the_recorded_builds(harness, tmp_path, K, V, BV):
    """KDA_P1_LDA and KDA_P4_LDA (scripts/probe_delta_lda.py) load P1's and P4's A operands from their shared-memory
    tiles into registers by ldmatrix and issue the same products in the same order, KDA_PREP_ALIAS=0 runs 07 on
    fp32 inputs in its earlier layout (the late arrays in their own space), KDA_KD_EARLY has 24 hand its operand buffer
    back before P4, KDA_STAGE_RING gives 23's element-wise warpgroup two staging tiles, KDA_O_LATE stores each chunk's o
    behind the next chunk's P1 issue (the last chunk's after the loop), KDA_O_BULK has 24 store it from a shared-memory
    tile by bulk copies (in place of KDA_O_LATE there), KDA_O_WARP by a ninth warp from that tile (24 on fp32 and bf16
    inputs, a build of its own) and KDA_RS_VPIN=1 copies 16's next v and beta after P4's issue; KDA_PREP_LEAN (a build of
    its own, 07 in its recorded layout) steps one offset a row for 07's and 21's loads and has 07 store Aqk during the
    inverse, its zero blocks written by the copy out, and with KDA_PREP_INV the inverse on every warp: every kernel of the harness (07 -> 08-20, 23, 24 and 21 -> 22,
    fp32 and bf16 inputs) must write the recorded build's o and final state bit for bit. Three chunks
    and a tail with an initial state, so that P1 multiplies a nonzero state and P4's update is read back (a
    fragment from the wrong rows, channels or hi / lo half is 1e-3 or more away)."""
    B, T, H = 1, 70, 2
    x = random_inputs(B, T, H, K, V, seed=5 + K + BV, gate="mixed", initial_state=True)
    outs = {}
    for name, defines in (("recorded", ()), ("probe", ("-DKDA_P1_LDA=1", "-DKDA_P4_LDA=1", "-DKDA_PREP_ALIAS=0",
                                                       "-DKDA_KD_EARLY=1", "-DKDA_STAGE_RING=1", "-DKDA_O_LATE=1",
                                                       "-DKDA_O_BULK=1", "-DKDA_RS_VPIN=1")),
                          ("store warp", ("-DKDA_O_WARP=1",)),
                          ("lean", ("-DKDA_PREP_LEAN=1", "-DKDA_PREP_INV=1"))):   # 07 aliased (ALIAS=0 above is not)
        d = tmp_path / name
        d.mkdir()
        for n in ("q", "k", "v", "g", "beta"):
            x[n].astype(np.float32).tofile(d / n)
        x["initial_state"].astype(np.float32).tofile(d / "h0")
        res = subprocess.run([str(harness(K, V, BV, defines)), str(d), str(B), str(T), str(H), str(K ** -0.5), "1"],
                             capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        outs[name] = {p.name: p.read_bytes() for p in d.iterdir() if p.name.endswith(("_o", "_ht"))}
    for tag in ("tl", "tlb", "pr", "prb", "dt", "wg", "sgb", "hl", "kr", "krb"):   # 19, 22 (both inputs), 15, 13, 17, 23, 24
        assert f"{tag}_o" in outs["recorded"], f"the harness no longer writes {tag}_o"
    for probe in ("probe", "lean", "store warp"):
        assert outs[probe].keys() == outs["recorded"].keys()
        differ = sorted(n for n in outs["recorded"] if outs[probe][n] != outs["recorded"][n])
        assert not differ, f"{probe} builds differ from the recorded builds in {differ}"
    ref_o, _ = kda_recurrent_fp64(x["q"], x["k"], x["v"], x["g"], x["beta"], K ** -0.5, x["initial_state"], True)
    o19 = np.frombuffer(outs["probe"]["tl_o"], np.float32).reshape(B, T, H, V)
    assert rel(o19, ref_o) < TOL   # and what they reproduce is right


def test_chain_probe_builds_hold_to_float64_and_the_recorded_sums(harness, tmp_path):
    """KDA_P1_CHAINS=3, KDA_P2_CHAINS=3 and KDA_P4_CHAINS=2 (scripts/probe_delta_chains.py) put the lo terms of P1, P2
    and P4 into accumulators of their own, added once each product completes: the same products summed in another
    order. Every main-loop kernel of the harness (13-20, 22, 24: fp32 and bf16 inputs) must stay within rounding of
    its recorded build (1e-5 relative, far below a dropped or misplaced term's 1e-3) and within TOL of the float64
    recurrence; and 24's fp32 sums must differ from the recorded ones in some word (the probe takes effect)."""
    B, T, H, K, V, BV = 1, 70, 2, 128, 128, 32
    x = random_inputs(B, T, H, K, V, seed=23, gate="mixed", initial_state=True)
    outs = {}
    for name, defines in (("recorded", ()), ("chains", ("-DKDA_P1_CHAINS=3", "-DKDA_P2_CHAINS=3", "-DKDA_P4_CHAINS=2"))):
        d = tmp_path / name
        d.mkdir()
        for n in ("q", "k", "v", "g", "beta"):
            x[n].astype(np.float32).tofile(d / n)
        x["initial_state"].astype(np.float32).tofile(d / "h0")
        res = subprocess.run([str(harness(K, V, BV, defines)), str(d), str(B), str(T), str(H), str(K ** -0.5), "1"],
                             capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        outs[name] = {p.name: np.fromfile(p, np.float32) for p in d.iterdir() if p.name.endswith(("_o", "_ht"))}
    ref_o, ref_s = kda_recurrent_fp64(x["q"], x["k"], x["v"], x["g"], x["beta"], K ** -0.5, x["initial_state"], True)
    for tag in ("wg", "dt", "tl", "kr", "krb", "pr", "prb"):   # 13, 15, 19, 24 (both inputs), 22 (both inputs)
        for part in ("o", "ht"):
            a, b = outs["chains"][f"{tag}_{part}"], outs["recorded"][f"{tag}_{part}"]
            assert rel(a, b) < 1e-5, f"{tag}_{part}: {rel(a, b):.2e} from the recorded build"
    assert rel(outs["chains"]["kr_o"], ref_o.ravel()) < TOL and rel(outs["chains"]["kr_ht"], ref_s.ravel()) < TOL
    assert not np.array_equal(outs["chains"]["kr_ht"], outs["recorded"]["kr_ht"]), "the chain probes change no sum"


def test_cluster_kernels_in_eager_order(harness, tmp_path):
    """11 and 14 (a head's value blocks as one cluster), 18 and 22, with every fiber run as far as it can before the
    next starts (EMU_FIBER_ORDER=eager): block 0 then reaches each hand-over long before block 1, so a
    copy or a store into another block's shared memory that does not wait for that block to be done
    with it lands on a tile still being read (round-robin order moves the blocks in step and hides it)."""
    B, T, H, K, V, BV = 1, 70, 2, 64, 64, 32
    x = random_inputs(B, T, H, K, V, seed=11, gate="mixed", initial_state=True)
    for n in ("q", "k", "v", "g", "beta"):
        x[n].astype(np.float32).tofile(tmp_path / n)
    x["initial_state"].astype(np.float32).tofile(tmp_path / "h0")
    env = {**__import__("os").environ, "EMU_FIBER_ORDER": "eager"}
    res = subprocess.run([str(harness(K, V, BV)), str(tmp_path), str(B), str(T), str(H), str(K ** -0.5), "1"],
                         capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    read = lambda name, shape: np.fromfile(tmp_path / name, np.float32).reshape(shape)  # noqa: E731
    for tag in ("mc", "m1", "mt", "tm", "t2", "t3"):
        for part, shape in (("o", (B, T, H, V)), ("ht", (B, H, K, V))):
            assert np.array_equal(read(f"{tag}_{part}", shape), read(f"wg_{part}", shape)), f"14 ({tag}) != 13 in eager order"
    ref_o, ref_s = kda_recurrent_fp64(x["q"], x["k"], x["v"], x["g"], x["beta"], K ** -0.5, x["initial_state"], True)
    assert rel(read("cl_o", (B, T, H, V)), ref_o) < TOL, "11 in eager order"
    # 18's two hand-overs a buffer (Kbg / Qg built a chunk early, Kd^T read until P4 a chunk later):
    # with one warpgroup run far ahead of the other, a buffer refilled too early would show here (18 is
    # bf16-only: held to the float64 recurrence on the rounded inputs within 17's error, as above)
    xb = {n: round_bf16(np.asarray(x[n], np.float32)) for n in ("q", "k", "v", "g", "beta")}
    ref_ob, ref_sb = kda_recurrent_fp64(xb["q"], xb["k"], xb["v"], xb["g"], xb["beta"], K ** -0.5, x["initial_state"], True)
    ref_or = round_bf16(ref_ob.astype(np.float32))
    s17, s18 = read("sgb_ht", (B, H, K, V)), read("ahb_ht", (B, H, K, V))
    o17, o18 = read("sgb_o", (B, T, H, V)), read("ahb_o", (B, T, H, V))
    assert rel(s18, ref_sb) < 1.25 * rel(s17, ref_sb) + 1e-5, "18 in eager order: final state"
    assert rel(o18, ref_or) < 1.25 * rel(o17, ref_or) + 1e-4, "18 in eager order: o"
    # 22's producer warp (21's images, T / A2 and v two chunks ahead): a buffer or slot refilled before the
    # chain is done with it would show here; held to the rounding model of 17's one-term products
    mo, ms = chunk_rounding_model(xb["q"], xb["k"], xb["v"], xb["g"], xb["beta"], K ** -0.5, x["initial_state"],
                                  one_term=("P1", "P4"), round_output=True)
    o22, s22 = read("prb_o", (B, T, H, V)), read("prb_ht", (B, H, K, V))
    assert rel(o22, mo) < SINGLE_TOL and rel(s22, ms) < SINGLE_TOL, "22 in eager order"
    # 23's chain (o stored and the slot released behind the next chunk's P1, P4 in two halves): the float64 bound
    o23, s23 = read("hl_o", (B, T, H, V)), read("hl_ht", (B, H, K, V))
    assert rel(o23, ref_o) < TOL and rel(s23, ref_s) < TOL, "23 in eager order"



def test_18_hands_buffers_back_only_after_the_wgmmas_that_read_them():
    """18's chain releases chunk n - 1's Kd^T (EMPTY_KD) only after the wait that retires P4 of chunk
    n - 1, and chunk n + 1's PQ is retired before the barrier after which S^T is overwritten. The CPU
    model cannot lose the first race (a thread's wgmma wait never yields to another fiber, so the
    element-wise warpgroup never runs between the release and the retire): the order is checked in
    the source."""
    chain = (ROOT / "kernels" / "delta" / "wgmma_recurrence.cuh").read_text().split("kda_wg_chain(")[1]
    ahead = chain.split("if constexpr (L::AHEAD) {")[1].split("\n    } else {\n")[0]
    assert ahead.index("wgmma_wait<0>();   // P4 of chunk n - 1") < ahead.index("EMPTY_KD + ((n - 1) & 1)")
    d = ahead.index("// ------------------------------------------ P2, then PQ")
    tail = ahead[d:]
    assert tail.index("wgmma_wait<0>();   // PQ of chunk n + 1") < tail.index("named_bar_sync(BAR_CONS, 128);")

# ----------------------------------------------------------------------------- the launch path on the CPU

@pytest.fixture()
def fake_cupy(monkeypatch, tmp_path_factory):
    import sys

    emu = str(ROOT / "tests" / "delta_emu")
    sys.path.insert(0, emu)
    try:
        import fake_device
    finally:
        sys.path.remove(emu)
    return fake_device.install(monkeypatch, tmp_path_factory.mktemp("delta_tc_launch"))


def test_launcher_and_notebook_functions_under_cpu_emulation(fake_cupy):
    """kda_tc's real launch path (validation, workspace, grids, blocks, shared memory, argument
    kinds) driving 06-09 on the CPU model, through notebook 13's own functions."""
    from attnlab.delta import fast
    from attnlab.delta import kernels as dk

    cp = fake_cupy
    x = random_inputs(2, 37, 2, 64, 64, seed=3, initial_state=True)
    ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
    d = {n: cp.asarray(a) for n, a in x.items()}
    # fp32 inputs: not the bf16-only impls (14's TMA form gets its tensor maps from fake_device's stand-in
    # for the driver's encoder, built from the same plan as the real ones)
    # (28, "pair", runs at K = 128 only: its own tests below)
    for impl in [i for i in dk.SUPPORTED_TC_IMPL if i not in dk.BF16_ONLY_IMPLS and i not in dk.PAIR_IMPLS]:
        plan = dk.prepare_tc(**d, output_final_state=True, impl=impl)
        plan.poison()
        o, s = plan.run()
        assert rel(o, ref_o) < TOL and rel(s, ref_s) < TOL, impl
        cfg = plan.launch_configs()
        for name, kernel in plan.kernels.items():
            launch = kernel.launches[-1]
            assert launch["shared_mem"] == cfg[name]["smem"] and launch["block"] == cfg[name]["block"], (impl, name)
        images = (4 * int(np.prod(dk.ops_workspace_shape(2, 37, 2, 64, bf16=False))) + 4 * 2 * 2 * 2
                  if impl in dk.PRE_IMPLS else 0)   # 21 -> 22: the hi / lo images and the ready flags
        if impl in dk.SHARE_IMPLS:   # 26: a ring of images a head, made flags, each block's acknowledgements
            images = 2 * 2 * dk.SHARE_SLOTS * dk.ops_image_bytes(64, bf16=False) + 4 * 2 * 2 * 2 * (1 + 64 // plan.bv)
        if impl in dk.SIDE_IMPLS:   # 27: 07's ready flags
            images = 4 * 2 * 2 * 2
        assert plan.workspace_bytes() == (0 if impl == "fused" else 4 * int(np.prod(dk.ta_workspace_shape(2, 37, 2))) + images)
    for impl, bv in dk.FIXED_BV.items():   # 16 and 23: their width is the chain's, any other is one line
        with pytest.raises(ValueError, match=rf"impl='{impl}' \(kernel {dk.state_step(impl)}\) runs {bv} value columns per "
                                             r"block, got bv=16; leave bv unset"):
            dk.prepare_tc(**d, impl=impl, bv=16)
    o, s = dk.kda_tc(**d)                     # defaults: 07 -> 10, no final state
    assert s is None and rel(o, ref_o) < TOL

    checks = fast.check_correctness([dict(B=1, T=33, H=2, K=64, V=64, gate="const", init=True)], seed=1)
    assert len(checks) == sum(1 if i in dk.FIXED_BV else 2 for _, i, _ in fast.TC_IMPLS + fast.FP32_IMAGE_IMPLS)
    assert checks["passed"].all() and set(checks["implementation"]) >= {fast.FP32_IMAGES}
    assert checks["matches_07_08"].dropna().astype(bool).all()
    assert checks["matches_07_08"].notna().sum() == 2 * len(fast.SAME_AS_08)   # both value-block widths
    mem = fast.peak_memory(1, 2, 64, 64, [40], with_fla=False)
    ws = mem[mem["implementation"] == fast.BEST].iloc[0]
    assert ws["extra_bytes"] == ws["model_bytes"] > 0
    ws = mem[(mem["implementation"] == fast.FP32_IMAGES) & (mem["dtype"] == "fp32")].iloc[0]   # 21 -> 22's images too
    assert ws["extra_bytes"] == ws["model_bytes"] > 4 * int(np.prod(dk.ops_workspace_shape(1, 40, 2, 64, bf16=False)))
    assert mem[mem["implementation"] == "06 fused"]["extra_bytes"].iloc[0] == 0
    acc = fast.target_accuracy(1, 2, 64, 64, 40, with_fla=False)
    ours = acc[acc["implementation"].isin([x[0] for x in fast.TC_IMPLS + fast.FP32_IMAGE_IMPLS]) & (acc["dtype"] == "fp32")]
    assert fast.FP32_IMAGES in set(ours["implementation"]) and (ours[["rel_err_o", "rel_err_state"]] < TOL).all().all()


@pytest.mark.parametrize("T, gate, init, bv, K", [(70, "mixed", True, 32, 128), (1, "logsigmoid", False, 32, 128),
                                                   (33, "strong", True, 16, 128), (64, "const", True, 32, 128),
                                                   (70, "mixed", True, 16, 64), (17, "logsigmoid", False, 32, 64)],
                         ids=["T70-mixed-h0", "T1", "T33-strong-h0-bv16", "T64-const-h0", "K64-T70-mixed-h0-bv16",
                              "K64-T17"])
def test_wy_kernel_matches_float64(fake_cupy, T, gate, init, bv, K):
    """25 (impl "wy": 24 in the WY form, W = T Kbg made by the element-wise warpgroup, U = T beta v added in P1, 07
    handing over Aqk) against the float64 recurrence at K = V = 128 and 64 through the launcher on the CPU model: outputs
    poisoned first, chunk tails, one token, strong and constant decays, an initial state; and beside 24 (its products
    are 24's but for W, an fp32 FMA sum: close to 24's results, not equal)."""
    from attnlab.delta import kernels as dk

    cp = fake_cupy
    x = random_inputs(1, T, 2, K, K, seed=40 + T, gate=gate, initial_state=init)
    d = {n: cp.asarray(a) for n, a in x.items()}
    ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
    plan = dk.prepare_tc(**d, output_final_state=True, impl="wy", bv=bv)
    assert plan.launch_configs()["state"]["smem"] == 4 * dk.wy_smem_words(K, K, bv)
    plan.poison()
    o, s = (a.get() for a in plan.run())
    assert rel(o, ref_o) < TOL and rel(s, ref_s) < TOL, f"25: o {rel(o, ref_o):.2e}, state {rel(s, ref_s):.2e}"
    o24, s24 = (a.get() for a in dk.prepare_tc(**d, output_final_state=True, impl="kdreg", bv=bv).run())
    assert rel(o, o24) < TOL and rel(s, s24) < TOL


@pytest.mark.parametrize("K, bv", [(128, 32), (64, 16)], ids=["K128", "K64-bv16"])
def test_wy_token_loop_matches_float64(fake_cupy, K, bv):
    """25's probe build KDA_WY_WLOOP=2 (fast.WY_WLOOP_PROBE: W made a token at a time from T' transposed) keeps 25's
    results: against the float64 recurrence (outputs poisoned, a chunk tail, an initial state) and close to 25 as built
    (the same FMAs summed in another order)."""
    from attnlab.delta import kernels as dk

    cp = fake_cupy
    x = random_inputs(1, 70, 2, K, K, seed=47, gate="mixed", initial_state=True)
    d = {n: cp.asarray(a) for n, a in x.items()}
    ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
    plan = dk.prepare_tc(**d, output_final_state=True, impl="wy", bv=bv, defines={"KDA_WY_WLOOP": 2})
    plan.poison()
    o, s = (a.get() for a in plan.run())
    assert rel(o, ref_o) < TOL and rel(s, ref_s) < TOL, f"25 (W a token at a time): o {rel(o, ref_o):.2e}"
    o25, s25 = (a.get() for a in dk.prepare_tc(**d, output_final_state=True, impl="wy", bv=bv).run())
    assert rel(o, o25) < 1e-6 and rel(s, s25) < 1e-6


def test_e_share_probe_builds_run_and_take_effect(fake_cupy):
    """24's probe builds KDA_E_SHARE=2 and 4 (fast.E_SHARE_PROBES: each WG_E thread at a share of its tokens; results
    meaningless) build and run through the launcher on the CPU model at K = V = 128, and the define takes effect: the
    operands of the tokens left out are never made, so o differs from 24's, which matches float64 (a probe whose build
    changed nothing would time 24 and call it a bound)."""
    from attnlab.delta import fast
    from attnlab.delta import kernels as dk

    cp = fake_cupy
    x = random_inputs(1, 40, 1, 128, 128, seed=8, gate="mixed", initial_state=True)
    d = {n: cp.asarray(a) for n, a in x.items()}
    ref_o, _ = kda_recurrent_fp64(**x, output_final_state=True)
    o24 = dk.prepare_tc(**d, impl="kdreg").run()[0].get()
    assert rel(o24, ref_o) < TOL
    for n, label in fast.E_SHARE_PROBES.items():
        assert (label, "kdreg", {"KDA_E_SHARE": n}) in fast.PROBE_BUILDS
        plan = dk.prepare_tc(**d, impl="kdreg", defines={"KDA_E_SHARE": n})
        plan.poison()
        o = plan.run()[0].get()
        assert not np.allclose(o, o24, rtol=1e-3, atol=1e-3), f"{label}: the build computes 24's o"
    assert "KDA_E_SHARE" in fast.MEANINGLESS_DEFINES


@pytest.mark.parametrize("K, bv, T, init", [(128, 32, 70, True), (64, 16, 33, False), (128, 16, 1, True)],
                         ids=["K128-T70-h0", "K64-T33-bv16", "K128-T1-h0"])
def test_global_load_build_reproduces_24(fake_cupy, K, bv, T, init):
    """24's builds KDA_E_LDG=1 and 2 (fast.E_LDG_PROBE, E_LDG_NA_PROBE: WG_E reads q, k, g from global memory, no
    staging tile, each chunk prefetched into L2 a chunk ahead; 2 with loads that allocate no L1 line) and the probe
    build KDA_E_LDG=3 (scripts/probe_delta_ldg.py: 1's loads a chunk ahead, into the registers that WG_E's arithmetic
    has finished with) load the same values and do the same arithmetic: o and the final state are 24's bit for bit
    (outputs poisoned, chunk tails, one token, an initial state), and 24's are held to float64."""
    from attnlab.delta import fast
    from attnlab.delta import kernels as dk

    cp = fake_cupy
    x = random_inputs(1, T, 3, K, K, seed=60 + T + K, gate="mixed", initial_state=init)
    d = {n: cp.asarray(a) for n, a in x.items()}
    ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
    o24, s24 = (a.get() for a in dk.prepare_tc(**d, output_final_state=True, impl="kdreg", bv=bv).run())
    assert rel(o24, ref_o) < TOL and rel(s24, ref_s) < TOL
    for mode, label in ((1, fast.E_LDG_PROBE), (2, fast.E_LDG_NA_PROBE), (3, None)):   # 3: the script's probe
        plan = dk.prepare_tc(**d, output_final_state=True, impl="kdreg", bv=bv, defines={"KDA_E_LDG": mode})
        plan.poison()
        o, s = (a.get() for a in plan.run())
        assert np.array_equal(o, o24) and np.array_equal(s, s24), f"KDA_E_LDG={mode} must reproduce 24 bit for bit"
        assert label is None or (label, "kdreg", {"KDA_E_LDG": mode}) in fast.PROBE_BUILDS


@pytest.mark.parametrize("impl", ["tile", "wide"])
def test_global_load_builds_of_19_and_20_reproduce_them(fake_cupy, impl):
    """KDA_E_LDG is a define of the loop 19, 20 and 24 share (wgmma_recurrence.cuh), so its builds of 19 (one
    element-wise warpgroup) and 20 (two) compile too: with 1 (global loads, no staging tile) and 3 (those loads a chunk
    ahead, into registers) they must write the recorded build's o and final state bit for bit (outputs poisoned, a
    tail chunk, an initial state, an odd head count), as 24's do above."""
    from attnlab.delta import kernels as dk

    cp = fake_cupy
    x = random_inputs(1, 70, 3, 128, 128, seed=198, gate="mixed", initial_state=True)
    d = {n: cp.asarray(a) for n, a in x.items()}
    o0, s0 = (a.get() for a in dk.prepare_tc(**d, output_final_state=True, impl=impl, bv=32).run())
    assert rel(o0, kda_recurrent_fp64(**x)[0]) < TOL
    for mode in (1, 3):
        plan = dk.prepare_tc(**d, output_final_state=True, impl=impl, bv=32, defines={"KDA_E_LDG": mode})
        plan.poison()
        o, s = (a.get() for a in plan.run())
        assert np.array_equal(o, o0) and np.array_equal(s, s0), f"{impl} with KDA_E_LDG={mode} must reproduce its build"


@pytest.mark.parametrize("K, bv, T, H, gate, init", [(128, 32, 70, 3, "mixed", True), (64, 16, 33, 1, "strong", False),
                                                     (128, 16, 1, 1, "logsigmoid", True), (64, 32, 64, 2, "const", True)],
                         ids=["K128-T70-h0-H3", "K64-T33-bv16-strong", "K128-T1-h0", "K64-T64-const-h0"])
def test_late_steps_reproduce_07_and_24(fake_cupy, K, bv, T, H, gate, init):
    """29 -> 30 ("late": 07 with its inverse's diagonal blocks on every warp, then 24 with each chunk's o stored behind
    the next chunk's P1) makes the same updates in the same order as 07 -> 24: 29's words are 07's, and o and the final
    state are 24's bit for bit (outputs and workspace poisoned, chunk tails, one token, strong and constant decays, an
    initial state, an odd head count), both held to float64; and the launcher runs 29 in 07's place with 24's layout."""
    from attnlab.delta import kernels as dk

    cp = fake_cupy
    x = random_inputs(1, T, H, K, K, seed=170 + T + K, gate=gate, initial_state=init)
    d = {n: cp.asarray(a) for n, a in x.items()}
    ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
    p24 = dk.prepare_tc(**d, output_final_state=True, impl="kdreg", bv=bv)
    p24.poison()
    o24, s24 = (a.get() for a in p24.run())
    plan = dk.prepare_tc(**d, output_final_state=True, impl="late", bv=bv)
    assert plan.kernels["prep"].function == "kda_chunk_prep_inv" and plan.kernels["state"].function == "kda_chunk_state_late"
    assert plan.launch_configs()["state"]["smem"] == p24.launch_configs()["state"]["smem"]
    assert plan.launch_configs()["prep"] == p24.launch_configs()["prep"]
    plan.poison()   # (the workspace too: every word 30 reads must be one 29 wrote)
    o, s = (a.get() for a in plan.run())
    assert np.array_equal(plan.ws["TA"].get(), p24.ws["TA"].get()), "29's words must be 07's"
    assert np.array_equal(o, o24) and np.array_equal(s, s24), "29 -> 30 must reproduce 07 -> 24 bit for bit"
    assert rel(o, ref_o) < TOL and rel(s, ref_s) < TOL, f"29 -> 30: o {rel(o, ref_o):.2e}, state {rel(s, ref_s):.2e}"


def test_recurrence_bounds_lines_come_from_the_tables():
    """fast.describe_recurrence_bounds: the call with 24's time replaced by each probe's, against goal x fla's faster
    call; a probe missing from the table gets no line, and no line at all without the call, fla or 24."""
    import pandas as pd

    from attnlab.delta import fast

    T = 16384
    lat = pd.DataFrame(dict(implementation=["07+24", fast.FLA, fast.FLA_GRAPH], dtype=["fp32", "bf16", "bf16"],
                            T=[T] * 3, stage=["all"] * 3, median_ms=[1.24, 1.92, 1.90]))
    half, quarter = fast.E_SHARE_PROBES[2], fast.E_SHARE_PROBES[4]
    probes = pd.DataFrame(dict(implementation=["24", half, quarter], median_ms=[0.90, 0.80, 0.55]))
    lines = fast.describe_recurrence_bounds(probes, lat, T)
    assert lines[0] == (f"- At T={T}, 07+24 takes 1.240 ms (its recurrence 0.900 ms alone in the probe table); 1.9x "
                        f"fla's 1.900 ms (bf16, {fast.FLA_GRAPH}) allows 1.000 ms, so the call must lose 0.240 ms (19%).")
    assert lines[1] == (f"- WG_E's work shared by a cluster of two value blocks (bound: {half}): 1.240 - 0.900 + 0.800 = "
                        "1.140 ms, still 0.140 ms (14%) past it.")
    assert lines[2].endswith("1.240 - 0.900 + 0.550 = 0.890 ms, 0.110 ms inside the goal.")
    assert len(lines) == 3
    assert fast.describe_recurrence_bounds(probes.iloc[1:], lat, T) == []
    assert fast.describe_recurrence_bounds(probes, lat.iloc[:1], T) == []
    assert fast.describe_recurrence_bounds(probes, lat, 4096) == []


def test_wy_kernel_layout_and_launch_tables():
    """25 runs fp32 inputs only (tests/test_delta_kernels.py: bf16 inputs' one-line error), with 07 in its Aqk form, and
    its layout fits a block (24's plus T's words, WG_E's T' buffers and, at K = 64, the channels' Kg)."""
    from attnlab.delta import kernels as dk

    assert "wy" in dk.FP32_ONLY_IMPLS and "wy" not in dk.BF16_IMPLS and "wy" not in dk.PREP_A2_IMPLS
    for K in (64, 128):
        assert dk.state_smem_bytes("wy", K, K, 32) <= 227 * 1024   # a block's dynamic shared memory at most
        assert dk.wy_smem_words(K, K, 32) - dk.tile_smem_words(K, K, 32) == 2 * 32 * 16 + 2 * 32 * 36 + (K * 36 if K == 64 else 0)


def test_probe_delta_wy_script_under_cpu_emulation(fake_cupy, monkeypatch, tmp_path, capsys):
    """scripts/probe_delta_wy.py end to end on the CPU model at a small shape (each entry's call run once, its time a
    stand-in): every probe build of fast.WY_LABELS and 25's call and kernels get a row, 25's o is within the bound of
    24's, its float64 check runs, and the table is written."""
    import sys

    import pandas as pd

    from attnlab.delta import fast

    probe_delta_wy = _script("probe_delta_wy")

    def timed(fn, budget_s, **row):
        fn()
        return dict(row, median_ms=1.0, q1_ms=1.0, q3_ms=1.0, rel_iqr=0.0)
    monkeypatch.setattr(fast, "_timed", timed)
    monkeypatch.setattr(probe_delta_wy, "_timed", timed)
    monkeypatch.setattr(sys, "argv", ["probe_delta_wy.py", "--B", "1", "--H", "1", "--T", "40", "--check-T", "33",
                                      "--no-fla", "--out", str(tmp_path)])
    probe_delta_wy.main()
    df = pd.read_csv(tmp_path / "probe_wy.csv")
    assert set(fast.WY_LABELS) <= set(df["implementation"])
    assert {("07+25", "all"), ("07+25", "07"), ("07+25", "25")} <= set(zip(df["implementation"], df["stage"]))
    assert (df[df["implementation"] == "07+25"]["rel_o_vs_24"] < TOL).all()
    out = capsys.readouterr().out
    assert "25 at B=2, T=33, H=3: rel error o " in out and "fla not timed" in out


def wy_chain_probe_model(x: dict, scale: float, C: int = 32):
    """What KDA_NO_P2's build computes, in float64: each chunk's X = beta v - Kbg S stands for V' (T taken as I: no
    P2 on the chain), S <- 2^G_L S + Kd^T X, and o = Qg S + A2 X with 07's A2 = Aqk (I + Akk)^-1 (its o product issued
    behind P4). Not KDA: the model of a timing build, which must still issue every product it claims."""
    q, k, v, g, beta = (np.asarray(x[n], np.float64) for n in ("q", "k", "v", "g", "beta"))
    B, T, H, K = q.shape
    S = np.array(x["initial_state"], np.float64) if "initial_state" in x else np.zeros((B, H, K, v.shape[-1]))
    o = np.zeros(v.shape)
    for t0 in range(0, T, C):
        sl = slice(t0, min(t0 + C, T))
        for b in range(B):
            for h in range(H):
                qn, kn, vn, bn = q[b, sl, h], k[b, sl, h], v[b, sl, h], beta[b, sl, h]
                G = np.cumsum(g[b, sl, h], axis=0)
                d = G[:, None, :] - G[None, :, :]                      # [i, j, c]: <= 0 where j <= i
                n = len(G)
                low = np.tril(np.ones((n, n), bool))[..., None]
                e = np.exp(np.where(low, np.minimum(d, 0.0), -np.inf))
                akk = np.tril(bn[:, None] * np.einsum("ic,jc,ijc->ij", kn, kn, e), -1)
                aqk = scale * np.einsum("ic,jc,ijc->ij", qn, kn, e)
                a2 = aqk @ np.linalg.inv(np.eye(n) + akk)
                xn = bn[:, None] * vn - (bn[:, None] * kn * np.exp(G)) @ S[b, h]
                o[b, sl, h] = (scale * qn * np.exp(G)) @ S[b, h] + a2 @ xn
                S[b, h] = np.exp(G[-1])[:, None] * S[b, h] + (kn * np.exp(G[-1] - G)).T @ xn
    return o, S


def test_wy_chain_probe_computes_its_model(fake_cupy):
    """KDA_NO_P2 (wgmma_recurrence.cuh; a timing build of 19, 22 and 24 in notebook 13's probe table): the chain as
    the WY form would run it, P1 then P4 with no X^T tile, barrier or P2 between them, and o's product issued behind
    P4 on the V'^T tile. Its results are not KDA's, but they must be its own model's (wy_chain_probe_model), on fp32
    inputs over three chunks and a tail with an initial state: a product left out, read from the wrong tile or
    waited for too late is far from it. The plain builds stay KDA (the define reaches only the probe)."""
    from attnlab.delta import kernels as dk

    cp = fake_cupy
    x = random_inputs(1, 70, 2, 64, 64, seed=21, gate="mixed", initial_state=True)
    d = {n: cp.asarray(a) for n, a in x.items()}
    want_o, want_s = wy_chain_probe_model(x, 64 ** -0.5)
    ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
    assert rel(want_o, ref_o) > 1e-2, "the probe's model is KDA: the test would not tell the builds apart"
    for impl in ("kdreg", "tile", "pre"):
        plan = dk.prepare_tc(**d, output_final_state=True, impl=impl, defines={"KDA_NO_P2": 1})
        plan.poison()
        o, s = (a.get() for a in plan.run())
        assert rel(o, want_o) < TOL and rel(s, want_s) < TOL, f"{impl}: {rel(o, want_o):.2e}, {rel(s, want_s):.2e}"
    plan = dk.prepare_tc(**d, output_final_state=True, impl="kdreg")
    o, s = (a.get() for a in plan.run())
    assert rel(o, ref_o) < TOL and rel(s, ref_s) < TOL


def test_register_operand_probe_forms_through_the_launcher(fake_cupy):
    """scripts/probe_delta_lda.py's builds through kda_tc's launch path on the CPU model: each form of 19 and 22
    (fp32 inputs) writes the recorded build's o and final state bit for bit, and the defines do reach the build
    (KDA_P1_TERMS=1, which drops P1's lo terms, changes o): the comparison is not between two identical builds.
    07's probe build (KDA_PREP_ALIAS=0, 19's forms) is launched with its earlier layout's shared memory."""
    from attnlab.delta import kernels as dk

    probe_delta_lda = _script("probe_delta_lda")
    cp = fake_cupy
    x = random_inputs(1, 70, 2, 64, 64, seed=3, initial_state=True)
    d = {n: cp.asarray(a) for n, a in x.items()}
    recorded = {}
    o0, _ = dk.prepare_tc(**d, output_final_state=True, impl="tile").run()
    o1, _ = dk.prepare_tc(**d, output_final_state=True, impl="tile", defines={"KDA_P1_TERMS": 1}).run()
    assert not np.array_equal(o1.get(), o0.get()), "the launcher's defines did not reach the CPU build"
    for impl in ("tile", "pre"):
        forms = probe_delta_lda.forms_of(impl, "fp32")
        assert forms[0] == ("recorded build", None, None) and len(forms) >= 4
        for label, defines, prep_defines in forms:
            plan = dk.prepare_tc(**d, output_final_state=True, impl=impl, defines=defines, prep_defines=prep_defines)
            assert (plan.kernels["state"].defines, plan.kernels["prep"].defines) == (defines or {}, prep_defines or {})
            if prep_defines:   # 07 in its earlier fp32 layout, launched with that layout's (larger) shared memory (a
                smem = plan.launch_configs()["prep"]["smem"]   # launch smaller than the kernel's layout traps here):
                assert smem == 4 * dk.prep_smem_words(64, alias=False) > 4 * dk.prep_smem_words(64), label   # 07's earlier
                assert 3 * (4 * dk.prep_smem_words(128, alias=False) + 1024) <= 228 * 1024   # fp32 layout: three blocks
            plan.poison()
            o, s = (a.get() for a in plan.run())
            ref = recorded.setdefault(impl, (o, s))
            assert np.array_equal(o, ref[0]) and np.array_equal(s, ref[1]), f"{impl}, {label}"
    # 23's forms: 07 in its earlier layout writes the same T / A2 words, two staging tiles hand WG_E the same q, k, g (23's results
    # bit for bit, the ring launched with its second tile's shared memory); its chain alone (KDA_PROBE=5) and its run
    # without input copies after chunk 0 (KDA_PROBE=4) are timing builds (results meaningless, not compared)
    forms = probe_delta_lda.forms_of("hilo", "fp32")
    assert forms[0][0] == "recorded build" and [f[1] for f in forms[-2:]] == [{"KDA_PROBE": 5}, {"KDA_PROBE": 4}]
    ref = None
    for label, defines, prep_defines in forms[:-2]:
        plan = dk.prepare_tc(**d, output_final_state=True, impl="hilo", defines=defines, prep_defines=prep_defines)
        ring = bool((defines or {}).get("KDA_STAGE_RING"))
        assert plan.state_ring == ring and plan.launch_configs()["state"]["smem"] == \
            dk.state_smem_bytes("hilo", 64, 64, 32) + ring * (3 * 32 * 64 * 4 + 8), label
        plan.poison()
        o, s = (a.get() for a in plan.run())
        ref = ref or (o, s)
        assert np.array_equal(o, ref[0]) and np.array_equal(s, ref[1]), f"23, {label}"
    assert any("KDA_STAGE_RING" in (f[1] or {}) for f in forms[:-2])
    with pytest.raises(ValueError, match=r"KDA_STAGE_RING is a probe build of 23 \(impl='hilo'\).*impl='tile'"):
        dk.prepare_tc(**d, impl="tile", defines={"KDA_STAGE_RING": 1})
    with pytest.raises(ValueError, match="probe builds of 07"):
        dk.prepare_tc(**d, impl="pre", prep_defines={"KDA_PREP_ALIAS": 1})


def test_lean_prep_probe_through_the_launcher(fake_cupy):
    """scripts/probe_delta_prep.py's forms of 07 through kda_tc's launch path on the CPU model (a tail chunk, an odd
    head count): the probe build's define reaches 07's build, and 07 -> 24 writes the recorded build's o and final state
    bit for bit (bf16 inputs: the harness's test above, whose lean build runs 07 -> 24 on both); and (--impl late) 29's
    probe build of the same define reaches 29's build, 29 -> 30 writing 07 -> 24's o and final state."""
    from attnlab.delta import kernels as dk

    probe_delta_prep = _script("probe_delta_prep")
    cp = fake_cupy
    x = random_inputs(1, 45, 3, 64, 64, seed=13, initial_state=True)
    d = {n: cp.asarray(a) for n, a in x.items()}
    assert probe_delta_prep.FORMS[0] == ("recorded", None) and len(probe_delta_prep.FORMS) == 2
    ref = None
    for form, prep_defines in probe_delta_prep.FORMS:
        plan = dk.prepare_tc(**d, output_final_state=True, impl="kdreg", prep_defines=prep_defines)
        assert plan.kernels["prep"].defines == (prep_defines or {})
        plan.poison()
        o, s = (a.get() for a in plan.run())
        ref = ref or (o, s)
        assert np.array_equal(o, ref[0]) and np.array_equal(s, ref[1]), form
    assert rel(ref[0], kda_recurrent_fp64(**x, output_final_state=True)[0]) < TOL
    for prep_defines in (None, probe_delta_prep.FORMS[1][1]):   # --impl late: 29's builds
        plan = dk.prepare_tc(**d, output_final_state=True, impl="late", prep_defines=prep_defines)
        assert plan.kernels["prep"].function == "kda_chunk_prep_inv" and plan.kernels["prep"].defines == (prep_defines or {})
        plan.poison()
        o, s = (a.get() for a in plan.run())
        assert np.array_equal(o, ref[0]) and np.array_equal(s, ref[1]), prep_defines


@pytest.mark.parametrize("K, V, bv, T, slots", [(64, 64, 32, 300, None), (64, 64, 16, 75, None), (128, 128, 32, 40, None),
                                                (64, 64, 16, 300, 4)],
                         ids=["K64V64BV32-ring-reused", "K64V64BV16-four-makers", "K128V128BV32", "K64V64BV16-eager-4-slots"])
def test_share_recurrence_reproduces_24_under_cpu_emulation(fake_cupy, monkeypatch, K, V, bv, T, slots):
    """26 ("share") through kda_tc's launch path on the CPU model, a head's blocks run together: each block's maker
    makes every (V / bv)-th chunk's image into the head's ring, every block's producer warp lands every chunk from it.
    The images are 19's operand buffers made by 19's arithmetic and the chain is 19's: o and the final state are 24's
    (19's) bit for bit, here with a tail chunk, an initial state, an odd head count and (T = 300: ten chunks) the
    ring's slots each taken again once the head's blocks have acknowledged them. The last case runs a ring of four
    slots (KDA_SHARE_SLOTS=4, a build of its own) with every fiber run as far as it can (EMU_FIBER_ORDER=eager, read by
    the build's first launch): a maker that refilled a slot before every block had acknowledged it would overwrite an
    image that a block has yet to land (round-robin order moves the blocks in step and hides that). Two calls on one
    plan (a new epoch each) give the same results."""
    from attnlab.delta import kernels as dk

    cp = fake_cupy
    x = random_inputs(1, T, 3, K, V, seed=17 + T, gate="mixed", initial_state=True)
    d = {n: cp.asarray(a) for n, a in x.items()}
    if slots:
        monkeypatch.setenv("EMU_FIBER_ORDER", "eager")
    plan = dk.prepare_tc(**d, output_final_state=True, impl="share", bv=bv,
                         defines={"KDA_SHARE_SLOTS": slots} if slots else None)
    assert plan.launch_configs()["state"]["block"] == (dk.SHARE_THREADS, 1, 1)
    assert plan.ws["RING"].shape[2] == (slots or dk.SHARE_SLOTS)   # the ring the build addresses, no more, no less
    plan.poison()
    o, s = (a.get() for a in plan.run())
    o24, s24 = (a.get() for a in dk.prepare_tc(**d, output_final_state=True, impl="kdreg", bv=bv).run())
    assert np.array_equal(o, o24) and np.array_equal(s, s24), (rel(o, o24), rel(s, s24))
    ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
    assert rel(o, ref_o) < TOL and rel(s, ref_s) < TOL
    epoch = plan.epoch
    o2, s2 = (a.get() for a in plan.run())
    assert plan.epoch == epoch + 1 and np.array_equal(o2, o) and np.array_equal(s2, s)


@pytest.mark.parametrize("K, T, H, side", [(64, 100, 3, True), (128, 40, 1, False)],
                         ids=["K64-T100-side-by-side", "K128-one-after-the-other"])
def test_side_recurrence_reproduces_24_under_cpu_emulation(fake_cupy, K, T, H, side):
    """27 ("side": 24's loop at 64 value columns a block, X^T and V'^T in one tile, v in boxes of 32 columns) after
    07 in 21's grid order (kda_chunk_prep_side) through kda_tc's launch path on the CPU model: every column's products
    are 24's in 24's order, so o and the final state are 24's (32 columns a block) bit for bit, with a tail chunk, an
    initial state and an odd head count. Side by side (the fake device runs 07 to its end, then 27, which acquires
    every chunk's ready flag: a flag 07 did not set aborts the model), a new epoch each call; one after the other
    (overlap off, as under compute-sanitizer), epoch 0 and no flags."""
    from attnlab.delta import kernels as dk

    cp = fake_cupy
    x = random_inputs(1, T, H, K, K, seed=29 + T, gate="mixed", initial_state=True)
    d = {n: cp.asarray(a) for n, a in x.items()}
    plan = dk.prepare_tc(**d, output_final_state=True, impl="side")
    assert plan.bv == dk.SIDE_BV == 64 and plan.overlap   # 1 * H * 1 blocks leave the fake device's SMs free
    cfg = plan.launch_configs()
    assert cfg["prep"]["grid"] == (H, -(-T // 32), 1) and cfg["state"]["grid"] == (K // 64, H, 1)
    assert cfg["state"]["smem"] == 4 * dk.side_smem_words(K, K, 64) <= 227 * 1024
    plan.overlap = side
    plan.poison()
    o, s = (a.get() for a in plan.run())
    assert plan.epoch == (1 if side else 0)
    if side:
        assert (plan.ws["READY"].get() == 1).all()
    o24, s24 = (a.get() for a in dk.prepare_tc(**d, output_final_state=True, impl="kdreg", bv=32).run())
    assert np.array_equal(o, o24) and np.array_equal(s, s24), (rel(o, o24), rel(s, s24))
    ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
    assert rel(o, ref_o) < TOL and rel(s, ref_s) < TOL
    if side:
        o2, s2 = (a.get() for a in plan.run())
        assert plan.epoch == 2 and (plan.ws["READY"].get() == 2).all()
        assert np.array_equal(o2, o) and np.array_equal(s2, s)


def test_side_refuses_what_it_cannot_run(fake_cupy, monkeypatch):
    """27's one-line errors: a value-block width other than its 64, more chunks than 07's grid beside it takes, and bf16
    inputs."""
    from attnlab.delta import kernels as dk

    cp = fake_cupy
    x = random_inputs(1, 40, 2, 64, 64, seed=3)
    d = {n: cp.asarray(a) for n, a in x.items()}
    with pytest.raises(ValueError, match=r"impl='side' \(kernel 27\) runs 64 value columns per block, got bv=32"):
        dk.prepare_tc(**d, impl="side", bv=32)
    monkeypatch.setattr(dk, "MAX_PRE_CHUNKS", 1)   # 07's grid beside 27 takes the chunks on its y axis (at most 65535)
    with pytest.raises(ValueError, match=r"impl='side' runs 07 in 21's grid order, .* at most 1 chunks of 32 \(T <= 32\), "
                                         r"got T=40; split the sequence or pass impl='kdreg'"):
        dk.prepare_tc(**d, impl="side")
    monkeypatch.setattr(dk, "_is_torch_bf16", lambda a: True)
    with pytest.raises(ValueError, match=r"impl='side' \(27, .*\) runs on fp32 inputs only: .*; pass impl='kdreg'"):
        dk.prepare_tc(**d, impl="side")


@pytest.mark.parametrize("T, gate, init, bv, H", [(70, "mixed", True, 32, 3), (1, "logsigmoid", False, 32, 1),
                                                   (33, "strong", True, 16, 1), (64, "const", True, 32, 2)],
                         ids=["T70-mixed-h0-H3", "T1", "T33-strong-h0-bv16", "T64-const-h0"])
def test_pair_recurrence_matches_float64_and_24(fake_cupy, T, gate, init, bv, H):
    """28 ("pair": 24 with a head's value blocks in clusters of two, each block's element-wise warpgroup making half of
    the channels' operands into both blocks' buffers through distributed shared memory) on the CPU model at
    K = V = 128: against the float64 recurrence (outputs poisoned, chunk tails, one token, strong and constant decays,
    an initial state, an odd head count), and beside 24, whose products it shares: only the gate products of a channel,
    made in two halves of 16 tokens, round differently, so o and the final state agree with 24's to rounding."""
    from attnlab.delta import kernels as dk

    cp = fake_cupy
    x = random_inputs(1, T, H, 128, 128, seed=80 + T, gate=gate, initial_state=init)
    d = {n: cp.asarray(a) for n, a in x.items()}
    ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
    plan = dk.prepare_tc(**d, output_final_state=True, impl="pair", bv=bv)
    assert plan.launch_configs()["state"]["smem"] == 4 * dk.pair_smem_words(128, 128, bv)
    plan.poison()
    o, s = (a.get() for a in plan.run())
    assert rel(o, ref_o) < TOL and rel(s, ref_s) < TOL, f"28: o {rel(o, ref_o):.2e}, state {rel(s, ref_s):.2e}"
    o24, s24 = (a.get() for a in dk.prepare_tc(**d, output_final_state=True, impl="kdreg", bv=bv).run())
    assert rel(o, o24) < 1e-5 and rel(s, s24) < 1e-5, f"28 beside 24: o {rel(o, o24):.2e}, state {rel(s, s24):.2e}"


def test_pair_in_eager_order_and_its_probe_builds(fake_cupy, monkeypatch):
    """28 with every fiber of the CPU model run as far as it can before the next (EMU_FIBER_ORDER=eager: the blocks of a
    pair reach their hand-overs out of step, not in the round-robin order's lockstep): o matches float64. (Neither
    order here runs the other block's chain two chunks behind this one's copies, so a copy that skipped its PEMPTY
    wait would pass; scripts/mutation_check.py lists only mutations the tests catch.) And its probe build
    KDA_PAIR_DIAG=4 (no copies to the other block; results meaningless) takes effect: that block's half of each
    chunk's operands is never there, so o is not 28's (a probe whose build changed nothing would time 28 and call it a
    bound). (KDA_PAIR_DIAG=1, the chain not waiting for the other half, is not run here: its next chunk's arrival
    meets a phase still waiting for bytes, which the model stops on.)"""
    from attnlab.delta import kernels as dk

    cp = fake_cupy
    monkeypatch.setenv("EMU_FIBER_ORDER", "eager")   # read once by each model library (the builds below are new ones)
    x = random_inputs(1, 70, 3, 128, 128, seed=150, gate="mixed", initial_state=True)
    d = {n: cp.asarray(a) for n, a in x.items()}
    ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
    for diag in (0, 4):   # 0: 28 as built (a define of its default value: a library of its own)
        plan = dk.prepare_tc(**d, output_final_state=True, impl="pair", defines={"KDA_PAIR_DIAG": diag})
        plan.poison()
        o, s = (a.get() for a in plan.run())
        if diag == 0:
            assert rel(o, ref_o) < TOL and rel(s, ref_s) < TOL, f"28 in eager order: o {rel(o, ref_o):.2e}"
        else:
            assert not rel(o, ref_o) < TOL, f"KDA_PAIR_DIAG={diag}: the build computes 28's o"


def test_pair_refuses_what_it_cannot_run(fake_cupy, monkeypatch):
    """28's one-line errors: K = 64 (its WG_E takes two threads a channel of K / 2 = 64), and bf16 inputs. (An odd
    number of value blocks a head, which its pairs would also refuse, cannot arise: V in {64, 128}, bv in {16, 32}.)"""
    from attnlab.delta import kernels as dk

    cp = fake_cupy
    x = random_inputs(1, 40, 2, 64, 64, seed=3)
    d = {n: cp.asarray(a) for n, a in x.items()}
    with pytest.raises(ValueError, match=r"impl='pair' \(kernel 28\) runs a head's value blocks in pairs.* got K=64, "
                                         r"V / bv = 2; pass impl='kdreg'"):
        dk.prepare_tc(**d, impl="pair", bv=32)
    monkeypatch.setattr(dk, "_is_torch_bf16", lambda a: True)
    with pytest.raises(ValueError, match=r"impl='pair' \(28, .*\) runs on fp32 inputs only: .*; pass impl='kdreg'"):
        dk.prepare_tc(**d, impl="pair")


def test_share_refuses_what_it_cannot_run(fake_cupy, monkeypatch):
    """26's one-line errors: bf16 inputs (no bf16 maker), and a grid that cannot be resident at once (its blocks wait
    for each other's chunks)."""
    from attnlab.delta import kernels as dk

    cp = fake_cupy
    x = random_inputs(2, 40, 2, 64, 64, seed=3)
    d = {n: cp.asarray(a) for n, a in x.items()}
    assert dk.share_resident(2, 16, 128, 32, 132) and not dk.share_resident(2, 17, 128, 32, 132)
    src = (ROOT / "kernels" / "delta" / "14_chunk_state_multicast.cu").read_text()   # one default, two places
    assert re.search(r"#define KDA_SHARE_SLOTS (\d+)", src).group(1) == str(dk.SHARE_SLOTS)
    with pytest.raises(ValueError, match="KDA_SHARE_SLOTS must be at least 4"):
        dk.prepare_tc(**d, impl="share", defines={"KDA_SHARE_SLOTS": 2})
    monkeypatch.setattr(dk, "share_resident", lambda *a: False)
    with pytest.raises(ValueError, match=r"impl='share' \(26\) needs all of its B \* H \* V / bv = 16 blocks resident"):
        dk.prepare_tc(**d, impl="share", bv=16)
    monkeypatch.setattr(dk, "_is_torch_bf16", lambda a: True)   # bf16 inputs as the launcher sees them
    with pytest.raises(ValueError, match=r"impl='share' \(26, .*\) runs on fp32 inputs only: .*; pass impl='pre'"):
        dk.prepare_tc(**d, impl="share")


def test_latency_table_times_the_fp32_images_beside_the_ladder(fake_cupy, monkeypatch):
    """fast.time_latency under the CPU model (each entry's call run once, its time a stand-in): 21 -> 22 on fp32
    inputs gets its call, each kernel alone and (where the launcher runs them side by side) the pair one after the
    other, and 07 in the form 19 reads gets its own row, so that the notebook's generated lines find them all."""
    import pandas as pd

    from attnlab.delta import fast

    calls = []

    def timed(fn, budget_s, **row):   # the entry's call, once; a distinct stand-in time per entry
        fn()
        calls.append(row)
        return dict(row, median_ms=1.0 + 0.01 * len(calls), q1_ms=1.0, q3_ms=1.0, rel_iqr=0.0)
    monkeypatch.setattr(fast, "_timed", timed)
    lat = fast.time_latency(1, 2, 64, 64, [40], with_fla=False)
    got = set(zip(lat["implementation"], lat["stage"]))
    a, b = fast.FP32_IMAGES, fast.IMAGES_BASE
    assert {(a, "all"), (a, "21"), (a, "22"), (f"{a} one after the other", "all"), (b, "07"), (b, "19")} <= got
    assert bool(lat[(lat["implementation"] == a) & (lat["stage"] == "all")]["overlap"].iloc[0])
    assert not any(lab == a for lab, _, _ in fast.TC_IMPLS)   # beside the ladder, not on it
    lines = fast.describe_fp32_images(lat, pd.DataFrame(columns=["implementation", "dtype", "T", "extra_bytes"]), 40)
    assert len(lines) == 2 and lines[0].startswith("- At T=40, 21 → 22 on fp32 inputs takes")


def test_targets_are_computed_with_their_keys_and_misses_reported():
    import pandas as pd

    from attnlab.delta import fast

    lat = pd.DataFrame([
        dict(implementation=fast.BEST, dtype="fp32", T=16384, stage="all", median_ms=1.0),
        dict(implementation=fast.BEST, dtype="fp32", T=4096, stage="all", median_ms=0.5),
        dict(implementation=fast.FLA, dtype="bf16", T=16384, stage="all", median_ms=1.9),
        dict(implementation=fast.FLA, dtype="bf16", T=4096, stage="all", median_ms=0.6),
        dict(implementation=fast.RECURRENT, dtype="fp32", T=16384, stage="all", median_ms=13.5)])
    acc = pd.DataFrame([dict(implementation=fast.BEST, dtype="fp32", T=16384, rel_err_o=7e-6, rel_err_state=5e-6),
                        dict(implementation=fast.FLA, dtype="bf16", T=16384, rel_err_o=5e-3, rel_err_state=1e-2)])
    mem = pd.DataFrame([dict(implementation=fast.BEST, dtype="fp32", T=16384, extra_bytes=60),
                        dict(implementation=fast.FLA, dtype="bf16", T=16384, extra_bytes=100)])
    v = fast.targets(lat, acc, mem).set_index("key")
    assert list(v.index) == ["x_fla_bf16_t16384", "x_fla_bf16_t4096", "x_recurrent_t16384",
                             "x_fla_bf16_t16384_bf16io", "worst_rel_rms", "mem_vs_fla_t16384"]
    assert v.loc["x_fla_bf16_t16384", "met"] is True and v.loc["x_fla_bf16_t16384", "value"] == pytest.approx(1.9)
    assert v.loc["x_fla_bf16_t4096", "met"] is False                 # 1.2x < 1.5x: reported as missed
    assert v.loc["x_recurrent_t16384", "met"] is True
    assert v.loc["x_fla_bf16_t16384_bf16io", "met"] is None and "not measured" in v.loc["x_fla_bf16_t16384_bf16io", "detail"]
    assert v.loc["worst_rel_rms", "met"] is True and v.loc["worst_rel_rms", "value"] == pytest.approx(7e-6)
    assert v.loc["mem_vs_fla_t16384", "met"] is True and v.loc["mem_vs_fla_t16384", "value"] == pytest.approx(0.6)
    v2 = fast.targets(lat[lat["implementation"] != fast.FLA], acc, mem).set_index("key")
    assert v2.loc["x_fla_bf16_t16384", "met"] is None               # fla not timed: not evaluated
    # the bf16-I/O target needs the speed and an error no worse than fla's bf16 on the same inputs
    lat3 = pd.concat([lat, pd.DataFrame([dict(implementation=fast.BF16_IO, dtype="bf16", T=16384, stage="all",
                                              median_ms=0.5)])])
    acc3 = pd.concat([acc, pd.DataFrame([dict(implementation=fast.BF16_IO, dtype="bf16", T=16384,
                                              rel_err_o=2e-3, rel_err_state=6e-6)])])
    v3 = fast.targets(lat3, acc3, mem).set_index("key")
    assert v3.loc["x_fla_bf16_t16384_bf16io", "met"] == True   # noqa: E712 (a numpy bool once no row is None)
    assert v3.loc["x_fla_bf16_t16384_bf16io", "value"] == pytest.approx(3.8)
    assert v3.loc["worst_rel_rms", "value"] == pytest.approx(7e-6)   # the fp32 bound ignores the bf16 rows
    acc4 = acc3.assign(rel_err_o=np.where(acc3["implementation"] == fast.BF16_IO, 2e-2, acc3["rel_err_o"]))
    assert fast.targets(lat3, acc4, mem).set_index("key").loc["x_fla_bf16_t16384_bf16io", "met"] == False  # noqa: E712



def test_ratios_against_fla_use_its_faster_call_and_a_host_bound_eager_call_is_named():
    """fla timed eagerly and as a CUDA-graph replay: the targets divide by the faster of the two at each T (an eager
    call that waits on Python's launches must not flatter our kernels), say so in their detail, and
    describe_fla_calls names the T where the eager call is host-bound; without the replay rows nothing changes."""
    import pandas as pd

    from attnlab.delta import fast

    rows = [(fast.BEST, "fp32", 16384, 1.0), (fast.BEST, "fp32", 4096, 0.3), (fast.RECURRENT, "fp32", 16384, 13.5),
            (fast.FLA, "bf16", 16384, 1.9), (fast.FLA, "bf16", 4096, 1.7), (fast.FLA_GRAPH, "bf16", 16384, 1.95),
            (fast.FLA_GRAPH, "bf16", 4096, 0.6)]
    lat = pd.DataFrame([dict(implementation=i, dtype=d, T=T, stage="all", median_ms=ms) for i, d, T, ms in rows])
    acc = pd.DataFrame([dict(implementation=fast.BEST, dtype="fp32", T=16384, rel_err_o=7e-6, rel_err_state=5e-6)])
    mem = pd.DataFrame([dict(implementation=fast.BEST, dtype="fp32", T=16384, extra_bytes=60)])
    v = fast.targets(lat, acc, mem).set_index("key")
    assert v.loc["x_fla_bf16_t16384", "value"] == pytest.approx(1.9)            # eager faster here: 1.9 / 1.0
    assert "CUDA graph" not in v.loc["x_fla_bf16_t16384", "detail"]
    assert v.loc["x_fla_bf16_t4096", "value"] == pytest.approx(2.0)             # the replay, not 1.7 / 0.3
    assert "its CUDA graph; eager call 1.700 ms" in v.loc["x_fla_bf16_t4096", "detail"]
    assert fast.fla_ms(lat, 4096) == (pytest.approx(0.6), fast.FLA_GRAPH)
    lines = fast.describe_fla_calls(lat)
    assert len(lines) == 1 and "host-bound" in lines[0] and "T=4096 (1.700 vs 0.600 ms)" in lines[0]
    assert "T=16384 (" not in lines[0] and "0.97× at T=16384" in lines[0]
    eager = lat[lat["implementation"] != fast.FLA_GRAPH]
    assert fast.targets(eager, acc, mem).set_index("key").loc["x_fla_bf16_t4096", "value"] == pytest.approx(1.7 / 0.3)
    assert fast.describe_fla_calls(eager) == []
    calm = lat.assign(median_ms=np.where(lat["implementation"] == fast.FLA_GRAPH, lat["median_ms"] * 2.9, lat["median_ms"]))
    assert "not host-bound" in fast.describe_fla_calls(calm)[0]


# ----------------------------------------------------------------------------- memory safety

SANITIZE_FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g"]
SANITIZER_REPORT = ("AddressSanitizer", "runtime error:", "UndefinedBehaviorSanitizer", "LeakSanitizer")


def test_tensor_core_kernels_under_sanitizers(tmp_path):
    """06, 07 -> 08, 07 -> 09 and 07 -> 10 built with AddressSanitizer and UBSan, shared memory past what each
    launch asked for poisoned (tests/sanitize/smem_guard.h): no out-of-bounds access, no UB."""
    import os

    probe = tmp_path / "probe.cpp"
    probe.write_text("int main() { return 0; }\n")
    if subprocess.run([GXX, *SANITIZE_FLAGS, str(probe), "-o", str(tmp_path / "probe")],
                      capture_output=True).returncode != 0:
        pytest.skip("g++ cannot build with -fsanitize=address,undefined here (libasan/libubsan missing)")
    K, V, BV, B, T, H = 64, 64, 32, 1, 45, 3
    exe = tmp_path / "harness_06_asan"
    cmd = [GXX, "-std=c++20", "-O1", "-pthread", *SANITIZE_FLAGS,
           "-include", str(ROOT / "tests/ladder_emu/ladder_emu.h"), "-include", str(ROOT / "tests/sanitize/smem_guard.h"),
           "-I", str(ROOT / "kernels"), f"-DEMU_K={K}", f"-DEMU_V={V}", f"-DEMU_BV={BV}",
           str(ROOT / "tests/delta_emu/harness_06.cpp"), "-o", str(exe)]
    res = emu_build.run(cmd)
    assert res.returncode == 0, res.stderr[-3000:]
    x = random_inputs(B, T, H, K, V, seed=5, gate="mixed", initial_state=True)
    for n in ("q", "k", "v", "g", "beta"):
        x[n].astype(np.float32).tofile(tmp_path / n)
    x["initial_state"].astype(np.float32).tofile(tmp_path / "h0")
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
    res = subprocess.run([str(exe), str(tmp_path), str(B), str(T), str(H), repr(K ** -0.5), "1"],
                         capture_output=True, text=True, timeout=900, env=env)
    report = [line for line in res.stderr.splitlines() if any(s in line for s in SANITIZER_REPORT)]
    assert res.returncode == 0 and not report, f"sanitizer report (exit {res.returncode}):\n{res.stderr[-6000:]}"
    ref_o, _ = kda_recurrent_fp64(x["q"], x["k"], x["v"], x["g"], x["beta"], K ** -0.5, x["initial_state"], True)
    for tag in ("fz", "ts", "ws", "ln", "cl"):
        assert rel(np.fromfile(tmp_path / f"{tag}_o", np.float32).reshape(B, T, H, V), ref_o) < TOL, tag


def test_phase_stamps_cover_kernel_10_and_summarise():
    """The stamp phases notebook 13 reads match kernel 10's KDA_STAMP calls (stamps 0-6 once per role),
    and phase_summary gives each phase's share of its role's chunk period."""
    import re

    import pandas as pd

    from attnlab.delta import fast
    from attnlab.delta import kernels as dk

    # 10's producers live in lean_producer.cuh (shared with 12), its consumers in its own file
    producer = (ROOT / "kernels" / "delta" / "lean_producer.cuh").read_text()
    consumer = (ROOT / "kernels" / dk.delta_kernel("10").source).read_text().split(
        "// ==================================================== consumers")[1]
    for role, text in (("producer", producer), ("consumer", consumer)):
        stamps = sorted(int(j) for j in re.findall(r"KDA_STAMP\((\d)\);", text))
        assert stamps == list(range(7)), (role, stamps)
        used = sorted({i for _, a, b in fast.STAMP_PHASES[role] for i in (a, b)})
        assert used == list(range(7)), role
    # 12's consumers stamp 0-5 (every role: 12 with two roles too), its producers are 10's
    src12 = (ROOT / "kernels" / dk.delta_kernel("12").source).read_text()
    consumer12 = src12.split("// ==================================================== consumers")[1]
    assert sorted(set(int(j) for j in re.findall(r"KDA_STAMP\((\d)\);", consumer12))) == list(range(6))
    assert consumer12.count("KDA_STAMP(4);") == 3 and consumer12.count("KDA_STAMP(5);") == 2   # every path
    for impl in ("regs", "regs2"):
        used = sorted({i for _, a, b in fast.CONSUMER_STAMP_PHASES[impl] for i in (a, b)})
        assert used == list(range(6)), impl
    rows = [dict(role=r, warp=w, phase=p, median_cycles=c) for r, w0 in (("consumer", 0), ("producer", 8))
            for w in (w0, w0 + 1) for p, c in (("wait", 100.0 + w), ("work", 300.0), ("chunk period", 400.0))]
    m = fast.phase_summary(pd.DataFrame(rows)).set_index(["role", "phase"])
    assert m.loc[("consumer", "work"), "share_of_period"] == pytest.approx(0.75)
    assert m.loc[("producer", "wait"), "median_cycles"] == pytest.approx(108.5)
    assert m.loc[("producer", "chunk period"), "share_of_period"] == pytest.approx(1.0)


def test_wgmma_family_stamps_and_generated_lines():
    """13's and 14's KDA_STAMP calls are the phases fast.CONSUMER/PRODUCER_STAMP_PHASES name (WG_C
    0-7, WG_E 0-3; 16's, 18's and 23's WG_C 0-4), and the lines notebook 13 generates from its stamp and probe tables say what the
    tables hold (pure functions on made-up tables)."""
    import re

    import pandas as pd

    from attnlab.delta import fast

    chain = (ROOT / "kernels" / "delta" / "wgmma_recurrence.cuh").read_text().split("kda_wg_chain(")[1]
    ops = (ROOT / "kernels" / "delta" / "wgmma_recurrence.cuh").read_text().split("kda_wg_chain(")[0]
    assert sorted(set(int(j) for j in re.findall(r"KDA_STAMP\((\d)\);", chain))) == list(range(8))
    for src in ("13_chunk_state_wgmma.cu", "14_chunk_state_multicast.cu"):   # WG_E's loop: 0, 1; its arithmetic: 2, 3
        loop = (ROOT / "kernels" / "delta" / src).read_text()
        assert sorted(set(int(j) for j in re.findall(r"KDA_STAMP\((\d)\);", loop + ops))) == list(range(4)), src
    k16 = (ROOT / "kernels" / "delta" / "16_chunk_state_wgrs.cu").read_text().split("// ====")
    assert [sorted(set(int(j) for j in re.findall(r"KDA_STAMP\((\d)\);", part))) for part in k16[1:]] == \
        [list(range(4)), list(range(5))]   # 16: WG_E 0-3, then WG_C 0-4
    ahead = chain.split("if constexpr (L::AHEAD) {")[1].split("\n    } else {\n")[0]   # 18's loop: WG_C 0-4
    assert sorted(set(int(j) for j in re.findall(r"KDA_STAMP\((\d)\);", ahead))) == list(range(5))
    hilo = (ROOT / "kernels" / "delta" / "wgmma_recurrence.cuh").read_text().split("kda_wg_chain_hilo(")[1]   # 23: WG_C 0-4
    assert sorted(set(int(j) for j in re.findall(r"KDA_STAMP\((\d)\);", hilo))) == list(range(5))
    wy = chain.split("if constexpr (L::WY) {\n            // ====")[1].split("continue;")[0]   # 25's loop: WG_C 1-5 (0 above)
    assert sorted(set(int(j) for j in re.findall(r"KDA_STAMP\((\d)\);", wy))) == list(range(1, 6))
    for impl in sorted(set(fast.WG_STAMP_IMPLS) | {"bulk2", "tma", "tma2", "tma3", "diet"}):
        # 16's chain stamps 0-4 (kernels/delta/16_chunk_state_wgrs.cu), 18's too (its AHEAD loop), 23's; 25's 0-5
        n_stamps = 5 if impl in ("wgrs", "ahead", "hilo") else 6 if impl == "wy" else 8
        assert sorted({i for _, a, b in fast.CONSUMER_STAMP_PHASES[impl] for i in (a, b)}) == list(range(n_stamps))
        assert sorted({i for _, a, b in fast.PRODUCER_STAMP_PHASES[impl] for i in (a, b)}) == list(range(4))
        assert fast.PRODUCER_WARPS[impl] == 4
    rows = []
    for impl, first in (("wgmma", 3000.0), ("bulk", 1000.0)):
        for w in range(8):
            role = "consumer" if w < 4 else "producer"
            for p, a, b in (fast.CONSUMER_STAMP_PHASES if role == "consumer" else fast.PRODUCER_STAMP_PHASES)[impl]:
                c = 2000.0 if (role, a) == ("consumer", 0) else first if (role, a) == ("producer", 0) else 500.0
                rows.append(dict(role=role, warp=w, phase=p, median_cycles=c, implementation=impl))
            rows.append(dict(role=role, warp=w, phase="chunk period", median_cycles=5000.0, implementation=impl))
    lines = fast.describe_wg_phases(pd.DataFrame(rows))
    assert lines[0] == ("- wgmma: chunk period 5000 cycles; WG_E spends 3000 (60 %) on its inputs and the hand-over "
                        "before its arithmetic, 500 on the arithmetic; WG_C's P1 phase (next copies issued, decay, "
                        "P1: [X; Ob] = [beta v; 0] - [Kbg; Qg] S) takes 2000.")
    assert lines[1].startswith("- bulk: chunk period 5000 cycles; WG_E spends 1000 (20 %)")
    probes = pd.DataFrame(dict(implementation=["13", "13 without input copies after chunk 0 (KDA_PROBE=4)", "14 bulk"],
                               median_ms=[1.5, 0.9, 3.0]))
    assert fast.describe_probes(probes) == [
        "- 13 without input copies after chunk 0 (KDA_PROBE=4): 0.900 ms against 1.500 ms for 13 as built "
        "(+0.600 ms is what the build took away).",
        "- 14 bulk: 3.000 ms, 0.50× 13's speed (slower)."]
    half = "19, WG_E at half its tokens a thread (KDA_PROBE=6)"
    probes = pd.DataFrame(dict(implementation=["19", half, "20"], median_ms=[1.0, 0.8, 0.95]))
    assert fast.describe_probes(probes)[-1].endswith("(0.200 ms, half of its work gone with them), 20 gains 25% with all "
                                                     "of the work kept.")
    probes.loc[2, "median_ms"] = 1.01   # 20 slower than 19: no negative percentage
    assert fast.describe_probes(probes)[-1].endswith("20 gains nothing with all of the work kept.")
    alone = "{} chain alone, WG_E arithmetic idle (KDA_PROBE=5)"
    probes = pd.DataFrame(dict(implementation=["19", "23", alone.format("19"), alone.format("23")],
                               median_ms=[0.9, 0.6, 0.7, 0.5]))
    assert fast.describe_probes(probes)[-1] == (
        "- 23 (the chain in registers, hi / lo terms as accumulator row pairs): 0.600 ms, 1.50× 19's speed (faster); "
        "its chain alone 0.500 ms against 19's 0.700 ms.")
    probes = pd.DataFrame(dict(implementation=["17 (bf16 I/O)", "17 (bf16 I/O) chain alone, WG_E arithmetic idle "
                                               "(KDA_PROBE=5)", "22 (bf16 I/O)"], median_ms=[0.8, 0.6, 0.65]))
    assert fast.describe_probes(probes)[-1] == (
        "- 22 (the operands from 21, no element-wise warpgroup): 0.650 ms against 17's 0.800 ms and 17's chain alone, "
        "WG_E idle, 0.600 ms: 75% of the gap between them closed.")
    probes.loc[2, "median_ms"] = 0.5
    assert fast.describe_probes(probes)[-1].endswith("0.600 ms: below that floor by 0.100 ms.")
    # 24's hand-over probe (valid results) is set against 24 as built, in either direction
    probes = pd.DataFrame(dict(implementation=["24", fast.KD_EARLY_PROBE], median_ms=[0.9, 0.8]))
    assert fast.describe_probes(probes) == [
        f"- {fast.KD_EARLY_PROBE}: 0.800 ms against 0.900 ms for 24 as built, 1.125× its speed (faster: WG_E waiting "
        "for its buffer held 24 back)."]
    probes.loc[1, "median_ms"] = 0.95
    assert fast.describe_probes(probes)[-1].endswith("0.947× its speed (slower: the earlier hand-over costs more than "
                                                     "it frees).")
    probes.loc[1, "median_ms"] = 0.898   # a 0.2 % difference is neither faster nor slower
    assert fast.describe_probes(probes)[-1].endswith("1.002× its speed (within 2% of it: WG_E waiting for its buffer "
                                                     "is not what holds 24 back).")
    # 25's W-loop variant (valid results) and its W probe (meaningless results) are set against 25 as built
    probes = pd.DataFrame(dict(implementation=["25", fast.WY_WLOOP_PROBE, fast.WY_NO_W_PROBE], median_ms=[1.0, 0.8, 0.7]))
    assert fast.describe_probes(probes) == [
        f"- {fast.WY_WLOOP_PROBE}: 0.800 ms against 1.000 ms for 25 as built, 1.250× its speed (faster).",
        f"- {fast.WY_NO_W_PROBE}: 0.700 ms against 1.000 ms for 25 as built (+0.300 ms is what the build took away)."]
    probes.loc[1, "median_ms"] = 0.999
    assert fast.describe_probes(probes)[0].endswith("1.001× its speed (within 2% of it).")
    # 22 runs on bf16 and on fp32 inputs: a probe build of the fp32 form is set against the fp32 form as built
    probes = pd.DataFrame(dict(implementation=["22 (fp32 images)", f"22 (fp32 images) {fast.WY_PROBE}", "22 (bf16 I/O)"],
                               median_ms=[0.65, 0.55, 0.48]))
    assert fast.describe_probes(probes) == [
        f"- 22 (fp32 images) {fast.WY_PROBE}: 0.550 ms against 0.650 ms for 22 (fp32 images) as built "
        "(+0.100 ms is what the build took away)."]
    assert {f"24 {fast.WY_PROBE}", f"22 (fp32 images) {fast.WY_PROBE}"} <= {x[0] for x in fast.PROBE_BUILDS}
    # scripts/probe_delta_wy.py: its builds are probe builds, and its lines bound the WY form from the data
    assert set(fast.WY_LABELS) <= {x[0] for x in fast.PROBE_BUILDS}
    with pytest.raises(ValueError, match="not probe builds"):
        fast.probe_latency(1, 1, 64, 64, 32, labels=["24", "24 in the WY form"])
    probes = pd.DataFrame(dict(implementation=["24", f"24 {fast.WY_PROBE}"], median_ms=[0.9, 0.7]))
    lines = fast.describe_wy_probe(probes, 0.34, 1.9)
    assert lines[0] == "- 07 alone + 24 as built: 0.340 + 0.900 = 1.240 ms; 1.9x fla's 1.900 ms (bf16) allows 1.000 ms."
    assert lines[1].startswith(f"- 07 alone + 24 {fast.WY_PROBE}: 0.340 + 0.700 = 1.040 ms, still 0.040 ms (4%) past it.")
    probes.loc[1, "median_ms"] = 0.6
    assert ", 0.060 ms inside it." in fast.describe_wy_probe(probes, 0.34, 1.9)[1]
    assert fast.describe_wy_probe(probes, 0.34, float("nan")) == [] == fast.describe_wy_probe(probes.iloc[:1], 0.34, 1.9)
    # probe_latency times the ladder's impls only (17 on bf16 inputs): a probe build of another would be dropped unseen
    assert {impl for _, impl, _ in fast.PROBE_BUILDS} <= {impl for _, impl, _ in fast.TC_IMPLS + fast.BF16_IO_IMPLS}
    # a probe build of 14's tensor-copy form is set against that form as built, not against 13 or "14"
    probes = pd.DataFrame(dict(implementation=["13", "14 tma, WG_C too",
                                               "14 tma, WG_C too, without input copies after chunk 0 (KDA_PROBE=4)"],
                               median_ms=[1.5, 1.0, 0.8]))
    assert fast.describe_probes(probes) == [
        "- 14 tma, WG_C too, without input copies after chunk 0 (KDA_PROBE=4): 0.800 ms against 1.000 ms for "
        "14 tma, WG_C too as built (+0.200 ms is what the build took away).",
        "- 14 tma, WG_C too: 1.000 ms, 1.50× 13's speed (faster)."]
