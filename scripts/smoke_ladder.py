#!/usr/bin/env python3
"""GPU smoke test of the ladder kernels 02–05 (tiled, vec_load, vec_padded, double_buffer).

    PYTHONPATH=lib python scripts/smoke_ladder.py            # correctness + a short timing preview
    PYTHONPATH=lib python scripts/smoke_ladder.py --no-timing

For every kernel × D ∈ {32, 64, 128} × shape (B, H, N) — including N=1, N=63/65 (partial tiles),
N=4097, B·H=1 and B·H=1000 — and for a few non-default tiles: fresh random inputs, the output
poisoned with NaN before the launch, then relative error vs float64 < 1e-5 and
torch.allclose(atol=1e-2, rtol=1e-2) vs torch SDPA. The float4 kernels must refuse a misaligned
view with ValueError; the scalar tiled kernel must compute it correctly. Also reported (INFO, not
pass/fail): max |kernel − naive| on identical inputs (the seed saw 0) and a latency preview.
Prints one PASS/FAIL line per case; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback

import numpy as np

KERNELS = ("tiled", "vec_load", "vec_padded", "double_buffer")
HEAD_DIMS = (32, 64, 128)
SHAPES = ((2, 8, 64), (1, 1, 1), (2, 8, 63), (2, 8, 65), (1, 3, 4097), (1000, 1, 17), (2, 8, 1000))
#: non-default (TILE_ROWS, TILE_KV), tried on a small and a partial-tile shape
EXTRA_TILES = ((1, 8), (2, 128), (4, 64), (16, 32), (32, 16), (32, 128))
EXTRA_SHAPES = ((2, 4, 100), (1, 2, 7))
REL_ERR_MAX = 1e-5
ATOL = RTOL = 1e-2

failures: list[str] = []
passes = 0


def report(ok: bool, what: str, detail: str) -> None:
    global passes
    tag = "PASS" if ok else "FAIL"
    print(f"{tag}  {what:<58} {detail}", flush=True)
    if ok:
        passes += 1
    else:
        failures.append(what)


def random_qkv(rng, B, H, N, D):
    import cupy as cp

    return tuple(cp.asarray(rng.standard_normal((B, H, N, D), dtype=np.float32)) for _ in range(3))


def check(name, q, k, v, tile_rows=None, tile_kv=None, label=""):
    """Launch once into a NaN-poisoned buffer and compare with float64 and with SDPA."""
    import cupy as cp
    import torch

    from attnlab.attention import run_attention
    from attnlab.reference import attention_fp64, attention_sdpa, rel_error

    B, H, N, D = q.shape
    what = f"{name:<13} D={D:<3} B={B:<4} H={H:<2} N={N:<5}{label}"
    try:
        out = cp.full(q.shape, np.nan, dtype=cp.float32)
        run_attention(name, q, k, v, tile_rows=tile_rows, tile_kv=tile_kv, out=out)
        cp.cuda.get_current_stream().synchronize()
        written = bool(cp.isfinite(out).all())
        err = rel_error(out, attention_fp64(q, k, v))
        sdpa = attention_sdpa(q, k, v)
        close = bool(torch.allclose(torch.from_dlpack(out), sdpa, atol=ATOL, rtol=RTOL))
        ok = written and err < REL_ERR_MAX and close
        report(ok, what, f"rel_err_fp64={err:.2e} allclose_sdpa={close} all_written={written}")
    except Exception as exc:  # noqa: BLE001 - a crash is a failure of this case, keep going
        report(False, what, f"raised {type(exc).__name__}: {exc}")
        traceback.print_exc(limit=3)


def misaligned_view(rng, B, H, N, D):
    """A C-contiguous float32 view whose data pointer is 4 bytes past a 16-byte boundary."""
    import cupy as cp

    buf = cp.empty(B * H * N * D + 4, dtype=cp.float32)
    base_off = (-(buf.data.ptr // 4)) % 4          # floats to the next 16-byte boundary
    view = buf[base_off + 1: base_off + 1 + B * H * N * D].reshape(B, H, N, D)
    view[...] = cp.asarray(rng.standard_normal((B, H, N, D), dtype=np.float32))
    assert view.data.ptr % 16 == 4 and view.flags.c_contiguous
    return view


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-timing", action="store_true", help="skip the latency preview")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import cupy as cp

    from attnlab.attention import get_spec, max_dynamic_smem, run_attention
    from attnlab.env import device_name

    print(f"device: {device_name()}, CuPy {cp.__version__}, max dynamic smem/block {max_dynamic_smem()} B")
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()

    # 1. default tiles, every shape
    for D in HEAD_DIMS:
        for B, H, N in SHAPES:
            q, k, v = random_qkv(rng, B, H, N, D)
            for name in KERNELS:
                check(name, q, k, v)

    # 2. non-default tiles (tiles whose shared memory does not fit must be refused, not launched)
    limit = max_dynamic_smem()
    for D in HEAD_DIMS:
        for B, H, N in EXTRA_SHAPES:
            q, k, v = random_qkv(rng, B, H, N, D)
            for name in KERNELS:
                for tr, tkv in EXTRA_TILES:
                    need = get_spec(name).smem_bytes(D, tr, tkv)
                    if need > limit:
                        what = f"{name:<13} D={D:<3} tile {tr}x{tkv} needs {need} B > {limit} B"
                        try:
                            run_attention(name, q, k, v, tile_rows=tr, tile_kv=tkv)
                            report(False, what, "launched although the tile does not fit")
                        except ValueError as exc:
                            report(True, what, f"refused: {str(exc)[:60]}")
                        continue
                    check(name, q, k, v, tr, tkv, label=f" tile={tr}x{tkv}")

    # 3. misaligned inputs: refused by the float4 kernels, computed correctly by the scalar one
    for D in HEAD_DIMS:
        B, H, N = 2, 2, 33
        q = misaligned_view(rng, B, H, N, D)
        k, v = (cp.ascontiguousarray(a) for a in random_qkv(rng, B, H, N, D)[:2])
        for name in KERNELS:
            if get_spec(name).vector_loads:
                what = f"{name:<13} D={D:<3} misaligned q (ptr % 16 = 4)"
                try:
                    run_attention(name, q, k, v)
                    report(False, what, "accepted a misaligned view (float4 loads would fault or misread)")
                except ValueError as exc:
                    report("aligned" in str(exc), what, f"refused with ValueError: {str(exc)[:60]}")
            else:
                check(name, q, k, v, label=" misaligned q")

    # 4. INFO: same inputs, max |kernel - naive| (0 = bit-identical, as the seed reported)
    print("\nINFO  max |kernel - naive| on identical inputs (0.0 = bit-identical):")
    for D in HEAD_DIMS:
        q, k, v = random_qkv(rng, 2, 8, 257, D)
        ref = run_attention("naive", q, k, v)
        diffs = {name: float(cp.abs(run_attention(name, q, k, v) - ref).max()) for name in KERNELS}
        print(f"INFO  D={D:<3} N=257 " + "  ".join(f"{n}={d:.1e}" for n, d in diffs.items()))

    # 5. INFO: latency preview (default tiles, B=2, H=8)
    if not args.no_timing:
        import torch
        import torch.nn.functional as F

        from attnlab.timing import time_gpu

        print("\nINFO  latency preview, median ms (B=2, H=8, fp32, default tiles, L2 flushed):")
        for D in HEAD_DIMS:
            for N in (1024, 4096):
                q, k, v = random_qkv(rng, 2, 8, N, D)
                out = cp.empty_like(q)
                cells = []
                for name in ("naive",) + KERNELS:
                    t = time_gpu(lambda: run_attention(name, q, k, v, out=out), budget_s=0.3)
                    cells.append(f"{name}={t.median_ms:.3f}")
                qt, kt, vt = (torch.from_dlpack(a) for a in (q, k, v))
                t = time_gpu(lambda: F.scaled_dot_product_attention(qt, kt, vt), budget_s=0.3)
                cells.append(f"sdpa={t.median_ms:.3f}")
                print(f"INFO  D={D:<3} N={N:<5} " + "  ".join(cells))

    print(f"\n{passes} passed, {len(failures)} failed in {time.perf_counter() - t0:.1f} s")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("ALL PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
