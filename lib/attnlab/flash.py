"""Beyond the seed: the flash kernels (08 register tiling, 09 TF32 tensor cores, 10 bf16/fp16
tensor cores) checked and timed beside torch SDPA, as tidy tables.

Everything that needs a GPU takes torch CUDA tensors (SDPA runs on them, and the kernels take
them zero-copy); everything else (ratios, verdicts) is pure pandas and unit-tested on the CPU.
Ratios are written ``x_<reference>`` = reference time / kernel time: above 1 the kernel is faster.
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from .attention import get_kernel, get_spec, prepare_attention, run_attention
from .attention.reference import attention_flops, attention_fp64, attention_sdpa, rel_error

#: torch SDPA as a reference: its default choice, or one backend forced.
SDPA_REFERENCES = ("sdpa", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient")


# ---------------------------------------------------------------- inputs and references

def random_inputs(B: int, H: int, N: int, D: int, dtype: str = "float32", *, seed: int,
                  logit_scale: float = 1.0):
    """Fresh standard-normal q, k, v on the GPU as torch tensors of ``dtype``; q and k multiplied
    by ``logit_scale`` (8 makes scores of several hundred at D = 128)."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(int(seed))
    q, k, v = (torch.randn(B, H, N, D, device="cuda", generator=g) for _ in range(3))
    if logit_scale != 1.0:
        q, k = q * logit_scale, k * logit_scale
    t = getattr(torch, dtype)
    return tuple(a.to(t).contiguous() for a in (q, k, v))


@contextlib.contextmanager
def _backend(reference: str):
    if reference == "sdpa":
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    which = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
             "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}[reference]
    with sdpa_kernel([which]):
        yield


def sdpa_call(reference: str, q, k, v, causal: bool = False):
    """A no-argument callable running torch SDPA (``reference`` picks the backend) on q, k, v."""
    import torch.nn.functional as F

    if reference not in SDPA_REFERENCES:
        raise ValueError(f"unknown reference {reference!r}: choose from {SDPA_REFERENCES}")

    def call():
        with _backend(reference):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return call


def sdpa_available(reference: str, q, k, v, causal: bool = False) -> bool:
    """Whether this SDPA backend runs on these inputs (cuDNN or flash may refuse a shape/dtype)."""
    try:
        sdpa_call(reference, q, k, v, causal)()
        return True
    except RuntimeError:
        return False


def large_logit_tolerance(rel_tol: float, max_score: float) -> float:
    """A score's rounding error grows with its size and exp() turns it into a relative error of P:
    the bound for inputs with large scores scales with the largest |score| (about 10 at unit scale)."""
    return rel_tol * max(1.0, max_score / 10.0)


# ---------------------------------------------------------------- correctness

