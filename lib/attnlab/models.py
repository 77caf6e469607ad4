"""NumPy models of what the kernels compute, step for step, so their algorithm can be checked on
a CPU (replay mode runs these for real; live mode runs the kernels themselves)."""

from __future__ import annotations

import numpy as np


def online_softmax_row(q_row: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float,
                       block: int = 1, dtype=np.float32) -> np.ndarray:
    """One query row of attention by the online softmax, ``block`` keys at a time.

    ``block=1`` is the naive kernel's loop (one key per step); a larger block is a K/V tile
    whose scores are folded in one key at a time as the seed's tiled kernel does. The running
    max m, denominator l and unnormalised output acc are rescaled by exp(m_old − m_new) whenever
    the max grows, so the result equals the two-pass softmax without storing the N scores.
    """
    if block < 1:
        raise ValueError("block must be at least 1")
    q_row = q_row.astype(dtype) * dtype(scale)
    m, l = dtype(-np.inf), dtype(0.0)
    acc = np.zeros(v.shape[-1], dtype=dtype)
    n = k.shape[0]
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, n, block):
            for j in range(start, min(start + block, n)):
                s = dtype(np.dot(q_row, k[j].astype(dtype)))
                m_new = max(m, s)
                alpha = dtype(np.exp(m - m_new))
                p = dtype(np.exp(s - m_new))
                l = l * alpha + p
                acc = acc * alpha + p * v[j].astype(dtype)
                m = m_new
    return acc / l


def online_softmax_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float | None = None,
                             block: int = 1, dtype=np.float32) -> np.ndarray:
    """The online-softmax model over a whole [B, H, N, D] problem (small shapes only: it loops)."""
    B, H, N, D = q.shape
    scale = 1.0 / np.sqrt(D) if scale is None else scale
    out = np.empty((B, H, N, D), dtype=dtype)
    for b in range(B):
        for h in range(H):
            for i in range(N):
                out[b, h, i] = online_softmax_row(q[b, h, i], k[b, h], v[b, h], scale, block, dtype)
    return out
