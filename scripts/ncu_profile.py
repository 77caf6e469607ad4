#!/usr/bin/env python3
"""Record Nsight Compute counters for notebook 06 (``data/results/<gpu>/06_roofline__ncu.csv``) or
for a flash notebook, 08/09/10 (``data/results/<gpu>/<notebook>__ncu.csv``).

Usage (on the GPU machine, from the repository root)::

    python scripts/ncu_profile.py                 # notebook 06: full plan, writes the canonical table
    python scripts/ncu_profile.py --profile quick # a subset, written under data/results/<gpu>/quick/
    python scripts/ncu_profile.py --dry-run       # print the plan and the ncu command, run nothing
    python scripts/ncu_profile.py --notebook 10_flash_bf16 [--profile full|quick] [--timeout S] [--dry-run]

This is the driver: it runs ``ncu`` as a subprocess over a worker mode of itself
(``--worker``), which launches every kernel of the plan exactly once inside a
``cudaProfilerStart/Stop`` window (compilation and a warm-up launch happen outside, so ncu sees
only the launch of interest), followed by a one-thread marker kernel in its own window. The
driver then splits ncu's CSV at the markers, labels each group with the worker's manifest and
records the tidy table with provenance.

``--notebook`` takes a flash notebook (FLASH_NOTEBOOKS): its plan comes from the kernel registry
(each of the notebook's kernels at its registry parameters and its SDPA references, B=2, H=8,
N=4096, D in 64 and 128; notebook 10 also causal for its last step and its references), its
counters are ``attnlab.ncu.flash_metrics()`` (duration, tensor/FMA pipes, issue slots, occupancy,
shared-memory bank conflicts, stall reasons). A metric this ncu or GPU does not know is dropped
and the run repeated once without it (said on the output).

If ncu is missing, or cannot read the counters (ERR_NVGPUCTRPERM, no device ...), nothing is
written: the script says why and exits 0, and the notebook shows "counters not available".
A plan/capture mismatch (a bug) exits 1 and also writes nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

from attnlab import ncu, roofline  # noqa: E402

NOTEBOOK, TABLE = "06_roofline", "ncu"


def say(msg: str) -> None:
    print(f"[ncu_profile] {msg}", flush=True)


# ------------------------------------------------------------------------------------ worker

class _ProfilerWindow:
    """cudaProfilerStart/Stop around one call (ncu --profile-from-start off profiles only inside)."""

    def __init__(self):
        import cupy as cp
        rt = cp.cuda.runtime
        if hasattr(rt, "profilerStart"):
            self.start, self.stop = rt.profilerStart, rt.profilerStop
        else:  # older CuPy
            from cupy.cuda import profiler
            self.start, self.stop = profiler.start, profiler.stop

    def __call__(self, fn):
        import cupy as cp
        cp.cuda.Device().synchronize()
        self.start()
        try:
            fn()
            cp.cuda.Device().synchronize()
        finally:
            self.stop()



def live_mode_for(exe: str | None):
    """The live mode when ncu exists and a CUDA device is usable; else None, after saying why."""
    if exe is None:
        say("counters not available: ncu (Nsight Compute CLI) not found on PATH or under CUDA_HOME; "
            "nothing written")
        return None
    say(f"using {exe} ({ncu.ncu_version(exe) or 'version unknown'})")
    try:
        from attnlab.env import resolve_mode
        return resolve_mode("live")
    except Exception as exc:  # noqa: BLE001
        say(f"counters not available: no usable CUDA device ({exc}); nothing written")
        return None

def worker(plan_path: Path, manifest_path: Path, seed: int) -> int:
    import numpy as np
    import cupy as cp

    from attnlab.attention import get_kernel, run_attention
    from attnlab.compile import load_kernel

    plan = json.loads(plan_path.read_text())
    window = _ProfilerWindow()
    marker = load_kernel(ncu.MARKER_SOURCE, ncu.MARKER_FUNCTION)
    marker_buf = cp.zeros(2, dtype=cp.int32)
    marker((1,), (1,), (marker_buf,))            # compile + first launch outside any window
    rng = np.random.default_rng(seed)
    manifest = []
    for entry in plan:
        e = dict(entry)
        B, H, N, D = e["B"], e["H"], e["N"], e["D"]
        try:
            q, k, v = (cp.asarray(rng.standard_normal((B, H, N, D), dtype=np.float32)) for _ in range(3))
            if e["kernel"] == ncu.SDPA_LABEL:
                import torch
                import torch.nn.functional as F
                qt, kt, vt = (torch.from_dlpack(a) for a in (q, k, v))
                call = lambda: F.scaled_dot_product_attention(qt, kt, vt)  # noqa: E731
                e["tile_rows"] = e["tile_kv"] = None
            else:
                plan_k = get_kernel(e["kernel"], D)          # default tiles (seed's), compiled now
                out = cp.empty_like(q)
                call = lambda: run_attention(e["kernel"], q, k, v, out=out, gpu=None)  # noqa: E731
                e["tile_rows"] = plan_k.tile_rows if plan_k.spec.tiled else None
                e["tile_kv"] = plan_k.tile_kv if plan_k.spec.tiled else None
            call()                                           # warm-up, outside the window
            cp.cuda.Device().synchronize()
        except Exception as exc:  # noqa: BLE001 - a missing kernel must not sink the whole run
            e["status"] = f"skipped: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            manifest.append(e)
            print(f"[worker] skip {e['kernel']} N={N} D={D}: {e['status']}", file=sys.stderr, flush=True)
            continue
        window(call)
        window(lambda: marker((1,), (1,), (marker_buf,)))
        e["status"] = "launched"
        manifest.append(e)
        del q, k, v
    manifest_path.write_text(json.dumps(manifest, indent=1))
    return 0


# ------------------------------------------------------------------------ flash notebooks

#: The flash notebooks and what each profiles: its kernels (a tuple of registry names, or a step
#: prefix: every kernel whose step starts with it), its SDPA references and which of its kernels
#: also run causal ("last": the last step; the references then run causal too, so a causal
#: figure always has its reference beside it).
FLASH_NOTEBOOKS = {
    "08_register_tiling": dict(kernels=("vec_padded", "register_tiled"), references=("sdpa",), causal=()),
    "09_tf32_tensor_cores": dict(kernels=("tf32", "3xtf32"), references=("sdpa",), causal=()),
    "10_flash_bf16": dict(kernels="10", references=("sdpa_flash", "sdpa_cudnn"), causal="last"),
    "11_hopper_wgmma": dict(kernels="11", references=("sdpa_flash", "sdpa_cudnn"), causal="last"),
}
FLASH_B, FLASH_H, FLASH_N, FLASH_D = 2, 8, 4096, (64, 128)

#: The delta notebooks and what each profiles (a function giving (label, step, how to launch)) at B=2,
#: H=16, K=V=128, T=4096 (quick: the same; the calls are few). "impl" is attnlab.delta.kernels.
#: prepare_tc's (or "chunk" for the three-kernel form), "stages" the launches of that plan to profile
#: together, "io" "bf16" for the bf16-I/O path (torch bfloat16 inputs).
def _delta_13_plan() -> tuple:
    """Notebook 13's launches: the three-kernel form's state pass, then every tensor-core impl of
    attnlab.delta.fast.TC_IMPLS (06 whole; of each two-kernel impl its recurrence, and 07 once), and
    the bf16-I/O paths (attnlab.delta.fast.BF16_IO_IMPLS); 07 with its A2 output at fp32 and bf16 I/O,
    and the recurrences that run on bf16 inputs only (17); 21 and 22 on fp32 inputs (FP32_IMAGE_IMPLS). Derived
    from the registry and TC_IMPLS, so a new delta step is profiled without an edit here."""
    from attnlab.delta import fast, kernels as dk

    role = {k.step: k.role for k in dk.DELTA_KERNELS}
    plan = [("05 state pass (3xTF32)", "05", dict(impl="chunk", stages=(3,)))]
    for label, impl, steps in fast.TC_IMPLS:
        if len(steps) == 1:
            plan.append((f"{steps[0]} {label.split(' ', 1)[-1]}", steps[0], dict(impl=impl, stages=(1,))))
            continue
        if not any(p[1] == steps[0] for p in plan):
            plan.append((f"{steps[0]} prep", steps[0], dict(impl=impl, stages=(1,))))
        name = f"{steps[1]} {role[steps[1]]}" + (f" ({label.split(' ', 1)[1]})" if " " in label else "")
        plan.append((name, steps[1], dict(impl=impl, stages=(2,))))
        if impl in {x[1] for x in fast.BF16_IO_IMPLS}:
            plan.append((f"{steps[1]} {role[steps[1]]}, bf16 I/O", steps[1], dict(impl=impl, stages=(2,), io="bf16")))
    # 07 in the form 13-17 read (its A2 output), fp32 and bf16 inputs; the bf16-only recurrences (17)
    a2 = next(x[1] for x in fast.BF16_IO_IMPLS if x[1] in dk.PREP_A2_IMPLS)
    plan.append(("07 prep, A2 (13-17)", "07", dict(impl=a2, stages=(1,))))
    plan.append(("07 prep, A2 (13-17), bf16 I/O", "07", dict(impl=a2, stages=(1,), io="bf16")))
    for label, impl, steps in fast.BF16_IO_IMPLS:   # and 22 on bf16 inputs (its fp32 form is beside the ladder)
        if impl in dk.BF16_ONLY_IMPLS or impl in dk.PRE_IMPLS:
            plan.append((f"{steps[1]} {role[steps[1]]} ({label})", steps[1], dict(impl=impl, stages=(2,), io="bf16")))
    for label, impl, steps in fast.FP32_IMAGE_IMPLS:   # 21 -> 22 on fp32 inputs, beside the ladder: each kernel
        for st, step in zip((1, 2), steps):          # (22 at fp32: the chain with no element-wise work at all)
            plan.append((f"{step} {role[step]} ({label}, fp32)", step, dict(impl=impl, stages=(st,))))
    return tuple(plan)


DELTA_NOTEBOOKS = {"13_fast_delta": _delta_13_plan}
DELTA_B, DELTA_H, DELTA_T, DELTA_K = 2, 16, 4096, 128


def build_delta_plan(notebook: str, profile: str = "full") -> list[dict]:
    """What the worker launches for a delta notebook, once each, labelled like a flash plan
    (N is the sequence length T, D the head size K = V)."""
    if profile not in ("full", "quick"):
        raise ValueError(f"profile must be 'full' or 'quick', got {profile!r}")
    plan = []
    for label, step, how in DELTA_NOTEBOOKS[notebook]():
        plan.append(dict(kernel=label, step=step, dtype=how.get("io", "fp32"), causal=False, B=DELTA_B, H=DELTA_H, N=DELTA_T,
                         D=DELTA_K, params="C=32,BV=32", purpose="kernel", param_values=None,
                         delta=dict(how, stages=list(how["stages"]))))
    return plan


def plan_for(notebook: str, profile: str, gpu: str | None = None) -> list[dict]:
    return build_delta_plan(notebook, profile) if notebook in DELTA_NOTEBOOKS else \
        build_flash_plan(notebook, profile, gpu=gpu)


def flash_kernels(notebook: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(kernels in step order, SDPA references, kernels also profiled causal) of a flash notebook."""
    from attnlab.attention import get_spec, kernels_of_step

    if notebook not in FLASH_NOTEBOOKS:
        raise ValueError(f"no flash ncu plan for notebook {notebook!r}; known: {', '.join(FLASH_NOTEBOOKS)}")
    cfg = FLASH_NOTEBOOKS[notebook]
    kernels = kernels_of_step(cfg["kernels"]) if isinstance(cfg["kernels"], str) else tuple(cfg["kernels"])
    kernels = tuple(sorted(kernels, key=lambda k: get_spec(k).step))
    causal = (kernels[-1],) if cfg["causal"] == "last" else tuple(cfg["causal"])
    return kernels, tuple(cfg["references"]), causal