def check(kernels: Sequence[str], shapes: Iterable[tuple[int, int, int, int]], *, seed: int,
          causal: bool = False, logit_scale: float = 1.0, nan_row: bool = False,
          params: Mapping[str, Mapping[str, int]] | None = None) -> pd.DataFrame:
    """Each kernel on fresh random inputs of every (B, H, N, D), beside float64 and torch SDPA
    (default backend) on the same inputs. The output is poisoned with NaN before each launch.

    ``nan_row`` puts a NaN into one query row: that row must come out NaN, every other row finite
    and accurate. ``passed`` applies the kernel's registry tolerance (scaled for large scores).
    """
    import torch

    rows = []
    for i, (B, H, N, D) in enumerate(shapes):
        by_dtype: dict[str, tuple] = {}
        for name in kernels:
            spec = get_spec(name)
            if D not in spec.head_dims or (causal and not spec.causal):
                continue
            dtype = spec.dtypes[0]
            if dtype not in by_dtype:
                q, k, v = random_inputs(B, H, N, D, dtype, seed=seed * 1000 + i, logit_scale=logit_scale)
                bad = None
                if nan_row:
                    bad = (B - 1, H - 1, N // 2)
                    q[bad][0] = float("nan")
                ref = attention_fp64(q, k, v, causal=causal)
                sdpa = attention_sdpa(q, k, v, causal=causal)
                keep = torch.ones(B, H, N, dtype=torch.bool)
                if bad is not None:
                    keep[bad] = False
                keep_np = keep.numpy()
                qd, kd = q.double(), k.double()
                max_score = float((qd @ kd.transpose(-1, -2)).nan_to_num(0).abs().max()) / D ** 0.5
                sdpa_err = rel_error(sdpa.float().cpu().numpy()[keep_np], _host(ref)[keep_np])
                by_dtype[dtype] = (q, k, v, ref, keep_np, bad, max_score, sdpa_err)
            q, k, v, ref, keep_np, bad, max_score, sdpa_err = by_dtype[dtype]
            out = torch.full_like(q, float("nan"))
            run_attention(name, q, k, v, out=out, causal=causal, params=(params or {}).get(name))
            torch.cuda.synchronize()
            o = out.float().cpu().numpy()
            err = rel_error(o[keep_np], _host(ref)[keep_np])
            nan_ok = True if bad is None else bool(np.isnan(o[bad]).all())
            tol = large_logit_tolerance(spec.rel_tol, max_score) if logit_scale != 1.0 else spec.rel_tol
            rows.append(dict(kernel=name, dtype=dtype, causal=causal, B=B, H=H, N=N, D=D,
                             logit_scale=logit_scale, nan_row=nan_row, max_score=max_score,
                             all_written=bool(np.isfinite(o[keep_np]).all()), nan_row_ok=nan_ok,
                             rel_err_fp64=err, sdpa_rel_err_fp64=sdpa_err,
                             err_vs_sdpa=_ratio(err, sdpa_err),
                             tolerance=tol, passed=bool(np.isfinite(o[keep_np]).all() and nan_ok and err < tol)))
    return pd.DataFrame(rows)


#: Edge shapes (B, H, N) every flash kernel is checked on: one row, tails on both sides of a tile,
#: N = 4097, one head, and B·H = 1000 short sequences.
EDGE_SHAPES = ((1, 1, 1), (1, 1, 2), (2, 8, 63), (2, 8, 65), (1, 3, 4097), (1, 1, 4097), (1000, 1, 17))


def check_suite(kernels: Sequence[str], D_list: Sequence[int], *, seed: int, N_grid: Sequence[int] = (),
                B: int = 2, H: int = 8) -> pd.DataFrame:
    """The correctness table of a flash notebook: every kernel on the edge shapes and the timing
    grid's N (at B, H), large logits (scores of several hundred), a NaN in one query row, and the
    causal variants where a kernel has them. One row per (kernel, case, shape)."""
    frames = []
    for D in D_list:
        shapes = [(*s, D) for s in EDGE_SHAPES] + [(B, H, n, D) for n in N_grid]
        frames.append(check(kernels, shapes, seed=seed).assign(case="random"))
        frames.append(check(kernels, [(2, 3, 257, D)], seed=seed + 1, logit_scale=8.0).assign(case="large logits"))
        frames.append(check(kernels, [(2, 3, 257, D)], seed=seed + 2, nan_row=True).assign(case="NaN row"))
        if any(get_spec(k).causal for k in kernels):
            frames.append(check(kernels, shapes, seed=seed + 3, causal=True).assign(case="causal"))
    return pd.concat(frames, ignore_index=True)


def check_summary(checks: pd.DataFrame) -> pd.DataFrame:
    """Per kernel and case: how many shapes passed, the worst error and SDPA's worst on the same inputs."""
    return (checks.groupby(["kernel", "case"], sort=False)
            .agg(shapes=("passed", "size"), passed=("passed", "sum"), worst_rel_err=("rel_err_fp64", "max"),
                 sdpa_worst_rel_err=("sdpa_rel_err_fp64", "max"), worst_err_vs_sdpa=("err_vs_sdpa", "max"))
            .reset_index())


def _ratio(err: float, ref_err: float) -> float:
    """err / ref_err; where the reference is exact (N = 1: the output is a row of V), 0 when we
    are exact too, else inf."""
    if ref_err > 0:
        return err / ref_err
    return 0.0 if err == 0 else float("inf")


def _host(a) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


# ---------------------------------------------------------------- timing

def time_kernels(kernels: Sequence[str], B: int, H: int, N_list: Sequence[int], D_list: Sequence[int], *,
                 dtype: str, references: Sequence[str] = ("sdpa",), causal: bool = False,
                 budget_s: float = 0.5, seed: int = 0,
                 params: Mapping[str, Mapping[str, int]] | None = None) -> pd.DataFrame:
    """Median latency of each kernel and each SDPA reference over the (D, N) grid, in one run.

    Every entry of one (D, N) shares the same fresh inputs and is timed interleaved with the
    others (one sample of each per round, CUDA events, warm-up, L2 flushed before each sample;
    attnlab.timing.time_rows, interleaved), so a ratio compares kernels under the same device
    conditions. A reference that refuses the inputs (a backend without this dtype or head dim) is
    left out of the table, not timed.
    """
    from .env import device_name, gpu_slug
    from .timing import time_rows

    gpu = gpu_slug(device_name())     # the ladder kernels take this GPU's tuned tiles, as run_attention does
    rows = []
    for D in D_list:
        for N in N_list:
            q, k, v = random_inputs(B, H, N, D, dtype, seed=seed + 17 * N + D)
            out = q.new_empty(q.shape)
            flops = attention_flops(B, H, N, D, causal)
            entries = []
            for name in kernels:
                spec = get_spec(name)
                if D not in spec.head_dims or dtype not in spec.dtypes or (causal and not spec.causal):
                    continue
                p = (params or {}).get(name)
                plan = get_kernel(name, D, gpu=gpu, dtype=dtype, causal=causal, params=p)
                # validated and planned once: the timed region holds the launch alone
                call = prepare_attention(name, q, k, v, out=out, causal=causal, params=p, gpu=gpu)
                described = ",".join(f"{a}={b}" for a, b in plan.params.items())
                entries.append((dict(kernel=name, step=spec.step, params=described), call))
            for ref in references:
                if sdpa_available(ref, q, k, v, causal):
                    entries.append((dict(kernel=ref, step="", params="library"), sdpa_call(ref, q, k, v, causal)))
            if not entries:
                continue
            point = dict(dtype=dtype, causal=causal, B=B, H=H, N=N, D=D)
            for row in time_rows(entries, budget_s=budget_s, interleaved=True,
                                 flops=flops):
                tflops = row.pop("tflops")
                rows.append(dict(kernel=row.pop("kernel"), step=row.pop("step"), **point, params=row.pop("params"),
                                 **row, flops=flops, tflops=tflops))
    return pd.DataFrame(rows)


#: Tile candidates notebook 10 scans for its last two steps (the notebook-05 way: every candidate
#: timed in one run; the registry's defaults are the scan's choice per D).
TILE_CANDIDATES = {
    "fa2_tuned": [dict(BM=64, BN=64, WARPS=4, STAGES=3), dict(BM=64, BN=64, WARPS=4, STAGES=2),
                  dict(BM=128, BN=64, WARPS=8, STAGES=3), dict(BM=128, BN=128, WARPS=8, STAGES=2),
                  dict(BM=64, BN=128, WARPS=4, STAGES=2)],
    "two_row_tiles": [dict(BM=128, BN=64, WARPS=4, STAGES=3, KC=32), dict(BM=128, BN=64, WARPS=4, STAGES=2, KC=64),
                      dict(BM=256, BN=64, WARPS=8, STAGES=2, KC=64), dict(BM=128, BN=32, WARPS=4, STAGES=3, KC=32)],
    "occupancy": [dict(BM=64, BN=48, WARPS=4, STAGES=2, MINB=3, QREG=1), dict(BM=64, BN=32, WARPS=4, STAGES=3, MINB=3, QREG=1),
                  dict(BM=64, BN=32, WARPS=4, STAGES=2, MINB=4, QREG=0), dict(BM=64, BN=48, WARPS=4, STAGES=2, MINB=3, QREG=0),
                  dict(BM=64, BN=64, WARPS=4, STAGES=2, MINB=0, QREG=1), dict(BM=64, BN=64, WARPS=4, STAGES=3, MINB=0, QREG=1)],
    "stream_k": [dict(BM=96, BN=48, WARPS=6, STAGES=2, MINB=2, QREG=1), dict(BM=96, BN=64, WARPS=6, STAGES=2, MINB=2, QREG=1),
                 dict(BM=64, BN=48, WARPS=4, STAGES=2, MINB=3, QREG=1), dict(BM=64, BN=64, WARPS=4, STAGES=2, MINB=3, QREG=1),
                 dict(BM=64, BN=64, WARPS=4, STAGES=2, MINB=0, QREG=1)],
    "copy_warps": [dict(BM=64, BN=48, WARPS=4, STAGES=2, MINB=3, QREG=1, FILL=0, CW=2),
                   dict(BM=64, BN=48, WARPS=4, STAGES=2, MINB=3, QREG=1, FILL=100, CW=2),
                   dict(BM=96, BN=48, WARPS=6, STAGES=2, MINB=2, QREG=1, FILL=100, CW=2),
                   dict(BM=64, BN=64, WARPS=4, STAGES=2, MINB=0, QREG=1, FILL=90, CW=2),
                   dict(BM=64, BN=64, WARPS=4, STAGES=2, MINB=0, QREG=1, FILL=90, CW=1)],
    "fixed_offsets": [dict(BM=64, BN=64, WARPS=4, STAGES=3), dict(BM=64, BN=64, WARPS=4, STAGES=2),
                      dict(BM=128, BN=64, WARPS=8, STAGES=3), dict(BM=128, BN=128, WARPS=8, STAGES=2),
                      dict(BM=64, BN=128, WARPS=4, STAGES=2)],
}


def tile_scan(candidates: Mapping[str, Sequence[Mapping[str, int]]], B: int, H: int, N: int,
              D_list: Sequence[int], *, dtype: str, budget_s: float, seed: int) -> pd.DataFrame:
    """Every candidate tile of every kernel timed at (D, N) in one run; a candidate the kernel's
    constraints refuse at some D is left out there (and named in the ``skipped`` column)."""
    frames = []
    for name, cands in candidates.items():
        for p in cands:
            for D in D_list:
                try:
                    frames.append(time_kernels([name], B, H, [N], [D], dtype=dtype, references=(), budget_s=budget_s,
                                               seed=seed, params={name: dict(p)}).assign(skipped=""))
                except ValueError as exc:   # the registry's constraint: not a valid tile at this D
                    frames.append(pd.DataFrame([dict(kernel=name, D=D, N=N, params=",".join(f"{a}={b}" for a, b in p.items()),
                                                     skipped=str(exc))]))
    return pd.concat(frames, ignore_index=True)


def fastest(timing: pd.DataFrame, kernels: Sequence[str], points: Sequence[tuple[int, int]],
            causal: bool = False) -> str | None:
    """The kernel with the lowest geometric-mean time over the (D, N) points, all measured in the
    same run; None when a kernel lacks a point."""
    best, best_t = None, float("inf")
    for k in kernels:
        t = timing[(timing["kernel"] == k) & (timing["causal"] == causal)].set_index(["D", "N"])["median_ms"]
        if not all(p in t.index for p in points):
            continue
        g = float(np.exp(np.mean([np.log(t.loc[p]) for p in points])))
        if g < best_t:
            best, best_t = k, g
    return best


# ---------------------------------------------------------------- static build (no GPU)

#: PTX instructions that show which hardware path a kernel took.
PTX_EVIDENCE = {"mma_tf32": "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
                "mma_bf16": "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                "mma_f16": "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                "ldmatrix": "ldmatrix.sync", "cp_async": "cp.async.cg", "ld_v4": "ld.global.nc.v4",
                "ex2": "ex2.approx", "wgmma": "wgmma.mma_async", "tma": "cp.async.bulk.tensor",
                "mbarrier": "mbarrier.try_wait", "setmaxnreg": "setmaxnreg"}


def static_table(kernels: Sequence[str], archs: Sequence[str] = ("sm_90",), *,
                 causal: Sequence[bool] = (False, True)) -> pd.DataFrame:
    """Registers, spills, shared memory and PTX instruction counts of every registered
    instantiation (each head dim, dtype and, where supported, causal variant), from the static
    build: nvcc/NVRTC with no GPU."""
    from .attention import resolve_params
    from .static import static_build

    rows = []
    for name in kernels:
        spec = get_spec(name)
        combos = [(d, dt, c) for d in spec.head_dims for dt in spec.dtypes for c in causal
                  if spec.causal or not c]
        for arch in archs:
            if spec.min_cc and int(arch.split("_")[1][:2]) < spec.min_cc:
                continue
            if spec.arch:   # an architecture-specific kernel builds only for its own target (sm_90 -> sm_90a)
                if spec.arch.rstrip("a") != arch:
                    continue
                arch = spec.arch
            if spec.flash:
                params = [resolve_params(name, d)[0] for d, _, _ in combos]
                args = [spec.flash_template_args(d, p, dt, c) for (d, dt, c), p in zip(combos, params)]
            else:
                params = [resolve_params(name, d)[0] for d, _, _ in combos]
                args = [spec.template_args(d, p["tile_rows"], p["tile_kv"]) for (d, _, _), p in zip(combos, params)]
            for (d, dt, c), p, rep in zip(combos, params, static_build(spec.source, spec.function, args, arch)):
                _, threads, smem = spec.launch(1, 1, d, p)
                rows.append(dict(kernel=name, step=spec.step, arch=arch, D=d, dtype=dt, causal=c,
                                 params=",".join(f"{a}={b}" for a, b in p.items()), threads=threads,
                                 registers=rep.registers, dynamic_smem_bytes=smem,
                                 static_smem_bytes=rep.static_smem_bytes, spill_bytes=rep.spill_store_bytes
                                 + rep.spill_load_bytes, stack_bytes=rep.stack_bytes,
                                 **{k: rep.ptx.count(v) for k, v in PTX_EVIDENCE.items()}))
    return pd.DataFrame(rows)


def runtime_compiler() -> str:
    """The compiler that builds the kernels this process launches: CuPy's NVRTC and its version."""
    try:
        import cupy as cp
        major, minor = cp.cuda.nvrtc.getVersion()
        return f"NVRTC {major}.{minor} (CuPy {cp.__version__})"
    except Exception as exc:  # noqa: BLE001 - a report names what it could not find
        return f"unknown ({type(exc).__name__})"


def loaded_table(kernels: Sequence[str], D_list: Sequence[int], *, dtype: str = "bfloat16",
                 causal: Sequence[bool] = (False, True)) -> pd.DataFrame:
    """Registers and local memory (spills) of each kernel as this process loads it (GPU): the
    compiler the launcher uses (NVRTC through CuPy) may allocate registers differently from the
    static build's nvcc/NVRTC, and only what is loaded runs."""
    compiler = runtime_compiler()
    rows = []
    for name in kernels:
        spec = get_spec(name)
        for d in D_list:
            if d not in spec.head_dims:
                continue
            for c in causal:
                if c and not spec.causal:
                    continue
                plan = get_kernel(name, d, dtype=dtype, causal=c)
                rows.append(dict(kernel=name, step=spec.step, D=d, dtype=dtype, causal=c,
                                 params=",".join(f"{a}={b}" for a, b in plan.params.items()),
                                 registers=int(plan.kernel.num_regs),
                                 local_bytes=int(plan.kernel.local_size_bytes), compiler=compiler))
    return pd.DataFrame(rows)


def compare_loaded(static: pd.DataFrame, loaded: pd.DataFrame) -> pd.DataFrame:
    """The static build beside the loaded kernel, per (kernel, D, causal) of ``loaded`` (the static
    table's rows of the loaded dtype and parameters)."""
    keys = ["kernel", "D", "causal", "params"]
    st = static[static["dtype"].isin(set(loaded["dtype"]))]
    st = st.groupby(keys, as_index=False)[["registers", "spill_bytes"]].first()
    out = loaded.merge(st.rename(columns={"registers": "static_registers", "spill_bytes": "static_spill_bytes"}),
                       on=keys, how="left")
    return out[["kernel", "step", "D", "causal", "params", "static_registers", "static_spill_bytes",
                "registers", "local_bytes", "compiler"]]


def describe_loaded(cmp: pd.DataFrame) -> str:
    """One generated sentence: which kernels spill as loaded although the static build does not."""
    if cmp.empty:
        return "No kernel was loaded."
    compiler = ", ".join(sorted(set(cmp["compiler"].astype(str))))
    bad = cmp[(cmp["local_bytes"] > 0) & ~(cmp["static_spill_bytes"] > 0)]
    if bad.empty:
        spill = cmp[cmp["local_bytes"] > 0]
        if spill.empty:
            return (f"As loaded ({compiler}), no kernel uses local memory: the static build's register and "
                    f"spill figures hold for what runs.")
        items = "; ".join(f"{r.kernel} D={r.D}{' causal' if r.causal else ''}: {r.local_bytes} B "
                          f"(static build: {r.static_spill_bytes} B of spill stores)" for r in spill.itertuples())
        return (f"As loaded ({compiler}), {len(spill)} of {len(cmp)} kernel variants use local memory, and the "
                f"static build spills in each of them too — {items}. Every other variant uses none.")
    items = "; ".join(f"{r.kernel} D={r.D}{' causal' if r.causal else ''}: {r.local_bytes} B of local memory "
                      f"at {r.registers} registers (static build: {r.static_registers}, no spills)"
                      for r in bad.itertuples())
    return (f"As loaded ({compiler}), {len(bad)} of {len(cmp)} kernel variants spill although the static "
            f"build does not — {items}. Their timings include those spills.")


# ---------------------------------------------------------------- ratios and verdicts (pure)

def ratios(timing: pd.DataFrame, kernel: str, reference: str) -> pd.DataFrame:
    """Per (causal, D, N): the kernel's and the reference's median times from the same run and
    ``x`` = reference time / kernel time (above 1: the kernel is faster)."""
    keys = ["causal", "D", "N"]
    mine = timing[timing["kernel"] == kernel].set_index(keys)
    ref = timing[timing["kernel"] == reference].set_index(keys)
    both = mine.index.intersection(ref.index)
    out = pd.DataFrame({"kernel_ms": mine.loc[both, "median_ms"], "reference_ms": ref.loc[both, "median_ms"],
                        "kernel_tflops": mine.loc[both, "tflops"]})
    out["x"] = out["reference_ms"] / out["kernel_ms"]
    out.insert(0, "reference", reference)
    out.insert(0, "kernel", kernel)
    return out.reset_index()


def step_gains(timing: pd.DataFrame, kernels: Sequence[str]) -> pd.DataFrame:
    """What each step bought: for every kernel whose registry predecessor is also timed, ``x`` =
    predecessor time / kernel time per (causal, D, N) of the same run (above 1: the step helped)."""
    frames = [ratios(timing, k, get_spec(k).predecessor).rename(columns={"reference": "predecessor"})
              for k in kernels if get_spec(k).predecessor in set(timing["kernel"])]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["kernel", "predecessor", "causal", "D", "N", "kernel_ms", "reference_ms", "kernel_tflops", "x"])


