"""The attention launchers' real path on the CPU: registry -> validation -> plan (grid, block, dynamic
shared memory, Stream-K workspace and plain-grid choice, template arguments) -> kernel, with CuPy and
the compiled kernel replaced by CPU stand-ins (tests/delta_emu/fake_device.py: NumPy arrays that say
they are CuPy's; each requested instantiation compiled with g++ against the ladder CPU model and
launched through ctypes, its arguments marshalled from the kernel's own parameter list; every array
the stand-in CuPy makes is followed by a guard the stand-in kernel checks after each launch). Nothing
in these tests restates a grid or a shared-memory size: a launcher that plans too few blocks, too
little shared memory or workspace, or passes an argument of the wrong kind fails here, on a machine
without a GPU.

The Hopper kernels (11, wgmma and TMA) are left out: the model has neither."""

from __future__ import annotations

import shutil
import sys

import numpy as np
import pytest

from attnlab import attention
from attnlab.paths import REPO_ROOT
from attnlab.attention.reference import attention_fp64, rel_error

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ (C++20) builds the CPU model")

#: Every registered kernel the CPU model runs (not the sm_90a ones).
EMULATED = tuple(n for n, s in attention.KERNELS.items() if not s.arch and not s.tma)
#: One small odd shape: B·H = 3, N = 77 (a part-filled last row block and key tile for every tile
#: shape in the registry), D = 64.
B, H, N, D = 1, 3, 77, 64
#: Blocks per SM the stand-in occupancy query answers (the GPU's driver gives it on a real launch):
#: 264 resident slots, so Stream-K kernels at this shape take their persistent grid.
BLOCKS_PER_SM = 2


@pytest.fixture()
def fake_gpu(monkeypatch, tmp_path_factory):
    emu = str(REPO_ROOT / "tests" / "delta_emu")
    sys.path.insert(0, emu)
    try:
        import fake_device
    finally:
        sys.path.remove(emu)
    cp = fake_device.install(monkeypatch, tmp_path_factory.mktemp("attention_launch"))
    import attnlab.occupancy

    monkeypatch.setattr(attnlab.occupancy, "driver_blocks", lambda *a, **k: BLOCKS_PER_SM)
    monkeypatch.setattr(attention.kernels, "_PLANS", {})   # plans hold stand-in kernels: none leaks out
    return cp


def _cases():
    for name in EMULATED:
        for causal in ((False, True) if attention.KERNELS[name].causal else (False,)):
            yield pytest.param(name, causal, id=f"{name}-{'causal' if causal else 'full'}")


@pytest.mark.parametrize("name, causal", list(_cases()))
def test_launcher_runs_the_kernel_on_the_cpu_model(fake_gpu, name, causal):
    cp = fake_gpu
    spec = attention.get_spec(name)
    dt = np.float16 if "float16" in spec.dtypes else np.float32
    rng = np.random.default_rng(7 + len(name) + int(causal))
    q, k, v = (rng.standard_normal((B, H, N, D)).astype(dt) for _ in range(3))
    out = cp.asarray(np.full((B, H, N, D), np.nan, dt))          # poisoned: every element must be written
    launch = attention.prepare_attention(name, cp.asarray(q), cp.asarray(k), cp.asarray(v), out=out, gpu=None,
                                         causal=causal)
    o = np.asarray(launch(), dtype=np.float64)
    assert np.isfinite(o).all(), f"{name}: {np.isnan(o).sum()} outputs never written"
    ref = attention_fp64(*(a.astype(np.float64) for a in (q, k, v)), causal=causal)
    err = rel_error(o, ref)
    assert err < spec.rel_tol, f"{name}: relative error {err:.2e} (registry tolerance {spec.rel_tol:g})"

    # what ran is what the plan says: the kernel object the plan holds (or its plain-grid kernel)
    # was launched with the plan's grid, block and dynamic shared memory
    plan = attention.get_kernel(name, D, gpu=None, dtype=spec.dtypes[0] if dt == np.float32 else "float16",
                                causal=causal)
    ran = [kern for kern in (plan.kernel, plan.plain_kernel) if kern is not None and kern.launches]
    assert len(ran) == 1, f"{name}: expected one of the plan's kernels to run"
    got = ran[0].launches[-1]
    assert got["grid"] == tuple(plan.grid(B * H, N)) + (1,) * (3 - len(plan.grid(B * H, N)))
    assert got["block"][0] == plan.block and got["shared_mem"] == plan.smem_bytes
    if spec.stream_k and not causal:
        persistent = plan.persistent(B * H, N)
        assert (ran[0] is plan.kernel) == persistent
        if persistent:
            assert got["grid"][0] == attention.stream_k_grid(B * H, N, plan.params, plan.slots) < plan.slots


