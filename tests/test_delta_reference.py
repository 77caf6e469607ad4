"""The float64 KDA references agree with each other, with fla's semantics and on edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.delta import chunk_stages_model, kda_chunk_fp64, kda_recurrent_fp64, random_inputs
from attnlab.delta.naive import check_shapes


def rel(a, b):
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(b))


CASES = [
    # B, T, H, K, V, C, gate, init, beta_range
    (1, 1, 1, 8, 4, 16, "logsigmoid", False, (0.05, 0.95)),     # T = 1
    (2, 17, 2, 16, 8, 16, "logsigmoid", True, (0.05, 0.95)),     # T not a multiple of C
    (2, 64, 2, 16, 16, 16, "logsigmoid", True, (0.05, 0.95)),    # T a multiple of C
    (1, 100, 3, 32, 8, 32, "logsigmoid", False, (0.05, 0.95)),
    (1, 45, 2, 16, 8, 16, "zero", True, (0.05, 0.95)),           # g = 0: no decay
    (1, 45, 2, 16, 8, 16, "const", True, (0.05, 0.95)),          # g = -50 every step
    (1, 70, 2, 16, 8, 32, "mixed", True, (0.05, 0.95)),          # -50 and log-sigmoid channels
    (1, 90, 1, 16, 8, 64, "strong", False, (0.05, 0.95)),        # g uniform in [-3, 0]
    (1, 40, 2, 16, 8, 8, "logsigmoid", True, (1e-6, 1e-5)),      # beta near 0
    (1, 40, 2, 16, 8, 8, "logsigmoid", True, (0.999999, 1.0)),   # beta near 1
]


def case_id(c):
    B, T, H, K, V, C, gate, init, br = c
    return f"B{B}-T{T}-H{H}-K{K}-V{V}-C{C}-{gate}-{'h0' if init else 'noh0'}-beta{br[0]:g}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_chunk_matches_recurrent(case):
    B, T, H, K, V, C, gate, init, br = case
    x = random_inputs(B, T, H, K, V, seed=T, gate=gate, beta_range=br, initial_state=init,
                      dtype=np.float64)
    o_r, s_r = kda_recurrent_fp64(**x, output_final_state=True)
    o_c, s_c = kda_chunk_fp64(**x, output_final_state=True, chunk_size=C)
    assert o_c.shape == (B, T, H, V) and s_c.shape == (B, H, K, V)
    assert np.all(np.isfinite(o_c)) and np.all(np.isfinite(s_c))
    assert rel(o_c, o_r) < 1e-12, rel(o_c, o_r)
    assert rel(s_c, s_r) < 1e-12, rel(s_c, s_r)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_kernel_stage_model_matches_recurrent(case):
    """The NumPy mirror of the CUDA stages: exact in float64, ~1e-6 in float32."""
    B, T, H, K, V, C, gate, init, br = case
    x = random_inputs(B, T, H, K, V, seed=T + 1, gate=gate, beta_range=br, initial_state=init,
                      dtype=np.float64)
    o_r, s_r = kda_recurrent_fp64(**x, output_final_state=True)
    m64 = chunk_stages_model(**x, chunk_size=C, dtype=np.float64)
    assert rel(m64["o"], o_r) < 1e-12 and rel(m64["final_state"], s_r) < 1e-12
    m32 = chunk_stages_model(**x, chunk_size=C, dtype=np.float32)
    assert m32["o"].dtype == np.float32
    assert rel(m32["o"], o_r) < 2e-5 and rel(m32["final_state"], s_r) < 2e-5


def test_final_state_none_unless_asked():
    x = random_inputs(1, 5, 1, 8, 4, dtype=np.float64)
    assert kda_recurrent_fp64(**x)[1] is None
    assert kda_chunk_fp64(**x, chunk_size=4)[1] is None


def test_initial_state_matters_and_chains():
    """Running [0, T1) then [T1, T) from the carried state equals one run over [0, T)."""
    x = random_inputs(2, 50, 2, 16, 8, seed=3, initial_state=True, dtype=np.float64)
    o_all, s_all = kda_recurrent_fp64(**x, output_final_state=True)
    first = {n: a[:, :23] for n, a in x.items() if n != "initial_state"}
    second = {n: a[:, 23:] for n, a in x.items() if n != "initial_state"}
    o1, s1 = kda_chunk_fp64(**first, initial_state=x["initial_state"], output_final_state=True,
                            chunk_size=16)
    o2, s2 = kda_chunk_fp64(**second, initial_state=s1, output_final_state=True, chunk_size=16)
    assert rel(np.concatenate([o1, o2], axis=1), o_all) < 1e-12
    assert rel(s2, s_all) < 1e-12
    o0, _ = kda_recurrent_fp64(**{n: a for n, a in x.items() if n != "initial_state"})
    assert rel(o0, o_all) > 1e-3        # the state given really is used


def test_very_negative_gates_forget_everything():
    """g = -50 per step: e^{-50} ≈ 2e-22, so each output depends only on its own token."""
    x = random_inputs(1, 70, 2, 16, 8, seed=5, gate="const", gate_value=-50.0, initial_state=True,
                      dtype=np.float64)
    o_c, s_c = kda_chunk_fp64(**x, output_final_state=True, chunk_size=64)
    o_r, _ = kda_recurrent_fp64(**x, output_final_state=True)
    assert np.all(np.isfinite(o_c)) and rel(o_c, o_r) < 1e-12
    # With S_{t-1} decayed to ~0: u = beta v, S = beta k v^T, o = scale beta (q.k) v.
    k, q, v, b = x["k"], x["q"], x["v"], x["beta"]
    expect = (16 ** -0.5) * (b * np.einsum("bthk,bthk->bth", q, k))[..., None] * v
    assert rel(o_c, expect) < 1e-12
    # And g = -1e4 (e^G underflows to exactly 0 inside the chunk) is still finite and exact.
    x["g"][:] = -1e4
    o_c, _ = kda_chunk_fp64(**x, chunk_size=32)
    m32 = chunk_stages_model(**x, chunk_size=32)
    assert np.all(np.isfinite(o_c)) and np.all(np.isfinite(m32["o"]))
    assert rel(m32["o"], o_c) < 1e-6


def test_zero_gate_beta_one_is_plain_delta_rule():
    """g = 0, beta = 1, orthonormal keys: S stores v exactly at k, so q = k reads it back."""
    K = V = 8
    k = np.eye(K)[None, :, None, :]                       # T = 8 orthonormal keys
    v = np.random.default_rng(0).standard_normal((1, 8, 1, V))
    g = np.zeros_like(k)
    beta = np.ones((1, 8, 1))
    _, S = kda_chunk_fp64(k, k, v, g, beta, output_final_state=True, chunk_size=4)
    assert np.allclose(S[0, 0], v[0, :, 0, :], atol=1e-12)   # row i of S is v_i
    # Writing the same key again with beta = 1 replaces (not adds) the value: the delta rule.
    k2 = np.concatenate([k, k[:, :1]], axis=1)
    v2 = np.concatenate([v, -v[:, :1]], axis=1)
    _, S2 = kda_recurrent_fp64(k2, k2, v2, np.zeros_like(k2), np.ones((1, 9, 1)), output_final_state=True)
    assert np.allclose(S2[0, 0, 0], -v[0, 0, 0], atol=1e-12)


def test_transition_matrix_form_matches_fla_semantics():
    """fla's naive_recurrent_kda, written as S_t = (I − β k kᵀ) diag(e^g) S_{t−1} + β k vᵀ,
    o_t = S_tᵀ (scale q) with explicit K×K matrices (a different evaluation order)."""
    B, T, H, K, V = 1, 30, 2, 8, 6
    x = random_inputs(B, T, H, K, V, seed=11, initial_state=True, dtype=np.float64)
    scale = 0.3
    o_r, s_r = kda_recurrent_fp64(**x, scale=scale, output_final_state=True)
    for b in range(B):
        for h in range(H):
            S = x["initial_state"][b, h].copy()
            for t in range(T):
                kt, bt = x["k"][b, t, h], x["beta"][b, t, h]
                A = (np.eye(K) - bt * np.outer(kt, kt)) @ np.diag(np.exp(x["g"][b, t, h]))
                S = A @ S + bt * np.outer(kt, x["v"][b, t, h])
                assert np.allclose(S.T @ (scale * x["q"][b, t, h]), o_r[b, t, h], atol=1e-12)
            assert np.allclose(S, s_r[b, h], atol=1e-12)


def test_against_fla_naive_when_installed():
    torch = pytest.importorskip("torch")
    naive = pytest.importorskip("fla.ops.kda.naive")
    x = random_inputs(2, 33, 2, 16, 8, seed=2, initial_state=True, dtype=np.float64)
    t = {n: torch.from_numpy(a) for n, a in x.items()}
    o_f, s_f = naive.naive_recurrent_kda(t["q"], t["k"], t["v"], t["g"], t["beta"],
                                         initial_state=t["initial_state"], output_final_state=True)
    o_r, s_r = kda_chunk_fp64(**x, output_final_state=True, chunk_size=16)
    # fla's naive runs in float32 (it casts with .to(torch.float)).
    assert rel(o_f.double().numpy(), o_r) < 1e-5
    assert rel(s_f.double().numpy(), s_r) < 1e-5


@pytest.mark.parametrize("bad, match", [
    (dict(k=np.zeros((1, 4, 1, 9))), "k must have q's shape"),
    (dict(v=np.zeros((1, 5, 1, 4))), "v must be"),
    (dict(beta=np.zeros((1, 4))), "beta must be"),
    (dict(g=np.zeros((1, 4, 2, 8))), "g must have"),
    (dict(initial_state=np.zeros((1, 1, 4, 8))), "initial_state must be"),
], ids=["k-shape", "v-shape", "beta-shape", "g-shape", "state-shape"])
def test_shape_errors(bad, match):
    x = random_inputs(1, 4, 1, 8, 4, dtype=np.float64)
    x.update(bad)
    with pytest.raises(ValueError, match=match):
        kda_recurrent_fp64(**x)


def test_check_shapes_returns_dims():
    x = random_inputs(2, 3, 4, 8, 16)
    assert check_shapes(x["q"], x["k"], x["v"], x["g"], x["beta"]) == (2, 3, 4, 8, 16)


def test_random_inputs_properties():
    x = random_inputs(2, 50, 3, 16, 8, seed=4)
    assert x["q"].dtype == np.float32 and x["q"].flags.c_contiguous
    assert np.allclose(np.linalg.norm(x["k"], axis=-1), 1, atol=1e-5)
    assert np.all(x["g"] < 0) and np.all((x["beta"] > 0) & (x["beta"] < 1))
    with pytest.raises(ValueError, match="gate"):
        random_inputs(1, 2, 1, 4, 4, gate="const", gate_value=1.0)


# ----------------------------------------------------------------------------- TF32 emulation

def test_tf32_rounding_and_truncation_bits():
    from attnlab.delta.tf32 import round_tf32, split_tf32, truncate_tf32

    ulp = 2.0 ** -10                                  # TF32 ulp at 1
    x = np.array([1 + ulp / 2, -(1 + ulp / 2), 1 + ulp / 2 - 2 ** -20, 1 + 0.75 * ulp, 3.0], np.float32)
    assert list(round_tf32(x)) == [1 + ulp, -(1 + ulp), 1.0, 1 + ulp, 3.0]      # ties away from zero
    assert list(truncate_tf32(x)) == [1.0, -1.0, 1.0, 1.0, 3.0]
    assert round_tf32(np.float32(1.5)).shape == ()
    rng = np.random.default_rng(1)
    y = (rng.standard_normal(1000) * 10.0 ** rng.integers(-20, 20, 1000)).astype(np.float32)
    hi, lo = split_tf32(y)
    assert np.array_equal(hi + lo, y)                 # the split is exact
    assert np.array_equal(round_tf32(hi), hi)         # hi is a TF32 number
    assert np.all(np.abs(lo) <= np.abs(hi) * 2.0 ** -11)


def test_3xtf32_reaches_fp32_accuracy_where_one_pass_does_not():
    from attnlab.delta.tf32 import matmul_tf32

    rng = np.random.default_rng(2)
    a = rng.standard_normal((32, 128)).astype(np.float32)
    b = rng.standard_normal((128, 32)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = lambda m: np.linalg.norm(m - ref) / np.linalg.norm(ref)  # noqa: E731
    assert err(matmul_tf32(a, b, passes=1)) > 1e-4
    assert err(matmul_tf32(a, b, passes=1, round_operands=True)) > 1e-4
    assert err(matmul_tf32(a, b, passes=3)) < 1e-6
    with pytest.raises(ValueError, match="passes"):
        matmul_tf32(a, b, passes=2)


def test_chunk_rounding_model_rounds_only_what_it_is_told():
    """attnlab.delta.chunk_rounding_model: unrounded it is the recurrence; bf16 inputs give the
    recurrence on rounded inputs; over one chunk from a zero state P1 has nothing to round (S = 0) and
    P4's one term is round(Kd)^T round(V') with V' = U from the stage model, independently built."""
    from attnlab.delta import chunk_rounding_model
    from attnlab.delta.tf32 import round_bf16

    x = random_inputs(1, 70, 2, 64, 64, seed=4, initial_state=True)
    d = {n: x[n] for n in ("q", "k", "v", "g", "beta", "initial_state")}
    ro, rs = kda_recurrent_fp64(**d, output_final_state=True)
    o, s = chunk_rounding_model(**d)
    assert np.abs(o - ro).max() < 1e-10 and np.abs(s - rs).max() < 1e-10
    xb = {n: round_bf16(d[n]).astype(np.float64) for n in ("q", "k", "v", "g", "beta")}
    bo, bs = kda_recurrent_fp64(**xb, initial_state=d["initial_state"], output_final_state=True)
    o, s = chunk_rounding_model(**d, round_inputs=True, round_output=True)
    assert np.array_equal(o, round_bf16(bo.astype(np.float32)).astype(np.float64)) or \
        np.mean(o != round_bf16(bo.astype(np.float32))) < 1e-3   # a last-bit tie at most
    assert np.abs(s - bs).max() < 1e-10
    one = {n: d[n][:, :32] for n in ("q", "k", "v", "g", "beta")}
    o0, s0 = chunk_rounding_model(**one)
    o1, s1 = chunk_rounding_model(**one, one_term=("P1", "P4"))
    assert np.array_equal(o0, o1), "from a zero state, rounding P1 or P4 cannot change the first chunk's o"
    m = chunk_stages_model(**one, chunk_size=32, dtype=np.float64)
    kd, u = m["Kd"][0], m["U"][0]                       # [H, 32, K], [H, 32, V]
    want = np.einsum("hck,hcv->hkv", round_bf16(kd.astype(np.float32)).astype(np.float64),
                     round_bf16(u.astype(np.float32)).astype(np.float64))
    assert np.abs(s1[0] - want).max() < 1e-9 * np.abs(want).max()
    assert rel(s1, s0) > 1e-4, "the one-term state must differ from the exact one"
    with pytest.raises(ValueError, match="one_term names products of"):
        chunk_rounding_model(**one, one_term=("P3",))
