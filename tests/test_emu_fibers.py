"""The CPU execution models' fiber scheduler (tests/emu_fibers.h) on its own: the eager order shows a
race the round-robin order hides, a barrier-correct program reads the same in both orders, a deadlock
aborts with its message, and a thread waiting at a barrier is passed over without being switched to
(what keeps the eager order's restarts from fiber 0 cheap)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import emu_build

GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(GXX is None, reason="g++ (C++20) is needed to build the fiber scheduler")
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def selftest(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("fibers") / "emu_fibers_selftest"
    cmd = [GXX, "-std=c++20", "-O1", f"-I{HERE}", str(HERE / "emu_fibers_selftest.cpp"), "-o", str(exe)]
    res = emu_build.run(cmd)
    assert res.returncode == 0, res.stderr
    return exe


def run(exe: Path, mode: str, order: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "EMU_FIBER_ORDER"}
    if order:
        env["EMU_FIBER_ORDER"] = order
    return subprocess.run([str(exe), mode], capture_output=True, text=True, timeout=60, env=env)


def test_eager_order_shows_a_race_that_round_robin_hides(selftest):
    rr, eager = run(selftest, "race").stdout.strip(), run(selftest, "race", "eager").stdout.strip()
    # eager: warp 0 runs on to the next block barrier before warp 1 starts, so all of it reads the old
    # value; round robin: warp 1 writes while most of warp 0 still waits to be resumed
    assert eager == "1" * 32
    assert rr != eager and set(rr) == {"1", "2"}


def test_a_barrier_between_read_and_write_reads_the_same_in_both_orders(selftest):
    assert run(selftest, "fenced").stdout.strip() == run(selftest, "fenced", "eager").stdout.strip() == "1" * 32


@pytest.mark.parametrize("order", [None, "eager"])
def test_a_barrier_that_can_never_turn_is_a_deadlock(selftest, order):
    res = run(selftest, "deadlock", order)
    assert res.returncode != 0 and "deadlock: 32 of 32 threads wait" in res.stderr


@pytest.mark.parametrize("order", [None, "eager"])
def test_waiting_threads_are_passed_over_not_switched_to(selftest, order):
    # 192 threads, 200 warp barriers each (plus 4 block barriers): a thread resumes once per barrier it
    # passes, so about 192 x 204 switches; switching to every waiting thread at each of the eager order's
    # restarts from fiber 0 took over 100x that
    switches = int(run(selftest, "count", order).stdout)
    assert switches <= 2 * 192 * 204
