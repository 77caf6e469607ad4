#!/usr/bin/env python3
"""Every registered attention kernel (or delta kernel) under NVIDIA compute-sanitizer, on a GPU.

    python scripts/sanitize_kernels.py                 # memcheck, racecheck, synccheck, initcheck
    python scripts/sanitize_kernels.py --tools memcheck
    python scripts/sanitize_kernels.py --family delta  # kernels/delta/01-22 instead (kns=kda_)
    python scripts/sanitize_kernels.py --family delta --impl pre   # only the tensor-core launches of these impls
    python scripts/sanitize_kernels.py --family delta --impl kdreg --tools racecheck --lineinfo   # file:line
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
import os
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
    {64, 32, 128} order of preference, non-causal and (where supported) causal; the tensor-core
    kernels (minimum compute capability 8.0) also at D = 128, whose registry tiles differ (10g's
    D = 128 tiles, for one, size the registers for three blocks per SM)."""
    from attnlab.attention import KERNELS

    out = []
    for name, spec in KERNELS.items():
        D = next(d for d in (64, 32, 128) if d in spec.head_dims)
        dims = (D, 128) if spec.min_cc >= 80 and D != 128 and 128 in spec.head_dims else (D,)
        for d in dims:
            for causal in ((False, True) if spec.causal else (False,)):
                out.append(dict(kernel=name, D=d, causal=causal, dtype=spec.dtypes[0]))
    return out


#: The delta family's launches: every step of attnlab.delta.kernels.DELTA_KERNELS through its
#: launcher, on B=1, H=3 (odd B·H), T=77 (not a multiple of any chunk), an initial state.
DELTA_B, DELTA_H, DELTA_T = 1, 3, 77


def delta_plan(impls_only=None) -> list[dict]:
    """The delta launches (every one, or with ``impls_only`` the tensor-core launches of those impls)."""
    out = [dict(launcher="recurrent", K=64, steps="01")]
    out += [dict(launcher="chunk", state=st, K=64, steps=f"02 03 {n}") for st, n in (("simt", "04"), ("tc", "05"))]
    from attnlab.delta import kernels as dk

    step_of = {k.source: k.step for k in dk.DELTA_KERNELS}   # by file: 14's holds two kernels
    prep = lambda impl: "21 " if impl in dk.PRE_IMPLS else "29 " if impl in dk.PREP_INV_IMPLS else "07 "  # noqa: E731
    impls = [("fused", "06")] + [(impl, prep(impl) + step_of[src]) for impl, (src, _, _, _) in dk.STATE_IMPLS.items()]
    out += [dict(launcher="tc", impl=impl, K=K, steps=steps) for impl, steps in impls for K in (64, 128)
            if impl not in dk.BF16_ONLY_IMPLS]
    out += [dict(launcher="tc", impl=impl, K=K, steps=steps, io="bf16")
            for impl, steps in impls if impl in dk.BF16_IMPLS for K in (64, 128)]
    if impls_only:
        unknown = set(impls_only) - {impl for impl, _ in impls}
        if unknown:
            raise SystemExit(f"--impl {' '.join(sorted(unknown))}: not a tensor-core impl; choose from "
                             f"{', '.join(impl for impl, _ in impls)}")
        out = [p for p in out if p.get("impl") in impls_only]
    return out


