#!/usr/bin/env python3
"""An unrecorded probe: Nsight Compute's per-instruction view (SASS) of single kernel launches —
warp-stall samples per instruction and, for shared-memory instructions, wavefronts actual vs
ideal — to find *which* instruction a kernel's stalls or excess bank wavefronts come from. The
recorded, per-kernel counters are scripts/ncu_profile.py's; this answers the follow-up question.

  python scripts/ncu_source.py --out $OUT fa2_tuned:128:4096:bfloat16 sdpa_flash:128:4096:bfloat16 \
      vec_padded:128:4096:float32

Each LAUNCH is KERNEL:D:N:DTYPE[:causal] (B=2, H=8, registry default parameters; KERNEL may be a
torch SDPA reference such as sdpa_flash), or delta:IMPL:T[:bf16][:prep] for the recurrence of a kda_tc
impl (notebook 13; B=2, H=16, K=V=128, fp32, 07's output in place: `delta:tma2:4096`; a probe build with
`:MACRO=N` items, `delta:kdreg:4096:KDA_E_SHARE=2`), with bf16 inputs
(`:bf16`; a bf16-only impl such as 17's "single" gets them anyway), or its 07 instead (`:prep`; the macros then
07's or 29's, `delta:late:16384:prep:KDA_PREP_VEC=1`). Every launch gets its own ncu run (SourceCounters and
WarpStateStats sections) over a worker that launches it once inside a profiler window after a
warm-up. Writes under --out, per launch: <label>.ncu-rep, <label>.source.csv (ncu --page source
--print-source sass --csv), <label>.details.csv, and a summary of the instructions with the most
stall samples (<label>.top.txt). Nothing here goes into data/.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))


def parse_launch(text: str) -> dict:
    parts = text.split(":")
    if parts[0] == "delta":
        flags = [x for x in parts[3:] if "=" not in x]
        macros = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in parts[3:] if "=" in kv}
        if len(parts) < 3 or not set(flags) <= {"bf16", "prep"}:
            raise SystemExit(f"launch {text!r}: expected delta:IMPL:T[:bf16][:prep][:MACRO=N ...]")
        return dict(kernel="delta", impl=parts[1], T=int(parts[2]), bf16="bf16" in flags, prep="prep" in flags,
                    defines=macros or None)
    if len(parts) not in (4, 5) or (len(parts) == 5 and parts[4] != "causal"):
        raise SystemExit(f"launch {text!r}: expected KERNEL:D:N:DTYPE[:causal]")
    return dict(kernel=parts[0], D=int(parts[1]), N=int(parts[2]), dtype=parts[3], causal=len(parts) == 5)


def label_of(e: dict) -> str:
    if e["kernel"] == "delta":
        return (f"delta_{e['impl']}_T{e['T']}" + ("_bf16" if e.get("bf16") else "") + ("_prep" if e.get("prep") else "")
                + "".join(f"_{k}{v}" for k, v in (e.get("defines") or {}).items()))
    return f"{e['kernel']}_D{e['D']}_N{e['N']}_{e['dtype']}{'_causal' if e['causal'] else ''}"


def worker(e: dict) -> int:
    import cupy as cp

    if e["kernel"] == "delta":   # the recurrence alone, after 07 has written its input
        from attnlab.delta import bench as db, fast, kernels as dk

        _, d = db.device_inputs(2, e["T"], 16, 128, 128, seed=0)
        d = fast.bf16_inputs(d) if e.get("bf16") else fast.probe_inputs(d, e["impl"])[0]
        macros, prep = e.get("defines"), e.get("prep")   # with :prep, the macros are 07's (29's) probe build's
        plan = dk.prepare_tc(**d, check_gate=False, impl=e["impl"], defines=None if prep else macros,
                             prep_defines=macros if prep else None)
        plan.run()
        cp.cuda.Device().synchronize()
        cp.cuda.runtime.profilerStart()
        plan.run(stages=(1,) if e.get("prep") else (2,))
        cp.cuda.Device().synchronize()
        cp.cuda.runtime.profilerStop()
        return 0
    import torch

    from attnlab import flash
    from attnlab.attention import prepare_attention

    q, k, v = flash.random_inputs(2, 8, e["N"], e["D"], e["dtype"], seed=17 * e["N"] + e["D"])
    if e["kernel"].startswith("sdpa"):
        call = flash.sdpa_call(e["kernel"], q, k, v, e["causal"])
    else:
        call = prepare_attention(e["kernel"], q, k, v, causal=e["causal"], gpu=None)
    call()
    torch.cuda.synchronize()
    rt = cp.cuda.runtime
    rt.profilerStart()
    call()
    torch.cuda.synchronize()
    rt.profilerStop()
    return 0


def summarise(csv_text: str, top: int = 40) -> str:
    """The instructions with the most warp-stall samples, and every shared-memory instruction with
    excess wavefronts, from ncu's source-page CSV (column names vary a little between versions)."""
    import io

    import pandas as pd

    lines = csv_text.splitlines()
    if lines and lines[0].startswith('"Kernel Name"'):   # newer ncu: the kernel's name on a line of its own first
        csv_text = "\n".join(lines[1:])
    try:
        df = pd.read_csv(io.StringIO(csv_text), thousands=",")
    except Exception as exc:  # noqa: BLE001 — a probe reports and goes on
        return f"could not parse the source CSV: {exc}"
    cols = list(df.columns)
    out = [f"columns: {cols}"]

    def col(*needles):
        for c in cols:
            if all(n.lower() in str(c).lower() for n in needles):
                return c
        return None
    src = col("source") or cols[1]
    samples = col("warp stall sampling (all")
    if samples is not None:
        d = df.copy()
        d[samples] = pd.to_numeric(d[samples], errors="coerce").fillna(0)
        total = d[samples].sum()
        out.append(f"total stall samples: {total:.0f}")
        keep = [c for c in (col("address"), src, samples, col("not-issued"), col("instructions executed"))
                if c is not None]
        out.append(d.sort_values(samples, ascending=False)[keep].head(top).to_string())
        # samples by opcode (first word of the SASS)
        d["opcode"] = d[src].astype(str).str.strip().str.split().str[0].str.split(".").str[0]
        by_op = d.groupby("opcode")[samples].sum().sort_values(ascending=False)
        out.append("samples by opcode (share):\n" + (by_op / max(total, 1)).head(20).round(3).to_string())
    ideal, actual = col("wavefronts", "shared", "ideal"), None
    for c in cols:
        if "wavefronts" in str(c).lower() and "shared" in str(c).lower() and "ideal" not in str(c).lower() \
                and "excessive" not in str(c).lower():
            actual = c
            break
    excess = col("wavefronts", "shared", "excessive")
    if excess is not None:
        d = df.copy()
        d[excess] = pd.to_numeric(d[excess], errors="coerce").fillna(0)
        keep = [c for c in (col("address"), src, actual, ideal, excess) if c is not None]
        out.append("shared-memory instructions with excess wavefronts:\n"
                   + d[d[excess] > 0].sort_values(excess, ascending=False)[keep].head(top).to_string())
    return "\n\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("launches", nargs="*")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/ncu_source"))
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--section", action="append", default=[],
                    help="more ncu sections, e.g. SpeedOfLight, ComputeWorkloadAnalysis, MemoryWorkloadAnalysis")
    args = ap.parse_args()
    if args.worker:
        return worker(parse_launch(args.worker))

    from attnlab import ncu
    exe = ncu.ncu_path()
    if exe is None:
        print("ncu not found: nothing to do", flush=True)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "lib"), os.environ.get("PYTHONPATH", "")]))
    for text in args.launches:
        e = parse_launch(text)
        label = label_of(e)
        rep = out / f"{label}.ncu-rep"
        cmd = [exe, "--profile-from-start", "off", "--section", "SourceCounters", "--section", "WarpStateStats",
               "--section", "LaunchStats", *(x for sec in args.section for x in ("--section", sec)), "--import-source", "no", "--export", str(rep), "--force-overwrite",
               sys.executable, str(Path(__file__).resolve()), "--worker", text]
        res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.timeout)
        print(f"[{label}] ncu status {res.returncode}", flush=True)
        if res.returncode != 0 or not rep.is_file():
            print(res.stdout[-2000:], res.stderr[-2000:], flush=True)
            continue
        for page, extra in (("source", ["--print-source", "sass"]), ("details", [])):
            r = subprocess.run([exe, "--import", str(rep), "--page", page, "--csv", *extra],
                               capture_output=True, text=True, timeout=args.timeout)
            (out / f"{label}.{page}.csv").write_text(r.stdout)
            if r.returncode != 0:
                print(f"[{label}] --page {page}: status {r.returncode}: {r.stderr[-500:]}", flush=True)
        summary = summarise((out / f"{label}.source.csv").read_text())
        (out / f"{label}.top.txt").write_text(summary)
        print(summary[:6000], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