def build_flash_plan(notebook: str, profile: str = "full", *, B: int = FLASH_B, H: int = FLASH_H,
                     N: int = FLASH_N, D_list=FLASH_D, gpu: str | None = None, params=None) -> list[dict]:
    """What the worker launches for a flash notebook, once each, in order: for each D, the
    notebook's kernels (step order) then its SDPA references, non-causal; then the causal ones.

    Every entry carries its label (ncu.FLASH_LABEL_COLUMNS): ``params`` is the template parameters
    as the latency tables write them ("BM=128,BN=64,..."; ``library`` for SDPA) and
    ``param_values`` the same as a dict, which the worker launches with. Flash kernels take the
    registry's per-D defaults (``params`` = {kernel: {name: value}} overrides); ladder kernels
    (vec_padded) take ``gpu``'s tuned tiles, as the notebooks' timing does, else the seed's.
    ``quick`` profiles D=64 only. The dtype is the notebook's kernels' first (fp32 for 08/09, bf16 for 10).
    """
    from attnlab.attention import get_spec, resolve_params

    if profile not in ("full", "quick"):
        raise ValueError(f"profile must be 'full' or 'quick', got {profile!r}")
    kernels, refs, causal_kernels = flash_kernels(notebook)
    dtype = get_spec(kernels[-1]).dtypes[0]
    ds = tuple(D_list)[:1] if profile == "quick" else tuple(D_list)
    plan = []
    for causal in (False, True):
        for D in ds:
            base = dict(dtype=dtype, causal=causal, B=B, H=H, N=N, D=D)
            for k in kernels:
                spec = get_spec(k)
                if causal and k not in causal_kernels:
                    continue
                if D not in spec.head_dims or dtype not in spec.dtypes or (causal and not spec.causal):
                    continue
                p, _ = resolve_params(k, D, (params or {}).get(k), gpu)
                plan.append(dict(kernel=k, step=spec.step, **base, params=",".join(f"{a}={b}" for a, b in p.items()),
                                 purpose="kernel", param_values=p))
            if causal and not causal_kernels:
                continue
            for ref in refs:
                plan.append(dict(kernel=ref, step="", **base, params="library", purpose="reference",
                                 param_values=None))
    return plan


