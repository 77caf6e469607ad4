"""A shared-memory bank-conflict model, and the access patterns of the ladder kernels.

Shared memory is 32 banks, each 4 bytes wide; bank = (byte address / 4) mod 32. One warp
instruction is served in *wavefronts* (passes): a wavefront can deliver one 4-byte word from
each bank, and any number of lanes reading the *same* word share it (broadcast). So within one
pass, the number of wavefronts needed is the largest number of *distinct* words that fall in one
bank. Wider accesses are split into phases first:

* 4-byte accesses: the whole warp (32 lanes) is one phase;
* 8-byte accesses: two phases of 16 lanes (half-warps);
* 16-byte accesses (float4): four phases of 8 lanes (quarter-warps).

An ideal access therefore costs 1, 2 or 4 wavefronts (one per phase); anything above that is a
bank conflict, and the *conflict degree* is the worst phase's wavefront count (32 = all lanes
of a phase serialised). This is the textbook model of the CUDA programming guide; real hardware
has refinements (e.g. merging of 128-bit accesses whose lanes share addresses), which the
Nsight Compute counters in notebook 06 can confirm or refute.

The second half of this module generates, from the kernels' index arithmetic (not typed by
hand), the addresses every warp instruction of the ladder kernels touches in shared memory, so
a notebook can show the conflict degree of each access before and after padding the row stride
from D to D + 4 floats.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

BANKS = 32
BANK_BYTES = 4
WARP = 32

#: lanes served together (one phase) for each access width in bytes
LANES_PER_PHASE = {4: 32, 8: 16, 16: 8}


@dataclass(frozen=True)
class WarpAccess:
    """Cost of one warp-wide shared-memory instruction."""

    width: int                      # bytes per lane: 4, 8 or 16
    phases: tuple[int, ...]         # wavefronts of each phase (0 for a phase with no active lane)

    @property
    def wavefronts(self) -> int:
        return sum(self.phases)

    @property
    def ideal_wavefronts(self) -> int:
        """One wavefront per phase that has an active lane."""
        return sum(1 for p in self.phases if p > 0)

    @property
    def degree(self) -> int:
        """Conflict degree: wavefronts of the worst phase (1 = conflict-free, 32 = fully serialised)."""
        return max(self.phases) if self.phases else 0

    @property
    def extra_wavefronts(self) -> int:
        return self.wavefronts - self.ideal_wavefronts

    @property
    def conflict_free(self) -> bool:
        return self.extra_wavefronts == 0


def bank_of(byte_address: int) -> int:
    return (byte_address // BANK_BYTES) % BANKS


def warp_access(addresses: Sequence[int | None], width: int = 4) -> WarpAccess:
    """Wavefronts of one warp instruction.

    ``addresses``: the byte address each lane accesses (index = lane; ``None`` = inactive lane),
    at most 32 entries. ``width``: bytes per lane (4, 8 or 16); every address must be aligned
    to it, as the hardware requires.
    """
    if width not in LANES_PER_PHASE:
        raise ValueError(f"access width must be 4, 8 or 16 bytes, got {width}")
    if len(addresses) > WARP:
        raise ValueError(f"a warp has 32 lanes, got {len(addresses)} addresses")
    per_phase = LANES_PER_PHASE[width]
    words_per_lane = width // BANK_BYTES
    phases = []
    for start in range(0, WARP, per_phase):
        words_by_bank: dict[int, set[int]] = defaultdict(set)
        for addr in addresses[start:start + per_phase]:
            if addr is None:
                continue
            if addr < 0 or addr % width:
                raise ValueError(f"address {addr} is negative or not aligned to the {width}-byte access")
            first = addr // BANK_BYTES
            for w in range(first, first + words_per_lane):
                words_by_bank[w % BANKS].add(w)
        phases.append(max((len(ws) for ws in words_by_bank.values()), default=0))
    return WarpAccess(width, tuple(phases))


def word_access(words: Sequence[int | None]) -> WarpAccess:
    """Same as :func:`warp_access` for 4-byte accesses given as word (float) indices."""
    return warp_access([None if w is None else BANK_BYTES * w for w in words], 4)


def conflict_degree(addresses: Sequence[int | None], width: int = 4) -> int:
    return warp_access(addresses, width).degree


# ------------------------------------------------------------------ the ladder kernels' accesses

#: Shared-memory row stride (floats) and global->shared copy width (bytes) of each tiled kernel,
#: read off kernels/attention/0[2-5]_*.cu.
LAYOUTS = {
    "tiled": {"pad": 0, "copy_width": 4},
    "vec_load": {"pad": 0, "copy_width": 16},
    "vec_padded": {"pad": 4, "copy_width": 16},
    "double_buffer": {"pad": 4, "copy_width": 16},
}


def row_stride(kernel: str, D: int) -> int:
    """Shared-memory row stride in floats."""
    try:
        return D + LAYOUTS[kernel]["pad"]
    except KeyError:
        raise ValueError(f"no shared-memory layout for kernel {kernel!r}; known: {', '.join(LAYOUTS)}") from None


@dataclass(frozen=True)
class AccessPattern:
    """All warp instructions of one kind issued by one block for one K/V tile."""

    kernel: str
    access: str                          # e.g. "K tile store (global->shared)"
    width: int                           # bytes per lane
    stride: int                          # row stride in floats
    instructions: tuple[tuple[int | None, ...], ...]   # byte addresses per lane, per instruction

    def costs(self) -> list[WarpAccess]:
        return [warp_access(list(ins), self.width) for ins in self.instructions]


def _copy_instructions(rows: int, D: int, stride: int, width: int, threads: int, base: int):
    """Warp instructions of the cooperative copy ``for idx = tid; idx < rows*D/vec; idx += threads``:
    thread ``tid`` moves element ``idx`` (a float or a float4) to row idx // (D/vec), column
    (idx % (D/vec)) * vec of a tile with row stride ``stride`` floats, starting at byte ``base``."""
    vec = width // BANK_BYTES
    per_row = D // vec
    total = rows * per_row
    out = []
    for it_start in range(0, total, threads):
        for warp_start in range(it_start, min(it_start + threads, total), WARP):
            lanes = []
            for lane in range(WARP):
                idx = warp_start + lane
                if idx >= total or idx >= it_start + threads:
                    lanes.append(None)
                else:
                    word = (idx // per_row) * stride + (idx % per_row) * vec
                    lanes.append(base + BANK_BYTES * word)
            out.append(tuple(lanes))
    return tuple(out)


def _row_read_instructions(row_indices: Iterable[int], D: int, stride: int, base: int):
    """A warp reading a whole row, lane t taking columns t, t+32, ... (one instruction per
    32-column slice): what the score loop does with K rows and the PV loop with V rows, and what
    each warp does once with its own Q row."""
    out = []
    for r in row_indices:
        for i in range(D // WARP):
            out.append(tuple(base + BANK_BYTES * (r * stride + lane + WARP * i) for lane in range(WARP)))
    return tuple(out)


def ladder_access_patterns(kernel: str, D: int, tile_rows: int, tile_kv: int) -> list[AccessPattern]:
    """The shared-memory accesses of one block of ``kernel`` for one K/V tile, from its indexing.

    Stores: the Q tile and the K/V tiles written by the cooperative global->shared copy (scalar in
    02, float4 in 03-05; 05's cp.async writes land in the same banks). Loads: each warp reads its Q
    row once, then for every key j of the tile the row K[j] (scores) and V[j] (PV update).
    """
    stride = row_stride(kernel, D)
    width = LAYOUTS[kernel]["copy_width"]
    threads = WARP * tile_rows
    q_base = 0
    k_base = BANK_BYTES * tile_rows * stride
    v_base = k_base + BANK_BYTES * tile_kv * stride
    mk = lambda access, w, ins: AccessPattern(kernel, access, w, stride, ins)  # noqa: E731
    return [
        mk("Q tile store (global->shared)", width, _copy_instructions(tile_rows, D, stride, width, threads, q_base)),
        mk("K tile store (global->shared)", width, _copy_instructions(tile_kv, D, stride, width, threads, k_base)),
        mk("V tile store (global->shared)", width, _copy_instructions(tile_kv, D, stride, width, threads, v_base)),
        mk("Q row read (each warp its own row)", 4, _row_read_instructions(range(tile_rows), D, stride, q_base)),
        mk("K row read (score loop, all warps)", 4, _row_read_instructions(range(tile_kv), D, stride, k_base)),
        mk("V row read (PV loop, all warps)", 4, _row_read_instructions(range(tile_kv), D, stride, v_base)),
    ]


def counterfactual_patterns(D: int, strides: Sequence[int] | None = None, rows: int = 32) -> list[AccessPattern]:
    """Accesses this design never makes, but a key-per-lane design (e.g. a thread per key, as in
    FlashAttention-style kernels) would: lane t reads row t of a K tile. This is where padding
    matters; shown for contrast with :func:`ladder_access_patterns`.

    * column read, 4 bytes: lane t reads K[t][c] (one column, down the rows);
    * row-per-lane float4 read: lane t reads K[t][c:c+4].
    """
    strides = list(strides) if strides is not None else [D, D + 1, D + 4]
    out = []
    for s in strides:
        col = tuple(BANK_BYTES * (t * s) for t in range(min(rows, WARP)))
        out.append(AccessPattern("key-per-lane", "K column read: lane t reads K[t][c]", 4, s, (col,)))
        if s % 4 == 0:  # a float4 read needs 16-byte aligned rows
            vec = tuple(BANK_BYTES * (t * s) for t in range(min(rows, WARP)))
            out.append(AccessPattern("key-per-lane", "K row-per-lane float4 read: lane t reads K[t][c:c+4]",
                                     16, s, (vec,)))
    return out


def summarize_patterns(patterns: Iterable[AccessPattern]):
    """One row per pattern: instructions, wavefronts, ideal, worst conflict degree, % extra."""
    import pandas as pd

    rows = []
    for p in patterns:
        costs = p.costs()
        wf = sum(c.wavefronts for c in costs)
        ideal = sum(c.ideal_wavefronts for c in costs)
        rows.append(dict(kernel=p.kernel, access=p.access, width_bytes=p.width, stride_floats=p.stride,
                         instructions=len(costs), wavefronts=wf, ideal_wavefronts=ideal,
                         conflict_degree=max((c.degree for c in costs), default=0),
                         extra_wavefronts_pct=100.0 * (wf - ideal) / ideal if ideal else 0.0))
    return pd.DataFrame(rows)


def ladder_conflict_table(kernels: Sequence[str] = ("tiled", "vec_load", "vec_padded", "double_buffer"),
                          head_dims: Sequence[int] = (32, 64, 128), tiles: dict | None = None):
    """Conflict degree of every shared-memory access of every ladder kernel and head dim.

    ``tiles`` maps D -> (tile_rows, tile_kv); default: the seed's tiles (8, 32), (8, 16), (8, 8).
    """
    import pandas as pd

    from .seed import SEED_TILES

    tiles = tiles or SEED_TILES
    frames = []
    for kernel in kernels:
        for D in head_dims:
            tr, tkv = tiles[D]
            t = summarize_patterns(ladder_access_patterns(kernel, D, tr, tkv))
            t.insert(1, "D", D)
            t.insert(2, "tile_rows", tr)
            t.insert(3, "tile_kv", tkv)
            frames.append(t)
    return pd.concat(frames, ignore_index=True)


def counterfactual_table(head_dims: Sequence[int] = (32, 64, 128)):
    import pandas as pd

    frames = []
    for D in head_dims:
        t = summarize_patterns(counterfactual_patterns(D))
        t.insert(1, "D", D)
        frames.append(t)
    return pd.concat(frames, ignore_index=True)
