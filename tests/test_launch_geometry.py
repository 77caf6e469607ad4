"""Launch geometry on the CPU: the grid the launcher computes, decoded the way each kernel decodes
``blockIdx``, covers every (head, query row) exactly once and never addresses a head past B·H.

Ladder kernels (01-04b) take a 1-D grid: 01 one block per row, 02-04b B·H·ceil(N/TILE_ROWS)
blocks, which the kernel splits back with ``row_tiles = (n + TILE_ROWS - 1) / TILE_ROWS``. Flash
kernels (08 on) take (ceil(N/BM), B·H). A floor where a ceiling belongs drops the last partial
tile of rows (never written) and, for the ladder, shifts every later head by one block.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from attnlab.attention import KERNELS, TILE_KV_CHOICES, TILE_ROWS_CHOICES, AttentionKernel, Param
from attnlab.compile import included_kernels
from attnlab.paths import KERNELS_DIR

LADDER_KERNELS = sorted(n for n, s in KERNELS.items() if not s.flash)
FLASH_KERNELS = sorted(n for n, s in KERNELS.items() if s.flash)
# N = 1, every N up to past the largest tile, and the notebooks' partial/large shapes.
NS = sorted({*range(1, 70), 95, 127, 128, 129, 255, 257, 1000, 1023, 4097})
BHS = (1, 3, 16)


def coverage(blocks_to_rows, grid_blocks: int, bh: int, n: int) -> np.ndarray:
    """How many times each (head, row) is written, given a vectorised block -> (head, rows) map."""
    heads, rows = np.broadcast_arrays(*blocks_to_rows(np.arange(grid_blocks, dtype=np.int64)))
    valid = rows < n                               # the kernels skip rows past n
    assert (heads[valid] < bh).all(), "a block addresses a head past B·H (out-of-bounds access)"
    return np.bincount((heads[valid] * n + rows[valid]).ravel(), minlength=bh * n)


def test_every_ladder_kernel_is_checked():
    assert {"naive", "tiled", "vec_load", "vec_padded", "double_buffer"} <= set(LADDER_KERNELS)


@pytest.mark.parametrize("name", LADDER_KERNELS)
def test_ladder_kernel_decodes_blocks_as_modelled(name):
    """The Python model below is the kernel's own decoding (so a changed kernel fails here first)."""
    src = (KERNELS_DIR / KERNELS[name].source).read_text()
    if not KERNELS[name].tiled:
        assert re.search(r"row\s*=\s*blockIdx\.x\s*;", src), f"{name}: expected one block per row"
        return
    assert re.search(r"row_tiles\s*=\s*\(n \+ TILE_ROWS - 1\) / TILE_ROWS\s*;", src), name
    assert re.search(r"bh\s*=\s*blockIdx\.x / row_tiles\s*;", src), name
    assert re.search(r"row0\s*=\s*\(blockIdx\.x % row_tiles\) \* TILE_ROWS\s*;", src), name
    assert re.search(r"row\s*=\s*row0 \+ warp\s*;", src), name


