"""The shared-memory bank-conflict model (lib/attnlab/banks.py) on known cases, and the ladder
kernels' access patterns generated from their indexing."""

import pytest

from attnlab import banks
from attnlab.banks import warp_access, word_access


# ------------------------------------------------------------------ textbook cases, 4-byte words

def test_consecutive_words_are_conflict_free():
    a = word_access(list(range(32)))
    assert a.wavefronts == 1 and a.degree == 1 and a.conflict_free


@pytest.mark.parametrize("stride,degree", [(1, 1), (2, 2), (4, 4), (8, 8), (16, 16), (32, 32), (64, 32),
                                           (33, 1), (3, 1), (36, 4), (68, 4)],
                         ids=lambda x: str(x))
def test_strided_column_access(stride, degree):
    # lane t reads word t*stride: the classic "walk down a column" pattern
    a = word_access([t * stride for t in range(32)])
    assert a.degree == degree
    assert a.wavefronts == degree


def test_stride_32_is_fully_serialised_and_33_is_free():
    assert word_access([32 * t for t in range(32)]).wavefronts == 32
    assert word_access([33 * t for t in range(32)]).conflict_free


def test_broadcast_same_word_does_not_conflict():
    assert word_access([5] * 32).wavefronts == 1
    # half the warp on one word, the other half on distinct words in other banks
    assert word_access([7] * 16 + list(range(8, 8 + 16))).wavefronts == 1


def test_same_bank_different_words_conflict_but_repeats_do_not():
    # words 0 and 32 share bank 0: two distinct words -> 2 wavefronts, however many lanes ask
    assert word_access([0, 32] * 16).wavefronts == 2
    assert word_access([0, 32, 64] + [1] * 29).degree == 3


def test_inactive_lanes_are_ignored():
    a = word_access([0, None, 32, None] + [None] * 28)
    assert a.wavefronts == 2
    assert word_access([None] * 32).wavefronts == 0


# ------------------------------------------------------------------ 8- and 16-byte accesses

def test_float4_contiguous_needs_four_phases_and_no_more():
    a = warp_access([16 * t for t in range(32)], width=16)
    assert a.phases == (1, 1, 1, 1)
    assert a.wavefronts == 4 and a.ideal_wavefronts == 4 and a.conflict_free


def test_float2_contiguous_is_two_half_warps():
    a = warp_access([8 * t for t in range(32)], width=8)
    assert a.phases == (1, 1) and a.conflict_free


@pytest.mark.parametrize("D", [32, 64, 128], ids=lambda d: f"D{d}")
def test_float4_row_per_lane_conflicts_at_stride_D_and_padding_D_plus_4_removes_it(D):
    # lane t reads K[t][0:4] as a float4: rows D floats apart all start in bank 0
    unpadded = warp_access([4 * t * D for t in range(32)], width=16)
    assert unpadded.degree == 8            # the 8 lanes of each quarter-warp serialise
    assert unpadded.wavefronts == 32
    padded = warp_access([4 * t * (D + 4) for t in range(32)], width=16)
    assert padded.conflict_free and padded.wavefronts == 4


def test_float4_broadcast_within_a_phase():
    a = warp_access([0] * 32, width=16)
    assert a.wavefronts == 4 and a.conflict_free


def test_rejects_misaligned_and_bad_widths():
    with pytest.raises(ValueError):
        warp_access([4] * 32, width=16)
    with pytest.raises(ValueError):
        warp_access([0] * 32, width=12)
    with pytest.raises(ValueError):
        warp_access([0] * 33)


def test_bank_of():
    assert banks.bank_of(0) == 0 and banks.bank_of(4) == 1 and banks.bank_of(128) == 0 and banks.bank_of(132) == 1


# ------------------------------------------------------------------ the ladder kernels

def test_row_strides_match_the_kernels():
    assert banks.row_stride("tiled", 64) == 64
    assert banks.row_stride("vec_load", 64) == 64
    assert banks.row_stride("vec_padded", 64) == 68
    assert banks.row_stride("double_buffer", 128) == 132
    with pytest.raises(ValueError):
        banks.row_stride("naive", 64)


