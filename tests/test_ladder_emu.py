"""The ladder kernels (kernels/attention/0[1-5]_*.cu) executed on the CPU by a small CUDA execution
model (tests/ladder_emu/): indexing, partial tiles, rows past N, barrier placement, and the claim
that 02-05 do the naive kernel's arithmetic in the same order (bit-identical outputs to 01).

Compiled with g++ (C++20; every CUDA thread a fiber, tests/emu_fibers.h); skipped where g++ is absent. 05 runs its
pre-sm_80 path here (no __CUDA_ARCH__): the same ping-pong schedule with plain copies.
"""

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from attnlab.attention import SEED_LADDER
from attnlab.paths import KERNELS_DIR, REPO_ROOT
from attnlab.attention.reference import attention_fp64, rel_error

import emu_build  # tests/emu_build.py: g++ builds cached by content

GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(GXX is None, reason="g++ (C++20) is needed to build the CPU execution model")

EMU_DIR = REPO_ROOT / "tests" / "ladder_emu"
KERNELS = SEED_LADDER   # the registry's seed ladder, in step order
# (D, TILE_ROWS, TILE_KV) -> shapes (B, H, N): the seed's tiles plus odd ones (one warp per block,
# a K/V tile longer than N, 32 warps per block), N = 1, N not a multiple of either tile.
CONFIGS = {
    (32, 8, 32): [(1, 1, 37), (1, 1, 1)],       # 37 = 4 full row tiles + 5 rows, 1 K/V tile + 5 keys
    (64, 8, 16): [(1, 2, 19)],
    (128, 8, 8): [(1, 1, 13)],
    (64, 2, 128): [(1, 1, 21)],
    (32, 1, 8): [(2, 1, 12)],
    (128, 32, 16): [(1, 1, 33)],                # 1024 threads; the second block has one active warp
}
# (the model runs every CUDA thread as a fiber and a barrier per shuffle: shapes stay small)
CASES = [(cfg, shape) for cfg, shapes in CONFIGS.items() for shape in shapes]


def _id(case):
    (D, tr, tk), (B, H, N) = case
    return f"B{B}-H{H}-N{N}-D{D}-TR{tr}-TK{tk}"


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out = tmp_path_factory.mktemp("ladder_emu")
    built: dict[tuple, Path] = {}

    def get(D: int, tr: int, tk: int) -> Path:
        if (D, tr, tk) not in built:
            exe = out / f"harness_{D}_{tr}_{tk}"
            cmd = [GXX, "-std=c++20", "-O1", "-pthread", "-include", str(EMU_DIR / "ladder_emu.h"),
                   f"-I{KERNELS_DIR}", f"-DEMU_D={D}", f"-DEMU_TR={tr}", f"-DEMU_TK={tk}",
                   str(EMU_DIR / "harness.cpp"), "-o", str(exe)]
            res = emu_build.run(cmd)
            assert res.returncode == 0, f"emulator build failed:\n{' '.join(cmd)}\n{res.stderr[-4000:]}"
            built[(D, tr, tk)] = exe
        return built[(D, tr, tk)]

    return get


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_ladder_kernels_on_cpu_model(case, build, tmp_path):
    (D, tr, tk), (B, H, N) = case
    rng = np.random.default_rng(N * D + tr)
    q, k, v = (rng.standard_normal((B, H, N, D), dtype=np.float32) for _ in range(3))
    for name, a in (("q", q), ("k", k), ("v", v)):
        a.tofile(tmp_path / name)
    res = subprocess.run([str(build(D, tr, tk)), str(tmp_path), str(B), str(H), str(N)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    ref = attention_fp64(q, k, v)
    outs = {name: np.fromfile(tmp_path / f"o_{name}", dtype=np.float32).reshape(B, H, N, D) for name in KERNELS}
    for name, o in outs.items():
        assert np.isfinite(o).all(), f"{name}: some outputs never written (NaN poison left) or NaN computed"
        assert rel_error(o, ref) < 1e-5, f"{name}: relative error {rel_error(o, ref):.2e} vs float64"
    for name in KERNELS[1:]:
        diff = float(np.abs(outs[name] - outs["naive"]).max())
        assert diff == 0.0, f"{name} differs from naive by up to {diff:.2e}: the arithmetic order changed"


# ----------------------------------------------------------------------------- sanitizers

# One small odd shape built with AddressSanitizer + UBSan: a read or write past q/k/v/o (vectors
# of exactly B·H·N·D floats) or past the dynamic shared memory a launch asked for (the model's
# `smem` array beyond it is poisoned by tests/sanitize/smem_guard.h), or undefined behaviour,
# aborts the run. N = 13 with TILE_ROWS = 4, TILE_KV = 8: a last row tile of one row (three idle
# warps) and a last K/V tile of five keys, in the last of two heads (whose over-reads leave the
# arrays rather than land in the next head).
SANITIZE_FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g"]
SANITIZE_ENV = {"ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:abort_on_error=0",
                "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
SANITIZE_CASE = ((32, 4, 8), (1, 2, 13))
SANITIZER_REPORT = ("AddressSanitizer", "runtime error:", "UndefinedBehaviorSanitizer", "LeakSanitizer")


def _sanitizers_work(tmp_path) -> bool:
    probe = tmp_path / "probe.cpp"
    probe.write_text("#include <sanitizer/asan_interface.h>\nint main() { return 0; }\n")
    res = subprocess.run([GXX, *SANITIZE_FLAGS, str(probe), "-o", str(tmp_path / "probe")],
                         capture_output=True, text=True)
    return res.returncode == 0


def test_ladder_kernels_under_sanitizers(tmp_path):
    import os

    if not _sanitizers_work(tmp_path):
        pytest.skip("g++ cannot build with -fsanitize=address,undefined here (libasan/libubsan missing)")
    (D, tr, tk), (B, H, N) = SANITIZE_CASE
    exe = tmp_path / "harness_asan"
    cmd = [GXX, "-std=c++20", "-O1", "-pthread", *SANITIZE_FLAGS, "-include", str(EMU_DIR / "ladder_emu.h"),
           "-include", str(REPO_ROOT / "tests" / "sanitize" / "smem_guard.h"),
           f"-I{KERNELS_DIR}", f"-DEMU_D={D}", f"-DEMU_TR={tr}", f"-DEMU_TK={tk}",
           str(EMU_DIR / "harness.cpp"), "-o", str(exe)]
    res = emu_build.run(cmd)
    assert res.returncode == 0, f"sanitizer build failed:\n{' '.join(cmd)}\n{res.stderr[-4000:]}"
    rng = np.random.default_rng(N * D + tr)
    q, k, v = (rng.standard_normal((B, H, N, D), dtype=np.float32) for _ in range(3))
    for name, a in (("q", q), ("k", k), ("v", v)):
        a.tofile(tmp_path / name)
    res = subprocess.run([str(exe), str(tmp_path), str(B), str(H), str(N)], capture_output=True, text=True,
                         timeout=300, env={**os.environ, **SANITIZE_ENV})
    report = [line for line in res.stderr.splitlines() if any(s in line for s in SANITIZER_REPORT)]
    assert res.returncode == 0 and not report, f"sanitizer report (exit {res.returncode}):\n{res.stderr[-6000:]}"
    ref = attention_fp64(q, k, v)
    for name in KERNELS:
        o = np.fromfile(tmp_path / f"o_{name}", dtype=np.float32).reshape(B, H, N, D)
        assert np.isfinite(o).all() and rel_error(o, ref) < 1e-5, name