def _delta_call(e: dict, seed: int):
    """A delta plan entry's launch: the plan's stages of prepare_tc / prepare_chunk on seeded inputs."""
    from attnlab.delta import bench as db
    from attnlab.delta import kernels as dk

    how = e["delta"]
    _, d = db.device_inputs(e["B"], e["N"], e["H"], e["D"], e["D"], seed=seed + e["N"])
    if how["impl"] == "chunk":
        plan = dk.prepare_chunk(**d, check_gate=False)
    else:
        if how.get("io") == "bf16":     # the bf16-I/O instantiation: torch bfloat16 q, k, v, g, beta
            from attnlab.delta.fast import bf16_inputs

            d = bf16_inputs(d)
        plan = dk.prepare_tc(**d, check_gate=False, impl=how["impl"])
        plan.overlap = False   # 21 -> 22 one after the other: Nsight Compute may run one kernel at a time
    plan.run()                                               # every stage once: 09 reads 07's output
    stages = tuple(how["stages"])
    return lambda: plan.run(stages=stages)


def flash_worker(plan_path: Path, manifest_path: Path, seed: int) -> int:
    """The worker for a flash plan: torch inputs of the entry's dtype (attnlab.flash.random_inputs,
    seeded per (N, D) as the latency tables are), the registry launcher or torch SDPA with the
    named backend, each call once in its own profiling window followed by the marker."""
    import cupy as cp
    import torch

    from attnlab import flash
    from attnlab.attention import prepare_attention
    from attnlab.compile import load_kernel

    plan = json.loads(plan_path.read_text())
    window = _ProfilerWindow()
    marker = load_kernel(ncu.MARKER_SOURCE, ncu.MARKER_FUNCTION)
    marker_buf = cp.zeros(2, dtype=cp.int32)
    marker((1,), (1,), (marker_buf,))            # compile + first launch outside any window
    manifest = []
    for entry in plan:
        e = dict(entry)
        B, H, N, D = e["B"], e["H"], e["N"], e["D"]
        try:
            if e.get("delta"):
                call = _delta_call(e, seed)
                call()                                       # compile + warm-up, outside the window
                cp.cuda.Device().synchronize()
                window(call)
                window(lambda: marker((1,), (1,), (marker_buf,)))
                e["status"] = "launched"
                manifest.append(e)
                continue
            q, k, v = flash.random_inputs(B, H, N, D, e["dtype"], seed=seed + 17 * N + D)
            if e["purpose"] == "reference":
                if not flash.sdpa_available(e["kernel"], q, k, v, e["causal"]):   # also the warm-up
                    raise RuntimeError(f"torch SDPA backend {e['kernel']} refused these inputs")
                call = flash.sdpa_call(e["kernel"], q, k, v, e["causal"])
            else:
                out = torch.empty_like(q)
                call = prepare_attention(e["kernel"], q, k, v, out=out, causal=e["causal"],
                                         params=e["param_values"], gpu=None)
            call()                                           # warm-up, outside the window
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - a missing kernel or backend must not sink the whole run
            e["status"] = f"skipped: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
            manifest.append(e)
            print(f"[worker] skip {e['kernel']} N={N} D={D} causal={e['causal']}: {e['status']}",
                  file=sys.stderr, flush=True)
            continue
        window(call)
        window(lambda: marker((1,), (1,), (marker_buf,)))
        e["status"] = "launched"
        manifest.append(e)
        del q, k, v, call
    manifest_path.write_text(json.dumps(manifest, indent=1))
    return 0


