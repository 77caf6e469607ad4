"""Launcher validation (CPU) and the kernels themselves on a GPU (skipped without one)."""

import numpy as np
import pytest

from attnlab.attention import (DEFAULT_TILES, KERNELS, SEED_LADDER, SEED_TILED, get_spec, resolve_params,
                                resolve_tiles, validate_qkv)
from attnlab.attention.bench import EDGE_SHAPES
from attnlab.paths import KERNELS_DIR


def test_unknown_kernel_is_named():
    with pytest.raises(ValueError, match="unknown kernel 'fast'.*naive"):
        get_spec("fast")


def test_tiles_default_caller_and_invalid():
    assert resolve_tiles("tiled", 64) == (*DEFAULT_TILES[64], "default")
    assert resolve_tiles("tiled", 64, 4, 32) == (4, 32, "caller")
    assert resolve_tiles("tiled", 128, tile_rows=16)[:2] == (16, DEFAULT_TILES[128][1])
    assert resolve_tiles("naive", 32)[2] == "untiled"
    with pytest.raises(ValueError, match="tile_rows=3"):
        resolve_tiles("tiled", 64, 3, 16)
    with pytest.raises(ValueError, match="tile_kv=12"):
        resolve_tiles("tiled", 64, 8, 12)
    with pytest.raises(ValueError, match="not tiled"):
        resolve_tiles("naive", 64, 8, 16)
    with pytest.raises(ValueError, match="unsupported head dim D=96"):
        resolve_tiles("tiled", 96)


