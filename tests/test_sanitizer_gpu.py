"""Every registered attention kernel under compute-sanitizer (memcheck, racecheck, synccheck,
initcheck) on one small odd shape (scripts/sanitize_kernels.py). GPU only; the CPU side is the
emulator's AddressSanitizer build (tests/test_ladder_emu.py) and its ThreadSanitizer build, a race
check of the shared-memory hand-overs (tests/test_emu_race.py)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "sanitize_kernels.py"


def test_sanitizer_summaries_are_read():
    sys.path.insert(0, str(ROOT / "scripts"))
    from sanitize_kernels import summary_errors

    assert summary_errors("========= ERROR SUMMARY: 0 errors\n") == 0
    assert summary_errors("========= ERROR SUMMARY: 3 errors\n") == 3
    assert summary_errors("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n") == 0
    assert summary_errors("========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)\n") == 1
    assert summary_errors("killed") == -1


def test_the_plan_covers_every_registered_kernel():
    from attnlab.attention import KERNELS

    out = subprocess.run([sys.executable, str(SCRIPT), "--list"], capture_output=True, text=True, check=True).stdout
    launched = {line.split("'kernel': '")[1].split("'")[0] for line in out.splitlines()}
    assert launched == set(KERNELS)
    rows = [line for line in out.splitlines() if line.strip()]
    for name, spec in KERNELS.items():
        plain = {r.split("'D': ")[1].split(",")[0] for r in rows if f"'kernel': '{name}'" in r and "'causal': False" in r}
        causal = {r.split("'D': ")[1].split(",")[0] for r in rows if f"'kernel': '{name}'" in r and "'causal': True" in r}
        assert plain, f"{name} is never launched non-causal"
        # every head dim the plan launches is launched causal too, exactly where the kernel supports it
        assert causal == (plain if spec.causal else set()), (name, plain, causal)
        # the tensor-core kernels are also launched at D = 128, whose registry tiles differ
        if spec.min_cc >= 80 and 128 in spec.head_dims:
            assert "128" in plain, name


@pytest.mark.gpu
@pytest.mark.skipif(not (shutil.which("compute-sanitizer") or Path("/usr/local/cuda/bin/compute-sanitizer").exists()),
                    reason="compute-sanitizer not installed")
def test_every_kernel_is_clean_under_compute_sanitizer():
    res = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]


def test_the_delta_plan_covers_every_delta_kernel():
    from attnlab.delta.kernels import DELTA_KERNELS

    out = subprocess.run([sys.executable, str(SCRIPT), "--family", "delta", "--list"], capture_output=True, text=True,
                         check=True).stdout
    steps = {s for line in out.splitlines() for s in line.split("'steps': '")[1].split("'")[0].split()}
    assert steps == {k.step for k in DELTA_KERNELS}


@pytest.mark.gpu
@pytest.mark.skipif(not (shutil.which("compute-sanitizer") or Path("/usr/local/cuda/bin/compute-sanitizer").exists()),
                    reason="compute-sanitizer not installed")
def test_every_delta_kernel_is_clean_under_compute_sanitizer():
    res = subprocess.run([sys.executable, str(SCRIPT), "--family", "delta"], capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]


@pytest.mark.gpu
@pytest.mark.skipif(not (shutil.which("compute-sanitizer") or Path("/usr/local/cuda/bin/compute-sanitizer").exists()),
                    reason="compute-sanitizer not installed")
def test_racecheck_gives_a_verdict_on_every_control():
    """scripts/racecheck_controls.py runs every race-check control under racecheck and says, per form,
    whether racecheck agrees with what the control is (its verdicts are findings, not pass / fail)."""
    script = ROOT / "scripts" / "racecheck_controls.py"
    forms = subprocess.run([sys.executable, str(script), "--list"], capture_output=True, text=True,
                           check=True).stdout.split("\n")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=3600)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    rows = {line.split()[0]: line for line in res.stdout.splitlines() if line.split()}
    for form in (f.split()[0] for f in forms if f):
        assert form in rows and ("agrees" in rows[form] or "racecheck" in rows[form] or "misses" in rows[form]), \
            (form, res.stdout[-3000:])
