"""A race check of the tensor-core kernels (delta 06-24, attention 10a-10i) on the CPU model, under ThreadSanitizer.

The model (tests/ladder_emu/ladder_emu.h, tests/emu_fibers.h) built with ``g++ -fsanitize=thread``
makes every CUDA thread a TSan thread whose switches order nothing; what orders two accesses is only
what the hardware promises and the model releases / acquires: a barrier's arrivals (``bar.sync``,
``bar.arrive``, ``__syncthreads``, ``__syncwarp``; not shuffles, warp MMAs or ldmatrix, which order
no memory) before its waiters' continuation, and an mbarrier phase's arrivals before its waiters.
What an asynchronous unit does (a bulk / tensor copy's bytes, a cp.async's, a wgmma's shared-memory
operands) is done by a TSan thread of its own that starts at the issue and ends before the phase or
the wait that completes it. Any pair of accesses to the same bytes by two threads, one a write, that
these do not order is reported, whichever order the model ran them in: a check of the hand-over
protocol that an output comparison (where the model's deterministic order hides most races) cannot
make. Its limits: blocks (and clusters) run one after another, fully ordered, so races between
blocks are not checked; the async proxy is not modelled (a missing ``fence.proxy.async`` is not
seen); a copy's waiters inherit its issuer's history before the issue, which the hardware does not
promise.

First the controls (tests/delta_emu/race_controls.cuh): each hazard in a correct form, where TSan
must stay quiet, and broken ones, where it must report (the same forms run under compute-sanitizer's
racecheck on a GPU: scripts/racecheck_controls.py); then tests/delta_emu/harness_06.cpp (every
delta kernel 06-24, fp32 and bf16 inputs) at K = 64 with 16-wide value blocks (where compute-
sanitizer's racecheck reported hazards in 19 and 24 on the H200) and at K = 128, on four chunks with
a tail (both operand buffers reused) and an initial state; and the attention family's tensor-core
ladder (tests/ladder_emu/harness_10.cpp) on its AddressSanitizer test's configuration.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from attnlab.delta import random_inputs
from attnlab.static import nvcc_path

import emu_build  # tests/emu_build.py: g++ builds cached by content

ROOT = Path(__file__).resolve().parents[1]
GXX = shutil.which("g++")
TSAN_FLAGS = ["-fsanitize=thread", "-g", "-O1"]
#: halt_on_error: the first report ends the run (its text is what the assertion shows)
TSAN_ENV = {"TSAN_OPTIONS": "halt_on_error=1 exitcode=66 report_signal_unsafe=0"}

pytestmark = pytest.mark.skipif(GXX is None, reason="g++ (C++20) is needed to build the CPU model")


@pytest.fixture(scope="module")
def tsan_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("emu_race")
    probe = out / "probe.cpp"
    probe.write_text("int main() { return 0; }\n")
    res = subprocess.run([GXX, *TSAN_FLAGS, str(probe), "-o", str(out / "probe")], capture_output=True, text=True)
    if res.returncode != 0 or subprocess.run(SETARCH + [str(out / "probe")], capture_output=True).returncode != 0:
        pytest.skip("g++ cannot build or run with -fsanitize=thread here (libtsan missing)")

    def build(source: str, *defines: str) -> Path:
        exe = out / (Path(source).stem + "".join(d.replace("-D", "_").replace("=", "") for d in defines))
        cmd = [GXX, "-std=c++20", *TSAN_FLAGS, "-pthread", "-include", str(ROOT / "tests/ladder_emu/ladder_emu.h"),
               "-I", str(ROOT / "kernels"), *defines, str(ROOT / source), "-o", str(exe)]
        res = emu_build.run(cmd)
        assert res.returncode == 0, f"build failed:\n{' '.join(cmd)}\n{res.stderr[-4000:]}"
        return exe

    return build


def first_report(stderr: str) -> str:
    """The first TSan report, trimmed to its accesses' top frames (what a failure message needs)."""
    start = stderr.find("WARNING: ThreadSanitizer")
    if start < 0:
        return stderr[-3000:]
    lines = stderr[start:].splitlines()
    keep = [ln for ln in lines[:80] if re.match(r"\s*(WARNING|Read|Write|Previous|Location|Thread|#[0-2] )", ln)]
    return "\n".join(keep[:30])


