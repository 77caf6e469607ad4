"""Reference attention: float64 NumPy (the ground truth) and torch SDPA (the vendor path)."""

from __future__ import annotations

import math

import numpy as np

from ..arrays import float_view, max_abs_error, rel_error, to_numpy  # noqa: F401  (re-exported: the family's error measures)


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


def attention_fp64(q, k, v, scale: float | None = None, causal: bool = False):
    """softmax(scale · Q Kᵀ) V in float64, head by head (so N=4097 needs only N² doubles at once).

    ``causal``: query row i attends to keys j <= i only (one sequence length for q and k).

    Shapes [B, H, N, D]; returns float64 [B, H, N, D] — a NumPy array for host inputs, a CuPy
    array for device inputs (the same formula, evaluated in float64 on the GPU).
    """
    xp, q = float_view(q)     # the float64 maths runs where the data is
    _, k = float_view(k)
    _, v = float_view(v)
    q, k, v = (a.astype(xp.float64) for a in (q, k, v))
    if q.ndim != 4 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k, v must share one [B, H, N, D] shape, got {q.shape}, {k.shape}, {v.shape}")
    scale = default_scale(q.shape[-1]) if scale is None else scale
    B, H, N, D = q.shape
    qf, kf, vf = (a.reshape(B * H, N, D) for a in (q, k, v))
    out = xp.empty_like(qf)
    # As many heads at once as keep the score matrices under ~256 MB.
    step = max(1, (256 << 20) // (8 * N * N))
    for h0 in range(0, B * H, step):
        sl = slice(h0, h0 + step)
        s = xp.matmul(qf[sl], kf[sl].transpose(0, 2, 1)) * scale
        if causal:
            s[:, ~xp.tri(N, dtype=bool)] = -xp.inf
        s -= s.max(axis=-1, keepdims=True)
        p = xp.exp(s)
        p /= p.sum(axis=-1, keepdims=True)
        out[sl] = xp.matmul(p, vf[sl])
    return out.reshape(B, H, N, D)


def attention_sdpa(q, k, v, scale: float | None = None, causal: bool = False):
    """torch.nn.functional.scaled_dot_product_attention on the inputs' device and dtype.

    Accepts torch tensors, or CuPy arrays (zero-copy through DLPack); returns a torch tensor.
    """
    import torch
    import torch.nn.functional as F

    def as_torch(a):
        if isinstance(a, torch.Tensor):
            return a
        if isinstance(a, np.ndarray):
            return torch.from_numpy(a)
        return torch.from_dlpack(a)

    def aligned(t):
        # torch's memory-efficient SDPA kernel faults ("misaligned address") on CUDA inputs that
        # are not 16-byte aligned (seen on an H200, torch 2.11); the reference takes a copy then.
        return t.clone() if t.is_cuda and t.data_ptr() % 16 else t

    q, k, v = (aligned(as_torch(a)) for a in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=causal)


def attention_flops(B: int, H: int, N: int, D: int, causal: bool = False) -> int:
    """Forward FLOPs, FlashAttention's convention: 2·N²·D for QKᵀ plus 2·N²·D for PV, per head;
    causal attention counts half (the convention of FlashAttention's and torch's benchmarks)."""
    return (2 if causal else 4) * B * H * N * N * D


def attention_min_bytes(B: int, H: int, N: int, D: int, itemsize: int = 4) -> int:
    """Fewest bytes through device memory: Q, K, V read once and O written once."""
    return 4 * B * H * N * D * itemsize
