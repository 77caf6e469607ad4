#!/usr/bin/env python3
"""GPU smoke test for the roofline / occupancy / Nsight Compute parts (notebooks 05–06).

Run on the GPU machine from the repository root::

    python scripts/smoke_roofline.py            # ~1 minute
    python scripts/smoke_roofline.py --ncu-profile-quick   # also the quick ncu_profile plan

Prints one PASS / WARN / FAIL line per check with its figures and exits non-zero when any check
FAILs. ncu missing or counters not readable is a WARN (notebooks then say "counters not
available"), not a FAIL.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

RESULTS: list[tuple[str, str, str]] = []


def report(status: str, name: str, detail: str) -> None:
    RESULTS.append((status, name, detail))
    print(f"{status:4s} {name}: {detail}", flush=True)


def check(name):
    """Run a check; an exception is a FAIL with its last traceback line."""
    def deco(fn):
        def run(*a, **k):
            t0 = time.time()
            try:
                fn(*a, **k)
            except Exception as exc:  # noqa: BLE001
                tb = traceback.format_exc().strip().splitlines()
                report("FAIL", name, f"{type(exc).__name__}: {exc} [{tb[-3].strip() if len(tb) > 2 else ''}]")
            finally:
                print(f"     ({name} took {time.time() - t0:.1f} s)", flush=True)
        return run
    return deco


# ------------------------------------------------------------------------------------ checks

@check("device")
def check_device():
    from attnlab.roofline import device_facts
    f = device_facts()
    report("PASS", "device", f"{f['name']} {f['arch']} SMs={f['sms']} L2={f['l2_bytes'] / 2**20:.0f} MiB "
                             f"smem opt-in={f['smem_optin']} B")


@check("static build of bench kernels")
def check_static():
    from attnlab.roofline import COPY_SOURCE, FMA_SOURCE
    from attnlab.static import nvcc_path, static_build
    if nvcc_path() is None:
        report("WARN", "static build of bench kernels", "no nvcc on this machine (the CPU test covers it)")
        return
    fma = static_build(FMA_SOURCE, "fma_peak", [()], "sm_90")[0]
    cp_ = static_build(COPY_SOURCE, "copy_f4", [()], "sm_90")[0]
    n = fma.ptx.count("fma.rn.f32")
    ok = n == 128 and not fma.spills and not cp_.spills
    report("PASS" if ok else "FAIL", "static build of bench kernels",
           f"fma_peak regs={fma.registers} fma.rn.f32 in PTX={n} (expect 128); copy_f4 regs={cp_.registers}")


@check("FMA peak")
def check_fma(ds):
    from attnlab.roofline import measure_fma_peak
    r = measure_fma_peak()
    tf = r["value"] / 1e12
    pct = 100 * r["value"] / ds.peak_flops
    status = "PASS" if pct >= 85 else ("WARN" if pct >= 50 else "FAIL")
    report(status, "FMA peak", f"{tf:.2f} TFLOP/s = {pct:.1f} % of datasheet {ds.peak_flops / 1e12:.0f} "
                               f"(median {r['median_ms']:.3f} ms, IQR {r['q1_ms']:.3f}-{r['q3_ms']:.3f}, "
                               f"grid {r['grid']}x{r['block']}, {r['blocks_per_sm']} blocks/SM, regs {r['registers']}, "
                               f"chains {r['chains']} x unroll {r['unroll']} x iters {r['iters']}; target ~95 %)")


@check("copy bandwidth")
def check_copy(ds):
    from attnlab.roofline import measure_copy_bandwidth
    r = measure_copy_bandwidth()
    tb = r["value"] / 1e12
    pct = 100 * r["value"] / ds.bandwidth
    status = "PASS" if pct >= 80 else ("WARN" if pct >= 50 else "FAIL")
    report(status, "copy bandwidth", f"{tb:.3f} TB/s (read+write) = {pct:.1f} % of datasheet "
                                     f"{ds.bandwidth / 1e12:.1f} TB/s (buffer {r['buffer_bytes'] / 2**30:.2f} GiB = "
                                     f"{r['buffer_bytes'] / r['l2_bytes']:.0f}x L2, median {r['median_ms']:.3f} ms, "
                                     f"grid {r['grid']}x{r['block']}, regs {r['registers']}; copy verified; target ~90 %)")


@check("occupancy model vs driver")
def check_occupancy():
    from attnlab.compile import load_kernel
    from attnlab.occupancy import compare_with_driver, device_arch, max_dynamic_smem
    arch = device_arch()
    entries = []
    fma = load_kernel("bench/01_fma_peak.cu", "fma_peak")
    cpy = load_kernel("bench/02_copy.cu", "copy_f4")
    probe = load_kernel("bench/01_fma_peak.cu", "fma_peak_config")
    for t in (32, 64, 96, 128, 256, 512, 1024):
        entries.append(dict(kernel=fma, kernel_name="fma_peak", block_threads=t, dynamic_smem=0))
    entries.append(dict(kernel=cpy, kernel_name="copy_f4", block_threads=256, dynamic_smem=0))
    top = max_dynamic_smem(arch)
    for smem in (1, 1000, 10_000, 48 * 1024, 48 * 1024 + 1, 100_000, top // 2, top - 1, top):
        for t in (128, 1024):
            entries.append(dict(kernel=probe, kernel_name="fma_peak_config", block_threads=t, dynamic_smem=smem))
    # the attention ladder at a few tiles (each may be missing while the ladder is being written)
    skipped, compile_times = [], []
    try:
        from attnlab.attention import get_kernel
        for name in ("tiled", "vec_load", "vec_padded", "double_buffer"):
            for D, tr, kv in ((32, 8, 32), (64, 8, 16), (128, 8, 8), (64, 32, 128), (128, 16, 64), (64, 1, 8)):
                t0 = time.perf_counter()
                try:
                    plan = get_kernel(name, D, tr, kv)
                except Exception as exc:  # noqa: BLE001
                    skipped.append(f"{name} D={D} ({tr},{kv}): {type(exc).__name__}")
                    continue
                compile_times.append(time.perf_counter() - t0)
                entries.append(dict(kernel=plan.kernel, kernel_name=name, D=D, tile_rows=tr, tile_kv=kv,
                                    block_threads=plan.block, dynamic_smem=plan.smem_bytes))
        plan = get_kernel("naive", 64)
        entries.append(dict(kernel=plan.kernel, kernel_name="naive", D=64, block_threads=plan.block,
                            dynamic_smem=plan.smem_bytes))
    except Exception as exc:  # noqa: BLE001
        skipped.append(f"attention launchers: {type(exc).__name__}: {exc}")
    if compile_times:
        per = sum(compile_times) / len(compile_times)
        print(f"     compile (NVRTC via CuPy, cold or disk-cached): {len(compile_times)} tiles, {per:.2f} s each on average "
              f"-> the full 05 scan (180 tiles) would spend ~{180 * per:.0f} s compiling", flush=True)
    df = compare_with_driver(entries, arch)
    bad = df[~df["agree"]]
    detail = (f"{int(df['agree'].sum())}/{len(df)} configurations agree on {arch} "
              f"(limiters seen: {', '.join(sorted(set(df['limiter'])))})")
    if skipped:
        detail += f"; skipped {len(skipped)}: " + "; ".join(skipped[:4])
    report("PASS" if bad.empty else "FAIL", "occupancy model vs driver", detail)
    if not bad.empty:
        print(bad[["kernel", "block_threads", "regs", "static_smem", "dynamic_smem", "driver_blocks",
                   "model_blocks", "limiter"]].to_string(index=False), flush=True)


NCU_METRICS_SMOKE = ("dram__bytes.sum", "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
                     "gpu__time_duration.sum", "lts__t_bytes.sum")
# 1 GiB: the write-back of up to one L2 (60 MiB) of dirty lines may fall after the kernel ends,
# which must stay a small fraction of the bytes counted
SMOKE_COPY_BYTES = 2**30
SMOKE_FMA = dict(grid=264, block=256, iters=64)


def ncu_target() -> int:
    """Launched under ncu: fma_peak once, copy_f4 once (compile is not a launch)."""
    import numpy as np
    import cupy as cp
    from attnlab.compile import load_kernel
    fma = load_kernel("bench/01_fma_peak.cu", "fma_peak")
    out = cp.empty(SMOKE_FMA["grid"] * SMOKE_FMA["block"], dtype=cp.float32)
    fma((SMOKE_FMA["grid"],), (SMOKE_FMA["block"],), (out, np.float32(0.999), np.float32(1e-3),
                                                       np.int32(SMOKE_FMA["iters"])))
    n4 = SMOKE_COPY_BYTES // 16
    src = cp.ones((n4, 4), dtype=cp.float32)
    dst = cp.empty_like(src)
    cpy = load_kernel("bench/02_copy.cu", "copy_f4")
    cpy((132 * 8,), (256,), (src, dst, np.int64(n4)))
    cp.cuda.Device().synchronize()
    return 0


@check("ncu")
def check_ncu():
    from attnlab import ncu
    exe = ncu.ncu_path()
    if exe is None:
        report("WARN", "ncu", "ncu not found: notebook 06 will say 'counters not available'")
        return
    report("PASS", "ncu --version", ncu.ncu_version(exe) or "unknown")
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "ncu.csv"
        cmd = ncu.build_command([sys.executable, str(Path(__file__).resolve()), "--ncu-target"], ncu=exe,
                                metrics=NCU_METRICS_SMOKE, kernel_regex="^(fma_peak|copy_f4)$", launch_count=2,
                                log_file=log)
        env = dict(os.environ, PYTHONPATH=str(ROOT / "lib"), LC_ALL="C")
        t0 = time.time()
        res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        text = log.read_text() if log.is_file() else ""
        if '"ID"' not in text and '"ID"' in res.stdout:
            text = res.stdout
        print(f"     ncu run: {time.time() - t0:.1f} s, status {res.returncode}", flush=True)
        try:
            tidy = ncu.parse_raw_csv(text)
        except ncu.NcuUnavailable:
            why = ncu.diagnose(text + res.stdout + res.stderr, res.returncode) or "no CSV"
            report("WARN", "ncu counters", f"counters not available: {why}")
            print((text + res.stdout + res.stderr)[-1500:], flush=True)
            return
    w = ncu.wide(tidy).set_index("function")
    print(w.to_string(), flush=True)
    problems = []
    if "copy_f4" in w.index and "dram__bytes.sum" in w.columns:
        dram = float(w.loc["copy_f4", "dram__bytes.sum"])
        ratio = dram / (2 * SMOKE_COPY_BYTES)
        print(f"     copy_f4: DRAM bytes {dram:.4g} = {ratio:.3f} x (read + write)", flush=True)
        if not 0.9 <= ratio <= 1.15:
            problems.append(f"copy DRAM bytes {ratio:.3f}x of expected")
    else:
        problems.append("copy_f4 or dram__bytes.sum missing")
    if "fma_peak" in w.index:
        ffma = float(w.loc["fma_peak", "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"])
        expect = SMOKE_FMA["grid"] * SMOKE_FMA["block"] * SMOKE_FMA["iters"] * 128
        print(f"     fma_peak: FFMA (thread) {ffma:.6g}, expected {expect:.6g} ({ffma / expect:.4f}x)", flush=True)
        if not 0.99 <= ffma / expect <= 1.02:
            problems.append(f"FFMA count {ffma / expect:.4f}x of expected")
    else:
        problems.append("fma_peak missing")
    report("FAIL" if problems else "PASS", "ncu counters on bench kernels",
           "; ".join(problems) if problems else "DRAM bytes of copy and FFMA count of fma_peak as modelled")


@check("ncu_profile quick")
def check_ncu_profile_quick():
    res = subprocess.run([sys.executable, "scripts/ncu_profile.py", "--profile", "quick", "--keep-raw",
                          "/tmp/attnlab_ncu_quick_raw.csv"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    print(res.stdout[-6000:], res.stderr[-3000:], flush=True)
    if res.returncode != 0:
        report("FAIL", "ncu_profile quick", f"exit status {res.returncode}")
    elif "counters not available" in res.stdout:
        report("WARN", "ncu_profile quick", "counters not available (see above)")
    else:
        report("PASS", "ncu_profile quick", "table written under data/results/<gpu>/quick/")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ncu-target", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ncu-profile-quick", action="store_true", help="also run scripts/ncu_profile.py --profile quick")
    args = p.parse_args()
    if args.ncu_target:
        return ncu_target()
    from attnlab.env import cuda_usable
    if not cuda_usable():
        report("FAIL", "device", "no usable CUDA device (CuPy)")
        return 1
    from attnlab.roofline import datasheet_ceilings, device_facts
    name = device_facts()["name"]
    try:
        ds = datasheet_ceilings("H200" if "H200" in name else name)
    except KeyError:
        ds = datasheet_ceilings("H200")
        report("WARN", "datasheet", f"{name} not in gpu_specs.csv; comparing with the H200's figures")
    t0 = time.time()
    check_device()
    check_static()
    check_fma(ds)
    check_copy(ds)
    check_occupancy()
    check_ncu()
    if args.ncu_profile_quick:
        check_ncu_profile_quick()
    fails = [r for r in RESULTS if r[0] == "FAIL"]
    warns = [r for r in RESULTS if r[0] == "WARN"]
    print(f"\nsmoke_roofline: {len(RESULTS) - len(fails) - len(warns)} PASS, {len(warns)} WARN, {len(fails)} FAIL "
          f"in {time.time() - t0:.0f} s", flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