@pytest.mark.parametrize("name", LADDER_KERNELS)
def test_ladder_grid_covers_every_row_once(name):
    spec = KERNELS[name]
    tiles = TILE_ROWS_CHOICES if spec.tiled else (1,)
    for tr in tiles:
        p = {"tile_rows": tr, "tile_kv": TILE_KV_CHOICES[0]}
        for bh in BHS:
            for n in NS:
                grid, threads, smem = spec.launch(bh, n, 64, p)
                assert grid[1:] == (1, 1) and grid[0] == spec.grid_blocks(bh, n, tr)
                if spec.tiled:
                    assert threads == 32 * tr, "one warp per query row of the tile"
                    row_tiles = (n + tr - 1) // tr          # what the kernel computes

                    def decode(b, row_tiles=row_tiles, tr=tr):
                        row0 = (b % row_tiles) * tr
                        return (b // row_tiles)[:, None], row0[:, None] + np.arange(tr)[None, :]
                else:
                    assert threads == 32

                    def decode(b, n=n):
                        return (b // n)[:, None], (b % n)[:, None]
                hits = coverage(decode, grid[0], bh, n)
                assert (hits == 1).all(), (f"{name} TILE_ROWS={tr} B·H={bh} N={n}: grid {grid[0]} leaves "
                                           f"{int((hits == 0).sum())} row(s) unwritten, "
                                           f"{int((hits > 1).sum())} written twice")
                # no block that does nothing at all (a whole tile of rows past n)
                assert grid[0] == bh * (row_tiles if spec.tiled else n)


# ----------------------------------------------------------------------------- flash family

# A stand-in flash kernel, so the 2-D launch is checked even while none is registered.
STAND_IN = AttentionKernel(
    "stand_in_flash", "99", "attention/99_stand_in.cu", "attn_stand_in",
    template=("D", "BM", "BN", "CAUSAL"), params=(Param("BM", (16, 32, 64, 128)), Param("BN", (32, 64))),
    defaults={64: {"BM": 64, "BN": 32}}, threads=lambda p: 4 * 32, smem=lambda d, p: 4 * d * (p["BM"] + 2 * p["BN"]))


def _flash_cases():
    cases = [pytest.param(STAND_IN, 64, {"BM": bm, "BN": 32}, id=f"stand_in-BM{bm}") for bm in (16, 32, 64, 128)]
    for name in FLASH_KERNELS:
        spec = KERNELS[name]
        for d in spec.head_dims:
            if d in spec.defaults:
                p = dict(spec.defaults[d])
                cases.append(pytest.param(spec, d, p, id=f"{name}-D{d}-" + "-".join(f"{k}{v}" for k, v in p.items())))
    return cases


@pytest.mark.parametrize("name", FLASH_KERNELS)
def test_flash_kernel_decodes_blocks_as_modelled(name):
    path = KERNELS_DIR / KERNELS[name].source
    # the kernel's file and those it builds on (10h on 10g's body, 10i on 10h's)
    src = "\n".join(p.read_text() for p in (path, *included_kernels(path)))
    # blockIdx.x picks a tile of BM rows, in grid order or (causal 10d: longest rows first) reversed:
    # either way a bijection of the row tiles, which the coverage test below models
    assert (re.search(r"blockIdx\.x \* BM\b", src) or
            re.search(r"\(gridDim\.x - 1 - blockIdx\.x\)", src)), f"{name}: expected blockIdx.x to pick a tile of BM rows"
    # (the Hopper kernels name it once, bh, for the tensor-map coordinates and the output offset)
    assert (re.search(r"head_offset\(blockIdx\.y\b", src) or
            (re.search(r"const int bh = blockIdx\.y;", src) and re.search(r"head_offset\(bh\b", src))), \
        f"{name}: expected blockIdx.y to pick the head"


@pytest.mark.parametrize("spec, d, p", _flash_cases())
def test_flash_grid_covers_every_row_once(spec, d, p):
    bm = p.get("BM", spec.fixed.get("BM"))
    for bh in BHS:
        for n in NS:
            grid, threads, smem = spec.launch(bh, n, d, p)
            assert grid[1] == bh and grid[2] == 1, f"{spec.name}: grid.y must be B·H"

            def decode(bx, gx=grid[0]):
                # blockIdx.x = row tile, blockIdx.y = head: enumerate the 2-D grid
                x, y = bx % gx, bx // gx
                return y[:, None], (x * bm)[:, None] + np.arange(bm)[None, :]
            hits = coverage(decode, grid[0] * grid[1], bh, n)
            assert (hits == 1).all(), (f"{spec.name} BM={bm} N={n}: grid.x {grid[0]} leaves "
                                       f"{int((hits == 0).sum())} row(s) unwritten")
            assert (grid[0] - 1) * bm < n, "a row tile lies wholly past N"


@pytest.mark.parametrize("bh, n, bm, bn, slots", [(16, 4096, 96, 48, 264), (16, 16384, 96, 48, 264), (1, 1, 64, 64, 528),
                                                  (3, 200, 96, 48, 5), (1000, 17, 64, 64, 528), (2, 4097, 64, 48, 396)])
def test_stream_k_schedule_covers_every_iteration_once(bh, n, bm, bn, slots):
    """10h's persistent grid: every (row block, key tile) iteration belongs to exactly one block;
    a row block is split only in the Stream-K part, and among at most the blocks the kernel's
    merge loop visits (attn10h::Schedule.owner)."""
    from attnlab.attention import stream_k_grid, stream_k_iterations, stream_k_ranges
    p = dict(BM=bm, BN=bn)
    blocks = stream_k_grid(bh, n, p, slots)
    assert 1 <= blocks <= slots
    t = stream_k_iterations(bh, n, p)
    hits = np.zeros(t, dtype=int)
    for ranges in stream_k_ranges(bh, n, p, blocks):
        for a, b in ranges:
            hits[a:b] += 1
    assert (hits == 1).all()
    L = math.ceil(n / bn)
    U = bh * math.ceil(n / bm)
    W = max(0, U // blocks - 1)
    base, tsk = W * blocks * L, (U - W * blocks) * L
    for u in range(U):
        owners = {c for c, ranges in enumerate(stream_k_ranges(bh, n, p, blocks))
                  for a, b in ranges if a < (u + 1) * L and b > u * L}
        if u * L < base:
            assert len(owners) == 1
        else:   # the kernel's owner(): ((it - base + 1) * P - 1) // Tsk for the first and last tile
            lo, hi = (((it - base + 1) * blocks - 1) // tsk for it in (u * L, u * L + L - 1))
            assert owners == set(range(lo, hi + 1))


@pytest.mark.parametrize("bh, n, bm, slots, fill, plain", [
    (16, 4096, 64, 528, 90, True),      # D = 64 at B·H = 16: 1024 row blocks in 2 rounds of 528, 97 % full
    (16, 4096, 96, 264, 90, False),     # D = 128: 688 in 3 rounds of 264, 87 % full
    (16, 16384, 96, 264, 95, False),    # 2736 in 11 rounds of 264: 94.2 %
    (16, 16384, 96, 264, 90, True),
    (2, 528 * 64, 64, 528, 100, True),  # exactly full rounds: nothing to balance
    (1, 1, 64, 528, 50, False),         # one row block on 528 slots: split its keys
    (16, 4096, 64, 528, 0, True)])      # FILL = 0: always the plain grid
def test_stream_k_takes_the_plain_grid_when_rounds_are_nearly_full(bh, n, bm, slots, fill, plain):
    """10h's launch choice (attn_stream_k_plain in its source, stream_k_plain here): 10g's grid
    when a plain grid's rounds are at least FILL % full, else the persistent Stream-K grid."""
    from attnlab.attention import stream_k_plain
    assert stream_k_plain(bh, n, dict(BM=bm, FILL=fill), slots) is plain
    U = bh * math.ceil(n / bm)
    assert plain == (100 * U >= fill * math.ceil(U / slots) * slots)
