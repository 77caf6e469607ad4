"""NumPy models of what the kernels compute, step for step, so their algorithm can be checked on
a CPU (replay mode runs these for real; live mode runs the kernels themselves).

The online softmax keeps, per query row, a running max m, denominator l and unnormalised output
acc; folding in keys one at a time (the kernels' loop) or a whole K/V tile at a time
(:func:`merge_states`) gives the two-pass softmax without storing the N scores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def softmax_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float | None = None,
                      dtype=np.float64) -> np.ndarray:
    """Direct (two-pass) softmax attention over the last two axes [..., N, D]."""
    q, k, v = (np.asarray(a, dtype=dtype) for a in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q * dtype(scale)) @ np.swapaxes(k, -1, -2)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(axis=-1, keepdims=True)) @ v


@dataclass
class SoftmaxState:
    """The online-softmax state of every query row: running max m, denominator l, output acc."""

    m: np.ndarray      # [..., N]
    l: np.ndarray      # [..., N]
    acc: np.ndarray    # [..., N, D] (unnormalised)

    def output(self) -> np.ndarray:
        return self.acc / self.l[..., None]


def empty_state(q: np.ndarray, dtype=np.float64) -> SoftmaxState:
    shape = q.shape[:-1]
    return SoftmaxState(np.full(shape, -np.inf, dtype=dtype), np.zeros(shape, dtype=dtype),
                        np.zeros(q.shape, dtype=dtype))


def merge_states(a: SoftmaxState, b: SoftmaxState) -> SoftmaxState:
    """Combine the states of two disjoint key sets: the rescaling step that lets the tiled
    kernels fold K/V tiles in one at a time (and that makes the order of tiles irrelevant)."""
    m = np.maximum(a.m, b.m)
    with np.errstate(invalid="ignore"):
        wa = np.where(np.isneginf(a.m), 0.0, np.exp(a.m - m))
        wb = np.where(np.isneginf(b.m), 0.0, np.exp(b.m - m))
    return SoftmaxState(m, a.l * wa + b.l * wb, a.acc * wa[..., None] + b.acc * wb[..., None])


def tile_state(q_scaled: np.ndarray, k_tile: np.ndarray, v_tile: np.ndarray) -> SoftmaxState:
    """The state of one K/V tile alone (scores against the tile's keys, max-shifted)."""
    s = q_scaled @ np.swapaxes(k_tile, -1, -2)
    m = s.max(axis=-1)
    p = np.exp(s - m[..., None])
    return SoftmaxState(m, p.sum(axis=-1), p @ v_tile)


def tiled_online_softmax(q: np.ndarray, k: np.ndarray, v: np.ndarray, tile_kv: int,
                         scale: float | None = None, dtype=np.float64, per_key: bool = False,
                         trace: list | None = None) -> np.ndarray:
    """Attention by the tiled online softmax over [..., N, D] arrays, ``tile_kv`` keys per tile.

    ``per_key=False``: each tile's scores are folded in at once (:func:`merge_states`).
    ``per_key=True``: the tile is walked key by key with exactly the kernels' update
    (m_new = max(m, s); alpha = e^(m - m_new); p = e^(s - m_new); l = l·alpha + p;
    acc = acc·alpha + p·V[j]) — slower, the literal model of kernels 01–05.
    The last tile may be partial (N not a multiple of ``tile_kv``); N = 1 is one partial tile.
    ``trace``, if a list, receives (first key of the tile, copy of m, copy of l) after each tile.
    """
    if tile_kv < 1:
        raise ValueError("tile_kv must be at least 1")
    q, k, v = (np.asarray(a, dtype=dtype) for a in (q, k, v))
    if k.shape != q.shape or v.shape != q.shape or q.ndim < 2:
        raise ValueError(f"q, k, v must share one [..., N, D] shape, got {q.shape}, {k.shape}, {v.shape}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    qs = q * dtype(scale)
    n = q.shape[-2]
    state = empty_state(q, dtype)
    for kv0 in range(0, n, tile_kv):
        kt, vt = k[..., kv0:kv0 + tile_kv, :], v[..., kv0:kv0 + tile_kv, :]
        if per_key:
            m, l, acc = state.m, state.l, state.acc
            for j in range(kt.shape[-2]):
                s = np.einsum("...nd,...d->...n", qs, kt[..., j, :])
                m_new = np.maximum(m, s)
                alpha = np.exp(m - m_new)   # exp(-inf) = 0 on the first key
                p = np.exp(s - m_new)
                l = l * alpha + p
                acc = acc * alpha[..., None] + p[..., None] * vt[..., j, None, :]
                m = m_new
            state = SoftmaxState(m, l, acc)
        else:
            state = merge_states(state, tile_state(qs, kt, vt))
        if trace is not None:
            trace.append((kv0, state.m.copy(), state.l.copy()))
    return state.output()


def online_softmax_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float | None = None,
                             block: int = 1, dtype=np.float32) -> np.ndarray:
    """The kernels' literal loop — keys folded in one at a time, in fp32 by default — over
    ``block``-key tiles; ``block=1`` is the naive kernel (01)."""
    return tiled_online_softmax(q, k, v, tile_kv=block, scale=scale, dtype=dtype, per_key=True)
