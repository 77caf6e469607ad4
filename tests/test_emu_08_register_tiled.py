"""kernels/attention/08_register_tiled.cu (fp32 flash attention, register-tiled outer products on the
CUDA cores) on the CPU execution model (tests/ladder_emu/harness_08.cpp + ladder_emu.h), its
shared-memory access patterns under the bank model, and its static build.

1. The kernel vs float64 attention (rel. error < 1e-5) for several <D, BM, BN, CG, TM>: N = 1,
   N not a multiple of BM or BN (partial row and key tiles), B*H = 3, many key tiles, large logits
   (scores of several hundred; tolerance grown with the largest score as in the GPU tests), and a
   NaN in one query row (that row all NaN, every other row right). The output is poisoned with
   NaN, so an unwritten element fails.
2. Every shared-memory instruction of the S and PV phases (addresses generated from the kernel's
   index arithmetic, re-stated here) is bank-conflict-free under attnlab.banks' model (float4 =
   four quarter-warp phases); without the XOR swizzles, the K reads and P writes would conflict.
3. Static build for sm_90 of the shipped instantiations: no spills, no stack, <= 255 registers,
   register and shared-memory budgets that let 2 blocks share an SM, 16-byte cp.async, 128-bit
   shared loads and ex2.approx in the PTX.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from attnlab.banks import warp_access
from attnlab.paths import KERNELS_DIR, REPO_ROOT
from attnlab.attention.reference import attention_fp64, rel_error

import emu_build  # tests/emu_build.py: g++ builds cached by content

GXX = shutil.which("g++")
needs_gxx = pytest.mark.skipif(GXX is None, reason="g++ (C++20) is needed to build the CPU execution model")

EMU_DIR = REPO_ROOT / "tests" / "ladder_emu"
SOURCE = "attention/08_register_tiled.cu"
FUNCTION = "attn_register_tiled"

# Shipped defaults per D, and alternatives worth measuring (see the kernel header).
DEFAULTS = {128: (128, 64, 64, 16, 8), 64: (64, 128, 64, 8, 8), 32: (32, 128, 64, 8, 8)}
ALTERNATIVES = [(128, 64, 64, 16, 4), (64, 64, 64, 16, 8)]

# (D, BM, BN, CG, TM) -> [(B, H, N, inputs)], inputs in {"normal", "large", "nan"}.
# Shapes stay small: the model runs every CUDA thread as a fiber on one OS thread.
CONFIGS = {
    DEFAULTS[128]: [(1, 1, 150, "normal"), (1, 1, 1, "normal"), (3, 1, 70, "large")],
    DEFAULTS[64]: [(1, 3, 130, "normal"), (1, 1, 97, "nan")],
    DEFAULTS[32]: [(2, 1, 77, "nan"), (1, 1, 140, "large")],
    (128, 64, 64, 16, 4): [(1, 2, 97, "normal")],     # TM = 4, 256 threads
    (64, 32, 16, 8, 4): [(1, 1, 45, "nan")],          # 64 threads, three key tiles, RS = 4
    (128, 32, 64, 32, 8): [(1, 1, 33, "normal")],     # CG = 32: a row group spans a warp
    (32, 32, 8, 8, 8): [(1, 1, 19, "large")],         # one warp, BN = 8 (one key per thread)
}
CASES = [(cfg, shape) for cfg, shapes in CONFIGS.items() for shape in shapes]


def _id(case):
    (D, bm, bn, cg, tm), (B, H, N, kind) = case
    return f"D{D}-BM{bm}-BN{bn}-CG{cg}-TM{tm}-B{B}H{H}N{N}-{kind}"


def smem_bytes(D: int, BM: int, BN: int) -> int:
    """Dynamic shared memory of the launch formula: qt [D][BM], ks, vs [BN][D], pt [BN][BM]."""
    return 4 * (D * BM + 2 * BN * D + BN * BM)


def threads(BM: int, TM: int, CG: int) -> int:
    return (BM // TM) * CG


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out = tmp_path_factory.mktemp("emu_08")
    built: dict[tuple, Path] = {}

    def get(cfg: tuple) -> Path:
        if cfg not in built:
            D, bm, bn, cg, tm = cfg
            exe = out / f"harness_08_{D}_{bm}_{bn}_{cg}_{tm}"
            cmd = [GXX, "-std=c++20", "-O1", "-pthread", "-include", str(EMU_DIR / "ladder_emu.h"),
                   f"-I{KERNELS_DIR}", f"-DEMU_D={D}", f"-DEMU_BM={bm}", f"-DEMU_BN={bn}",
                   f"-DEMU_CG={cg}", f"-DEMU_TM={tm}", str(EMU_DIR / "harness_08.cpp"), "-o", str(exe)]
            res = emu_build.run(cmd)
            assert res.returncode == 0, f"emulator build failed:\n{' '.join(cmd)}\n{res.stderr[-4000:]}"
            built[cfg] = exe
        return built[cfg]

    return get


@needs_gxx
@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_register_tiled_on_cpu_model(case, build, tmp_path):
    cfg, (B, H, N, kind) = case
    D = cfg[0]
    rng = np.random.default_rng(1000 * N + D + cfg[2])
    q, k, v = (rng.standard_normal((B, H, N, D), dtype=np.float32) for _ in range(3))
    if kind == "large":   # scale.q.k of std 100: maxima of several hundred
        q *= 10.0
        k *= 10.0
    nan_row = None
    if kind == "nan":
        nan_row = (B - 1, H - 1, N // 2)
        q[nan_row + (3,)] = np.nan
    for name, a in (("q", q), ("k", k), ("v", v)):
        a.tofile(tmp_path / name)
    res = subprocess.run([str(build(cfg)), str(tmp_path), str(B), str(H), str(N)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    o = np.fromfile(tmp_path / "o", dtype=np.float32).reshape(B, H, N, D)

    valid = np.ones((B, H, N), dtype=bool)
    qr = q.astype(np.float64)
    if nan_row is not None:
        assert np.isnan(o[nan_row]).all(), "the NaN query row should be all NaN"
        valid[nan_row] = False
        qr[nan_row] = 0.0   # reference for the other rows (rows are independent)
    ref = attention_fp64(qr, k, v)
    good = o[valid]
    assert np.isfinite(good).all(), "outputs never written (NaN poison left) or NaN/Inf computed"
    smax = float(np.abs(qr @ k.astype(np.float64).transpose(0, 1, 3, 2)).max()) / np.sqrt(D)
    if kind == "large":
        assert smax > 200
    tol = 1e-5 * max(1.0, smax / 10.0)   # a score's rounding error grows with its size
    err = rel_error(good, ref[valid])
    assert err < tol, f"relative error {err:.2e} vs float64 (tolerance {tol:.1e}, max |score| {smax:.0f})"


# ------------------------------------------------------------------ bank-conflict model

def _warp_lanes(cfg, warp):
    """(rg, cg) of each lane of one warp (thread t: rg = t // CG, cg = t % CG)."""
    D, BM, BN, CG, TM = cfg
    ts = [32 * warp + lane for lane in range(32)]
    return [(t // CG, t % CG) for t in ts]


def _shared_patterns(cfg, swizzle=True):
    """Byte addresses (relative to each buffer, whose bases are multiples of 128 bytes) of every
    warp-wide shared-memory instruction in the S and PV phases and the Q staging, as
    (name, width, [address per lane]) triples, from the kernel's index arithmetic."""
    D, BM, BN, CG, TM = cfg
    TM4, KN, DC, D4 = TM // 4, BN // CG, D // (4 * CG), D // 4
    sw = (lambda j: j & 7) if swizzle else (lambda j: 0)
    nthreads = threads(BM, TM, CG)
    for w in range(nthreads // 32):
        lanes = _warp_lanes(cfg, w)
        for d4 in range(D4):                                    # S: K fragments
            for kk in range(KN):
                yield "K read", 16, [4 * ((cg + CG * kk) * D + 4 * (d4 ^ sw(cg + CG * kk))) for rg, cg in lanes]
        for d in range(D):                                      # S: Q fragments
            for c in range(TM4):
                yield "Q read", 16, [4 * (d * BM + TM * rg + 4 * c) for rg, cg in lanes]
        for kk in range(KN):                                    # P stores
            for c in range(TM4):
                yield "P write", 16, [4 * ((cg + CG * kk) * BM + 4 * ((TM4 * rg + c) ^ sw(cg + CG * kk)))
                                      for rg, cg in lanes]
        for j in range(BN):                                     # PV: P and V fragments
            for c in range(TM4):
                yield "P read", 16, [4 * (j * BM + 4 * ((TM4 * rg + c) ^ sw(j))) for rg, cg in lanes]
            for c in range(DC):
                yield "V read", 16, [4 * (j * D + 4 * cg + 4 * CG * c) for rg, cg in lanes]
        for it in range(BM * D4 // nthreads):                   # Q staging (transposing stores)
            idx = [32 * w + lane + it * nthreads for lane in range(32)]
            for e in range(4):
                yield "Q store", 4, [4 * ((4 * (i // BM) + e) * BM + i % BM) for i in idx]


@pytest.mark.parametrize("cfg", sorted(set(CONFIGS) | set(ALTERNATIVES)), ids=lambda c: "-".join(map(str, c)))
def test_shared_memory_accesses_are_conflict_free(cfg):
    bad = {}
    for name, width, addrs in _shared_patterns(cfg):
        acc = warp_access(addrs, width)
        if not acc.conflict_free:
            bad[name] = max(bad.get(name, 0), acc.degree)
    assert not bad, f"{cfg}: bank conflicts (worst degree per access): {bad}"


def test_swizzles_are_what_makes_it_conflict_free():
    worst = {}
    for name, width, addrs in _shared_patterns(DEFAULTS[128], swizzle=False):
        worst[name] = max(worst.get(name, 0), warp_access(addrs, width).degree)
    assert worst["K read"] == 8 and worst["P write"] == 8, worst   # 8 lanes of a phase, one bank group
    assert worst["Q read"] == worst["V read"] == worst["P read"] == 1


# ------------------------------------------------------------------ static build (sm_90)

SHIPPED = list(DEFAULTS.values()) + ALTERNATIVES
REGS_PER_SM, SMEM_PER_SM, SMEM_RESERVED_PER_BLOCK = 65536, 233472, 1024   # H100/H200 (sm_90)


def test_static_build_sm90():
    from attnlab.static import has_vector_global_loads, nvcc_path, static_build
    if nvcc_path() is None:
        pytest.skip("nvcc is needed for the static build")
    for rep in static_build(SOURCE, FUNCTION, SHIPPED, arch="sm_90"):
        name = rep.name
        D, BM, BN, CG, TM = rep.template_args
        assert not rep.spills and rep.stack_bytes == 0, \
            f"{name}: spills ({rep.spill_store_bytes} B stored, stack {rep.stack_bytes} B)"
        assert 0 < rep.registers <= 255, f"{name}: {rep.registers} registers"
        assert rep.static_smem_bytes == 0, "all shared memory is dynamic"
        nthr = threads(BM, TM, CG)
        regs = (rep.registers + 7) // 8 * 8   # allocation granularity (per thread, 8 registers)
        assert 2 * nthr * regs <= REGS_PER_SM, f"{name}: {rep.registers} registers x {nthr} threads: < 2 blocks/SM"
        assert 2 * (smem_bytes(D, BM, BN) + SMEM_RESERVED_PER_BLOCK) <= SMEM_PER_SM, f"{name}: smem < 2 blocks/SM"
        ptx = rep.ptx
        assert has_vector_global_loads(ptx) and "cp.async.cg.shared.global" in ptx, f"{name}: no 16-byte cp.async"
        assert "ld.shared.v4.f32" in ptx, f"{name}: no 128-bit shared loads"
        assert "ex2.approx" in ptx, f"{name}: exp2 is not on the SFU"
