#!/usr/bin/env python3
"""compute-sanitizer's racecheck on the race-check controls (tests/delta_emu/race_controls.cuh), on a GPU.

    python scripts/racecheck_controls.py          # every form under racecheck; a table of verdicts
    python scripts/racecheck_controls.py --list   # the forms (no GPU needed)

Each control is one hazard of the lab's kernels in a correctly synchronised form ("ok") and in forms
that miss one step; the CPU model's ThreadSanitizer build reports exactly the broken ones
(tests/test_emu_race.py). Here racecheck runs the same forms (tests/delta_emu/race_controls_gpu.cu, a
kernel race_<form> each, one block a launch). Where it reports an ok form, its reports of that
pattern on the lab's kernels are its own limits, not hazards; where it misses a broken form, its
silence on that pattern proves nothing. ring_ok is 19 / 24's operand hand-over at K = 64 (named
barriers, one 2^G_L word a channel written by half of WG_E), where racecheck reported hazards in the
kernels on the H200 that the CPU model's check does not find.

Each form runs in a process of its own, cut off after a timeout (a broken form could hang). Exit
status: 0 when racecheck ran (whatever it reported: the table is the result), 2 when it could not.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

CONTROLS = ROOT / "tests" / "delta_emu" / "race_controls.cuh"
KERNELS = ROOT / "tests" / "delta_emu" / "race_controls_gpu.cu"


def forms() -> list[tuple[str, bool, int, int]]:
    """(name, broken, threads, shared-memory bytes) of every control, in RACE_FORMS' order."""
    text = CONTROLS.read_text()
    table = text[text.index("RACE_FORMS[] = {"):text.index("};", text.index("RACE_FORMS[] = {"))]
    return [(m[1], m[2] == "true", int(m[3]), int(m[4]))
            for m in re.finditer(r'\{"(\w+)", (true|false), (\d+), (\d+)\}', table)]


def reported_kernels(log: str) -> set[str]:
    """The control kernels racecheck names in a hazard report ("... access at race_<form>+0x...")."""
    return set(re.findall(r"\bat (?:void )?(race_\w+?)(?:\(|\+0x)", log))


def hazards(log: str) -> int:
    """Hazards racecheck displayed ("RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)"); -1
    when the summary is missing (the tool did not finish)."""
    m = re.search(r"RACECHECK SUMMARY: (\d+) hazards? displayed", log)
    return int(m.group(1)) if m else -1


def worker(form: str) -> int:
    import cupy as cp

    from attnlab.compile import load_kernel

    (threads, smem), = [(t, b) for name, _, t, b in forms() if name == form]
    out = cp.zeros(256, cp.float32)
    src = cp.arange(64, dtype=cp.float32)
    fn = load_kernel(KERNELS, f"race_{form}", arch="sm_90a")
    fn((1,), (threads,), (out, src), shared_mem=smem)
    cp.cuda.Device().synchronize()
    print(f"[racecheck-controls] ran {form}", flush=True)
    return 0


def driver(lineinfo: bool, timeout: int = 180) -> int:
    """Each form in a process of its own under racecheck (a broken form may hang: it is cut off and
    named, the others still run)."""
    exe = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not Path(exe).exists():
        print("compute-sanitizer not found (install the CUDA toolkit's sanitizer)")
        return 2
    env = {**os.environ, **({"ATTNLAB_LINEINFO": "1"} if lineinfo else {})}
    print(f"{'form':<17} {'expected':<9} {'racecheck':<10} verdict", flush=True)
    ran_any = False
    for name, broken, _, _ in forms():
        cmd = [exe, "--tool", "racecheck", "--kernel-name", f"kns=race_{name}", "--print-limit", "20",
               sys.executable, __file__, "--worker", name]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
            log = proc.stdout + proc.stderr
        except subprocess.TimeoutExpired:
            print(f"{name:<17} {'race' if broken else 'ok':<9} {'-':<10} hung (cut off after {timeout} s)", flush=True)
            continue
        n = hazards(log)
        if f"[racecheck-controls] ran {name}" not in log or n < 0:
            print(f"{name:<17} {'race' if broken else 'ok':<9} {'-':<10} did not run:\n{log[-3000:]}", flush=True)
            continue
        ran_any = True
        flagged = n > 0
        if flagged == broken:
            verdict = "agrees"
        elif flagged:
            verdict = "reports a correctly ordered form: such reports on the kernels are racecheck's limits"
        else:
            verdict = "misses a broken form: its silence on this pattern proves nothing"
        others = reported_kernels(log) - {f"race_{name}"}
        print(f"{name:<17} {'race' if broken else 'ok':<9} {('reported' if flagged else 'quiet'):<10} {verdict}"
              + (f" (also names {sorted(others)})" if others else ""), flush=True)
        if flagged:
            print("\n".join(ln for ln in log.splitlines() if "Race reported" in ln or "access at" in ln)[:2000])
    return 0 if ran_any else 2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print the forms and exit")
    ap.add_argument("--worker", metavar="FORM", help=argparse.SUPPRESS)
    ap.add_argument("--lineinfo", action="store_true", help="build with -lineinfo (reports name file:line)")
    args = ap.parse_args()
    if args.list:
        for name, broken, threads, smem in forms():
            print(f"{name} {'race' if broken else 'ok'} {threads} {smem}")
        return 0
    if args.worker:
        return worker(args.worker)
    return driver(args.lineinfo)


if __name__ == "__main__":
    sys.exit(main())