#: GCC 12's TSan runtime can fail at start ("unexpected memory mapping") where the kernel randomises
#: mmap bases with more bits than it expects: run without address randomisation where setarch can
SETARCH = [shutil.which("setarch"), platform.machine(), "-R"] if shutil.which("setarch") else []


def run_tsan(args: list[str], timeout: int, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(SETARCH + args, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **TSAN_ENV, **env})


def control_forms() -> list[tuple[str, bool]]:
    src = (ROOT / "tests/delta_emu/race_controls.cuh").read_text()
    return [(m.group(1), m.group(2) == "true") for m in re.finditer(r'\{"(\w+)", (true|false), ', src)]


def test_every_hazard_has_a_correct_and_a_broken_control():
    forms = control_forms()
    names = [n for n, _ in forms]
    assert len(names) == len(set(names)) >= 8, names
    kinds = [n[:-3] for n, race in forms if n.endswith("_ok") and not race]
    assert len(kinds) >= 6 and not any(n.endswith("_ok") for n, race in forms if race), forms
    for n, race in forms:
        if race:
            assert any(n.startswith(k + "_") for k in kinds), f"{n}: no correct form of its hazard beside it"
    for k in kinds:
        assert any(race and n.startswith(k + "_") for n, race in forms), f"{k}: no broken form"


@pytest.mark.parametrize("form, race", control_forms(), ids=[f for f, _ in control_forms()])
def test_race_check_controls(tsan_build, form, race):
    exe = tsan_build("tests/delta_emu/race_controls.cpp")
    listed = subprocess.run([str(exe), "list"], capture_output=True, text=True).stdout.split()
    assert form in listed, f"{form}: not a form of the built controls"
    res = run_tsan([str(exe), form], timeout=120)
    reported = "WARNING: ThreadSanitizer: data race" in res.stderr
    if race:
        assert reported and res.returncode == 66, (
            f"{form}: a broken hand-over that TSan did not report (rc {res.returncode}): the check is blind\n"
            f"{res.stderr[-2000:]}")
    else:
        assert res.returncode == 0 and "ThreadSanitizer" not in res.stderr, (
            f"{form}: a correct hand-over reported as a race:\n{first_report(res.stderr)}")


#: (K, V, BV, defines): the shape racecheck flagged on the H200 (19 and 24 at K = 64, BV = 16), the target's head size,
#: and the timing build KDA_NO_P2 (19, 20, 22, 24 with no P2 stage: its own hand-overs of the V'^T tile)
RACE_CONFIGS = [(64, 64, 16, ()), (128, 128, 32, ()), (64, 64, 16, ("-DKDA_NO_P2=1",))]


@pytest.mark.parametrize("K, V, BV, defines", RACE_CONFIGS,
                         ids=[f"K{k}V{v}BV{b}" + "".join(d.replace("-D", "-").split("=")[0] for d in ds)
                              for k, v, b, ds in RACE_CONFIGS])
def test_delta_kernels_have_no_unordered_shared_memory_access(tsan_build, tmp_path, K, V, BV, defines):
    exe = tsan_build("tests/delta_emu/harness_06.cpp", f"-DEMU_K={K}", f"-DEMU_V={V}", f"-DEMU_BV={BV}", *defines)
    B, T, H = 1, 100, 1   # four chunks of 32, the last one a tail of 4: both operand buffers reused
    x = random_inputs(B, T, H, K, V, seed=11, initial_state=True)
    for n in ("q", "k", "v", "g", "beta"):
        x[n].astype(np.float32).tofile(tmp_path / n)
    x["initial_state"].astype(np.float32).tofile(tmp_path / "h0")
    res = run_tsan([str(exe), str(tmp_path), str(B), str(T), str(H), str(K ** -0.5), "1"], timeout=1800)
    assert "ThreadSanitizer" not in res.stderr, (
        f"K={K} BV={BV}: an unordered pair of shared-memory accesses (the first report):\n{first_report(res.stderr)}")
    assert res.returncode == 0, res.stderr[-3000:]
    # the run was a real one: 24's output (the last fp32 kernel the harness runs) is there and finite
    o = np.fromfile(tmp_path / "kr_o", np.float32)
    assert o.size == B * T * H * V and np.isfinite(o).all()


