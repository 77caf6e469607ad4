"""Launcher validation (CPU) and the kernels themselves on a GPU (skipped without one)."""

import numpy as np
import pytest

from attnlab.attention import (DEFAULT_TILES, KERNELS, LADDER, get_spec, resolve_tiles, validate_qkv)
from attnlab.bench import EDGE_SHAPES


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
    with pytest.raises(ValueError, match="expected a CuPy array or a CUDA torch tensor"):
        validate_qkv(q, q, q)


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


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("D", [32, 64, 128])
@pytest.mark.parametrize("bhn", EDGE_SHAPES, ids=lambda s: "B{}-H{}-N{}".format(*s))
def test_kernel_matches_float64_on_edge_shapes(name, D, bhn):
    import cupy as cp
    from attnlab.attention import run_attention
    from attnlab.reference import attention_fp64, rel_error

    q, k, v = _qkv(*bhn, D, seed=hash((name, D, bhn)) % 2**31)
    out = cp.full(q.shape, np.nan, dtype=cp.float32)   # poison: unwritten elements stay NaN
    run_attention(name, q, k, v, out=out)
    assert bool(cp.isfinite(out).all()), "kernel left elements unwritten"
    assert rel_error(out, attention_fp64(q, k, v)) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("name", [n for n in KERNELS if KERNELS[n].tiled])
@pytest.mark.parametrize("tiles", [(1, 8), (32, 8), (4, 128), (16, 64)], ids=lambda t: f"TR{t[0]}-TKV{t[1]}")
def test_tiled_kernels_with_non_default_tiles(name, tiles):
    from attnlab.attention import run_attention
    from attnlab.reference import attention_fp64, rel_error

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
    flat = cp.zeros(1 * 2 * 16 * 64 + 1, dtype=cp.float32)
    misaligned = flat[1:].reshape(1, 2, 16, 64)   # 4 bytes past a 256-byte boundary
    for name in [n for n in KERNELS if KERNELS[n].vector_loads]:
        with pytest.raises(ValueError, match="16-byte aligned"):
            run_attention(name, misaligned, k, v)
    # the scalar kernels accept the same misaligned view
    run_attention("naive", misaligned, k, v)
    with pytest.raises(ValueError, match="out must be"):
        run_attention("naive", q, k, v, out=cp.empty((1, 2, 16, 32), cp.float32))


def test_ladder_order():
    assert LADDER == ("naive", "tiled", "vec_load", "vec_padded")