def test_the_studies_timing_loops_run_their_grids_on_the_cpu_model(fake_gpu, monkeypatch):
    """Notebook 04's tile scan and notebook 05's tuned-tile gain, end to end on the CPU model, through
    the one timing loop (timing.time_rows; its sampler replaced by one call of each entry): the kernels
    really run, every grid point gets its row, a tile over the shared-memory limit is recorded as
    skipped, and a tuned tile equal to the default is timed once (gain exactly 1)."""
    from attnlab import ladder, tile_scan, timing

    ran = []

    def once(fn, budget_s, **kw):
        ran.append(fn())
        return timing.summarize([1.0, 1.0, 1.0])

    monkeypatch.setattr(timing, "time_gpu", once)
    scan = ladder.time_tile_scan(["tiled"], [32], 40, [1, 2], [8, 4096], B=1, H=1, budget_s=0.1, seed=0)
    assert list(zip(scan["tile_rows"], scan["tile_kv"])) == [(1, 8), (1, 4096), (2, 8), (2, 4096)]
    timed = scan[scan["skipped"] == ""]
    assert len(timed) == 2 == len(ran) and (scan[scan["skipped"] != ""]["tile_kv"] == 4096).all()
    assert timing.timing_problems(timed).empty and (timed["tflops"] > 0).all()
    ran.clear()
    gain = tile_scan.measure_gain(["tiled"], [40], [32], gpu="none", B=1, H=1, budget_s=0.1, seed=0,
                                  tuned_tiles={("tiled", 32): tuple(int(x) for x in tile_scan.SEED_DEFAULTS[32])})
    assert len(gain) == 1 and len(ran) == 1 and gain["gain"].iloc[0] == 1.0


def test_the_occupancy_scan_and_the_flash_ladder_timing_run_on_the_cpu_model(fake_gpu, monkeypatch):
    """Notebook 05's live scan (compile, driver query, float64 check, timing) and notebook 08-10's
    interleaved ladder timing, end to end on the CPU model through timing.time_rows (the sampler
    replaced by one call of each entry): every configuration and every (kernel, D, N) gets its row,
    the check really compares against float64, the flash rows carry TFLOP/s from the FLOP model."""
    import pandas as pd

    from attnlab import flash, occupancy, tile_scan, timing

    cp = fake_gpu
    monkeypatch.setattr(timing, "time_gpu", lambda fn, budget_s, **kw: (fn(), timing.summarize([2.0] * 3))[1])
    monkeypatch.setattr(timing, "time_gpu_interleaved",
                        lambda fns, budget_s, **kw: {n: (f(), timing.summarize([2.0] * 3))[1] for n, f in fns.items()})
    monkeypatch.setattr(occupancy, "device_arch", lambda: "sm_90")
    monkeypatch.setattr(occupancy, "kernel_resources",
                        lambda kern: {"regs": 32, "static_smem": 0, "local_bytes": 0, "max_dynamic_smem_attr": 49152})
    configs = tile_scan.scan_configs(["tiled"], [32], [1, 2], [8], arch="sm_90")
    per_config, scan = tile_scan.live_scan(configs, [33, 40], B=1, H=1, budget_s=0.1, seed=0)
    assert len(per_config) == 2 and (per_config["skipped"] == "").all()
    assert (per_config["rel_err_fp64"] < attention.get_spec("tiled").rel_tol).all()
    assert sorted(zip(scan["tile_rows"], scan["N"])) == [(1, 33), (1, 40), (2, 33), (2, 40)]
    assert timing.timing_problems(scan).empty and (scan["tflops"] > 0).all()

    # the stand-in device array, given torch's new_empty (flash's inputs are torch tensors)
    monkeypatch.setattr(type(cp.asarray(np.zeros(1))), "new_empty",
                        lambda self, shape: cp.asarray(np.empty(shape, dtype=self.dtype)), raising=False)

    def inputs(B, H, N, D, dtype, *, seed, logit_scale=1.0):
        rng = np.random.default_rng(seed)
        return tuple(cp.asarray(rng.standard_normal((B, H, N, D)).astype(np.float16)) for _ in range(3))

    monkeypatch.setattr(flash, "random_inputs", inputs)
    import attnlab.env

    monkeypatch.setattr(attnlab.env, "device_name", lambda: "Fake GPU")
    name = next(n for n in EMULATED if "float16" in attention.get_spec(n).dtypes and 64 in attention.get_spec(n).head_dims)
    t = flash.time_kernels([name], 1, 1, [48], [64], dtype="float16", references=(), budget_s=0.1)
    assert list(t["kernel"]) == [name] and t["N"].tolist() == [48] and t["D"].tolist() == [64]
    assert t["tflops"].iloc[0] == pytest.approx(t["flops"].iloc[0] / 2e-3 / 1e12)
    assert isinstance(t, pd.DataFrame) and timing.timing_problems(t).empty