def test_flash_ladder_has_no_unordered_shared_memory_access(tsan_build, tmp_path):
    """The attention family's tensor-core ladder (10a-10d, 10f-10i: cp.async pipelines, 10i's copy warps;
    10h's blocks each on their own: the Stream-K fix-up between blocks is outside the check) on the
    configuration its AddressSanitizer test uses, under the race check."""
    from test_emu_10_bf16_ladder import SANITIZE_10, _to16

    (D, bm, bn, w, bf16, causal, st), (B, H, N) = SANITIZE_10
    exe = tsan_build("tests/ladder_emu/harness_10.cpp", f"-DEMU_D={D}", f"-DEMU_BM={bm}", f"-DEMU_BN={bn}",
                     f"-DEMU_WARPS={w}", f"-DEMU_BF16={int(bf16)}", f"-DEMU_CAUSAL={int(causal)}",
                     f"-DEMU_STAGES={st}", "-DEMU_QREG=1", "-DEMU_CW=2")
    rng = np.random.default_rng(78)
    for name in "qkv":
        _to16(rng.standard_normal((B, H, N, D), dtype=np.float32), bf16).tofile(tmp_path / name)
    res = run_tsan([str(exe), str(tmp_path), str(B), str(H), str(N)], timeout=900,
                   EMU_SK_BLOCKS="5", EMU_REVERSE="1", EMU_FILL="101")
    assert "ThreadSanitizer" not in res.stderr, (
        f"an unordered pair of shared-memory accesses (the first report):\n{first_report(res.stderr)}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "stream_k plain=0" in res.stdout, res.stdout   # 10h took its Stream-K path, not the plain grid
    ran = sorted(p.name for p in tmp_path.glob("o_*"))
    assert {"o_copy_warps", "o_stream_k", "o_cp_async"} <= set(ran), ran


def test_gpu_controls_match_the_cpu_ones():
    """race_controls_gpu.cu defines race_<form> for form i of RACE_FORMS, in order, and the GPU script
    lists the same forms."""
    import sys

    kernels = re.findall(r"^RACE_KERNEL\((\d+), (\w+)\)", (ROOT / "tests/delta_emu/race_controls_gpu.cu").read_text(),
                         re.MULTILINE)
    names = [n for n, _ in control_forms()]
    assert [(int(i), n) for i, n in kernels] == list(enumerate(names))
    body = (ROOT / "tests/delta_emu/race_controls.cuh").read_text()
    cases = re.findall(r"case (\d+): race_\w+\(", body)
    assert [int(c) for c in cases] == list(range(len(names)))
    out = subprocess.run([sys.executable, str(ROOT / "scripts/racecheck_controls.py"), "--list"], capture_output=True,
                         text=True, check=True).stdout.split("\n")
    assert [ln.split()[:2] for ln in out if ln] == [[n, "race" if r else "ok"] for n, r in control_forms()]


def test_racecheck_reports_are_read_per_control():
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    from racecheck_controls import reported_kernels

    log = ("========= Error: Race reported between Write access at race_ring_ok+0x5460\n"
           "=========     and Read access at race_ring_ok+0x1710 [4608 hazards]\n"
           "========= Error: Race reported between Read access at void race_bulk_war(float *, const float *)+0x10\n")
    assert reported_kernels(log) == {"race_ring_ok", "race_bulk_war"}
    assert reported_kernels("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)") == set()


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is needed for the static build")
def test_gpu_controls_build_for_the_h200():
    from attnlab.static import static_build

    src = ROOT / "tests/delta_emu/race_controls_gpu.cu"
    for name, _ in control_forms():
        (rep,) = static_build(src, f"race_{name}", ((),), arch="sm_90a")
        assert rep.spill_store_bytes == 0, (name, rep)
