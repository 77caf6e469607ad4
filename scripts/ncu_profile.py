#!/usr/bin/env python3
"""Record Nsight Compute counters for notebook 06: ``data/results/<gpu>/06_roofline__ncu.csv``.

Usage (on the GPU machine, from the repository root)::

    python scripts/ncu_profile.py                 # full plan, writes the canonical table
    python scripts/ncu_profile.py --profile quick # a subset, written under data/results/<gpu>/quick/
    python scripts/ncu_profile.py --dry-run       # print the plan and the ncu command, run nothing

This is the driver: it runs ``ncu`` as a subprocess over a worker mode of itself
(``--worker``), which launches every kernel of the plan exactly once inside a
``cudaProfilerStart/Stop`` window (compilation and a warm-up launch happen outside, so ncu sees
only the launch of interest), followed by a one-thread marker kernel in its own window. The
driver then splits ncu's CSV at the markers, labels each group with the worker's manifest and
records the tidy table with provenance.

If ncu is missing, or cannot read the counters (ERR_NVGPUCTRPERM, no device ...), nothing is
written: the script says why and exits 0, and notebook 06 shows "counters not available".
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

from attnlab import ncu  # noqa: E402

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


# ------------------------------------------------------------------------------------ driver

def driver(args) -> int:
    plan = ncu.build_plan(args.profile)
    exe = ncu.ncu_path()
    if args.dry_run:
        say(f"plan: {len(plan)} calls")
        for e in plan:
            say(f"  {e['kernel']:14s} N={e['N']:6d} D={e['D']:4d} ({e['purpose']})")
        cmd = ncu.build_command([sys.executable, __file__, "--worker", "--plan", "PLAN", "--manifest", "MANIFEST"],
                                ncu=exe or "ncu", profile_from_start=False, log_file="LOG")
        say("command: " + " ".join(cmd))
        return 0
    if exe is None:
        say("counters not available: ncu (Nsight Compute CLI) not found on PATH or under CUDA_HOME; "
            "nothing written")
        return 0
    say(f"using {exe} ({ncu.ncu_version(exe) or 'version unknown'})")
    try:
        from attnlab.env import resolve_mode
        mode = resolve_mode("live")
    except Exception as exc:  # noqa: BLE001
        say(f"counters not available: no usable CUDA device ({exc}); nothing written")
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="full", choices=("full", "quick"))
    p.add_argument("--timeout", type=int, default=420, help="seconds allowed for the whole ncu run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--keep-raw", metavar="PATH", help="also save ncu's raw CSV output here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--plan", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--manifest", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        if not args.plan or not args.manifest:
            p.error("--worker needs --plan and --manifest")
        return worker(args.plan, args.manifest, args.seed)
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
