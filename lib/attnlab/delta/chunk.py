r"""The chunked (UT / WY) form of Kimi Delta Attention.

Split T into chunks of C tokens. Inside a chunk with start state S, cumulative gates
G_i = Σ_{s≤i} g_s (per key channel, reset at every chunk) and j ≤ i::

    Akk[i,j] = beta_i Σ_c k_i[c] k_j[c] e^{G_i[c]-G_j[c]}      (j < i)
    Aqk[i,j] = scale  Σ_c q_i[c] k_j[c] e^{G_i[c]-G_j[c]}      (j ≤ i)
    (I + Akk) W = beta ⊙ K ⊙ e^G,   (I + Akk) U = beta ⊙ V      (unit lower-triangular solves)
    V' = U − W S
    O  = scale (Q ⊙ e^G) S + Aqk V'
    S ← diag(e^{G_L}) S + (K ⊙ e^{G_L−G})^T V'

Every exponent above is ≤ 0 (G is non-increasing inside a chunk because g ≤ 0), so nothing
overflows however negative the gates are; exponentials that underflow to 0 stand for terms that
really are below 1e-38. Splitting e^{G_i−G_j} into e^{G_i}·e^{−G_j} would overflow once |G| > 88.

Two functions:

* :func:`kda_chunk_fp64` — the float64 reference (``numpy.linalg.solve`` for the triangular
  systems, an independent route to the same numbers as :func:`..naive.kda_recurrent_fp64`);
* :func:`chunk_stages_model` — the three CUDA kernels' stages in NumPy with the kernels'
  intermediate arrays and layouts (zero-padded last chunk, the right-looking forward
  substitution order, the state pass), in float32 or float64. The GPU tests compare each
  kernel's intermediate output with it, so a failing stage is named.
"""

from __future__ import annotations


import numpy as np

from .naive import _as_f64, check_shapes