def describe_step_gains(gains: pd.DataFrame) -> str:
    """One generated line per step: the range and median of its gain over the points measured."""
    lines = []
    for (k, pred), g in gains.groupby(["kernel", "predecessor"], sort=False):
        word = "faster" if g["x"].median() > 1 else "slower"
        lines.append(f"- **{get_spec(k).step} {k}** against {get_spec(pred).step} {pred}: "
                     f"{g['x'].min():.2f}–{g['x'].max():.2f}× (median {g['x'].median():.2f}×, {word}) over "
                     f"{len(g)} measured points (D, N, causal).")
    return "\n".join(lines)


def min_ratio(timing: pd.DataFrame, kernel: str, reference: str, *, D_list: Sequence[int],
              N_list: Sequence[int], causal: bool = False) -> float:
    """The smallest ``x`` over the given (D, N) points; NaN when any point was not measured (a
    verdict must never pass on missing data)."""
    r = ratios(timing, kernel, reference)
    r = r[(r["causal"] == causal) & r["D"].isin(D_list) & r["N"].isin(N_list)]
    if len(r) < len(D_list) * len(N_list):
        return float("nan")
    return float(r["x"].min())


def verdict(name: str, value: float, target: float, *, higher_is_better: bool = True) -> dict:
    """One row of a verdict table: met / missed / not measured, with the margin."""
    if value is None or not np.isfinite(value):
        status = "not measured"
    elif (value >= target) if higher_is_better else (value <= target):
        status = "met"
    else:
        status = "missed"
    return dict(target=name, value=value, required=("≥ " if higher_is_better else "≤ ") + f"{target:g}",
                status=status, margin=(value / target if higher_is_better else target / value)
                if value and np.isfinite(value) else float("nan"))


