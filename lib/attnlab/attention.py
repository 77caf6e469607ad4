"""Launchers for the softmax-attention ladder (kernels/attention/NN_*.cu), with validation.

Every kernel computes O = softmax(scale · Q Kᵀ) V for q, k, v of shape [B, H, N, D], float32,
C-contiguous, on one CUDA device. The tiled kernels take two compile-time tile sizes:
TILE_ROWS (query rows per block = warps per block) and TILE_KV (K/V rows per shared-memory
tile). A caller who gives no tile gets the tuned tile for this GPU (data/tuned/<gpu>.json,
written by notebook 05) or else the seed's per-head-dim default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

SUPPORTED_HEAD_DIMS = (32, 64, 128)
TILE_ROWS_CHOICES = (1, 2, 4, 8, 16, 32)
TILE_KV_CHOICES = (8, 16, 32, 64, 128)
#: Seed 000's D-adaptive tiles (TILE_ROWS, TILE_KV), found on a GTX 1660 Ti.
DEFAULT_TILES = {32: (8, 32), 64: (8, 16), 128: (8, 8)}
MAX_GRID_X = 2**31 - 1


@dataclass(frozen=True)
class AttentionKernel:
    name: str
    step: str                # the NN_ prefix shared with its notebook
    source: str              # relative to kernels/
    function: str
    tiled: bool = True
    vector_loads: bool = False   # float4 global loads: needs 16-byte aligned rows
    smem_pad: int = 0            # floats added to each shared-memory row
    kv_stages: int = 1           # K/V tile buffers (2 = ping-pong double buffering)
    summary: str = ""

    def template_args(self, head_dim: int, tile_rows: int, tile_kv: int) -> tuple[int, ...]:
        return (head_dim,) if not self.tiled else (head_dim, tile_rows, tile_kv)

    def smem_bytes(self, head_dim: int, tile_rows: int, tile_kv: int) -> int:
        """Dynamic shared memory: a Q tile plus kv_stages × (K tile + V tile), rows padded."""
        if not self.tiled:
            return 0
        return (tile_rows + 2 * self.kv_stages * tile_kv) * (head_dim + self.smem_pad) * 4

    def block_threads(self, tile_rows: int) -> int:
        return 32 if not self.tiled else 32 * tile_rows

    def grid_blocks(self, bh: int, n: int, tile_rows: int) -> int:
        return bh * n if not self.tiled else bh * math.ceil(n / tile_rows)


KERNELS: dict[str, AttentionKernel] = {k.name: k for k in (
    AttentionKernel("naive", "01", "attention/01_naive.cu", "attn_naive", tiled=False,
                    summary="one warp per query row, K/V read straight from global memory"),
    AttentionKernel("tiled", "02", "attention/02_tiled.cu", "attn_tiled",
                    summary="TILE_ROWS warps share K/V tiles in shared memory"),
    AttentionKernel("vec_load", "03", "attention/03_vec_load.cu", "attn_vec_load", vector_loads=True,
                    summary="tiled, global→shared copies as 128-bit float4 loads"),
    AttentionKernel("vec_padded", "04", "attention/04_vec_padded.cu", "attn_vec_padded",
                    vector_loads=True, smem_pad=4,
                    summary="float4 loads, shared-memory rows padded by 4 floats"),
    AttentionKernel("double_buffer", "04", "attention/05_double_buffer.cu", "attn_double_buffer",
                    vector_loads=True, smem_pad=4, kv_stages=2,
                    summary="padded float4 kernel with ping-pong K/V tiles filled by cp.async"),
)}
LADDER = ("naive", "tiled", "vec_load", "vec_padded")


def get_spec(name: str) -> AttentionKernel:
    try:
        return KERNELS[name]
    except KeyError:
        raise ValueError(f"unknown kernel {name!r}; known: {', '.join(KERNELS)}") from None


def default_tiles(head_dim: int) -> tuple[int, int]:
    check_head_dim(head_dim)
    return DEFAULT_TILES[head_dim]


def check_head_dim(head_dim: int) -> None:
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"unsupported head dim D={head_dim}: the kernels support D in {SUPPORTED_HEAD_DIMS}")


def resolve_tiles(name: str, head_dim: int, tile_rows: int | None = None, tile_kv: int | None = None,
                  gpu: str | None = None) -> tuple[int, int, str]:
    """(tile_rows, tile_kv, where_from): the caller's, else tuned for ``gpu``, else the default."""
    spec = get_spec(name)
    check_head_dim(head_dim)
    if not spec.tiled:
        if tile_rows not in (None, 1) or tile_kv is not None:
            raise ValueError(f"kernel {name!r} is not tiled: it takes no tile_rows/tile_kv")
        return 1, 0, "untiled"
    where = "caller"
    if tile_rows is None or tile_kv is None:
        tuned = None
        if gpu:
            try:
                from . import tuned as tuned_mod
                tuned = tuned_mod.lookup(gpu, name, head_dim)
            except (ImportError, FileNotFoundError):
                tuned = None
        base, where = (tuned, "tuned") if tuned else (DEFAULT_TILES[head_dim], "default")
        tile_rows = base[0] if tile_rows is None else tile_rows
        tile_kv = base[1] if tile_kv is None else tile_kv
    if tile_rows not in TILE_ROWS_CHOICES:
        raise ValueError(f"tile_rows={tile_rows} not supported: choose from {TILE_ROWS_CHOICES}")
    if tile_kv not in TILE_KV_CHOICES:
        raise ValueError(f"tile_kv={tile_kv} not supported: choose from {TILE_KV_CHOICES}")
    return int(tile_rows), int(tile_kv), where


