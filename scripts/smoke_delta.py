#!/usr/bin/env python3
"""GPU smoke test of the Kimi Delta Attention kernels (kernels/delta/01-05; the chunked form with
its default state pass, 05 on tensor cores where it runs) and, when installed,
a head-to-head with flash-linear-attention's chunk_kda / fused_recurrent_kda.

    PYTHONPATH=lib python scripts/smoke_delta.py                 # everything
    PYTHONPATH=lib python scripts/smoke_delta.py --no-timing     # correctness only
    PYTHONPATH=lib python scripts/smoke_delta.py --json $OUT/smoke_delta.json   # (default when $OUT is set)

1. Correctness on small shapes: fresh random inputs (q, k L2-normalised per head, g = log-sigmoid,
   beta in (0, 1)), outputs and workspaces poisoned with NaN, relative RMS error of o and the
   final state vs the float64 recurrent reference < 1e-5, for T ∈ {1, 17, 64, 100, 300},
   K = V ∈ {64, 128}, initial state on/off, gates -50 per step / mixed / uniform in [-3, 0];
   every chunk size and value block, K != V, every row-group width of the recurrent kernel.
2. Stage by stage: each chunked kernel's intermediate arrays vs the float64 NumPy mirror.
3. torch CUDA inputs, and the device-side ValueErrors.
4. The target shape B=2, H=16, K=V=128, T=16384: error vs a float64 reference computed on the GPU.
5. Timings (median of CUDA-event samples, L2 flushed) at T ∈ {4096, 16384}: recurrent, chunked
   (chunk 32/64/128 × value block 16/32) and fla (bf16 and fp32 inputs) when importable.
Prints PASS/FAIL per check (exit 1 on any FAIL) and TARGET MET/MISSED lines (informative).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import numpy as np

REL_MAX_SMALL = 1e-5
REL_MAX_TARGET = 1e-4
results: dict = {"checks": [], "timings": [], "targets": [], "info": {}}
failures: list[str] = []


def report(ok: bool, what: str, detail: str = "") -> None:
    print(f"{'PASS' if ok else 'FAIL'}  {what:<62} {detail}", flush=True)
    results["checks"].append(dict(ok=bool(ok), what=what, detail=detail))
    if not ok:
        failures.append(what)


def rel(out, ref) -> float:
    """‖out − ref‖ / ‖ref‖ in float64, on the GPU when either side is a CuPy array; inf if out has NaN."""
    import cupy as cp

    if isinstance(out, cp.ndarray) or isinstance(ref, cp.ndarray):
        o = cp.asarray(out, dtype=cp.float64)
        r = cp.asarray(ref, dtype=cp.float64)
        if o.shape != r.shape:
            raise ValueError(f"shapes differ: {o.shape} vs {r.shape}")
        if not bool(cp.isfinite(o).all()):
            return float("inf")
        nr = float(cp.linalg.norm(r))
        return float(cp.linalg.norm(o - r)) / nr if nr > 0 else float(cp.linalg.norm(o - r))
    from attnlab.reference import rel_error

    return rel_error(out, ref)


def device_inputs(B, T, H, K, V, *, seed, gate="logsigmoid", init=False):
    import cupy as cp

    from attnlab.delta import random_inputs

    x = random_inputs(B, T, H, K, V, seed=seed, gate=gate, initial_state=init)
    return x, {n: cp.asarray(a) for n, a in x.items()}


# ----------------------------------------------------------------------------- 1. small shapes

def small_shapes() -> None:
    from attnlab.delta import kda_recurrent_fp64
    from attnlab.delta import kernels as dk

    seed = 0
    for K in (64, 128):
        for T in (1, 17, 64, 100, 300):
            for init in (False, True):
                for gate in ("logsigmoid", "const", "mixed", "strong"):
                    if gate != "logsigmoid" and T not in (17, 300):
                        continue
                    seed += 1
                    x, d = device_inputs(2, T, 2, K, K, seed=seed, gate=gate, init=init)
                    ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
                    tag = f"K=V={K} T={T} {'h0' if init else 'noh0'} g={ {'const': '-50'}.get(gate, gate)}"
                    try:
                        plan = dk.prepare_recurrent(**d, output_final_state=True)
                        plan.poison()
                        o, s = plan.run()
                        eo, es = rel(o, ref_o), rel(s, ref_s)
                        report(eo < REL_MAX_SMALL and es < REL_MAX_SMALL, f"recurrent {tag}",
                               f"rel(o)={eo:.2e} rel(S)={es:.2e}")
                        for C, bv in ((64, 16), (64, 32), (16, 32)):
                            plan = dk.prepare_chunk(**d, output_final_state=True, chunk_size=C, bv=bv)
                            plan.poison()
                            o, s = plan.run()
                            eo, es = rel(o, ref_o), rel(s, ref_s)
                            report(eo < REL_MAX_SMALL and es < REL_MAX_SMALL, f"chunked C={C} BV={bv} {tag}",
                                   f"rel(o)={eo:.2e} rel(S)={es:.2e}")
                    except Exception as exc:  # noqa: BLE001
                        traceback.print_exc()
                        report(False, f"kernels {tag}", f"{type(exc).__name__}: {exc}")
    # Every chunk size, mixed K != V, and the recurrent kernel's row-group variants.
    for (K, V) in ((128, 128), (64, 128), (128, 64)):
        seed += 1
        x, d = device_inputs(1, 333, 3, K, V, seed=seed, init=True)
        ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
        # Every chunk size at K = V = 128; two at K != V (each new size costs NVRTC time).
        for C in (dk.SUPPORTED_CHUNK if K == V else (32, 64)):
            for bv in dk.SUPPORTED_BV:
                try:
                    plan = dk.prepare_chunk(**d, output_final_state=True, chunk_size=C, bv=bv)
                    plan.poison()
                    o, s = plan.run()
                    eo, es = rel(o, ref_o), rel(s, ref_s)
                    report(eo < REL_MAX_SMALL and es < REL_MAX_SMALL, f"chunked C={C} BV={bv} K={K} V={V} T=333",
                           f"rel(o)={eo:.2e} rel(S)={es:.2e}")
                except Exception as exc:  # noqa: BLE001
                    traceback.print_exc()
                    report(False, f"chunked C={C} BV={bv} K={K} V={V}", f"{type(exc).__name__}: {exc}")
        for rg in (4, 8, 16, 32):
            if K % (4 * rg):
                continue
            try:
                plan = dk.prepare_recurrent(**d, output_final_state=True, rg=rg)
                plan.poison()
                o, s = plan.run()
                eo, es = rel(o, ref_o), rel(s, ref_s)
                report(eo < REL_MAX_SMALL and es < REL_MAX_SMALL, f"recurrent RG={rg} K={K} V={V} T=333",
                       f"rel(o)={eo:.2e} rel(S)={es:.2e}")
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc()
                report(False, f"recurrent RG={rg} K={K} V={V}", f"{type(exc).__name__}: {exc}")


# ----------------------------------------------------------------------------- 2. stages

def stages() -> None:
    from attnlab.delta import chunk_stages_model
    from attnlab.delta import kernels as dk

    for (K, V, C, T) in ((128, 128, 64, 150), (64, 64, 32, 90), (128, 128, 128, 200)):
        x, d = device_inputs(2, T, 2, K, V, seed=T, init=True)
        m = chunk_stages_model(**x, chunk_size=C, dtype=np.float64)
        try:
            plan = dk.prepare_chunk(**d, chunk_size=C, bv=32, output_final_state=True)
            plan.poison()
            plan.run(stages=(1,))
            errs = {n: rel(plan.ws[n], m[n]) for n in ("Akk", "Aqk", "Qg", "Kd", "gL")}
            errs["Kbg"] = rel(plan.ws["W"], m["Kbg"])
            plan.run(stages=(2,))
            errs["W"], errs["U"] = rel(plan.ws["W"], m["W"]), rel(plan.ws["U"], m["U"])
            plan.run(stages=(3,))
            errs["o"], errs["S"] = rel(plan.o, m["o"]), rel(plan.final_state, m["final_state"])
            worst = max(errs, key=errs.get)
            report(all(e < 2e-6 for e in errs.values()), f"stages K={K} V={V} C={C} T={T}",
                   " ".join(f"{n}={e:.1e}" for n, e in errs.items()) + f" (worst {worst})")
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            report(False, f"stages K={K} V={V} C={C}", f"{type(exc).__name__}: {exc}")


# ----------------------------------------------------------------------------- 3. torch, errors

def torch_and_errors() -> None:
    import cupy as cp

    from attnlab.delta import kda_recurrent_fp64, random_inputs
    from attnlab.delta import kernels as dk

    x = random_inputs(1, 70, 2, 128, 128, seed=5, initial_state=True)
    ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
    try:
        import torch

        if torch.cuda.is_available():
            t = {n: torch.from_numpy(a).cuda() for n, a in x.items()}
            o, s = dk.kda_chunk(**t, output_final_state=True)
            o2, _ = dk.kda_recurrent(**t)
            ok = isinstance(o, cp.ndarray) and rel(o, ref_o) < REL_MAX_SMALL and rel(o2, ref_o) < REL_MAX_SMALL
            report(ok, "torch CUDA inputs (zero-copy via DLPack)", f"rel(o)={rel(o, ref_o):.2e}")
    except ImportError:
        print("INFO  torch not importable: torch interop not checked")
    d = {n: cp.asarray(a) for n, a in x.items()}
    bad = dict(d, g=cp.abs(d["g"]))
    try:
        dk.kda_chunk(**bad)
        report(False, "positive g raises ValueError", "no error")
    except ValueError as exc:
        report("g must be" in str(exc), "positive g raises ValueError", str(exc)[:60])
    try:
        q = cp.asfortranarray(d["q"])
        dk.kda_recurrent(**dict(d, q=q))
        report(False, "non-contiguous q raises ValueError", "no error")
    except ValueError as exc:
        report("C-contiguous" in str(exc), "non-contiguous q raises ValueError", str(exc)[:60])


# ----------------------------------------------------------------------------- 4-5. target shape

def fla_functions():
    try:
        from fla.ops.kda import chunk_kda, fused_recurrent_kda  # noqa: F401

        import fla

        return chunk_kda, fused_recurrent_kda, getattr(fla, "__version__", "?")
    except Exception as exc:  # noqa: BLE001
        print(f"INFO  flash-linear-attention not importable ({type(exc).__name__}: {exc}); fla not timed")
        return None, None, None


def target_shape(timing: bool, Ts=(4096, 16384)) -> None:
    import cupy as cp
    import torch

    from attnlab.delta import kda_recurrent_fp64
    from attnlab.delta import kernels as dk
    from attnlab.delta.model import workspace_bytes
    from attnlab.timing import time_gpu

    chunk_kda, fused_recurrent_kda, fla_version = fla_functions()
    results["info"]["fla_version"] = fla_version
    B, H, K, V = 2, 16, 128, 128
    best = {}
    for T in Ts:
        x, d = device_inputs(B, T, H, K, V, seed=T, init=False)
        del x
        t0 = time.perf_counter()
        ref_o, _ = kda_recurrent_fp64(**d)
        cp.cuda.get_current_stream().synchronize()
        print(f"INFO  float64 reference on the GPU, T={T}: {time.perf_counter() - t0:.1f} s")
        rec = dk.prepare_recurrent(**d, check_gate=False)
        rec.poison()
        e_rec = rel(rec.run()[0], ref_o)
        report(e_rec < REL_MAX_TARGET, f"recurrent B={B} H={H} K=V={K} T={T}", f"rel(o)={e_rec:.2e}")
        chunk = dk.prepare_chunk(**d, chunk_size=64, check_gate=False)
        chunk.poison()
        e_chk = rel(chunk.run()[0], ref_o)
        report(e_chk < REL_MAX_TARGET, f"chunked C=64 BV={chunk.bv} B={B} H={H} K=V={K} T={T}",
               f"rel(o)={e_chk:.2e}")
        results["info"][f"workspace_bytes_T{T}"] = workspace_bytes(B, T, H, K, V, 64)
        if T == max(Ts):
            results["targets"].append(dict(target="rel RMS error < 1e-4 (fp32)", T=T,
                                           recurrent=e_rec, chunked=e_chk,
                                           met=bool(e_rec < 1e-4 and e_chk < 1e-4)))
        if not timing:
            continue

        def record(name, dtype, fn, budget=1.0, **extra):
            try:
                t = time_gpu(fn, budget_s=budget, warmup=2, min_repeats=5, max_repeats=50)
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc()
                print(f"INFO  {name} T={T}: could not be timed ({type(exc).__name__}: {exc})")
                return None
            tok_per_s = B * T / (t.median_ms * 1e-3)
            print(f"TIME  {name:<34} {dtype:<5} T={T:<6} median {t.median_ms:9.3f} ms  "
                  f"[q1 {t.q1_ms:.3f}, q3 {t.q3_ms:.3f}, n={t.repeats}]  {tok_per_s / 1e6:7.2f} Mtok/s", flush=True)
            results["timings"].append(dict(name=name, dtype=dtype, B=B, T=T, H=H, K=K, V=V, **extra, **t.row()))
            return t.median_ms

        for rg in (8, 16):
            p = dk.prepare_recurrent(**d, rg=rg, check_gate=False)
            ms = record(f"recurrent RG={rg}", "fp32", p.run, budget=2.0, rg=rg)
            if ms and (("rec", T) not in best or ms < best[("rec", T)][0]):
                best[("rec", T)] = (ms, f"RG={rg}")
        for C in (32, 64, 128):
            for bv in (16, 32):
                p = dk.prepare_chunk(**d, chunk_size=C, bv=bv, check_gate=False)
                ms = record(f"chunked C={C} BV={bv}", "fp32", p.run, chunk_size=C, bv=bv)
                for st, stage_name in ((1, "intra"), (2, "solve"), (3, "state")):
                    record(f"  stage {st} ({stage_name}) C={C} BV={bv}", "fp32",
                           lambda p=p, st=st: p.run(stages=(st,)), budget=0.5, chunk_size=C, bv=bv)
                if ms and (("chunk", T) not in best or ms < best[("chunk", T)][0]):
                    best[("chunk", T)] = (ms, f"C={C} BV={bv}")
        pool = cp.get_default_memory_pool()
        results["info"][f"cupy_pool_total_bytes_T{T}"] = int(pool.total_bytes())

        if chunk_kda is not None:
            tq = {n: torch.from_dlpack(a) for n, a in d.items()}
            for dtype, tdt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
                tt = {n: a.to(tdt).contiguous() for n, a in tq.items()}
                args = (tt["q"], tt["k"], tt["v"], tt["g"], tt["beta"])
                try:
                    with torch.no_grad():
                        o_f, _ = chunk_kda(*args)
                    e_f = rel(cp.from_dlpack(o_f.float().contiguous()), ref_o)
                    print(f"INFO  fla chunk_kda {dtype} T={T}: rel(o) vs float64 = {e_f:.2e}")
                    results["info"][f"fla_chunk_{dtype}_rel_T{T}"] = e_f
                except Exception as exc:  # noqa: BLE001
                    print(f"INFO  fla chunk_kda {dtype} failed: {type(exc).__name__}: {exc}")
                    continue

                def fla_chunk(args=args):
                    with torch.no_grad():
                        return chunk_kda(*args)

                def fla_rec(args=args):
                    with torch.no_grad():
                        return fused_recurrent_kda(*args)

                ms = record("fla chunk_kda", dtype, fla_chunk)
                if ms:
                    best[("fla_chunk", dtype, T)] = (ms, dtype)
                record("fla fused_recurrent_kda", dtype, fla_rec, budget=2.0)

    if not timing:
        return
    T = max(Ts)
    if ("rec", T) in best and ("chunk", T) in best:
        (r_ms, r_cfg), (c_ms, c_cfg) = best[("rec", T)], best[("chunk", T)]
        ratio = r_ms / c_ms
        met = ratio >= 10
        print(f"TARGET {'MET   ' if met else 'MISSED'} chunked ≥ 10× faster than recurrent at T={T}: "
              f"{ratio:.2f}× (chunked {c_cfg} {c_ms:.3f} ms, recurrent {r_cfg} {r_ms:.3f} ms)")
        results["targets"].append(dict(target="chunked >= 10x recurrent", T=T, ratio=ratio, met=met,
                                       chunked_ms=c_ms, chunked_cfg=c_cfg, recurrent_ms=r_ms, recurrent_cfg=r_cfg))
    for dtype in ("bf16", "fp32"):
        if ("fla_chunk", dtype, T) in best and ("chunk", T) in best:
            f_ms = best[("fla_chunk", dtype, T)][0]
            c_ms, c_cfg = best[("chunk", T)]
            ratio = f_ms / c_ms
            met = ratio >= 0.5
            print(f"TARGET {'MET   ' if met else 'MISSED'} chunked (fp32) ≥ 0.5× fla chunk_kda ({dtype}) "
                  f"throughput at T={T}: {ratio:.2f}× (ours {c_ms:.3f} ms {c_cfg}, fla {f_ms:.3f} ms)")
            results["targets"].append(dict(target=f"chunked >= 0.5x fla chunk_kda {dtype}", T=T, ratio=ratio,
                                           met=met, chunked_ms=c_ms, fla_ms=f_ms))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-timing", action="store_true", help="correctness only")
    ap.add_argument("--json", help="write all checks, timings and targets to this JSON file")
    ap.add_argument("--T", type=int, nargs="*", default=[4096, 16384], help="sequence lengths at the target shape")
    args = ap.parse_args()

    from attnlab.env import cuda_usable, device_name

    if not cuda_usable():
        print("FAIL  no usable CUDA device")
        return 1
    print(f"INFO  device: {device_name()}")
    results["info"]["device"] = device_name()
    t0 = time.perf_counter()
    for part in (small_shapes, stages, torch_and_errors):
        try:
            part()
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            report(False, part.__name__, f"{type(exc).__name__}: {exc}")
    try:
        target_shape(not args.no_timing, tuple(args.T))
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        report(False, "target shape", f"{type(exc).__name__}: {exc}")
    n = len(results["checks"])
    print(f"\n{n - len(failures)}/{n} checks passed in {time.perf_counter() - t0:.0f} s")
    for f in failures:
        print(f"  FAILED: {f}")
    out_json = args.json or (os.path.join(os.environ["OUT"], "smoke_delta.json") if os.environ.get("OUT") else None)
    if out_json:
        with open(out_json, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
