"""The tensor-core flash-attention ladder (kernels/attention/10[a-f]_*.cu, bf16/fp16 in and out) on
the CPU execution model (tests/ladder_emu/harness_10.cpp + ladder_emu.h), plus static builds.

1. A layout self-test of the emulator: one warp, ldmatrix (x4, x2, x2.trans, x4.trans) and
   mma.m16n8k16 (bf16 and fp16) against the PTX ISA's documented fragment layouts and the plain
   product, including the flash-attention trick of feeding the accumulators of two n8 tiles back
   as the A fragment of the next MMA.
2. Every step vs float64 attention on the 16-bit-rounded inputs (rel. error < 1e-2), non-causal
   and causal (float64 causal reference below), on odd shapes: N = 1, N not a multiple of any
   tile, B*H = 3, large logits (scores of several hundred), row maxima that keep growing from tile
   to tile, a NaN in one query row (that row NaN, the others right). 10a-10c do the same arithmetic in the same order, so their outputs must be
   bit-identical; 10d must agree closely, and 10f (10d with every fragment load at a per-lane
   base plus an immediate) and 10g (10f with Q's fragments held or re-read, QREG alternating over
   the configurations) must equal 10d bit for bit. 10e (32 query rows a warp: configurations with
   BM = 32 * WARPS) runs next to 10a with BM / 16 warps and must agree with it as closely as 10d.
3. Static build for sm_90 of every shipped instantiation: no spills, <= 255 registers, the
   mma/ldmatrix/cp.async instructions in the PTX, and 10d's / 10e's register targets (blocks/SM).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from attnlab.attention import get_spec, stream_k_plain
from attnlab.paths import KERNELS_DIR, REPO_ROOT
from attnlab.attention.reference import attention_fp64, default_scale, rel_error

import emu_build  # tests/emu_build.py: g++ builds cached by content

GXX = shutil.which("g++")
needs_gxx = pytest.mark.skipif(GXX is None, reason="g++ (C++20) is needed to build the CPU execution model")

EMU_DIR = REPO_ROOT / "tests" / "ladder_emu"
KERNELS = ("mma_baseline", "ldmatrix_swizzle", "cp_async", "tuned", "fixed_offsets", "occupancy", "stream_k",
           "copy_warps")  # BM = 16 * WARPS
KERNELS_6W = ("mma_baseline", "occupancy", "stream_k", "copy_warps")   # 6 warps at D = 128: 10g/10h copy with 128 of 192 threads
KERNELS_10E = ("mma_baseline", "two_row_tiles")                         # BM = 32 * WARPS

# (D, BM, BN, WARPS, BF16, CAUSAL, STAGES) -> [(B, H, N, inputs)], inputs in {"normal", "large",
# "ramp", "nan"}: "large" scores are ~ +-300; "ramp" scales key j by 1 + j/(2N) on top, so the row
# maxima keep growing by tens of log2 units from tile to tile: 10d's speculative p (no rescale)
# would exceed fp16's range there, so its exact path must catch it (a bound of 1e30 instead of
# 256 fails the fp16 ramp case).
# BM = 16 * WARPS (10a-10d) or 32 * WARPS (10e, next to 10a with BM / 16 warps). Shapes stay
# small: the model runs every CUDA thread as a fiber on one OS thread.
CONFIGS = {
    (64, 64, 64, 4, True, False, 2): [(1, 3, 130, "normal"), (1, 1, 1, "normal"), (1, 1, 97, "nan")],
    (64, 64, 64, 4, True, True, 3): [(1, 1, 130, "normal"), (1, 2, 77, "large"), (1, 1, 200, "ramp")],
    (64, 64, 64, 4, False, True, 2): [(1, 1, 100, "nan"), (1, 1, 1, "normal")],
    (64, 128, 64, 8, False, False, 3): [(1, 1, 130, "large")],      # 10d's D=64 tiles
    (128, 64, 32, 4, False, False, 3): [(1, 1, 100, "normal"), (1, 1, 150, "ramp")],
    (128, 64, 64, 4, True, True, 2): [(1, 1, 130, "nan"), (3, 1, 20, "large")],
    (128, 128, 64, 8, True, True, 3): [(1, 1, 150, "normal")],       # 10d's D=128 tiles
    (128, 128, 64, 8, True, False, 3): [(1, 1, 129, "ramp")],
    (32, 32, 16, 2, False, True, 2): [(2, 1, 45, "normal")],
    (32, 64, 32, 4, True, False, 3): [(1, 1, 33, "large")],
    # 10e: BM = 32 * WARPS (2 chunks of 32 keys a tile when BN = 64, pipelined unless causal at
    # D = 128; "normal" inputs exercise the speculative path, "ramp" / "large" the exact one)
    (128, 128, 64, 4, True, False, 2): [(1, 1, 150, "ramp"), (1, 1, 300, "normal"), (1, 2, 1, "normal"),
                                        (1, 1, 97, "nan")],
    (128, 128, 64, 4, False, True, 2): [(1, 1, 150, "ramp"), (1, 1, 260, "normal"), (3, 1, 20, "large"),
                                        (1, 1, 130, "nan")],
    (64, 128, 64, 4, False, True, 3): [(1, 1, 200, "ramp"), (1, 1, 260, "normal"), (1, 1, 1, "normal")],
    (64, 128, 64, 4, True, False, 3): [(1, 3, 77, "large")],
    (128, 64, 32, 2, False, False, 3): [(1, 1, 100, "ramp")],
    (32, 64, 32, 2, True, True, 2): [(2, 1, 45, "normal")],
    # 10e with 64-key S chunks (8th element KC = 64: Q read once per 64 keys, one vote per 64 keys,
    # no chunk pipelining); BN = 128 gives two chunks a tile.
    (128, 128, 64, 4, True, False, 2, 64): [(1, 1, 150, "ramp"), (1, 1, 97, "nan"), (1, 2, 1, "normal")],
    (128, 128, 64, 4, False, True, 2, 64): [(1, 1, 260, "normal"), (3, 1, 20, "large"), (1, 1, 130, "nan")],
    (128, 128, 128, 4, True, True, 2, 64): [(1, 1, 200, "ramp")],
    (64, 128, 64, 4, True, False, 3, 64): [(1, 1, 130, "normal")],
    # 10g/10h with 6 warps (BM = 96): 10h's D = 128 tiles; 10d/10f need 32 * WARPS a multiple of D
    (128, 96, 48, 6, True, False, 2): [(1, 2, 200, "normal"), (1, 3, 97, "nan"), (2, 1, 130, "ramp"),
                                       (3, 1, 257, "large"), (1, 4, 300, "normal")],
    (128, 96, 64, 6, False, True, 2): [(1, 1, 150, "normal")],
    (128, 96, 64, 6, True, False, 3): [(1, 2, 150, "large")],
    (64, 96, 48, 6, True, False, 3): [(2, 1, 100, "large")],
    # 10i's D = 128 tiles (2 of 4 warps copy, 4 rows a pass)
    (128, 64, 48, 4, True, False, 2): [(1, 2, 100, "normal"), (2, 1, 47, "nan")],
    (128, 64, 48, 4, False, True, 2): [(1, 1, 130, "ramp")],
}
CASES = [(cfg, shape) for cfg, shapes in CONFIGS.items() for shape in shapes]


def _kc(cfg: tuple) -> int:
    """10e's S chunk (keys): the optional 8th element of a configuration, 32 by default."""
    return cfg[7] if len(cfg) > 7 else 32