# ---------------------------------------------------------------- input validation

def _array_module(x):
    """'cupy' or 'torch' for a device array; ValueError for anything else."""
    mod = type(x).__module__
    if mod.startswith("cupy"):
        return "cupy"
    if mod.startswith("torch"):
        if not x.is_cuda:
            raise ValueError("torch tensors must be on a CUDA device (got a CPU tensor)")
        return "torch"
    raise ValueError(f"expected a CuPy array or a CUDA torch tensor, got {type(x).__name__}")


def _as_cupy(x):
    import cupy as cp

    return x if _array_module(x) == "cupy" else cp.from_dlpack(x)


def validate_qkv(q, k, v, *, needs_alignment: bool = False) -> tuple[int, int, int, int]:
    """Check q, k, v and return (B, H, N, D); every failure names the violated constraint."""
    arrays = {"q": q, "k": k, "v": v}
    kinds = {n: _array_module(a) for n, a in arrays.items()}
    if len(set(kinds.values())) != 1:
        raise ValueError(f"q, k, v must all be CuPy arrays or all torch tensors, got {kinds}")
    cps = {n: _as_cupy(a) for n, a in arrays.items()}
    for n, a in cps.items():
        if a.ndim != 4:
            raise ValueError(f"{n} must have shape [B, H, N, D] (4 dims), got {a.ndim} dims {a.shape}")
        if a.dtype != np.float32:
            raise ValueError(f"{n} must be float32, got {a.dtype}")
        if not a.flags.c_contiguous:
            raise ValueError(f"{n} must be C-contiguous (the kernels ignore strides); call .copy() / .contiguous()")
    shapes = {n: a.shape for n, a in cps.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"q, k, v must share one shape [B, H, N, D], got {shapes}")
    devices = {n: a.device.id for n, a in cps.items()}
    if len(set(devices.values())) != 1:
        raise ValueError(f"q, k, v must be on one device, got {devices}")
    B, H, N, D = cps["q"].shape
    if min(B, H, N) < 1:
        raise ValueError(f"B, H and N must be at least 1, got B={B}, H={H}, N={N}")
    check_head_dim(D)
    if needs_alignment:
        for n, a in cps.items():
            if a.data.ptr % 16:
                raise ValueError(f"{n} is not 16-byte aligned (address {a.data.ptr:#x}): the float4 kernels "
                                 "need 16-byte aligned rows; pass a fresh allocation or a copy")
    return B, H, N, D