def test_padded_float4_store_addresses_follow_the_kernel_indexing():
    # 04_vec_padded: element idx goes to row idx / (D/4), column (idx % (D/4)) * 4, stride D + 4
    pats = {p.access: p for p in banks.ladder_access_patterns("vec_padded", 32, tile_rows=8, tile_kv=32)}
    k_store = pats["K tile store (global->shared)"]
    first = k_store.instructions[0]
    k_base = 4 * 8 * 36
    assert first[:8] == tuple(k_base + 16 * c for c in range(8))          # row 0, float4s 0..7
    assert first[8] == k_base + 4 * 36                                     # lane 8 starts row 1
    # 32 rows x 8 float4 = 256 float4 = one instruction per warp of 8 warps
    assert len(k_store.instructions) == 8


def test_padded_row_reads_follow_the_kernel_indexing():
    # 04_vec_padded's score and PV loops: lane t reads k_tile[j * (D + 4) + t + 32 i]
    D = 64
    pats = {p.access: p for p in banks.ladder_access_patterns("vec_padded", D, tile_rows=8, tile_kv=16)}
    k_base = 4 * 8 * (D + 4)
    reads = pats["K row read (score loop, all warps)"].instructions
    assert reads[0] == tuple(k_base + 4 * lane for lane in range(32))             # row 0, columns 0..31
    assert reads[1][0] == k_base + 4 * 32                                          # row 0, columns 32..63
    assert reads[2] == tuple(k_base + 4 * ((D + 4) + lane) for lane in range(32))  # row 1 starts D + 4 on


def test_scalar_copy_instruction_count():
    pats = {p.access: p for p in banks.ladder_access_patterns("tiled", 64, tile_rows=8, tile_kv=16)}
    # 16 rows x 64 floats = 1024 floats over 256 threads = 4 iterations x 8 warps
    assert len(pats["K tile store (global->shared)"].instructions) == 32
    assert len(pats["K row read (score loop, all warps)"].instructions) == 16 * 2


@pytest.mark.parametrize("kernel", ["tiled", "vec_load", "vec_padded", "double_buffer"])
@pytest.mark.parametrize("D,tile_rows,tile_kv", [(32, 8, 32), (64, 8, 16), (128, 8, 8), (64, 1, 8), (128, 32, 64),
                                                 (32, 2, 128)],
                         ids=lambda x: str(x))
def test_every_ladder_access_is_conflict_free_padded_or_not(kernel, D, tile_rows, tile_kv):
    # The reason padding cannot help this design: a warp always reads along a row (lane t takes
    # column t + 32i) and the copies write consecutive addresses; no lane ever walks down a column.
    t = banks.summarize_patterns(banks.ladder_access_patterns(kernel, D, tile_rows, tile_kv))
    assert len(t) == 6
    assert (t["conflict_degree"] == 1).all(), t
    assert (t["wavefronts"] == t["ideal_wavefronts"]).all()


def test_ladder_conflict_table_covers_every_kernel_and_head_dim():
    t = banks.ladder_conflict_table()
    assert set(t["kernel"]) == {"tiled", "vec_load", "vec_padded", "double_buffer"}
    assert set(t["D"]) == {32, 64, 128}
    assert len(t) == 4 * 3 * 6
    assert set(t[t["kernel"] == "vec_padded"]["stride_floats"]) == {36, 68, 132}
    assert (t["extra_wavefronts_pct"] == 0).all()


def test_counterfactual_key_per_lane_accesses_show_where_padding_matters():
    t = banks.counterfactual_table((64,))
    col = t[t["access"].str.startswith("K column")].set_index("stride_floats")["conflict_degree"]
    assert col[64] == 32 and col[65] == 1 and col[68] == 4
    vec = t[t["access"].str.contains("float4")].set_index("stride_floats")["conflict_degree"]
    assert vec[64] == 8 and vec[68] == 1
    assert 65 not in vec.index   # a float4 read needs 16-byte aligned rows
