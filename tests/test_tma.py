"""Host side of the Hopper kernels (attnlab.tma, the registry's TMA entries) without a GPU."""

import pytest

from attnlab import tma
from attnlab.attention import KERNELS, resolve_params


def test_box_plan_describes_each_head_as_its_own_rows():
    plan = tma.box_plan(bh=6, n=1000, d=128, rows=64)
    assert plan["dims"] == (128, 1000, 6)                 # innermost first: D, N, B·H
    assert plan["strides"] == (128 * 2, 1000 * 128 * 2)   # bytes, rank - 1 of them
    assert plan["box"] == (64, 64, 1)                     # 64 columns = one 128-byte swizzle row


@pytest.mark.parametrize("kw, msg", [
    (dict(bh=1, n=10, d=96, rows=64), "multiple of the box width"),
    (dict(bh=1, n=10, d=128, rows=64, cols=128), "at most 64"),
    (dict(bh=1, n=10, d=64, rows=300), "box rows"),
    (dict(bh=0, n=10, d=64, rows=64), "empty tensor"),
])
def test_box_plan_refuses_what_the_copy_engine_cannot_do(kw, msg):
    with pytest.raises(ValueError, match=msg):
        tma.box_plan(**kw)


def test_tensor_map_checks_before_the_driver():
    with pytest.raises(ValueError, match="16-byte aligned"):
        tma.tensor_map_3d(0x1008, "bfloat16", 1, 16, 64, 64)
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        tma.tensor_map_3d(0x1000, "float32", 1, 16, 64, 64)


@pytest.mark.parametrize("name", [n for n, s in KERNELS.items() if s.tma])
def test_tma_kernels_boxes_fit_their_shared_memory(name):
    spec = KERNELS[name]
    assert spec.arch == "sm_90a" and spec.min_cc == 90
    for d in spec.head_dims:
        p, _ = resolve_params(name, d)
        for rows in (p["BM"], p["BN"]):
            tma.box_plan(bh=2, n=4096, d=d, rows=rows)   # a valid box for Q (BM rows) and K/V (BN rows)
        stages = p.get("STAGES", 1)
        _, threads, smem = spec.launch(1, 1, d, p)
        # Q tile + stages x (K + V) tiles, 16-bit, plus the 1024 bytes the kernel may skip to align
        assert smem == 2 * d * (p["BM"] + 2 * stages * p["BN"]) + 1024 <= 227 * 1024
        assert threads == (384 if name == "warp_specialized" else 128)


def test_rows_plan_describes_a_chunk_of_one_head():
    # q of [B=2, T=100, H=16, K=128] fp32: (K, H, T, B) innermost first, a box of 32 tokens x 128 channels
    plan = tma.rows_plan(2, 100, 16, 128, 32, 4)
    assert plan["dims"] == (128, 16, 100, 2)
    assert plan["strides"] == (128 * 4, 16 * 128 * 4, 100 * 16 * 128 * 4)
    assert plan["box"] == (128, 1, 32, 1)
    with pytest.raises(ValueError, match="1..256"):
        tma.rows_plan(1, 10, 1, 64, 300, 4)
    with pytest.raises(ValueError, match="multiple of 16 bytes"):
        tma.rows_plan(1, 10, 1, 6, 32, 2)
    with pytest.raises(ValueError, match="16-byte aligned"):
        tma.tensor_map_rows(0x1008, "float32", 1, 16, 1, 64, 32)
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        tma.tensor_map_rows(0x1000, "float16", 1, 16, 1, 64, 32)


def test_rows_plan_value_blocks_and_swizzle():
    # v of [B=2, T=100, H=16, V=128] bf16 in value blocks of 32 columns, each box row (64 bytes) swizzled
    plan = tma.rows_plan(2, 100, 16, 128, 32, 2, cols=32, swizzle=64)
    assert plan["dims"] == (128, 16, 100, 2) and plan["box"] == (32, 1, 32, 1) and plan["swizzle"] == 64
    assert tma.rows_plan(1, 10, 1, 64, 8, 4)["swizzle"] == 0
    with pytest.raises(ValueError, match="at most 64 bytes"):
        tma.rows_plan(1, 10, 1, 128, 32, 4, cols=32, swizzle=64)   # 128-byte rows under a 64-byte swizzle
    with pytest.raises(ValueError, match="swizzle must be one of"):
        tma.rows_plan(1, 10, 1, 64, 32, 4, swizzle=16)
    with pytest.raises(ValueError, match="within the tensor"):
        tma.rows_plan(1, 10, 1, 64, 32, 4, cols=128)