def verdict_table(rows: Sequence[dict]) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=["target", "value", "required", "status", "margin"])


def describe_verdicts(table: pd.DataFrame, source: str) -> str:
    """Markdown sentences generated from a verdict table: each states the measured value, the
    requirement and whether it is met, so no sentence can disagree with its number."""
    lines = []
    for r in table.itertuples():
        if r.status == "not measured":
            lines.append(f"- **{r.target}**: not measured in this run (required {r.required}).")
        elif r.status == "met":
            lines.append(f"- **{r.target}**: {r.value:.3g} against the required {r.required} — **met**.")
        else:
            # a miss never reads as "100 % of the target": floor the share at one decimal
            share = math.floor(r.margin * 1000) / 10
            lines.append(f"- **{r.target}**: {r.value:.4g} against the required {r.required} — **missed** "
                         f"({share:.1f} % of the target).")
    return "\n".join(lines) + f"\n\n_{source}_"


def ladder_table(timing: pd.DataFrame, static: pd.DataFrame, kernels: Sequence[str], *, D: int, N: int,
                 causal: bool, references: Sequence[str], roof_tflops: float | None = None) -> pd.DataFrame:
    """One row per kernel at (D, N, causal): time, TFLOP/s, % of the roof, × each reference from
    the same run, and the static build's registers, spills and shared memory."""
    t = timing[(timing["D"] == D) & (timing["N"] == N) & (timing["causal"] == causal)].set_index("kernel")
    st = static[(static["D"] == D) & (static["causal"] == causal)].drop_duplicates("kernel").set_index("kernel")
    rows = []
    for k in kernels:
        if k not in t.index:
            continue
        row = dict(kernel=k, step=get_spec(k).step, median_ms=t.loc[k, "median_ms"], tflops=t.loc[k, "tflops"])
        if roof_tflops:
            row["pct_of_roof"] = 100.0 * row["tflops"] / roof_tflops
        for ref in references:
            row[f"x_{ref}"] = t.loc[ref, "median_ms"] / row["median_ms"] if ref in t.index else float("nan")
        if k in st.index:
            row.update(registers=int(st.loc[k, "registers"]), spill_bytes=int(st.loc[k, "spill_bytes"]),
                       smem_bytes=int(st.loc[k, "dynamic_smem_bytes"] + st.loc[k, "static_smem_bytes"]))
        rows.append(row)
    return pd.DataFrame(rows)