# ---------------------------------------------------------------- launching

@dataclass(frozen=True)
class LaunchPlan:
    spec: AttentionKernel
    kernel: Any            # cupy.RawKernel
    head_dim: int
    tile_rows: int
    tile_kv: int
    tiles_from: str
    block: int
    smem_bytes: int

    def grid(self, bh: int, n: int) -> int:
        return self.spec.grid_blocks(bh, n, self.tile_rows)


_PLANS: dict[tuple, LaunchPlan] = {}


def max_dynamic_smem() -> int:
    import cupy as cp

    return cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                              cp.cuda.Device().id)


def get_kernel(name: str, head_dim: int, tile_rows: int | None = None, tile_kv: int | None = None,
               gpu: str | None = None) -> LaunchPlan:
    """Compile (once) the kernel for this head dim and tile, and say how to launch it."""
    from .compile import load_kernel

    spec = get_spec(name)
    tr, tkv, where = resolve_tiles(name, head_dim, tile_rows, tile_kv, gpu)
    key = (name, head_dim, tr, tkv)
    plan = _PLANS.get(key)
    if plan is None:
        smem = spec.smem_bytes(head_dim, tr, tkv)
        if smem > max_dynamic_smem():
            raise ValueError(f"{name} with D={head_dim}, tile_rows={tr}, tile_kv={tkv} needs {smem} bytes of "
                             f"shared memory; this GPU allows {max_dynamic_smem()} per block")
        kernel = load_kernel(spec.source, spec.function, spec.template_args(head_dim, tr, tkv))
        if smem > 48 * 1024:
            kernel.max_dynamic_shared_size_bytes = smem  # opt in above the 48 KB default
        plan = LaunchPlan(spec, kernel, head_dim, tr, tkv, where, spec.block_threads(tr), smem)
        _PLANS[key] = plan
    elif plan.tiles_from != where:
        plan = LaunchPlan(**{**plan.__dict__, "tiles_from": where})
    return plan


def run_attention(name: str, q, k, v, tile_rows: int | None = None, tile_kv: int | None = None,
                  out=None, scale: float | None = None, gpu: str | None = "auto"):
    """Launch kernel ``name`` on q, k, v ([B, H, N, D] float32) and return O.

    CuPy inputs give a CuPy output, torch inputs a torch tensor (zero-copy, same memory).
    ``out`` (optional) must match q and is overwritten. ``scale`` defaults to 1/sqrt(D).
    A tile the caller leaves out comes from ``data/tuned/<gpu>.json``: ``gpu="auto"`` (default)
    means this device's file; ``gpu=None`` means the seed's built-in defaults (what the ladder
    notebooks use to reproduce the seed's tables).
    """
    spec = get_spec(name)
    if gpu == "auto":
        from .env import device_name, gpu_slug
        gpu = gpu_slug(device_name())
    B, H, N, D = validate_qkv(q, k, v, needs_alignment=spec.vector_loads)
    is_torch = _array_module(q) == "torch"
    qc, kc, vc = _as_cupy(q), _as_cupy(k), _as_cupy(v)
    import cupy as cp

    if out is None:
        oc = cp.empty_like(qc)
    else:
        oc = _as_cupy(out)
        if oc.shape != qc.shape or oc.dtype != np.float32 or not oc.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous float32 array of shape {qc.shape}")
    plan = get_kernel(name, D, tile_rows, tile_kv, gpu)
    grid = plan.grid(B * H, N)
    if grid > MAX_GRID_X:
        raise ValueError(f"B*H*N too large for a 1-D grid ({grid} blocks > {MAX_GRID_X})")
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    plan.kernel((grid,), (plan.block,), (qc, kc, vc, oc, np.int32(N), np.float32(scale)),
                shared_mem=plan.smem_bytes)
    if is_torch:
        import torch

        return out if out is not None else torch.from_dlpack(oc)
    return oc