def _qreg(cfg: tuple) -> int:
    """10g's QREG for a configuration: alternating over CONFIGS, so both Q-fragment choices run."""
    return list(CONFIGS).index(cfg) % 2


def _cw(cfg: tuple) -> int:
    """10i's copying warps for a configuration: one of the values its registry constraint accepts
    (fewer than every warp, alternating over CONFIGS), -1 where none is (10i not built)."""
    D, bm, bn, w = cfg[:4]
    spec = get_spec("copy_warps")
    ok = [cw for cw in (1, 2, 3, 4) if cw < w and spec.constraint(D, dict(BM=bm, BN=bn, WARPS=w, CW=cw)) is None]
    return ok[list(CONFIGS).index(cfg) % len(ok)] if ok and bm == 16 * w else -1


def _fill(cfg: tuple, shape: tuple) -> int:
    """10h's FILL for a case (the launch choice: 10g's kernel on its plain grid when the plain
    rounds over the slots are at least FILL % full): 0 (always plain) and 90 in one case of five
    each; in the other three 101, beyond the registry's choices, so that the Stream-K path runs
    even where the rounds happen to be full."""
    return (101, 90, 101, 101, 0)[CASES.index((cfg, shape)) % 5]


def _sk_env(cfg: tuple, shape: tuple) -> dict:
    """10h's persistent grid on the model: 1 to 7 blocks (so row blocks are split into parts at
    different places, or not at all), and every other case with the blocks in reverse order (so
    each part of a split row block is, in some case, the one that arrives last and merges). One
    case in three runs the threads in the eager order (tests/emu_fibers.h: each warp runs to the
    next block barrier before the next warp starts, so a copy that lands in shared memory before
    another warp has read what it overwrites changes the output)."""
    i = CASES.index((cfg, shape))
    env = dict(os.environ, EMU_SK_BLOCKS=str(1 + (3 * i) % 7), EMU_REVERSE=str(i % 2),
               EMU_FILL=str(_fill(cfg, shape)))
    if i % 3 == 1:
        env["EMU_FIBER_ORDER"] = "eager"
    return env