# ------------------------------------------------------------------------------------ driver

def driver(args) -> int:
    plan = roofline.ncu_plan(args.profile)
    exe = ncu.ncu_path()
    if args.dry_run:
        say(f"plan: {len(plan)} calls")
        for e in plan:
            say(f"  {e['kernel']:14s} N={e['N']:6d} D={e['D']:4d} ({e['purpose']})")
        cmd = ncu.build_command([sys.executable, __file__, "--worker", "--plan", "PLAN", "--manifest", "MANIFEST"],
                                ncu=exe or "ncu", profile_from_start=False, log_file="LOG")
        say("command: " + " ".join(cmd))
        return 0
    mode = live_mode_for(exe)
    if mode is None:
        return 0

    with tempfile.TemporaryDirectory(prefix="attnlab-ncu-") as tmp:
        tmp = Path(tmp)
        plan_path, manifest_path, log_path = tmp / "plan.json", tmp / "manifest.json", tmp / "ncu.csv"
        plan_path.write_text(json.dumps(plan))
        target = [sys.executable, str(Path(__file__).resolve()), "--worker", "--plan", str(plan_path),
                  "--manifest", str(manifest_path), "--seed", str(args.seed)]
        cmd = ncu.build_command(target, ncu=exe, profile_from_start=False, log_file=log_path)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "lib"), os.environ.get("PYTHONPATH", "")]),
                   LC_ALL="C")
        say(f"profiling {len(plan)} calls (timeout {args.timeout} s) ...")
        t0 = time.time()
        try:
            res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            say(f"counters not available: ncu did not finish within {args.timeout} s; nothing written")
            return 0
        say(f"ncu finished in {time.time() - t0:.0f} s with status {res.returncode}")
        text = log_path.read_text() if log_path.is_file() else ""
        if '"ID"' not in text and '"ID"' in res.stdout:
            text = res.stdout          # an ncu that ignored --log-file for the CSV
        if args.keep_raw:
            Path(args.keep_raw).write_text(text)
            say(f"raw ncu output kept in {args.keep_raw}")
        if res.stderr.strip():
            sys.stderr.write(res.stderr[-4000:])
        try:
            tidy = ncu.parse_raw_csv(text)
        except ncu.NcuUnavailable as exc:
            reason = ncu.diagnose(text + res.stdout + res.stderr, res.returncode) or str(exc)
            say(f"counters not available: {reason}; nothing written")
            return 0
        if not manifest_path.is_file():
            say(f"counters not available: the worker wrote no manifest (status {res.returncode}); nothing written")
            return 0
        manifest = json.loads(manifest_path.read_text())
    for e in manifest:
        if e.get("status") != "launched":
            say(f"  not profiled: {e['kernel']} N={e['N']} D={e['D']}: {e['status']}")
    missing = [m for m in ncu.METRICS if m not in set(tidy["metric"])]
    if missing:
        say(f"warning: ncu returned no column for {', '.join(missing)}")
    try:
        long = ncu.assemble(tidy, manifest)
    except ValueError as exc:
        say(f"ERROR: {exc}; nothing written")
        return 1
    if long["value"].notna().sum() == 0:
        say("counters not available: every counter came back empty; nothing written")
        return 0

    from attnlab.results import save_table
    path = save_table(long, NOTEBOOK, TABLE, mode, profile=args.profile)
    say(f"wrote {path.relative_to(ROOT)}: {long[['kernel', 'N', 'D']].drop_duplicates().shape[0]} calls x "
        f"{long['metric'].nunique()} metrics")
    w = ncu.counters_wide(long)
    cols = [c for c in ("kernel", "N", "D", "dram__bytes.sum", "lts__t_bytes.sum", "lts__t_sector_hit_rate.pct",
                        "gpu__time_duration.sum") if c in w.columns]
    print(w[cols].to_string(index=False), flush=True)
    return 0