def test_shared_memory_layouts_match_the_seed():
    # Seed 000 reports 10, 11 and 12 KB for its best tiles at D = 32, 64, 128 (Q + K + V tiles).
    spec = get_spec("tiled")
    assert [spec.smem_bytes(d, *DEFAULT_TILES[d]) // 1024 for d in (32, 64, 128)] == [9, 10, 12]
    padded = get_spec("vec_padded").smem_bytes(64, 8, 16)
    assert padded == (8 + 2 * 16) * (64 + 4) * 4
    assert get_spec("double_buffer").smem_bytes(64, 8, 16) == (8 + 4 * 16) * 68 * 4
    assert get_spec("naive").smem_bytes(64, 1, 0) == 0


def test_host_arrays_are_refused_with_the_reason():
    q = np.zeros((1, 1, 4, 32), np.float32)
    with pytest.raises(ValueError, match="q must be on a CUDA device, got a NumPy array"):
        validate_qkv(q, q, q)
    with pytest.raises(ValueError, match="expected a CuPy array or a CUDA torch tensor, got list"):
        validate_qkv([1.0], q, q)


def _np(B=1, H=2, N=16, D=64, dtype=np.float32):
    return np.random.default_rng(0).standard_normal((B, H, N, D)).astype(dtype)


@pytest.mark.parametrize("args, message", [
    ((_np(dtype=np.float16), _np(), _np()), "q must be float32 for this kernel, got float16"),
    ((_np()[0], _np(), _np()), "4 dims"),
    ((_np().transpose(0, 1, 3, 2).copy().transpose(0, 1, 3, 2), _np(), _np()), "C-contiguous"),
    ((_np(), _np(N=8), _np()), "share one shape"),
    ((_np(D=48), _np(D=48), _np(D=48)), "unsupported head dim D=48"),
    ((_np(N=0), _np(N=0), _np(N=0)), "at least 1"),
], ids=["dtype", "dims", "strides", "shape", "head-dim", "empty"])
def test_validation_runs_on_host_arrays_before_the_device_check(args, message):
    """Every shape/dtype/layout error is found on NumPy arrays, i.e. without a GPU."""
    with pytest.raises(ValueError, match=message):
        validate_qkv(*args)


def test_sixteen_bit_kernels_validate_their_dtypes():
    torch = pytest.importorskip("torch")
    for name, spec in KERNELS.items():
        if "bfloat16" in spec.dtypes:
            t = torch.zeros(1, 1, 4, 64, dtype=torch.bfloat16)
            with pytest.raises(ValueError, match="must be on a CUDA device"):   # dtype accepted, device not
                validate_qkv(t, t, t, dtypes=spec.dtypes, head_dims=spec.head_dims)
            with pytest.raises(ValueError, match="must be bfloat16 or float16"):
                f = torch.zeros(1, 1, 4, 64)
                validate_qkv(f, f, f, dtypes=spec.dtypes, head_dims=spec.head_dims)


def test_cpu_torch_tensors_are_refused():
    torch = pytest.importorskip("torch")
    t = torch.zeros(1, 1, 4, 32)
    with pytest.raises(ValueError, match="must be on a CUDA device"):
        validate_qkv(t, t, t)


# ---------------------------------------------------------------- on the GPU

def _qkv(B, H, N, D, seed):
    import cupy as cp
    rng = np.random.default_rng(seed)
    return tuple(cp.asarray(rng.standard_normal((B, H, N, D), dtype=np.float32)) for _ in range(3))


_CASES = [(n, d, c) for n, s in sorted(KERNELS.items()) for d in s.head_dims for c in (False, True)
          if s.causal or not c]


@pytest.mark.gpu
@pytest.mark.parametrize("name, D, causal", _CASES, ids=[f"{n}-D{d}{'-causal' if c else ''}" for n, d, c in _CASES])
@pytest.mark.parametrize("bhn", EDGE_SHAPES, ids=lambda s: "B{}-H{}-N{}".format(*s))
def test_kernel_matches_float64_on_edge_shapes(name, D, causal, bhn):
    import torch
    from attnlab.attention import run_attention
    from attnlab.attention.reference import attention_fp64, rel_error

    spec = get_spec(name)
    dtype = getattr(torch, spec.dtypes[0])
    g = torch.Generator(device="cuda").manual_seed(hash((name, D, bhn, causal)) % 2**31)
    q, k, v = (torch.randn(*bhn, D, device="cuda", generator=g).to(dtype) for _ in range(3))
    out = torch.full_like(q, float("nan"))   # poison: unwritten elements stay NaN
    run_attention(name, q, k, v, out=out, causal=causal)
    assert bool(torch.isfinite(out).all()), "kernel left elements unwritten"
    err = rel_error(out, attention_fp64(q, k, v, causal=causal))
    assert err < spec.rel_tol, f"relative error {err:.2e} >= {spec.rel_tol:.0e}"


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(n for n, s in KERNELS.items() if s.flash))
def test_large_logits_and_a_nan_row(name):
    """Scores of several hundred stay finite (online max); a NaN in one query row poisons that row only."""
    import torch
    from attnlab.attention import run_attention
    from attnlab.attention.reference import attention_fp64, rel_error

    spec = get_spec(name)
    dtype = getattr(torch, spec.dtypes[0])
    D = spec.head_dims[-1]
    g = torch.Generator(device="cuda").manual_seed(3)
    q, k, v = (torch.randn(2, 3, 257, D, device="cuda", generator=g) for _ in range(3))
    q, k = q * 8.0, k * 8.0                       # |scale·q·k| reaches several hundred
    q, k, v = (t.to(dtype) for t in (q, k, v))
    smax = float((q.double() @ k.double().transpose(-1, -2)).abs().max()) / D ** 0.5
    assert smax > 200
    # a score's rounding error grows with its size, and exp() turns it into a relative error of P:
    # the bound scales with the largest score (about 10 for unit-variance inputs)
    tol = spec.rel_tol * max(1.0, smax / 10)
    assert rel_error(run_attention(name, q, k, v), attention_fp64(q, k, v)) < tol
    q[1, 2, 100, 5] = float("nan")
    out = run_attention(name, q, k, v).float()
    assert bool(torch.isnan(out[1, 2, 100]).all())
    out[1, 2, 100] = 0.0
    assert bool(torch.isfinite(out).all()), "a NaN in one query row leaked into other rows"


@pytest.mark.gpu
@pytest.mark.parametrize("name", [n for n in KERNELS if KERNELS[n].tiled and not KERNELS[n].flash])
@pytest.mark.parametrize("tiles", [(1, 8), (32, 8), (4, 128), (16, 64)], ids=lambda t: f"TR{t[0]}-TKV{t[1]}")
def test_tiled_kernels_with_non_default_tiles(name, tiles):
    from attnlab.attention import run_attention
    from attnlab.attention.reference import attention_fp64, rel_error

    q, k, v = _qkv(2, 3, 200, 64, seed=7)
    assert rel_error(run_attention(name, q, k, v, *tiles), attention_fp64(q, k, v)) < 1e-5


@pytest.mark.gpu
def test_torch_tensors_in_torch_tensor_out():
    import torch
    from attnlab.attention import run_attention

    q, k, v = (torch.randn(1, 2, 33, 64, device="cuda") for _ in range(3))
    out = run_attention("naive", q, k, v)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, k, v), atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