def _pad_chunks(x: np.ndarray, C: int) -> np.ndarray:
    """[B, T, H, ...] -> [B, H, NT, C, ...] with the last chunk zero-padded."""
    B, T, H = x.shape[:3]
    NT = -(-T // C)
    pad = NT * C - T
    if pad:
        x = np.concatenate([x, np.zeros((B, pad, H) + x.shape[3:], dtype=x.dtype)], axis=1)
    x = x.reshape((B, NT, C, H) + x.shape[3:])
    return np.moveaxis(x, 3, 1)   # [B, H, NT, C, ...]


def _pair_decay(G: np.ndarray, strict: bool) -> np.ndarray:
    """e^{G_i − G_j} for j ≤ i (j < i if strict), 0 elsewhere; G is [..., C, K] -> [..., C, C, K].

    Only the lower triangle is exponentiated, where the exponent is ≤ 0.
    """
    C = G.shape[-2]
    d = G[..., :, None, :] - G[..., None, :, :]
    mask = np.tril(np.ones((C, C), dtype=bool), -1 if strict else 0)[..., None]
    return np.exp(np.where(mask, np.minimum(d, 0.0), -np.inf))


def kda_chunk_fp64(q, k, v, g, beta, scale: float | None = None, initial_state=None,
                   output_final_state: bool = False, chunk_size: int = 64):
    """Chunked KDA in float64 (any T ≥ 1: the last chunk is zero-padded).

    Returns ``(o [B, T, H, V], S [B, H, K, V] or None)``; agrees with the recurrent form to
    rounding (≈1e-13 relative).
    """
    q, k, v, g, beta = (_as_f64(a) for a in (q, k, v, g, beta))
    h0 = None if initial_state is None else _as_f64(initial_state)
    B, T, H, K, V = check_shapes(q, k, v, g, beta, h0)
    if int(chunk_size) != chunk_size or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    C = int(chunk_size)
    scale = K ** -0.5 if scale is None else float(scale)
    qc, kc, vc, gc = (_pad_chunks(a, C) for a in (q, k, v, g))
    bc = _pad_chunks(beta, C)                                  # [B, H, NT, C]
    NT = qc.shape[2]
    G = np.cumsum(gc, axis=-2)                                 # padded rows have g = 0
    S = np.zeros((B, H, K, V)) if h0 is None else h0.copy()
    o = np.empty((B, H, NT, C, V))
    eye = np.eye(C)
    for n in range(NT):
        Gn, qn, kn, vn, bn = G[:, :, n], qc[:, :, n], kc[:, :, n], vc[:, :, n], bc[:, :, n]
        Dk = _pair_decay(Gn, strict=True)                      # [B, H, C, C, K]
        Dq = _pair_decay(Gn, strict=False)
        Akk = bn[..., None] * np.einsum("bhic,bhjc,bhijc->bhij", kn, kn, Dk)
        Aqk = scale * np.einsum("bhic,bhjc,bhijc->bhij", qn, kn, Dq)
        rhs = np.concatenate([bn[..., None] * kn * np.exp(Gn), bn[..., None] * vn], axis=-1)
        WU = np.linalg.solve(eye + Akk, rhs)
        W, U = WU[..., :K], WU[..., K:]
        Vp = U - W @ S
        o[:, :, n] = scale * (qn * np.exp(Gn)) @ S + Aqk @ Vp
        GL = Gn[..., -1, :]                                    # [B, H, K]
        Kd = kn * np.exp(GL[..., None, :] - Gn)
        S = np.exp(GL)[..., None] * S + np.swapaxes(Kd, -1, -2) @ Vp
    o = np.moveaxis(o, 1, 3).reshape(B, NT * C, H, V)[:, :T]
    return np.ascontiguousarray(o), (S if output_final_state else None)


# ----------------------------------------------------------------------------- kernel mirror

LOG2E = 1.4426950408889634


def chunk_stages_model(q, k, v, g, beta, scale: float | None = None, initial_state=None,
                       chunk_size: int = 64, dtype=np.float32) -> dict[str, np.ndarray]:
    """The CUDA kernels' three stages in NumPy, with their intermediate arrays and layouts.

    Stage 1 (``kernels/delta/02_chunk_intra.cu``), per (b, h, chunk): cumulative gates in
    base 2 (``G2 = log2(e)·cumsum(g)``, then ``exp2`` of differences ≤ 0), ``Akk``, ``Aqk``
    ``[B, H, NT, C, C]``; ``Qg = scale·q·e^G``, ``Kd = k·e^{G_L−G}``, ``Kbg = beta·k·e^G``
    ``[B, H, NT·C, K]``; ``gL = e^{G_L}`` ``[B, H, NT, K]``.
    Stage 2 (``03_chunk_solve.cu``): W and U by right-looking forward substitution
    (row j done, then subtract ``Akk[i, j]·X_j`` from every later row i), ``U = (I+Akk)^{-1}(beta·v)``
    ``[B, H, NT·C, V]``; W overwrites Kbg.
    Stage 3 (``04_chunk_state.cu``): the sequential pass over chunks; returns ``o``, ``final_state``.

    ``dtype=np.float32`` follows the kernels' arithmetic precision (not their exact summation
    order); ``np.float64`` gives exact intermediates to compare the GPU's against.
    """
    f = np.dtype(dtype).type
    cast = lambda a: np.ascontiguousarray(_as_f64(a), dtype=f)  # noqa: E731
    q, k, v, g, beta = (cast(a) for a in (q, k, v, g, beta))
    h0 = None if initial_state is None else cast(initial_state)
    B, T, H, K, V = check_shapes(q, k, v, g, beta, h0)
    C = int(chunk_size)
    scale = f(K ** -0.5 if scale is None else scale)
    qc, kc, vc, gc = (_pad_chunks(a, C) for a in (q, k, v, g))     # [B, H, NT, C, *]
    bc = _pad_chunks(beta, C)
    NT = qc.shape[2]

    # ---- stage 1: gates, A matrices, elementwise products
    G2 = np.cumsum(gc, axis=-2, dtype=f) * f(LOG2E)
    d = G2[..., :, None, :] - G2[..., None, :, :]                   # [B, H, NT, C, C, K]
    low = np.tril(np.ones((C, C), dtype=bool), 0)
    E = np.where(low[..., None], np.exp2(np.minimum(d, f(0))), f(0)).astype(f)
    kk = np.einsum("...ic,...jc,...ijc->...ij", kc, kc, E)
    qk = np.einsum("...ic,...jc,...ijc->...ij", qc, kc, E)
    Akk = (bc[..., None] * np.tril(kk, -1)).astype(f)
    Aqk = (scale * np.tril(qk, 0)).astype(f)
    eG = np.exp2(G2)
    GL2 = G2[..., -1, :]                                             # padded rows keep G_L
    Qg = scale * qc * eG
    Kd = kc * np.exp2(GL2[..., None, :] - G2)
    Kbg = bc[..., None] * kc * eG
    gL = np.exp2(GL2)

    # ---- stage 2: right-looking forward substitution, (I + Akk) X = [Kbg | beta·v]
    X = np.concatenate([Kbg, bc[..., None] * vc], axis=-1).astype(f)
    for j in range(C - 1):
        X[..., j + 1:, :] -= Akk[..., j + 1:, j, None] * X[..., j:j + 1, :]
    W, U = X[..., :K], X[..., K:]

    # ---- stage 3: the sequential state pass
    S = np.zeros((B, H, K, V), dtype=f) if h0 is None else h0.copy()
    o = np.empty((B, H, NT, C, V), dtype=f)
    for n in range(NT):
        Vp = U[:, :, n] - W[:, :, n] @ S
        o[:, :, n] = Qg[:, :, n] @ S + Aqk[:, :, n] @ Vp
        S = gL[:, :, n][..., None] * S + np.swapaxes(Kd[:, :, n], -1, -2) @ Vp
    o = np.moveaxis(o, 1, 3).reshape(B, NT * C, H, V)[:, :T]
    flat = lambda a: a.reshape(B, H, NT * C, a.shape[-1])  # noqa: E731
    return dict(Akk=Akk, Aqk=Aqk, Qg=flat(Qg), Kd=flat(Kd), Kbg=flat(Kbg), gL=gL,
                W=flat(W), U=flat(U), o=np.ascontiguousarray(o), final_state=S)


# ----------------------------------------------------------------------------- rounding model

#: The products of the tensor-core recurrence (13-17) whose operands :func:`chunk_rounding_model`
#: can round to one bf16 term: P1 = [Kg; Qg] S, P2 = [T; A2] X, P4 = Kd^T V'.
PRODUCTS = ("P1", "P2", "P4")


def chunk_rounding_model(q, k, v, g, beta, scale: float | None = None, initial_state=None, *,
                         round_inputs: bool = False, one_term: tuple = (), round_output: bool = False,
                         chunk_size: int = 32):
    """The recurrence of kernels 13-17 in float64, with chosen roundings to bf16 and nothing else.

    Per chunk (G the cumulative gates, T = (I + Akk)^-1, A2 = Aqk T as 07 hands them over)::

        X  = beta (v - Kg S),   Ob = Qg S                  (P1; Kg = k e^G, Qg = scale q e^G)
        V' = T X,               o = Ob + A2 X              (P2)
        S  = e^{G_L} S + Kd^T V'                           (P4; Kd = k e^{G_L - G})

    ``round_inputs`` rounds q, k, v, g, beta to bf16 first (the bf16-I/O path's inputs); each product
    named in ``one_term`` (of :data:`PRODUCTS`) multiplies its two operands rounded to bf16 once (what
    a single bf16 wgmma sees; the kernels' three-term products are exact to ~2^-16 and are modelled
    as exact); ``round_output`` rounds o to bf16. Returns ``(o [B, T, H, V], S [B, H, K, V])``.
    Everything else is float64, so the difference from the unrounded model is what those roundings
    cost. Any T ≥ 1 (the last chunk zero-padded)."""
    from .tf32 import round_bf16

    bad = set(one_term) - set(PRODUCTS)
    if bad:
        raise ValueError(f"one_term names products of {PRODUCTS}, got {sorted(bad)}")
    rb = lambda a: round_bf16(np.asarray(a, np.float32)).astype(np.float64)  # noqa: E731
    q, k, v, g, beta = (_as_f64(a) for a in (q, k, v, g, beta))
    h0 = None if initial_state is None else _as_f64(initial_state)
    B, T, H, K, V = check_shapes(q, k, v, g, beta, h0)
    if round_inputs:
        q, k, v, g, beta = (rb(a) for a in (q, k, v, g, beta))
    C = int(chunk_size)
    scale = K ** -0.5 if scale is None else float(scale)
    r = {p: (rb if p in one_term else (lambda a: a)) for p in PRODUCTS}
    qc, kc, vc, gc = (_pad_chunks(a, C) for a in (q, k, v, g))
    bc = _pad_chunks(beta, C)
    NT = qc.shape[2]
    G = np.cumsum(gc, axis=-2)
    S = np.zeros((B, H, K, V)) if h0 is None else h0.copy()
    o = np.empty((B, H, NT, C, V))
    eye = np.eye(C)
    for n in range(NT):
        Gn, qn, kn, vn, bn = G[:, :, n], qc[:, :, n], kc[:, :, n], vc[:, :, n], bc[:, :, n]
        Akk = bn[..., None] * np.einsum("bhic,bhjc,bhijc->bhij", kn, kn, _pair_decay(Gn, strict=True))
        Aqk = scale * np.einsum("bhic,bhjc,bhijc->bhij", qn, kn, _pair_decay(Gn, strict=False))
        Tm = np.linalg.inv(eye + Akk)
        A2 = Aqk @ Tm
        Sr = r["P1"](S)
        X = bn[..., None] * (vn - r["P1"](kn * np.exp(Gn)) @ Sr)
        Ob = r["P1"](scale * qn * np.exp(Gn)) @ Sr
        Xr = r["P2"](X)
        Vp = r["P2"](Tm) @ Xr
        o[:, :, n] = Ob + r["P2"](A2) @ Xr
        GL = Gn[..., -1, :]
        Kd = kn * np.exp(GL[..., None, :] - Gn)
        S = np.exp(GL)[..., None] * S + np.swapaxes(r["P4"](Kd), -1, -2) @ r["P4"](Vp)
    o = np.moveaxis(o, 1, 3).reshape(B, NT * C, H, V)[:, :T]
    if round_output:
        o = rb(o)
    return np.ascontiguousarray(o), S