def _describe(e: dict) -> str:
    return (f"{e['kernel']:18s} {e['step'] or '-':4s} {e['dtype']:9s} D={e['D']:4d} N={e['N']:5d} "
            f"causal={str(e['causal']):5s} {e['params']}")


def _compute_capability() -> str | None:
    try:
        import cupy as cp
        return str(cp.cuda.Device().compute_capability)
    except Exception:  # noqa: BLE001
        return None


def _run_ncu_once(exe: str, plan: list[dict], metrics, notebook: str, seed: int, timeout: int, keep_raw):
    """One ncu run over the flash worker: (tidy table, manifest, None) or (None, None, reason)
    or (None, None, ['unknown', metric, ...]) when ncu refused some metric names."""
    with tempfile.TemporaryDirectory(prefix="attnlab-ncu-") as tmp:
        tmp = Path(tmp)
        plan_path, manifest_path, log_path = tmp / "plan.json", tmp / "manifest.json", tmp / "ncu.csv"
        plan_path.write_text(json.dumps(plan))
        target = [sys.executable, str(Path(__file__).resolve()), "--worker", "--notebook", notebook,
                  "--plan", str(plan_path), "--manifest", str(manifest_path), "--seed", str(seed)]
        cmd = ncu.build_command(target, metrics=metrics, ncu=exe, profile_from_start=False, log_file=log_path)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "lib"), os.environ.get("PYTHONPATH", "")]),
                   LC_ALL="C")
        say(f"profiling {len(plan)} calls x {len(metrics)} metrics (timeout {timeout} s) ...")
        t0 = time.time()
        try:
            res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, None, f"ncu did not finish within {timeout} s"
        say(f"ncu finished in {time.time() - t0:.0f} s with status {res.returncode}")
        text = log_path.read_text() if log_path.is_file() else ""
        if '"ID"' not in text and '"ID"' in res.stdout:
            text = res.stdout          # an ncu that ignored --log-file for the CSV
        if keep_raw:
            Path(keep_raw).write_text(text)
            say(f"raw ncu output kept in {keep_raw}")
        if res.stderr.strip():
            sys.stderr.write(res.stderr[-4000:])
        everything = text + res.stdout + res.stderr
        refused = ncu.unknown_metrics(everything, metrics)
        if refused:
            return None, None, ["unknown", *refused]
        try:
            tidy = ncu.parse_raw_csv(text)
        except ncu.NcuUnavailable as exc:
            return None, None, ncu.diagnose(everything, res.returncode) or str(exc)
        if not manifest_path.is_file():
            return None, None, f"the worker wrote no manifest (status {res.returncode})"
        return tidy, json.loads(manifest_path.read_text()), None