def test_bad_inputs_get_named_errors():
    import cupy as cp
    from attnlab.attention import run_attention

    q, k, v = _qkv(1, 2, 16, 64, seed=1)
    cases = [
        ((q.astype(cp.float16), k, v), "must be float32"),
        ((q[0], k[0], v[0]), "4 dims"),
        ((q.transpose(0, 1, 3, 2).copy().transpose(0, 1, 3, 2), k, v), "C-contiguous"),
        ((q, k[:, :, :8].copy(), v), "share one shape"),
        ((*_qkv(1, 1, 4, 48, 2),), "unsupported head dim D=48"),
    ]
    for args, message in cases:
        with pytest.raises(ValueError, match=message):
            run_attention("naive", *args)
    import torch

    flat = cp.zeros(1 * 2 * 16 * 64 + 1, dtype=cp.float32)
    misaligned = flat[1:].reshape(1, 2, 16, 64)   # 4 bytes past a 256-byte boundary
    for name in [n for n in KERNELS if KERNELS[n].vector_loads]:
        dtype = getattr(torch, KERNELS[name].dtypes[0])
        kt, vt = (torch.zeros(1, 2, 16, 64, device="cuda", dtype=dtype) for _ in range(2))
        qm = torch.zeros(1 * 2 * 16 * 64 + 1, device="cuda", dtype=dtype)[1:].view(1, 2, 16, 64)  # 2 or 4 bytes off
        with pytest.raises(ValueError, match="16-byte aligned"):
            run_attention(name, qm, kt, vt)
    # the scalar kernels accept the same misaligned view
    run_attention("naive", misaligned, k, v)
    with pytest.raises(ValueError, match="out must be"):
        run_attention("naive", q, k, v, out=cp.empty((1, 2, 16, 32), cp.float32))


def test_ladder_order():
    assert SEED_LADDER == ("naive", "tiled", "vec_load", "vec_padded", "double_buffer")
    assert SEED_TILED == SEED_LADDER[1:]
    # notebook 06's profiling plan (attnlab.roofline, a study) derives from the registry
    from attnlab import roofline
    assert {e["kernel"] for e in roofline.ncu_plan("full")} - {"torch_sdpa"} == set(SEED_LADDER)


# ---------------------------------------------------------------- the registry itself

@pytest.mark.parametrize("name", sorted(KERNELS))
def test_registry_entry_is_consistent(name):
    spec = get_spec(name)
    path = KERNELS_DIR / spec.source
    assert path.is_file(), f"{name}: no source {spec.source}"
    # one numbering: the file's number (and letter) is the kernel's step
    assert path.name.split("_")[0] == spec.step, f"{name}: file {path.name} but step {spec.step}"
    assert f"{spec.function}(" in path.read_text() or f"{spec.function} (" in path.read_text()
    if spec.predecessor is not None:
        assert spec.predecessor in KERNELS and KERNELS[spec.predecessor].step < spec.step
    if spec.flash:
        names = {p.name for p in spec.params}
        assert "BM" in spec.template or "BM" in spec.fixed or "BM" in names
        for d in spec.head_dims:
            p, where = resolve_params(name, d)
            assert where == "default" and set(p) == names
            grid, threads, smem = spec.launch(6, 1000, d, p)
            assert grid[1] == 6 and grid[0] * p["BM"] >= 1000 > (grid[0] - 1) * p["BM"]
            assert threads % 32 == 0 and 32 <= threads <= 1024 and 0 < smem <= 227 * 1024
            args = spec.flash_template_args(d, p, spec.dtypes[0], False)
            assert len(args) == len(spec.template) and args[0] == d


def test_flash_parameters_are_checked():
    flash = [n for n, s in KERNELS.items() if s.flash]
    if not flash:
        pytest.skip("no flash kernels registered")
    name = flash[0]
    spec = get_spec(name)
    with pytest.raises(ValueError, match="has no parameter"):
        resolve_params(name, spec.head_dims[0], {"tile_rows": 8})
    first = spec.params[0]
    with pytest.raises(ValueError, match=f"{first.name}=7 not supported"):
        resolve_params(name, spec.head_dims[0], {first.name: 7})
    with pytest.raises(ValueError, match="no tile_rows/tile_kv"):
        resolve_tiles(name, spec.head_dims[0])