def plot_tflops(ax, timing: pd.DataFrame, kernels: Sequence[str], *, D: int, causal: bool = False,
                title: str = "") -> None:
    """TFLOP/s against N, one distinguishable line per kernel or reference (references dashed)."""
    import matplotlib.pyplot as plt

    t = timing[(timing["D"] == D) & (timing["causal"] == causal)]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, k in enumerate(kernels):
        r = t[t["kernel"] == k].sort_values("N")
        if r.empty:
            continue
        ax.plot(r["N"], r["tflops"], marker="o", color=colours[i % len(colours)],
                linestyle="--" if k.startswith("sdpa") else "-", label=k)
    ax.set(xscale="log", xlabel="N (sequence length)", ylabel="TFLOP/s", title=title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")


def describe_counters(summary: pd.DataFrame) -> str:
    """One generated line per profiled launch (attnlab.ncu.flash_summary's columns): where its time
    goes, in the counters' own numbers."""
    def pct(v):
        return "n/a" if v is None or not np.isfinite(v) else f"{v:.0f} %"
    lines = []
    for r in summary.to_dict("records"):
        head = f"- **{r['kernel']}** (D={r['D']}{', causal' if r.get('causal') else ''}): "
        parts = [f"tensor pipe {pct(r.get('tensor_pipe_pct'))} of peak", f"FMA pipe {pct(r.get('fma_pipe_pct'))}",
                 f"issue slots {pct(r.get('issue_pct'))}", f"occupancy {pct(r.get('occupancy_pct'))}"]
        if isinstance(r.get("stall_1"), str):
            parts.append(f"top stalls {r['stall_1']} ({r['stall_1_share']:.0%}), {r.get('stall_2')} "
                         f"({r.get('stall_2_share', float('nan')):.0%})")
        for key, label in (("smem_ld_conflicts_per_wavefront", "shared-load"), ("ldsm_conflicts_per_wavefront", "ldmatrix")):
            v = r.get(key)
            if v is not None and np.isfinite(v):
                parts.append(f"{v:.2f} {label} bank conflicts per wavefront")
        lines.append(head + "; ".join(parts) + ".")
    return "\n".join(lines)
