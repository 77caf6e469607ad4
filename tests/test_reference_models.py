"""References and the NumPy model of the online softmax."""

import numpy as np
import pytest
import torch

from attnlab.attention.models import online_softmax_attention
from attnlab.attention.reference import (attention_flops, attention_fp64, attention_min_bytes, attention_sdpa, max_abs_error,
                               rel_error)
from attnlab.timing import summarize


def qkv(B, H, N, D, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((B, H, N, D), dtype=np.float32) for _ in range(3))


@pytest.mark.parametrize("shape", [(1, 1, 1, 32), (2, 3, 65, 32), (1, 2, 17, 128)], ids=lambda s: "B{}-H{}-N{}-D{}".format(*s))
def test_fp64_reference_agrees_with_torch_sdpa(shape):
    q, k, v = qkv(*shape)
    ref = attention_fp64(q, k, v)
    sdpa = attention_sdpa(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v))
    assert ref.dtype == np.float64
    assert rel_error(sdpa, ref) < 1e-5


def test_fp64_reference_is_softmax_weighted_average():
    # N=1: softmax of one score is 1, so the output is V itself.
    q, k, v = qkv(2, 2, 1, 32)
    assert np.allclose(attention_fp64(q, k, v), v)
    # Identical keys: uniform weights, so every row is the mean of V.
    q, k, v = qkv(1, 1, 8, 32)
    k[:] = k[:, :, :1]
    assert np.allclose(attention_fp64(q, k, v)[0, 0], v[0, 0].mean(axis=0), atol=1e-6)


def test_reference_rejects_mismatched_shapes():
    q, k, v = qkv(1, 1, 4, 32)
    with pytest.raises(ValueError, match="share one"):
        attention_fp64(q, k[:, :, :3], v)


@pytest.mark.parametrize("block", [1, 4, 16, 64])
def test_online_softmax_model_matches_two_pass(block):
    q, k, v = qkv(1, 2, 37, 32, seed=block)
    out = online_softmax_attention(q, k, v, block=block)
    assert rel_error(out, attention_fp64(q, k, v)) < 1e-5


def test_online_softmax_survives_large_scores():
    # Scores of ±1e4 would overflow a naive exp; the running max keeps every exponent ≤ 0.
    q, k, v = qkv(1, 1, 5, 32)
    out = online_softmax_attention(q * 100, k * 100, v, scale=1.0)
    assert np.all(np.isfinite(out))
    assert rel_error(out, attention_fp64(q * 100, k * 100, v, scale=1.0)) < 1e-5


def test_error_metrics():
    ref = np.ones((2, 2))
    assert rel_error(ref * 1.001, ref) == pytest.approx(1e-3)
    assert rel_error(np.array([[np.nan, 1], [1, 1]]), ref) == float("inf")
    assert max_abs_error(ref + 0.5, ref) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        rel_error(np.ones(3), np.ones(4))


def test_flop_and_byte_accounting():
    assert attention_flops(2, 8, 4096, 64) == 4 * 2 * 8 * 4096 ** 2 * 64
    assert attention_min_bytes(2, 8, 4096, 64) == 4 * 2 * 8 * 4096 * 64 * 4


def test_timing_summary():
    t = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert t.median_ms == 3.0 and t.min_ms == 1.0 and t.max_ms == 100.0 and t.repeats == 5
    assert t.q1_ms == 2.0 and t.q3_ms == 4.0 and not t.converged
    assert summarize([1.0] * 10).converged
    for bad in ([], [1.0, float("nan")], [-1.0]):
        with pytest.raises(ValueError):
            summarize(bad)