def flash_driver(args) -> int:
    notebook = args.notebook
    exe = ncu.ncu_path()
    if args.dry_run:
        plan = plan_for(notebook, args.profile)
        metrics = ncu.flash_metrics("90")
        from attnlab.results import table_path
        where = table_path(notebook, ncu.FLASH_TABLE, "<gpu>", args.profile)
        where = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
        say(f"plan for {notebook} ({args.profile}): {len(plan)} calls, B={plan[0]['B']} H={plan[0]['H']}")
        if any("tile_rows" in (e["param_values"] or {}) for e in plan):
            say("  (ladder tiles shown are the seed's; a run takes the GPU's tuned tiles, as the notebooks do)")
        for e in plan:
            say("  " + _describe(e))
        say(f"metrics ({len(metrics)}; the gmma stall only on a 9.x GPU):")
        for m in metrics:
            say(f"  {m}")
        say(f"table: {where}")
        cmd = ncu.build_command([sys.executable, __file__, "--worker", "--notebook", notebook, "--plan", "PLAN",
                                 "--manifest", "MANIFEST"], metrics=metrics, ncu=exe or "ncu",
                                profile_from_start=False, log_file="LOG")
        say("command: " + " ".join(cmd))
        return 0
    mode = live_mode_for(exe)
    if mode is None:
        return 0
    plan = plan_for(notebook, args.profile, gpu=mode.gpu)
    metrics = list(ncu.flash_metrics(_compute_capability()))
    deadline = time.time() + args.timeout          # --timeout bounds the whole run, retries included
    for attempt in range(3):
        left = int(deadline - time.time())
        if left < 1:
            problem = f"ncu did not finish within {args.timeout} s"
            break
        tidy, manifest, problem = _run_ncu_once(exe, plan, metrics, notebook, args.seed, left, args.keep_raw)
        if isinstance(problem, list):
            refused = problem[1:]
            metrics = [m for m in metrics if m not in refused]
            say(f"ncu does not know {', '.join(refused)}: running again without "
                f"{'it' if len(refused) == 1 else 'them'}")
            if attempt < 2 and metrics:
                continue
            problem = "ncu refused the metric names"
        break
    if problem:
        say(f"counters not available: {problem}; nothing written")
        return 0
    for e in manifest:
        if e.get("status") != "launched":
            say(f"  not profiled: {e['kernel']} D={e['D']} causal={e['causal']}: {e['status']}")
    missing = [m for m in metrics if m not in set(tidy["metric"])]
    if missing:
        say(f"warning: ncu returned no column for {', '.join(missing)}")
    try:
        long = ncu.assemble(tidy, manifest, label_columns=ncu.FLASH_LABEL_COLUMNS)
    except ValueError as exc:
        say(f"ERROR: {exc}; nothing written")
        return 1
    long = ncu.keep_metrics(long, metrics)
    if long.empty or long["value"].notna().sum() == 0:
        say("counters not available: every counter came back empty; nothing written")
        return 0

    from attnlab.results import save_table
    path = save_table(long, notebook, ncu.FLASH_TABLE, mode, profile=args.profile)
    summary = ncu.flash_summary(long)
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    say(f"wrote {shown}: {len(summary)} calls x {long['metric'].nunique()} metrics")
    cols = ["kernel", "D", "causal", "n_kernels", "duration_us", "tensor_pipe_pct", "fma_pipe_pct", "issue_pct",
            "occupancy_pct", "smem_ld_conflicts_per_wavefront", "ldsm_conflicts_per_wavefront", "stall_1",
            "stall_1_share", "stall_2", "stall_2_share"]
    print(summary[cols].to_string(index=False, float_format=lambda x: f"{x:.3g}"), flush=True)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--notebook", choices=(NOTEBOOK, *FLASH_NOTEBOOKS, *DELTA_NOTEBOOKS), default=NOTEBOOK,
                   help=f"whose counters to record (default {NOTEBOOK}: the ladder kernels' roofline counters)")
    p.add_argument("--profile", default="full", choices=("full", "quick"))
    p.add_argument("--timeout", type=int, default=420, help="seconds allowed for the whole ncu run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--keep-raw", metavar="PATH", help="also save ncu's raw CSV output here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--plan", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--manifest", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.timeout < 1:
        p.error("--timeout must be at least 1 second")
    flash_nb = args.notebook != NOTEBOOK
    if args.worker:
        if not args.plan or not args.manifest:
            p.error("--worker needs --plan and --manifest")
        return (flash_worker if flash_nb else worker)(args.plan, args.manifest, args.seed)
    return flash_driver(args) if flash_nb else driver(args)


if __name__ == "__main__":
    sys.exit(main())