def _id(case):
    cfg, (B, H, N, kind) = case
    D, bm, bn, w, bf16, causal, st = cfg[:7]
    kc = f"-KC{cfg[7]}" if len(cfg) > 7 else ""
    return (f"D{D}-BM{bm}-BN{bn}-W{w}-{'bf16' if bf16 else 'fp16'}-{'causal' if causal else 'full'}-S{st}{kc}"
            f"-B{B}H{H}N{N}-{kind}")


def _to16(x: np.ndarray, bf16: bool) -> np.ndarray:
    """float32 -> 16-bit bit patterns (round to nearest even), via torch's CPU conversion."""
    import torch
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    return t.to(torch.bfloat16 if bf16 else torch.float16).view(torch.int16).numpy().view(np.uint16)


def _from16(u: np.ndarray, bf16: bool) -> np.ndarray:
    if bf16:
        return (u.astype(np.uint32) << 16).view(np.float32)
    return u.view(np.float16).astype(np.float32)


def attention_causal_fp64(q, k, v, scale: float | None = None) -> np.ndarray:
    """softmax(scale · Q Kᵀ + causal mask) V in float64: query i sees keys j <= i."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    scale = default_scale(q.shape[-1]) if scale is None else scale
    n = q.shape[-2]
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    s = np.where(np.triu(np.ones((n, n), dtype=bool), k=1), -np.inf, s)
    s -= s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("bhij,bhjd->bhid", p, v)


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out = tmp_path_factory.mktemp("ladder_emu_10")
    built: dict[tuple, Path] = {}

    def get(cfg: tuple) -> Path:
        if cfg not in built:
            D, bm, bn, w, bf16, causal, st = cfg[:7]
            exe = out / ("harness_10_" + "_".join(str(int(x)) for x in cfg))
            cmd = [GXX, "-std=c++20", "-O1", "-pthread", "-include", str(EMU_DIR / "ladder_emu.h"),
                   f"-I{KERNELS_DIR}", f"-DEMU_D={D}", f"-DEMU_BM={bm}", f"-DEMU_BN={bn}", f"-DEMU_WARPS={w}",
                   f"-DEMU_BF16={int(bf16)}", f"-DEMU_CAUSAL={int(causal)}", f"-DEMU_STAGES={st}", f"-DEMU_KC={_kc(cfg)}",
                   f"-DEMU_QREG={_qreg(cfg)}", f"-DEMU_CW={_cw(cfg)}",
                   str(EMU_DIR / "harness_10.cpp"), "-o", str(exe)]
            res = emu_build.run(cmd)
            assert res.returncode == 0, f"emulator build failed:\n{' '.join(cmd)}\n{res.stderr[-4000:]}"
            built[cfg] = exe
        return built[cfg]

    return get


@needs_gxx
def test_emulator_fragment_layouts(build):
    """ldmatrix / mma.m16n8k16 in ladder_emu.h vs the PTX ISA layouts and the plain product."""
    res = subprocess.run([str(build(next(iter(CONFIGS)))), "selftest"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "selftest ok" in res.stdout, res.stdout + res.stderr


@needs_gxx
@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_flash_ladder_on_cpu_model(case, build, tmp_path):
    cfg, (B, H, N, kind) = case
    D, bm, bn, w, bf16, causal, st = cfg[:7]
    rng = np.random.default_rng(1000 * N + D + 7 * bn + int(causal))
    q, k, v = (rng.standard_normal((B, H, N, D), dtype=np.float32) for _ in range(3))
    if kind in ("large", "ramp"):  # scores scale * q.k of std 100: maxima of several hundred
        q *= 10.0
        k *= 10.0
    if kind == "ramp":
        k *= (1.0 + 0.5 * np.arange(N, dtype=np.float32) / N)[:, None]
    bits = {name: _to16(a, bf16) for name, a in (("q", q), ("k", k), ("v", v))}
    nan_row = None
    if kind == "nan":
        nan_row = (0, H - 1, N // 2)
        bits["q"][nan_row + (3,)] = 0x7FC0 if bf16 else 0x7E00
    for name, a in bits.items():
        a.tofile(tmp_path / name)
    qr, kr, vr = (_from16(bits[name], bf16).astype(np.float64) for name in "qkv")

    res = subprocess.run([str(build(cfg)), str(tmp_path), str(B), str(H), str(N)],
                         capture_output=True, text=True, timeout=300, env=_sk_env(cfg, (B, H, N, kind)))
    assert res.returncode == 0, res.stderr
    two_rows = bm == 32 * w
    six_warps = (32 * w) % D != 0 or bn % (256 * w // D) != 0
    outs = {name: _from16(np.fromfile(tmp_path / f"o_{name}", dtype=np.uint16), bf16).reshape(B, H, N, D)
            for name in (KERNELS_10E if two_rows else KERNELS_6W if six_warps else KERNELS)
            if name != "copy_warps" or _cw(cfg) >= 0}

    ref_fn = attention_causal_fp64 if causal else attention_fp64
    valid = np.ones((B, H, N), dtype=bool)
    if nan_row is not None:
        valid[nan_row] = False
        qr[nan_row] = 0.0  # reference for the other rows (rows are independent)
    ref = np.asarray(ref_fn(qr, kr, vr))
    for name, o in outs.items():
        if nan_row is not None:
            assert np.isnan(o[nan_row]).all(), f"{name}: the NaN query row should be all NaN"
        good = o[valid]
        assert np.isfinite(good).all(), f"{name}: outputs never written (NaN poison left) or NaN/Inf computed"
        err = rel_error(good, ref[valid])
        assert err < 1e-2, f"{name}: relative error {err:.2e} vs float64"
    base = outs["mma_baseline"][valid]
    if "stream_k" in outs:
        # 10h: 10g's body over parts of the key range, merged: the same function to rounding (each
        # part's P is relative to its own reference point); on a grid of one block, bit-identical
        tol = 2.0 ** -8 if bf16 else 2.0 ** -10
        err = rel_error(outs["stream_k"][valid], outs["occupancy"][valid])
        assert err < tol, f"stream_k differs from occupancy: relative difference {err:.2e}"
        slots = int(_sk_env(cfg, (B, H, N, kind))["EMU_SK_BLOCKS"])
        plain = causal or stream_k_plain(B * H, N, dict(BM=bm, FILL=_fill(cfg, (B, H, N, kind))), slots)
        if not causal:   # the model's launch choice (attn_stream_k_plain) is the launcher's
            assert f"stream_k plain={int(plain)}" in res.stdout, res.stdout
        if slots == 1 or plain:
            assert np.array_equal(outs["stream_k"], outs["occupancy"], equal_nan=True), \
                "stream_k on one block, or on 10g's plain grid (causal, FILL), is not bit-identical to occupancy"
    if "copy_warps" in outs:
        # 10i: 10h's schedule and arithmetic, only other threads copy the tiles: bit-identical
        assert np.array_equal(outs["copy_warps"], outs["stream_k"], equal_nan=True), \
            f"copy_warps (CW={_cw(cfg)}) is not bit-identical to stream_k"
    if six_warps:
        return
    if not two_rows:
        # 10a, 10b, 10c: same MMAs in the same order, same softmax: bit-identical on the model.
        for name in ("ldmatrix_swizzle", "cp_async"):
            diff = float(np.abs(outs[name][valid] - base).max())
            assert diff == 0.0, f"{name} differs from mma_baseline by up to {diff:.2e}"
        # 10f: 10d's loads at other addresses of the same data (NaN rows compared as NaN)
        for name in ("fixed_offsets", "occupancy"):
            same = np.array_equal(outs[name], outs["tuned"], equal_nan=True)
            assert same, f"{name} (QREG={_qreg(cfg)} for occupancy) is not bit-identical to tuned"
    # 10d and 10e subtract a different (stale) max, so their P rounds differently: allow two units
    # of roundoff of the output type (the outputs themselves are rounded to it).
    tol = 2.0 ** -8 if bf16 else 2.0 ** -10
    name = "two_row_tiles" if two_rows else "tuned"
    err = rel_error(outs[name][valid], base)
    assert err < tol, f"{name} differs from mma_baseline: relative difference {err:.2e}"


# ------------------------------------------------------------------ sanitizers

# 10g/10h/10i on one small odd shape, built with AddressSanitizer + UBSan (tests/test_ladder_emu.py's
# flags; tests/sanitize/smem_guard.h poisons the model's shared memory past what a launch asked
# for): D = 128 with 6 warps (10i copying with 2 of them: 4 rows a pass, two swizzle patterns),
# N = 77 (a last row block of 77 - 0 = 77 < 96 rows and a last key tile of 29 keys), B·H = 3, and
# the Stream-K path on 5 blocks in reverse order (row blocks split, the workspace and counters
# written and merged). An access past q, k, v, o, the workspace or the counters (vectors of
# exactly their size), past the dynamic shared memory, or undefined behaviour aborts the run.
SANITIZE_10 = ((128, 96, 48, 6, True, False, 2), (1, 3, 77))


@needs_gxx
def test_stream_k_and_copy_warps_under_sanitizers(tmp_path):
    from test_ladder_emu import SANITIZE_ENV, SANITIZE_FLAGS, SANITIZER_REPORT, _sanitizers_work

    if not _sanitizers_work(tmp_path):
        pytest.skip("g++ cannot build with -fsanitize=address,undefined here (libasan/libubsan missing)")
    cfg, (B, H, N) = SANITIZE_10
    D, bm, bn, w, bf16, causal, st = cfg
    cw = 2
    assert get_spec("copy_warps").constraint(D, dict(BM=bm, BN=bn, WARPS=w, CW=cw)) is None
    exe = tmp_path / "harness_10_asan"
    cmd = [GXX, "-std=c++20", "-O1", "-pthread", *SANITIZE_FLAGS, "-include", str(EMU_DIR / "ladder_emu.h"),
           "-include", str(REPO_ROOT / "tests" / "sanitize" / "smem_guard.h"), f"-I{KERNELS_DIR}",
           f"-DEMU_D={D}", f"-DEMU_BM={bm}", f"-DEMU_BN={bn}", f"-DEMU_WARPS={w}", f"-DEMU_BF16={int(bf16)}",
           f"-DEMU_CAUSAL={int(causal)}", f"-DEMU_STAGES={st}", "-DEMU_QREG=1", f"-DEMU_CW={cw}",
           str(EMU_DIR / "harness_10.cpp"), "-o", str(exe)]
    res = emu_build.run(cmd)
    assert res.returncode == 0, f"sanitizer build failed:\n{' '.join(cmd)}\n{res.stderr[-4000:]}"
    rng = np.random.default_rng(77)
    q, k, v = (rng.standard_normal((B, H, N, D), dtype=np.float32) for _ in range(3))
    bits = {name: _to16(a, bf16) for name, a in (("q", q), ("k", k), ("v", v))}
    for name, a in bits.items():
        a.tofile(tmp_path / name)
    env = {**os.environ, **SANITIZE_ENV, "EMU_SK_BLOCKS": "5", "EMU_REVERSE": "1", "EMU_FILL": "101"}
    names = "occupancy,stream_k,copy_warps"
    res = subprocess.run([str(exe), str(tmp_path), str(B), str(H), str(N), names], capture_output=True, text=True,
                         timeout=600, env=env)
    report = [line for line in res.stderr.splitlines() if any(s in line for s in SANITIZER_REPORT)]
    assert res.returncode == 0 and not report, f"sanitizer report (exit {res.returncode}):\n{res.stderr[-6000:]}"
    assert "stream_k plain=0" in res.stdout, res.stdout   # the Stream-K path ran, not the plain grid
    ref = attention_fp64(*(_from16(bits[n], bf16).astype(np.float64).reshape(B, H, N, D) for n in "qkv"))
    for name in names.split(","):
        o = _from16(np.fromfile(tmp_path / f"o_{name}", dtype=np.uint16), bf16).reshape(B, H, N, D)
        assert np.isfinite(o).all() and rel_error(o, ref) < 1e-2, name


# ------------------------------------------------------------------ static builds (sm_90)

MMA_BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
MMA_F16 = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
# Shipped tile choices: (D, BM, BN, WARPS) for 10a-10c (10c with STAGES 2 and 3), and
# (D, BM, BN, WARPS, STAGES) for 10d: its defaults per D first, then alternatives worth measuring.
LADDER_TILES = [(64, 128, 64, 8), (128, 128, 64, 8), (32, 128, 64, 8)]
TUNED_TILES = [(64, 128, 64, 8, 3), (128, 128, 64, 8, 3), (32, 128, 64, 8, 3),
               (64, 128, 64, 8, 2), (128, 64, 64, 4, 3), (128, 128, 32, 8, 3)]
# 10e (D, BM, BN, WARPS, STAGES, KC): defaults per D first, then alternatives worth measuring
# (KC = keys per S chunk: 64 reads Q once per 64 keys, 32 pipelines two chunks a 64-key tile).
TWO_ROW_TILES = [(128, 128, 64, 4, 2, 64), (64, 128, 64, 4, 3, 32), (32, 128, 64, 4, 3, 32),
                 (128, 128, 64, 4, 2, 32), (128, 256, 64, 8, 2, 64), (128, 128, 32, 4, 3, 32),
                 (64, 128, 64, 4, 3, 64)]
# 10f (D, BM, BN, WARPS, STAGES): defaults per D first, then the scan's alternatives.
FIXED_TILES = [(64, 64, 64, 4, 3), (128, 128, 128, 8, 2), (32, 128, 64, 8, 3), (128, 64, 64, 4, 3),
               (64, 128, 64, 8, 3)]
# 10g (D, BM, BN, WARPS, STAGES, MINB, QREG): defaults per D first, then the scan's alternatives.
OCC_TILES = [(64, 64, 64, 4, 2, 0, 1), (128, 64, 48, 4, 2, 3, 1), (32, 128, 64, 8, 3, 0, 1),
             (128, 64, 32, 4, 3, 3, 1), (128, 64, 32, 4, 2, 4, 0), (128, 64, 48, 4, 2, 3, 0),
             (128, 96, 64, 6, 2, 2, 1), (128, 96, 48, 6, 2, 2, 1)]
# 10h (same parameters as 10g): defaults per D first, then the scan's alternatives.
STREAM_TILES = [(128, 96, 48, 6, 2, 2, 1), (64, 64, 64, 4, 2, 0, 1), (32, 128, 64, 8, 3, 0, 1),
                (128, 64, 48, 4, 2, 3, 1), (64, 64, 32, 4, 3, 0, 1)]
# 10i (10g's parameters and CW, the copying warps): defaults per D first, then the scan's alternatives.
COPY_TILES = [(128, 64, 48, 4, 2, 3, 1, 2), (64, 64, 64, 4, 2, 0, 1, 2), (32, 128, 64, 8, 3, 0, 1, 2),
              (64, 64, 64, 4, 2, 0, 1, 1), (128, 64, 32, 4, 3, 3, 1, 2), (128, 96, 48, 6, 2, 2, 1, 2),
              (128, 64, 48, 4, 2, 3, 1, 0)]
STEPS = {
    "10a_mma_baseline.cu": ("attn_mma_baseline", ()),
    "10b_ldmatrix_swizzle.cu": ("attn_ldmatrix_swizzle", ("ldmatrix",)),
    "10c_cp_async.cu": ("attn_cp_async", ("ldmatrix", "cp.async")),
    "10d_tuned.cu": ("attn_tuned", ("ldmatrix", "cp.async")),
    "10e_two_row_tiles.cu": ("attn_two_row_tiles", ("ldmatrix", "cp.async")),
    "10f_fixed_offsets.cu": ("attn_fixed_offsets", ("ldmatrix", "cp.async")),
    "10g_occupancy.cu": ("attn_occupancy", ("ldmatrix", "cp.async")),
    "10h_stream_k.cu": ("attn_stream_k", ("ldmatrix", "cp.async", "atom.global.add")),
    "10i_copy_warps.cu": ("attn_copy_warps", ("ldmatrix", "cp.async", "atom.global.add")),
}
# Stream-K steps: their plain-grid kernel (the registry's plain_function), built beside them
PLAIN = {"10h_stream_k.cu": "attn_occupancy", "10i_copy_warps.cu": "attn_copy_warps_plain"}
SPILLS_ALLOWED = {"10h_stream_k.cu": 64, "10i_copy_warps.cu": 64}   # the registry's spill_bytes_allowed


def _instantiations(source: str):
    out = []
    for bf16 in (True, False):
        for causal in (False, True):
            if source.startswith("10e"):
                out.extend((d, bm, bn, w, bf16, causal, st, kc) for d, bm, bn, w, st, kc in TWO_ROW_TILES)
            elif source.startswith("10i"):
                out.extend((d, bm, bn, w, bf16, causal, st, mb, qr, cw) for d, bm, bn, w, st, mb, qr, cw in COPY_TILES)
            elif source.startswith("10g") or source.startswith("10h"):
                tiles = OCC_TILES if source.startswith("10g") else STREAM_TILES
                out.extend((d, bm, bn, w, bf16, causal, st, mb, qr) for d, bm, bn, w, st, mb, qr in tiles)
            elif source.startswith("10f"):
                out.extend((d, bm, bn, w, bf16, causal, st) for d, bm, bn, w, st in FIXED_TILES)
            elif source.startswith("10d"):
                out.extend((d, bm, bn, w, bf16, causal, st) for d, bm, bn, w, st in TUNED_TILES)
            elif source.startswith("10c"):
                out.extend((*tiles, bf16, causal, st) for tiles in LADDER_TILES for st in (2, 3))
            else:
                out.extend((*tiles, bf16, causal) for tiles in LADDER_TILES)
    return out


@pytest.mark.parametrize("source", list(STEPS))
def test_static_build_sm90(source):
    from attnlab.static import nvcc_path, static_build
    if nvcc_path() is None:
        pytest.skip("nvcc is needed for the static build")
    function, needles = STEPS[source]
    insts = _instantiations(source)
    reps = static_build(f"attention/{source}", function, insts, arch="sm_90")
    if source in PLAIN:
        reps = [*reps, *static_build(f"attention/{source}", PLAIN[source], insts, arch="sm_90")]
    for rep in reps:
        name = rep.name
        allowed = SPILLS_ALLOWED.get(source, 0)   # the registry's spill_bytes_allowed (10h's header says why)
        assert rep.spill_store_bytes <= allowed and rep.stack_bytes <= allowed, \
            f"{name}: spills ({rep.spill_store_bytes} B stored, stack {rep.stack_bytes} B; {allowed} B allowed)"
        assert 0 < rep.registers <= 255, f"{name}: {rep.registers} registers"
        bf16 = rep.template_args[4]
        assert (MMA_BF16 if bf16 else MMA_F16) in rep.ptx, f"{name}: no m16n8k16 mma in the PTX"
        causal = rep.template_args[5]
        for needle in needles:
            if needle == "atom.global.add" and (causal or rep.function == PLAIN.get(source)):
                continue   # 10h, 10i: causal launches keep 10g's grid, no split row blocks to count
            assert needle in rep.ptx, f"{name}: no {needle} in the PTX"
        if source.startswith(("10d", "10f")):
            D, bm, bn, w = rep.template_args[:4]
            blocks = 2 if (D <= 64 or w == 4) else 1  # the blocks/SM 10d's __launch_bounds__ asks for
            assert rep.registers * 32 * w * blocks <= 65536, f"{name}: {rep.registers} registers, < {blocks} blocks/SM"
        if source.startswith(("10g", "10i")):
            D, bm, bn, w = rep.template_args[:4]
            minb = rep.template_args[7] or (2 if (D <= 64 or w == 4) else 1)   # 10g's __launch_bounds__
            assert rep.registers * 32 * w * minb <= 65536, f"{name}: {rep.registers} registers, < {minb} blocks/SM"
        if source.startswith("10e"):
            D, bm, bn, w = rep.template_args[:4]
            # 10e's __launch_bounds__: <= 255 registers at D = 128 (2 blocks of 4 warps/SM, 1 of 8),
            # <= 168 below (3 blocks of 4 warps)
            blocks = max(1, 65536 // (32 * w * (255 if D == 128 else 168)))
            assert rep.registers * 32 * w * blocks <= 65536, f"{name}: {rep.registers} registers, < {blocks} blocks/SM"


@pytest.mark.parametrize("source", list(STEPS))
def test_nvrtc_build(source, monkeypatch, tmp_path):
    """The lead's live loader compiles with NVRTC (no host code allowed): build there too. (The
    static cache keys on the compiler, "nvrtc X.Y" here, so an nvcc build never stands in for it.)"""
    pytest.importorskip("cuda.bindings.nvrtc")
    import attnlab.static as st
    monkeypatch.setattr(st, "nvcc_path", lambda: None)
    assert st.compiler_version().startswith("nvrtc")
    function, needles = STEPS[source]
    tiles = {"10e": (128, 64, 4), "10f": (128, 128, 8), "10g": (64, 48, 4), "10h": (96, 48, 6),
             "10i": (64, 48, 4)}.get(source[:3], (128, 64, 8))
    insts = [i for i in _instantiations(source) if i[0] in (64, 128) and i[1:4] == tiles][:4]
    assert insts, f"no NVRTC instantiation of {source} with tiles {tiles}"
    for rep in st.static_build(f"attention/{source}", function, insts, arch="sm_90"):
        allowed = SPILLS_ALLOWED.get(source, 0)
        assert rep.registers > 0 and rep.spill_store_bytes <= allowed, f"{rep.name}: {rep.registers} registers, spills"
        assert (MMA_BF16 if rep.template_args[4] else MMA_F16) in rep.ptx
