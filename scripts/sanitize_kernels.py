#!/usr/bin/env python3
"""Every registered attention kernel under NVIDIA compute-sanitizer, on a GPU.

    python scripts/sanitize_kernels.py                 # memcheck, racecheck, synccheck, initcheck
    python scripts/sanitize_kernels.py --tools memcheck
    python scripts/sanitize_kernels.py --list          # what the worker launches (no GPU needed)

The driver runs this script's worker once per tool under ``compute-sanitizer --tool <tool>
--kernel-name kns=attn_`` (only the lab's kernels are checked, not torch's), and reads the tool's
"ERROR SUMMARY". The worker launches each registered kernel once on a small, odd shape (B·H = 3,
N not a multiple of any tile; causal too where the kernel has it) at its registry defaults, with
the output poisoned, and checks that every output is finite. Exit status: 0 when every tool reports
no errors, 1 when one does, 2 when the sanitizer could not run.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
B, H, N = 1, 3, 77


def plan() -> list[dict]:
    """(kernel, D, causal, dtype) launches: every registered kernel, its smallest head dim in
    {64, 32, 128} order of preference, non-causal and (where supported) causal."""
    from attnlab.attention import KERNELS

    out = []
    for name, spec in KERNELS.items():
        D = next(d for d in (64, 32, 128) if d in spec.head_dims)
        for causal in ((False, True) if spec.causal else (False,)):
            out.append(dict(kernel=name, D=D, causal=causal, dtype=spec.dtypes[0]))
    return out


def worker() -> int:
    import torch

    from attnlab.attention import KERNELS, run_attention
    from attnlab.env import device_name

    major, minor = torch.cuda.get_device_capability()
    bad = 0
    for p in plan():
        spec = KERNELS[p["kernel"]]
        if spec.arch and int(spec.arch[3:].rstrip("a")) != 10 * major + minor:
            print(f"[sanitize] skip {p['kernel']}: built for {spec.arch}, this GPU is sm_{major}{minor}", flush=True)
            continue
        if spec.min_cc and 10 * major + minor < spec.min_cc:
            print(f"[sanitize] skip {p['kernel']}: needs compute capability {spec.min_cc}", flush=True)
            continue
        g = torch.Generator(device="cuda").manual_seed(7)
        dt = getattr(torch, p["dtype"])
        q, k, v = (torch.randn(B, H, N, p["D"], device="cuda", generator=g).to(dt) for _ in range(3))
        out = torch.full_like(q, float("nan"))
        run_attention(p["kernel"], q, k, v, out=out, causal=p["causal"])
        torch.cuda.synchronize()
        ok = bool(torch.isfinite(out.float()).all())
        bad += not ok
        print(f"[sanitize] ran {p['kernel']} D={p['D']} causal={p['causal']} {p['dtype']}: "
              f"{'all outputs written' if ok else 'NON-FINITE OUTPUT'}", flush=True)
    print(f"[sanitize] worker done on {device_name()}: {bad} bad outputs", flush=True)
    return 1 if bad else 0


def driver(tools) -> int:
    exe = shutil.which("compute-sanitizer") or (
        "/usr/local/cuda/bin/compute-sanitizer" if Path("/usr/local/cuda/bin/compute-sanitizer").exists() else None)
    if exe is None:
        print("compute-sanitizer not found (install the CUDA toolkit's sanitizer)")
        return 2
    rows, worst = [], 0
    for tool in tools:
        t0 = time.time()
        cmd = [exe, "--tool", tool, "--kernel-name", "kns=attn_", "--print-limit", "20",
               sys.executable, __file__, "--worker"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        text = proc.stdout + proc.stderr
        errors = summary_errors(text)
        ran = len(re.findall(r"^\[sanitize\] ran ", text, re.MULTILINE))
        rows.append((tool, errors, ran, proc.returncode, time.time() - t0))
        if errors != 0 or proc.returncode != 0:
            worst = max(worst, 1 if errors > 0 or proc.returncode else 2)
            print(text[-6000:])
        # one line per tool as it finishes (a long run cut short still says what passed)
        print(f"[sanitize] {tool}: {errors} errors over {ran} launches, exit {proc.returncode}, "
              f"{time.time() - t0:.0f} s", flush=True)
    print(f"{'tool':<10} {'errors':>6} {'launches':>8} {'exit':>4} {'seconds':>8}")
    for tool, errors, ran, rc, s in rows:
        print(f"{tool:<10} {errors:>6} {ran:>8} {rc:>4} {s:>8.0f}")
    return worst


def summary_errors(text: str) -> int:
    """Errors in a compute-sanitizer log: memcheck, synccheck and initcheck end with "ERROR SUMMARY:
    N errors", racecheck with "RACECHECK SUMMARY: H hazards displayed (N errors, W warnings)"; -1
    when neither line is there (the tool did not finish)."""
    m = re.search(r"ERROR SUMMARY: (\d+) error", text) or \
        re.search(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?", text)
    return int(m.group(1)) if m else -1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tools", nargs="*", default=list(TOOLS), choices=TOOLS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--list", action="store_true", help="print the launches and exit")
    args = ap.parse_args()
    if args.list:
        for p in plan():
            print(p)
        return 0
    return worker() if args.worker else driver(args.tools)


if __name__ == "__main__":
    sys.exit(main())