def delta_worker(impls_only=None) -> int:
    import cupy as cp
    import numpy as np

    from attnlab.delta import kernels as dk, random_inputs
    from attnlab.env import device_name

    bad = 0
    cc = int(cp.cuda.Device().compute_capability)
    for p in delta_plan(impls_only):
        K = p["K"]
        x = {n: cp.asarray(a) for n, a in random_inputs(DELTA_B, DELTA_T, DELTA_H, K, K, seed=7,
                                                        initial_state=True).items()}
        # The gate-sign check is a CuPy reduction (outside --kernel-name): initcheck would call the
        # copy of its result uninitialised. The inputs are valid by construction; checked on the host.
        assert (x["g"].get() <= 0).all()
        if p["launcher"] == "recurrent":
            plan = dk.prepare_recurrent(**x, output_final_state=True, check_gate=False)
        elif p["launcher"] == "chunk":
            if p["state"] == "tc" and cc < dk.TC_MIN_CC:
                continue
            plan = dk.prepare_chunk(**x, output_final_state=True, state=p["state"], check_gate=False)
        else:
            if cc < dk.FUSED_MIN_CC:
                print(f"[sanitize] skip kda_tc {p['impl']}: needs compute capability {dk.FUSED_MIN_CC}", flush=True)
                continue
            if p.get("io") == "bf16":   # torch bfloat16 inputs, made on the host and copied in
                import torch

                x = dict(x, **{n: torch.from_numpy(x[n].get()).to(torch.bfloat16).cuda()
                               for n in ("q", "k", "v", "g", "beta")})
            if p["impl"] == "cluster" and cc < dk.CLUSTER_MIN_CC:
                continue
            plan = dk.prepare_tc(**x, output_final_state=True, impl=p["impl"], check_gate=False)
            # compute-sanitizer runs one kernel at a time: 22 beside 21 would wait for chunks 21 cannot start to write
            plan.overlap = False
        # No poison fill and no device-side check: the outputs stay as cp.empty left them and are
        # copied whole to the host, so initcheck sees a read of any element a kda_ kernel did not
        # write (a CuPy fill or reduction kernel falls outside --kernel-name and would hide it, or
        # make the copy of its 1-byte result look uninitialised).
        o, s = plan.run()
        cp.cuda.Device().synchronize()
        if getattr(plan, "io", "fp32") == "bf16":   # the bf16 bits copied out as they are and widened on the host (a torch
            # conversion kernel on the device would fall outside --kernel-name: initcheck then blames it)
            o = (plan.o.get().view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            o = o.get()
        ok = bool(np.isfinite(o).all() and np.isfinite(s.get()).all())
        bad += not ok
        print(f"[sanitize] ran delta {p['steps']} K={K}{' bf16 I/O' if p.get('io') else ''}: "
              f"{'all outputs written' if ok else 'NON-FINITE OUTPUT'}",
              flush=True)
    print(f"[sanitize] worker done on {device_name()}: {bad} bad outputs", flush=True)
    return 1 if bad else 0


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
        # inputs made on the host and copied in: a device-side torch.randn runs outside
        # --kernel-name, so initcheck would take every input element for uninitialised memory
        g = torch.Generator().manual_seed(7)
        dt = getattr(torch, p["dtype"])
        q, k, v = (torch.randn(B, H, N, p["D"], generator=g).to(dt).to("cuda") for _ in range(3))
        # torch.empty, checked on the host: see delta_worker (initcheck and the kernel-name filter)
        out = torch.empty_like(q)
        run_attention(p["kernel"], q, k, v, out=out, causal=p["causal"])
        torch.cuda.synchronize()
        ok = bool(torch.isfinite(out.cpu().float()).all())
        bad += not ok
        print(f"[sanitize] ran {p['kernel']} D={p['D']} causal={p['causal']} {p['dtype']}: "
              f"{'all outputs written' if ok else 'NON-FINITE OUTPUT'}", flush=True)
    print(f"[sanitize] worker done on {device_name()}: {bad} bad outputs", flush=True)
    return 1 if bad else 0


def driver(tools, family: str = "attention", impls=None, lineinfo: bool = False) -> int:
    exe = shutil.which("compute-sanitizer") or (
        "/usr/local/cuda/bin/compute-sanitizer" if Path("/usr/local/cuda/bin/compute-sanitizer").exists() else None)
    if exe is None:
        print("compute-sanitizer not found (install the CUDA toolkit's sanitizer)")
        return 2
    rows, worst = [], 0
    for tool in tools:
        t0 = time.time()
        prefix = "kda_" if family == "delta" else "attn_"
        cmd = [exe, "--tool", tool, "--kernel-name", f"kns={prefix}", "--print-limit", "20",
               sys.executable, __file__, "--worker", "--family", family, *(["--impl", *impls] if impls else [])]
        env = {**os.environ, **({"ATTNLAB_LINEINFO": "1"} if lineinfo else {})}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
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
    ap.add_argument("--family", default="attention", choices=("attention", "delta"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--list", action="store_true", help="print the launches and exit")
    ap.add_argument("--impl", nargs="*", default=None, help="delta family: only these tensor-core impls (e.g. pre)")
    ap.add_argument("--lineinfo", action="store_true",
                    help="build the kernels with -lineinfo (ATTNLAB_LINEINFO=1): reports name file:line, not only offsets")
    args = ap.parse_args()
    if args.impl and args.family != "delta":
        ap.error("--impl selects delta launches: pass --family delta")
    if args.list:
        for p in (delta_plan(args.impl) if args.family == "delta" else plan()):
            print(p)
        return 0
    if args.worker:
        return delta_worker(args.impl) if args.family == "delta" else worker()
    return driver(args.tools, args.family, args.impl, args.lineinfo)


if __name__ == "__main__":
    sys.exit(main())
