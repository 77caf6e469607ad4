"""A quick, unrecorded probe of the flash kernels on a GPU: correctness, speed beside torch SDPA,
the tensor-core roofs, and optional parameter sweeps — for choosing defaults before a recorded run
(the recorded figures come from notebooks 08-10). Prints short tables; writes CSVs to --out.

  python scripts/probe_flash.py --out $OUT                      # every flash kernel, default params
  python scripts/probe_flash.py --kernels tuned --sweep 'tuned:BN=32,64;WARPS=4,8' --no-check
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

import pandas as pd  # noqa: E402

from attnlab import flash  # noqa: E402
from attnlab.attention import KERNELS, get_kernel, get_spec  # noqa: E402

EDGE = [(1, 1, 1), (2, 8, 63), (2, 8, 65), (1, 3, 4097), (1000, 1, 17)]


def parse_sweep(text: str) -> dict[str, list[dict]]:
    """'k1:BN=32,TM=4|BN=64,TM=8 k2:BM=64' -> {k1: [{BN:32,TM:4}, {BN:64,TM:8}], k2: [{BM:64}]}"""
    out: dict[str, list[dict]] = {}
    for item in text.split():
        name, _, spec = item.partition(":")
        out[name] = [{a.split("=")[0]: int(a.split("=")[1]) for a in combo.split(",")} for combo in spec.split("|")]
    return out


def smoke(kernels) -> int:
    """Each kernel once per (D, causal, N) on small shapes: relative error against float32 SDPA."""
    import torch
    import torch.nn.functional as F

    from attnlab.attention import run_attention
    bad = 0
    for name in kernels:
        spec = get_spec(name)
        dtype = getattr(torch, spec.dtypes[0])
        for D in spec.head_dims:
            for causal in ([False, True] if spec.causal else [False]):
                for B, H, N in ((1, 1, 1), (1, 2, 63), (2, 3, 200), (1, 2, 1024)):
                    q, k, v = (torch.randn(B, H, N, D, device="cuda").to(dtype) for _ in range(3))
                    try:
                        o = run_attention(name, q, k, v, causal=causal)
                        torch.cuda.synchronize()
                        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
                        err = float((o.float() - ref).norm() / ref.norm())
                        msg = f"{err:.2e}"
                        bad += not err < spec.rel_tol
                    except Exception as e:  # noqa: BLE001 — a probe reports and goes on
                        msg, bad = f"ERROR {str(e)[:200]}", bad + 1
                    print(f"smoke {name} D={D} causal={causal} B={B} H={H} N={N}: {msg}", flush=True)
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", nargs="*", default=[n for n, s in KERNELS.items() if s.flash])
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/probe_flash"))
    ap.add_argument("--sweep", default="")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--budget", type=float, default=0.3)
    ap.add_argument("--N", nargs="*", type=int, default=[1024, 4096, 16384])
    ap.add_argument("--smoke", action="store_true",
                    help="only run each kernel once on a few small shapes against SDPA in float32 and exit")
    args = ap.parse_args()
    if args.smoke:
        return smoke(args.kernels)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_rows", 500)
    t0 = time.time()

    # static facts as the driver loaded them
    res = []
    for name in args.kernels:
        spec = get_spec(name)
        for D in spec.head_dims:
            for causal in ([False, True] if spec.causal else [False]):
                try:
                    plan = get_kernel(name, D, dtype=spec.dtypes[0], causal=causal)
                    res.append(dict(kernel=name, D=D, causal=causal, regs=plan.kernel.num_regs,
                                    local=plan.kernel.local_size_bytes, smem=plan.smem_bytes, threads=plan.block,
                                    params=plan.params))
                except Exception as e:  # noqa: BLE001 — a probe reports and goes on
                    res.append(dict(kernel=name, D=D, causal=causal, error=str(e)[:300]))
    print(pd.DataFrame(res).to_string(), flush=True)

    from attnlab.roofline import measure_mma_peak
    peaks = pd.DataFrame([measure_mma_peak(k) for k in ("tf32_mma", "bf16_mma")])
    peaks.to_csv(out / "peaks.csv", index=False)
    print(peaks[["ceiling", "value", "median_ms", "registers"]].to_string(), flush=True)

    if not args.no_check:
        frames = []
        for dtype in ("float32", "bfloat16"):
            ks = [k for k in args.kernels if dtype in get_spec(k).dtypes]
            if not ks:
                continue
            for D in (64, 128):
                shapes = [(*s, D) for s in EDGE]
                frames.append(flash.check(ks, shapes, seed=1))
                frames.append(flash.check(ks, [(2, 3, 257, D)], seed=2, logit_scale=8.0))
                frames.append(flash.check(ks, [(2, 3, 257, D)], seed=3, nan_row=True))
                if dtype == "bfloat16":
                    frames.append(flash.check(ks, shapes[:4], seed=4, causal=True))
        chk = pd.concat(frames, ignore_index=True)
        chk.to_csv(out / "check.csv", index=False)
        summary = chk.groupby(["kernel", "D", "causal"]).agg(
            passed=("passed", "all"), worst=("rel_err_fp64", "max"), sdpa_worst=("sdpa_rel_err_fp64", "max"),
            worst_vs_sdpa=("err_vs_sdpa", "max"))
        print(summary.to_string(), flush=True)
        print(chk[~chk["passed"]].to_string() if (~chk["passed"]).any() else "all checks passed", flush=True)

    frames = []
    fp32 = [k for k in args.kernels if "float32" in get_spec(k).dtypes]
    half = [k for k in args.kernels if "bfloat16" in get_spec(k).dtypes]
    if fp32:
        frames.append(flash.time_kernels(fp32, 2, 8, args.N, [64, 128], dtype="float32", references=("sdpa",),
                                         budget_s=args.budget))
    if half:
        for causal in (False, True):
            frames.append(flash.time_kernels(half, 2, 8, [n for n in args.N if n >= 4096] or args.N, [64, 128],
                                             dtype="bfloat16", references=("sdpa_flash", "sdpa_cudnn"),
                                             causal=causal, budget_s=args.budget))
    for name, combos in parse_sweep(args.sweep).items():
        spec = get_spec(name)
        for p in combos:
            for D in (64, 128):
                try:
                    frames.append(flash.time_kernels([name], 2, 8, args.N, [D],
                                                     dtype=spec.dtypes[0], references=(), budget_s=args.budget,
                                                     params={name: p}).assign(sweep=str(p)))
                except Exception as e:  # noqa: BLE001 — a probe reports and goes on
                    print(f"sweep {name} D={D} {p}: {str(e)[:200]}", flush=True)
    tim = pd.concat(frames, ignore_index=True)
    if "sweep" not in tim:
        tim["sweep"] = None
    base = tim[tim["sweep"].isna()]
    tim.to_csv(out / "timing.csv", index=False)
    cols = ["kernel", "causal", "D", "N", "params", "median_ms", "rel_iqr", "tflops"]
    print(tim[[c for c in cols + ["sweep"] if c in tim.columns]].to_string(), flush=True)
    ref_of = {"float32": "sdpa", "bfloat16": "sdpa_flash"}
    rat = []
    for name in args.kernels:
        ref = ref_of[get_spec(name).dtypes[0]]
        rat.append(flash.ratios(base, name, ref))
        if ref == "sdpa_flash":
            rat.append(flash.ratios(base, name, "sdpa_cudnn"))
    rat = pd.concat(rat, ignore_index=True)
    print(rat.to_string(), flush=True)
    print(f"probe took {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
