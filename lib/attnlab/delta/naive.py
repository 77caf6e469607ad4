"""The recurrent definition of Kimi Delta Attention in float64 NumPy (the ground truth).

Per token t, for every batch b and head h, with state S ``[K, V]`` (in this order, as
flash-linear-attention's ``naive_recurrent_kda`` defines it)::

    S   = diag(exp(g_t)) S                  # per-channel decay of the key dimension
    u   = beta_t (v_t - S^T k_t)            # delta rule: the correction of what S predicts for k_t
    S   = S + k_t u^T
    o_t = S^T (scale q_t)

The loop runs over T; batch and heads are vectorised.
"""

from __future__ import annotations

import math

import numpy as np

from ..arrays import array_module, float_view, to_numpy


def _xp(x):
    """NumPy, or CuPy when x is a CuPy array / torch CUDA tensor (the same float64 maths on a GPU)."""
    return array_module(x)


def _as_f64(x, xp=np):
    """A contiguous float64 copy of x in xp (NumPy or CuPy)."""
    if xp is np:
        return np.ascontiguousarray(to_numpy(x), dtype=np.float64)
    _, a = float_view(x)
    return xp.ascontiguousarray(xp.asarray(a), dtype=xp.float64)


def check_shapes(q, k, v, g, beta, initial_state=None) -> tuple[int, int, int, int, int]:
    """(B, T, H, K, V) after checking that the five inputs (and the state) are arrays and agree."""
    named = dict(q=q, k=k, v=v, g=g, beta=beta, **({} if initial_state is None else {"initial_state": initial_state}))
    for name, a in named.items():
        if not (hasattr(a, "shape") and hasattr(a, "ndim")):
            raise ValueError(f"{name} must be an array (NumPy, CuPy or a torch tensor), got {type(a).__name__}")
    if q.ndim != 4:
        raise ValueError(f"q must be [B, T, H, K], got shape {tuple(q.shape)}")
    B, T, H, K = q.shape
    if tuple(k.shape) != (B, T, H, K):
        raise ValueError(f"k must have q's shape {(B, T, H, K)}, got {tuple(k.shape)}")
    if tuple(g.shape) != (B, T, H, K):
        raise ValueError(f"g must have q's shape {(B, T, H, K)}, got {tuple(g.shape)}")
    if v.ndim != 4 or tuple(v.shape[:3]) != (B, T, H):
        raise ValueError(f"v must be [B, T, H, V] with (B, T, H) = {(B, T, H)}, got {tuple(v.shape)}")
    V = v.shape[3]
    if tuple(beta.shape) != (B, T, H):
        raise ValueError(f"beta must be [B, T, H] = {(B, T, H)}, got {tuple(beta.shape)}")
    if initial_state is not None and tuple(initial_state.shape) != (B, H, K, V):
        raise ValueError(f"initial_state must be [B, H, K, V] = {(B, H, K, V)}, "
                         f"got {tuple(initial_state.shape)}")
    if T < 1:
        raise ValueError("T must be at least 1")
    return B, T, H, K, V


def kda_recurrent_fp64(q, k, v, g, beta, scale: float | None = None, initial_state=None,
                       output_final_state: bool = False):
    """Token-by-token KDA in float64. Returns ``(o [B, T, H, V], S [B, H, K, V] or None)``.

    NumPy in, NumPy out; CuPy arrays or torch CUDA tensors in: the same float64 loop on the GPU
    (CuPy arrays out), which makes a float64 reference at T = 16k take about a second.
    """
    xp = _xp(q)
    q, k, v, g, beta = (_as_f64(a, xp) for a in (q, k, v, g, beta))
    h0 = None if initial_state is None else _as_f64(initial_state, xp)
    B, T, H, K, V = check_shapes(q, k, v, g, beta, h0)
    scale = K ** -0.5 if scale is None else float(scale)
    S = xp.zeros((B, H, K, V)) if h0 is None else h0.copy()
    o = xp.empty((B, T, H, V))
    decay = xp.exp(g)                                          # g <= 0: factors in (0, 1]
    for t in range(T):
        kt, qt, vt = k[:, t], q[:, t], v[:, t]                 # [B, H, K|V]
        S *= decay[:, t][..., None]                            # diag(e^g) S
        pred = xp.einsum("bhk,bhkv->bhv", kt, S)                # S^T k
        u = beta[:, t][..., None] * (vt - pred)
        S += kt[..., None] * u[..., None, :]                   # k u^T
        o[:, t] = xp.einsum("bhk,bhkv->bhv", qt * scale, S)
    return o, (S if output_final_state else None)


def random_inputs(B: int, T: int, H: int, K: int, V: int, *, seed: int = 0, gate: str = "logsigmoid",
                  gate_value: float = -50.0, beta_range=(0.05, 0.95), initial_state: bool = False,
                  dtype=np.float32):
    """Realistic random KDA inputs as NumPy arrays.

    q, k are L2-normalised per head (as KDA layers do, so ``I - beta k k^T`` is a contraction);
    v ~ N(0, 1); g is log-sigmoid of N(0, 1) + 2 (mostly close to 0, some strong decay), or
    ``gate='zero'`` (no decay), ``'const'`` (every entry ``gate_value``, e.g. -50), ``'mixed'``
    (alternate channel quads at ``gate_value`` and log-sigmoid) or ``'strong'`` (uniform in [-3, 0]);
    beta uniform in ``beta_range``. Returns a dict with q, k, v, g, beta (and initial_state).
    """
    # drawn in float32 (the dtype every kernel reads): at the benchmark shapes (T up to 65536) the
    # float64 draws took longer than the timed calls they feed
    rng = np.random.default_rng(seed)
    f32 = np.float32

    def normal(*shape):
        return rng.standard_normal(shape, dtype=f32)

    q = normal(B, T, H, K)
    k = normal(B, T, H, K)
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = normal(B, T, H, V)
    if gate == "logsigmoid":
        x = normal(B, T, H, K) + f32(2.0)
        g = -np.logaddexp(f32(0.0), -x)      # log(sigmoid(x)) < 0, computed without overflow
    elif gate == "zero":
        g = np.zeros((B, T, H, K), dtype=f32)
    elif gate == "mixed":
        # Channel quads alternate between a strong decay (-50 per step) and log-sigmoid gates,
        # so one chunk holds channels of both of the chunked kernel's evaluation paths.
        x = normal(B, T, H, K) + f32(2.0)
        g = -np.logaddexp(f32(0.0), -x)
        g[..., (np.arange(K) // 4) % 2 == 0] = float(gate_value)
    elif gate == "strong":
        # Uniform in [-3, 0]: a chunk of 64 decays by ~2^-140 in some channels, less in others.
        g = f32(-3.0) * rng.random((B, T, H, K), dtype=f32)
    elif gate == "const":
        if gate_value > 0:
            raise ValueError("gates are log-space decays: gate_value must be <= 0")
        g = np.full((B, T, H, K), gate_value, dtype=f32)
    else:
        raise ValueError(f"gate must be 'logsigmoid', 'zero', 'const', 'mixed' or 'strong', got {gate!r}")
    lo, hi = beta_range
    beta = rng.uniform(lo, hi, (B, T, H)).astype(f32)
    out = dict(q=q, k=k, v=v, g=g, beta=beta)
    if initial_state:
        out["initial_state"] = rng.standard_normal((B, H, K, V)) / math.sqrt(K)
    return {name: np.ascontiguousarray(a, dtype=dtype) for name, a in out.items()}
