"""Launchers for the softmax-attention ladder (kernels/attention/NN_*.cu), with validation.

Every kernel computes O = softmax(scale · Q Kᵀ) V for q, k, v of shape [B, H, N, D], float32,
C-contiguous, on one CUDA device. The tiled kernels take two compile-time tile sizes:
TILE_ROWS (query rows per block = warps per block) and TILE_KV (K/V rows per shared-memory
tile). A caller who gives no tile gets the tuned tile for this GPU (data/tuned/<gpu>.json,
written by notebook 05) or else the seed's per-head-dim default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from .. import tuned as tuned_store
from ..seed import SEED_TILES
from ..arrays import (BFLOAT16, FLOAT16, FLOAT32, array_kind, as_cupy, data_ptr, device_id, dtype_name,
                     is_contiguous, require_device)

SUPPORTED_HEAD_DIMS = (32, 64, 128)
TILE_ROWS_CHOICES = (1, 2, 4, 8, 16, 32)
TILE_KV_CHOICES = (8, 16, 32, 64, 128)
#: The ladder kernels' default tiles where nothing was tuned: seed 000's (attnlab.seed.SEED_TILES).
DEFAULT_TILES = SEED_TILES
MAX_GRID_X = 2**31 - 1


@dataclass(frozen=True)
class Param:
    """A tunable template parameter of a kernel and the values it may take."""
    name: str
    choices: tuple[int, ...]


@dataclass(frozen=True)
class AttentionKernel:
    """One registered kernel: where its source is, what it computes on, and how to launch it.

    Two launch families share this record. The seed's ladder (01-05) takes TILE_ROWS/TILE_KV
    (one warp per query row, 1-D grid of B·H·ceil(N/TILE_ROWS) blocks). The flash kernels (08 on)
    name their template parameters in ``template`` (``D``, ``BF16`` and ``CAUSAL`` are filled from
    the inputs; the rest from ``fixed`` and the tunable ``params``, whose per-D ``defaults`` are
    the registry's choice), and launch a 2-D grid (ceil(N / BM), B·H) of ``threads(p)`` threads with
    ``smem(D, p)`` bytes of dynamic shared memory.
    """
    name: str
    step: str                # the notebook step: file number (plus a letter for a sub-step)
    source: str              # relative to kernels/
    function: str
    predecessor: str | None = None      # the kernel this one changes (for source diffs)
    summary: str = ""
    label: str = ""                     # a short name for plots and tables (the seed's ladder)
    precision: str = "fp32"             # 'fp32' (FMA), 'tf32', '3xtf32', '16-bit' (bf16/fp16 MMA)
    dtypes: tuple[str, ...] = (FLOAT32,)
    head_dims: tuple[int, ...] = SUPPORTED_HEAD_DIMS
    vector_loads: bool = False          # 16-byte loads: rows must be 16-byte aligned
    causal: bool = False                # supports causal masking
    min_cc: int = 0                     # lowest compute capability (e.g. 80 for mma.sync + cp.async)
    rel_tol: float = 1e-5               # correctness bound against float64 (tests, notebooks)
    # ladder geometry (01-05)
    tiled: bool = True
    smem_pad: int = 0                   # floats added to each shared-memory row
    kv_stages: int = 1                  # K/V tile buffers (2 = ping-pong double buffering)
    # flash geometry (08 on)
    template: tuple[str, ...] = ()
    params: tuple[Param, ...] = ()
    defaults: Mapping[int, Mapping[str, int]] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    threads: Callable[[Mapping[str, int]], int] | None = None
    smem: Callable[[int, Mapping[str, int]], int] | None = None
    #: extra constraints between parameters and D (the kernel's static_asserts, as a message)
    constraint: Callable[[int, Mapping[str, int]], str | None] | None = None
    #: an architecture-specific target (``sm_90a``: wgmma, setmaxnreg), else the GPU's plain sm_XY
    arch: str | None = None
    #: takes TMA tensor maps of q, k, v (boxes of BM and BN rows) instead of their pointers
    tma: bool = False
    #: Stream-K (10h): non-causal launches take a persistent grid of one block per resident slot
    #: (:func:`stream_k_grid`) and the extra arguments B·H, a float32 workspace and int32 counters
    #: (:func:`stream_k_workspace`); causal launches keep ``launch``'s grid
    stream_k: bool = False
    #: Stream-K kernels: the kernel in the same source, with the same template, that a
    #: non-causal launch takes on ``launch``'s plain grid when that grid's rounds are at least
    #: FILL % full (:func:`stream_k_plain`); its arguments are those of ``function`` without the
    #: Stream-K extras
    plain_function: str = ""
    #: spill bytes (stores) the static build may show: 0 for every kernel but 10h, whose header
    #: says which value it reloads and how often
    spill_bytes_allowed: int = 0

    @property
    def flash(self) -> bool:
        return bool(self.template)

    # -- ladder (01-05)
    def template_args(self, head_dim: int, tile_rows: int, tile_kv: int) -> tuple[int, ...]:
        return (head_dim,) if not self.tiled else (head_dim, tile_rows, tile_kv)

    def smem_bytes(self, head_dim: int, tile_rows: int, tile_kv: int) -> int:
        """Dynamic shared memory: a Q tile plus kv_stages × (K tile + V tile), rows padded."""
        if not self.tiled:
            return 0
        return (tile_rows + 2 * self.kv_stages * tile_kv) * (head_dim + self.smem_pad) * 4

    def block_threads(self, tile_rows: int) -> int:
        return 32 if not self.tiled else 32 * tile_rows

    def grid_blocks(self, bh: int, n: int, tile_rows: int) -> int:
        return bh * n if not self.tiled else bh * math.ceil(n / tile_rows)

    # -- flash (08 on)
    def flash_template_args(self, head_dim: int, p: Mapping[str, int], dtype: str = FLOAT32,
                            causal: bool = False) -> tuple:
        values = {"D": head_dim, "BF16": dtype == BFLOAT16, "CAUSAL": bool(causal), **self.fixed, **p}
        return tuple(values[n] for n in self.template)

    def launch(self, bh: int, n: int, head_dim: int, p: Mapping[str, int]) -> tuple[tuple, int, int]:
        """(grid, threads per block, dynamic shared-memory bytes) for B·H = bh heads of n rows."""
        if self.flash:
            return (math.ceil(n / p["BM"]), bh, 1), self.threads(p), self.smem(head_dim, p)
        tr, tkv = p["tile_rows"], p["tile_kv"]
        return ((self.grid_blocks(bh, n, tr), 1, 1), self.block_threads(tr),
                self.smem_bytes(head_dim, tr, tkv))


def _fp32_smem(floats: Callable[[int, Mapping[str, int]], int]) -> Callable[[int, Mapping[str, int]], int]:
    return lambda d, p: 4 * floats(d, p)


def _register_tiled_constraint(d: int, p: Mapping[str, int]) -> str | None:
    threads = p["BM"] // p["TM"] * p["CG"]
    if d % (4 * p["CG"]) or threads % (d // 4) or p["BN"] % p["CG"] or (p["BM"] * d // 4) % threads:
        return (f"D={d} needs D % (4·CG) == 0, BN % CG == 0 and (BM/TM)·CG threads that divide D/4 and "
                f"BM·D/4 (got {dict(p)})")
    return None


def _fa2_constraint(tuned: bool) -> Callable[[int, Mapping[str, int]], str | None]:
    def check(d: int, p: Mapping[str, int]) -> str | None:
        if p["BM"] != 16 * p["WARPS"]:
            return f"BM must be 16·WARPS: each warp owns 16 query rows (got {dict(p)})"
        if tuned and (p["BN"] % (256 * p["WARPS"] // d) or (32 * p["WARPS"]) % d):
            return f"D={d} needs BN % (256·WARPS/D) == 0 and 32·WARPS % D == 0 (got {dict(p)})"
        return None
    return check


def _occupancy_constraint(d: int, p: Mapping[str, int]) -> str | None:
    """10g's tile copy: the first floor(32·WARPS / D)·D threads copy, 8·floor(32·WARPS / D) rows a
    pass, so BM and BN must be whole numbers of passes."""
    if p["BM"] != 16 * p["WARPS"]:
        return f"BM must be 16·WARPS: each warp owns 16 query rows (got {dict(p)})"
    rows = 8 * (32 * p["WARPS"] // d)
    if rows == 0 or p["BM"] % rows or p["BN"] % rows or p["BN"] % 16:
        return (f"D={d} copies 8·floor(32·WARPS/D) rows a pass: BM and BN must be multiples of it and BN of 16 "
                f"(got {dict(p)})")
    return None


def _copy_warps_constraint(d: int, p: Mapping[str, int]) -> str | None:
    """10i: 10g's tile copy issued by the first CW warps (attn10g::TileCopy with CW > 0): 32·CW
    threads, 32·CW / (D/8) rows a pass, a multiple of 4 dividing BM and BN; CW = 0 is 10g's rule."""
    cw = p["CW"]
    if cw == 0:
        return _occupancy_constraint(d, p)
    if p["BM"] != 16 * p["WARPS"]:
        return f"BM must be 16·WARPS: each warp owns 16 query rows (got {dict(p)})"
    rows, rem = divmod(32 * cw, d // 8)
    if cw > p["WARPS"] or rem or rows % 4 or p["BM"] % rows or p["BN"] % rows or p["BN"] % 16:
        return (f"CW={cw} copying warps move 32·CW/(D/8) rows a pass: CW <= WARPS, that a whole multiple of 4 "
                f"dividing BM and BN, and BN a multiple of 16 (got D={d}, {dict(p)})")
    return None


def stream_k_iterations(bh: int, n: int, p: Mapping[str, int]) -> int:
    """Iterations (row block, key tile) of a Stream-K launch: B·H · ceil(N/BM) · ceil(N/BN)."""
    return bh * ((n + p["BM"] - 1) // p["BM"]) * ((n + p["BN"] - 1) // p["BN"])


def stream_k_grid(bh: int, n: int, p: Mapping[str, int], slots: int) -> int:
    """Blocks of a Stream-K launch: one per resident slot (SMs × blocks per SM), never more than
    there are iterations (every block then has at least one)."""
    if slots < 1:
        raise ValueError(f"a Stream-K launch needs at least one resident block slot (got {slots})")
    return min(slots, stream_k_iterations(bh, n, p))


def stream_k_plain(bh: int, n: int, p: Mapping[str, int], slots: int) -> bool:
    """Whether a non-causal 10h launch takes 10g's plain grid (attn_stream_k_plain in its source):
    a plain grid's R = ceil(U/P) rounds of the U = B·H·ceil(N/BM) row blocks over P = ``slots``
    resident blocks are at least FILL % full (100·U >= FILL·R·P)."""
    if slots < 1:
        raise ValueError(f"a Stream-K launch needs at least one resident block slot (got {slots})")
    U = bh * ((n + p["BM"] - 1) // p["BM"])
    return 100 * U >= p["FILL"] * (-(-U // slots)) * slots


def stream_k_ranges(bh: int, n: int, p: Mapping[str, int], blocks: int) -> list[list[tuple[int, int]]]:
    """Each block's iteration ranges, as 10h's attn10h::Schedule computes them: W = max(0,
    floor(U/P) - 1) data-parallel rounds (block c: row block r·P + c, whole), then an equal share
    [base + c·Tsk/P, base + (c+1)·Tsk/P) of the remaining row blocks' iterations."""
    L = (n + p["BN"] - 1) // p["BN"]
    U = bh * ((n + p["BM"] - 1) // p["BM"])
    W = max(0, U // blocks - 1)
    base, tsk = W * blocks * L, (U - W * blocks) * L
    return [[((r * blocks + c) * L, (r * blocks + c + 1) * L) for r in range(W)]
            + [(base + c * tsk // blocks, base + (c + 1) * tsk // blocks)] for c in range(blocks)]


def stream_k_workspace(head_dim: int, threads: int, blocks: int, bh: int, n: int, bm: int) -> tuple[int, int]:
    """(float32 workspace elements, int32 counters) of a Stream-K launch: two parts a block of
    4·D/8 + 4 floats a thread, and one counter per row block."""
    return 2 * blocks * (4 * (head_dim // 8) + 4) * threads, bh * math.ceil(n / bm)


#: What 10g and 10h share: the same row-block body (attn10g::row_block), template and parameters.
_ROW_BLOCK_KERNEL: dict[str, Any] = dict(
    precision="16-bit", dtypes=(BFLOAT16, FLOAT16), vector_loads=True, causal=True, min_cc=80, rel_tol=1e-2,
    template=("D", "BM", "BN", "WARPS", "BF16", "CAUSAL", "STAGES", "MINB", "QREG"),
    params=(Param("BM", (32, 64, 96, 128, 192, 256)), Param("BN", (16, 32, 48, 64, 96, 128)),
            Param("WARPS", (2, 4, 6, 8, 12, 16)), Param("STAGES", (2, 3)), Param("MINB", (0, 1, 2, 3, 4)),
            Param("QREG", (0, 1))),
    threads=lambda p: 32 * p["WARPS"], constraint=_occupancy_constraint)


#: The kernels beyond the seed (08 on): flash-attention structure, one notebook step each.
FLASH_KERNELS: tuple[AttentionKernel, ...] = (
    AttentionKernel(
        "register_tiled", "08", "attention/08_register_tiled.cu", "attn_register_tiled", predecessor="vec_padded",
        summary="flash structure on CUDA cores: TM x BN/CG micro-tiles of S and O in registers, outer products",
        vector_loads=True, min_cc=0, rel_tol=1e-5,
        template=("D", "BM", "BN", "CG", "TM"),
        params=(Param("BM", (32, 64, 128)), Param("BN", (16, 32, 64, 128)), Param("CG", (8, 16, 32)),
                Param("TM", (4, 8))),
        # from an H200 sweep (scripts/probe_flash.py): BN=32 at D=128 was 3 % faster than BN=64
        defaults={32: dict(BM=128, BN=64, CG=8, TM=8), 64: dict(BM=128, BN=64, CG=8, TM=8),
                  128: dict(BM=64, BN=32, CG=16, TM=8)},
        threads=lambda p: p["BM"] // p["TM"] * p["CG"],
        smem=lambda d, p: 4 * (d * p["BM"] + 2 * p["BN"] * d + p["BN"] * p["BM"]),
        constraint=_register_tiled_constraint),
    *(AttentionKernel(
        name, "09", "attention/09_tf32_mma.cu", "attn_tf32_mma_q", predecessor="register_tiled",
        summary=summary, precision=name, vector_loads=True, min_cc=80, rel_tol=tol,
        template=("D", "BM", "BN", "WARPS", "PASSES", "KV_PREP", "Q_SMEM", "MIN_BLOCKS"), fixed={"PASSES": passes},
        params=(Param("BM", (16, 32, 64, 96, 128, 256)), Param("BN", (16, 32, 40, 64)),
                Param("WARPS", (1, 2, 4, 6, 8, 16)), Param("KV_PREP", (0, 1)), Param("Q_SMEM", (0, 1, 2)),
                Param("MIN_BLOCKS", (0, 1, 2, 3))),
        defaults=defaults,
        threads=lambda p: 32 * p["WARPS"],
        smem=(lambda nb: lambda d, p: (4 * p["BN"] * (2 * d + nb * (2 * d + 20)) if p["KV_PREP"]
                                       else 8 * p["BN"] * (2 * d + 20)) + 4 * p["BM"] * d * p["Q_SMEM"])(
            2 if passes == 3 else 1),
        constraint=lambda d, p: (None if p["BM"] == 16 * p["WARPS"] and p["BN"] % 8 == 0
                                 and (p["Q_SMEM"] < 2 or passes == 3) else
                                 f"BM must be 16·WARPS, BN a multiple of 8, Q_SMEM=2 only with 3xTF32 (got {dict(p)})"))
      for name, passes, tol, summary, defaults in (
        ("tf32", 1, 5e-3, "mma.sync m16n8k8 TF32 for QKᵀ and PV, one pass: fast, ~1e-3 error",
         {d: dict(BM=128, BN=64, WARPS=8, KV_PREP=1, Q_SMEM=0, MIN_BLOCKS=0) for d in (32, 64, 128)}),
        # correctness bound 2e-5: fp32-class, far below one TF32 pass (~4e-4); the 2e-6 is a
        # target notebook 09 measures (and meets since the rescale fix, 93c3819)
        ("3xtf32", 3, 2e-5, "mma.sync m16n8k8 TF32 with the big/small split (three MMAs): fp32-class error",
         {32: dict(BM=128, BN=64, WARPS=8, KV_PREP=1, Q_SMEM=0, MIN_BLOCKS=0),
          64: dict(BM=128, BN=64, WARPS=8, KV_PREP=1, Q_SMEM=0, MIN_BLOCKS=0),
          128: dict(BM=128, BN=32, WARPS=8, KV_PREP=1, Q_SMEM=0, MIN_BLOCKS=0)}))),
    *(AttentionKernel(
        name, step, f"attention/{step}_{stem}.cu", f"attn_{stem}", predecessor=prev, summary=summary,
        precision="16-bit", dtypes=(BFLOAT16, FLOAT16), vector_loads=True, causal=True, min_cc=80, rel_tol=1e-2,
        template=("D", "BM", "BN", "WARPS", "BF16", "CAUSAL") + (("STAGES",) if staged else ()),
        params=(Param("BM", (32, 64, 128)), Param("BN", (16, 32, 64, 128)), Param("WARPS", (2, 4, 8)))
               + ((Param("STAGES", (2, 3)),) if staged else ()),
        defaults=({32: dict(BM=128, BN=64, WARPS=8, STAGES=3), 64: dict(BM=64, BN=64, WARPS=4, STAGES=3),
                   128: dict(BM=128, BN=128, WARPS=8, STAGES=2)} if stem == "tuned" else   # H200 sweep
                  {d: dict(BM=128, BN=64, WARPS=8, **({"STAGES": stages} if staged else {})) for d in (32, 64, 128)}),
        threads=lambda p: 32 * p["WARPS"],
        smem=lambda d, p: 2 * d * (p["BM"] + 2 * p.get("STAGES", 1) * p["BN"]),
        constraint=_fa2_constraint(stem == "tuned"))
      for name, step, stem, prev, staged, stages, summary in (
        ("mma_baseline", "10a", "mma_baseline", "3xtf32", False, 0,
         "bf16/fp16 mma.sync m16n8k16, Q fragments in registers, P reused from the accumulators"),
        ("ldmatrix_swizzle", "10b", "ldmatrix_swizzle", "mma_baseline", False, 0,
         "fragments by ldmatrix from XOR-swizzled shared memory: conflict-free"),
        ("cp_async_pipeline", "10c", "cp_async", "ldmatrix_swizzle", True, 2,
         "K/V tiles by cp.async in a multi-stage pipeline"),
        ("fa2_tuned", "10d", "tuned", "cp_async_pipeline", True, 3,
         "one barrier per tile, speculative softmax rescaling, hoisted addressing, per-D tiles"))),
    AttentionKernel(
        "two_row_tiles", "10e", "attention/10e_two_row_tiles.cu", "attn_two_row_tiles", predecessor="fa2_tuned",
        summary="32 query rows a warp: every K/V fragment feeds two MMAs; Q by ldmatrix; S in 32-key chunks",
        precision="16-bit", dtypes=(BFLOAT16, FLOAT16), vector_loads=True, causal=True, min_cc=80, rel_tol=1e-2,
        template=("D", "BM", "BN", "WARPS", "BF16", "CAUSAL", "STAGES", "KC"),
        params=(Param("BM", (64, 128, 256)), Param("BN", (32, 64, 128)), Param("WARPS", (2, 4, 8)),
                Param("STAGES", (2, 3)), Param("KC", (32, 64))),
        # the fastest of an H200 sweep (scripts/probe_flash.py) at D = 64 and 128; still slower than 10d
        defaults={32: dict(BM=128, BN=64, WARPS=4, STAGES=3, KC=32),
                  64: dict(BM=256, BN=64, WARPS=8, STAGES=2, KC=64),
                  128: dict(BM=256, BN=64, WARPS=8, STAGES=2, KC=64)},
        threads=lambda p: 32 * p["WARPS"],
        smem=lambda d, p: 2 * d * (p["BM"] + 2 * p["STAGES"] * p["BN"]),
        constraint=lambda d, p: (None if p["BM"] == 32 * p["WARPS"] and p["WARPS"] % 2 == 0
                                 and (p["BN"] // 8) * (d // 32) % p["WARPS"] == 0 and p["BN"] % p["KC"] == 0 else
                                 f"BM must be 32·WARPS with WARPS even, (BN/8)·(D/32) a multiple of WARPS and BN "
                                 f"a multiple of KC (got D={d}, {dict(p)})")),
    AttentionKernel(
        "fixed_offsets", "10f", "attention/10f_fixed_offsets.cu", "attn_fixed_offsets", predecessor="fa2_tuned",
        summary="every ldmatrix at a per-lane base register plus an immediate: no address arithmetic per "
                "fragment load",
        precision="16-bit", dtypes=(BFLOAT16, FLOAT16), vector_loads=True, causal=True, min_cc=80, rel_tol=1e-2,
        template=("D", "BM", "BN", "WARPS", "BF16", "CAUSAL", "STAGES"),
        params=(Param("BM", (32, 64, 128)), Param("BN", (16, 32, 64, 128)), Param("WARPS", (2, 4, 8)),
                Param("STAGES", (2, 3))),
        defaults={32: dict(BM=128, BN=64, WARPS=8, STAGES=3), 64: dict(BM=64, BN=64, WARPS=4, STAGES=3),
                  128: dict(BM=128, BN=128, WARPS=8, STAGES=2)},
        threads=lambda p: 32 * p["WARPS"],
        smem=lambda d, p: 2 * d * (p["BM"] + 2 * p["STAGES"] * p["BN"]),
        constraint=_fa2_constraint(True)),
    AttentionKernel(
        "occupancy", "10g", "attention/10g_occupancy.cu", "attn_occupancy", predecessor="fixed_offsets",
        summary="10f with registers sized for 12-16 warps per SM at D=128 (MINB), smaller key tiles, Q "
                "fragments held or re-read (QREG)",
        **_ROW_BLOCK_KERNEL,
        defaults={32: dict(BM=128, BN=64, WARPS=8, STAGES=3, MINB=0, QREG=1),
                  64: dict(BM=64, BN=64, WARPS=4, STAGES=2, MINB=0, QREG=1),
                  128: dict(BM=64, BN=48, WARPS=4, STAGES=2, MINB=3, QREG=1)},
        smem=lambda d, p: 2 * d * (p["BM"] + 2 * p["STAGES"] * p["BN"])),
    AttentionKernel(
        "stream_k", "10h", "attention/10h_stream_k.cu", "attn_stream_k", predecessor="occupancy",
        summary="10g's row blocks scheduled Stream-K: a persistent grid, equal key tiles per block, split "
                "row blocks merged by the last block to finish them (no part-empty last wave)",
        # FILL: a launch parameter (not in the template): plain grid when its rounds are >= FILL % full
        **{**_ROW_BLOCK_KERNEL, "params": _ROW_BLOCK_KERNEL["params"] + (Param("FILL", (0, 50, 80, 90, 95, 100)),)},
        # D = 128: blocks of 6 warps (96 rows; two blocks, 12 warps an SM) were faster than 10g's
        # tiles at N = 16384 on the H200 (scripts/probe_flash.py) and slower at N = 4096, where
        # their last wave is emptier: the case Stream-K is for. 48-key tiles at D = 128: 64-key
        # ones spill more under the schedule's extra state (spill_bytes_allowed)
        defaults={32: dict(BM=128, BN=64, WARPS=8, STAGES=3, MINB=0, QREG=1, FILL=90),
                  64: dict(BM=64, BN=64, WARPS=4, STAGES=2, MINB=0, QREG=1, FILL=90),
                  128: dict(BM=96, BN=48, WARPS=6, STAGES=2, MINB=2, QREG=1, FILL=100)},
        smem=lambda d, p: 2 * d * (p["BM"] + 2 * p["STAGES"] * p["BN"]) + 16,
        stream_k=True, plain_function="attn_occupancy", spill_bytes_allowed=64),
    AttentionKernel(
        "copy_warps", "10i", "attention/10i_copy_warps.cu", "attn_copy_warps", predecessor="stream_k",
        summary="10h with the tile copies issued by CW of the block's warps (the others go straight to "
                "their MMAs)",
        **{**_ROW_BLOCK_KERNEL, "template": _ROW_BLOCK_KERNEL["template"] + ("CW",),
           "params": _ROW_BLOCK_KERNEL["params"] + (Param("FILL", (0, 50, 80, 90, 95, 100)),
                                                   Param("CW", (0, 1, 2, 3, 4, 6))),
           "constraint": _copy_warps_constraint},
        # from an H200 probe (interleaved, same run): 2 of 4 warps copying beat 10g's every-thread
        # copy at D = 64 and 128, and the plain grid (FILL = 0) beat Stream-K with these tiles at
        # D = 128; D = 32 was not measured: 10h's parameters, every warp copying (CW = 0)
        defaults={32: dict(BM=128, BN=64, WARPS=8, STAGES=3, MINB=0, QREG=1, FILL=90, CW=0),
                  64: dict(BM=64, BN=64, WARPS=4, STAGES=2, MINB=0, QREG=1, FILL=90, CW=2),
                  128: dict(BM=64, BN=48, WARPS=4, STAGES=2, MINB=3, QREG=1, FILL=0, CW=2)},
        smem=lambda d, p: 2 * d * (p["BM"] + 2 * p["STAGES"] * p["BN"]) + 16,
        # spills: 10h's body and schedule (10h's header, point 5); its plain-grid kernel spills nothing
        stream_k=True, plain_function="attn_copy_warps_plain", spill_bytes_allowed=64),
)

#: The Hopper step (notebook 11, sm_90a): warpgroup MMAs on TMA-loaded shared memory.
HOPPER_KERNELS: tuple[AttentionKernel, ...] = tuple(
    AttentionKernel(
        name, step, f"attention/{step}_{stem}.cu", f"attn_{stem}", predecessor=prev, summary=summary,
        precision="16-bit", dtypes=(BFLOAT16, FLOAT16), head_dims=(64, 128), vector_loads=True, causal=True,
        min_cc=90, rel_tol=1e-2, arch="sm_90a", tma=True,
        template=("D", "BN") + (("STAGES",) if staged else ()) + ("BF16", "CAUSAL"),
        params=(Param("BM", (64,)), Param("BN", (64, 128))) + ((Param("STAGES", (2, 3)),) if staged else ()),
        defaults=defaults,
        threads=lambda p: 128,
        smem=lambda d, p: 2 * d * (p["BM"] + 2 * p.get("STAGES", 1) * p["BN"]) + 1024)
    for name, step, stem, prev, staged, defaults, summary in (
        ("wgmma_tma", "11a", "wgmma_tma", "fa2_tuned", False,
         {64: dict(BM=64, BN=128), 128: dict(BM=64, BN=128)},
         "one warpgroup: wgmma m64 on shared-memory operands, TMA copies on an mbarrier, one K/V buffer"),
        ("wgmma_pipeline", "11b", "wgmma_pipeline", "wgmma_tma", True,
         {64: dict(BM=64, BN=128, STAGES=2), 128: dict(BM=64, BN=64, STAGES=2)},
         "STAGES K/V buffers on their own mbarriers: the next tiles' copies run under this tile's MMAs"),
        # defaults: the fastest of an H200 sweep of BN x STAGES (scripts/probe_flash.py)
        ("wgmma_overlap", "11c", "wgmma_overlap", "wgmma_pipeline", True,
         {64: dict(BM=64, BN=128, STAGES=3), 128: dict(BM=64, BN=128, STAGES=3)},
         "S of tile j and P V of tile j-1 in flight together: the softmax runs under the tensor cores")))
HOPPER_KERNELS += (
    AttentionKernel(
        "warp_specialized", "11d", "attention/11d_warp_specialized.cu", "attn_warp_specialized",
        predecessor="wgmma_pipeline",
        summary="a producer warpgroup (TMA only, setmaxnreg.dec) and two consumer warpgroups sharing each K/V tile",
        precision="16-bit", dtypes=(BFLOAT16, FLOAT16), head_dims=(64, 128), vector_loads=True, causal=True,
        min_cc=90, rel_tol=1e-2, arch="sm_90a", tma=True,
        template=("D", "BN", "STAGES", "BF16", "CAUSAL"),
        params=(Param("BM", (128,)), Param("BN", (64, 128)), Param("STAGES", (2, 3, 4))),
        # an H200 sweep of BN x STAGES (scripts/probe_flash.py): STAGES=3 was 1 % faster at D=128,
        # N=16384 and 2 % slower at N=4096
        defaults={64: dict(BM=128, BN=128, STAGES=2), 128: dict(BM=128, BN=128, STAGES=2)},
        threads=lambda p: 384,
        smem=lambda d, p: 2 * d * (p["BM"] + 2 * p["STAGES"] * p["BN"]) + 1024),)

KERNELS: dict[str, AttentionKernel] = {k.name: k for k in (
    AttentionKernel("naive", "01", "attention/01_naive.cu", "attn_naive", tiled=False, label="Naive",
                    summary="one warp per query row, K/V read straight from global memory"),
    AttentionKernel("tiled", "02", "attention/02_tiled.cu", "attn_tiled", predecessor="naive", label="Tiled",
                    summary="TILE_ROWS warps share K/V tiles in shared memory"),
    AttentionKernel("vec_load", "03", "attention/03_vec_load.cu", "attn_vec_load", predecessor="tiled",
                    label="VecLoad", vector_loads=True, summary="tiled, global→shared copies as 128-bit float4 loads"),
    AttentionKernel("vec_padded", "04", "attention/04_vec_padded.cu", "attn_vec_padded", predecessor="vec_load",
                    label="VecPad", vector_loads=True, smem_pad=4,
                    summary="float4 loads, shared-memory rows padded by 4 floats"),
    AttentionKernel("double_buffer", "04b", "attention/04b_double_buffer.cu", "attn_double_buffer",
                    predecessor="vec_padded", label="DoubleBuf", vector_loads=True, smem_pad=4, kv_stages=2,
                    summary="padded float4 kernel with ping-pong K/V tiles filled by cp.async"),
    *FLASH_KERNELS,
    *HOPPER_KERNELS,
)}
#: The seed's ladder (01-04b, fp32, TILE_ROWS/TILE_KV tiles), in step order: notebooks 01-06 run it;
#: the flash kernels (08 on) continue it in their own notebooks.
SEED_LADDER: tuple[str, ...] = tuple(sorted((k.name for k in KERNELS.values() if not k.flash),
                                            key=lambda n: KERNELS[n].step))
#: Its tiled members (02 on), which share K/V tiles in shared memory.
SEED_TILED: tuple[str, ...] = tuple(k for k in SEED_LADDER if KERNELS[k].tiled)


def kernels_of_step(prefix: str) -> tuple[str, ...]:
    """Registered kernels whose step starts with ``prefix`` ('10' gives 10a, 10b, ...), in step order."""
    return tuple(sorted((k.name for k in KERNELS.values() if k.step.startswith(prefix)),
                        key=lambda n: KERNELS[n].step))


def get_spec(name: str) -> AttentionKernel:
    try:
        return KERNELS[name]
    except KeyError:
        raise ValueError(f"unknown kernel {name!r}; known: {', '.join(KERNELS)}") from None


def default_tiles(head_dim: int) -> tuple[int, int]:
    check_head_dim(head_dim)
    return DEFAULT_TILES[head_dim]


def check_head_dim(head_dim: int, spec: AttentionKernel | None = None) -> None:
    dims = spec.head_dims if spec is not None else SUPPORTED_HEAD_DIMS
    if head_dim not in dims:
        who = f"{spec.name} supports" if spec is not None else "the kernels support"
        raise ValueError(f"unsupported head dim D={head_dim}: {who} D in {tuple(dims)}")


def resolve_tiles(name: str, head_dim: int, tile_rows: int | None = None, tile_kv: int | None = None,
                  gpu: str | None = None) -> tuple[int, int, str]:
    """(tile_rows, tile_kv, where_from) of a ladder kernel: the caller's, else tuned for ``gpu``,
    else the seed's default."""
    spec = get_spec(name)
    if spec.flash:
        raise ValueError(f"kernel {name!r} has no tile_rows/tile_kv: its parameters are "
                         f"{', '.join(p.name for p in spec.params)}")
    check_head_dim(head_dim)
    if not spec.tiled:
        if tile_rows not in (None, 1) or tile_kv is not None:
            raise ValueError(f"kernel {name!r} is not tiled: it takes no tile_rows/tile_kv")
        return 1, 0, "untiled"
    where = "caller"
    if tile_rows is None or tile_kv is None:
        tuned = None
        if gpu:
            try:
                tuned = tuned_store.lookup(gpu, name, head_dim)
            except FileNotFoundError:
                tuned = None
        base, where = (tuned, "tuned") if tuned else (DEFAULT_TILES[head_dim], "default")
        tile_rows = base[0] if tile_rows is None else tile_rows
        tile_kv = base[1] if tile_kv is None else tile_kv
    if tile_rows not in TILE_ROWS_CHOICES:
        raise ValueError(f"tile_rows={tile_rows} not supported: choose from {TILE_ROWS_CHOICES}")
    if tile_kv not in TILE_KV_CHOICES:
        raise ValueError(f"tile_kv={tile_kv} not supported: choose from {TILE_KV_CHOICES}")
    return int(tile_rows), int(tile_kv), where


def resolve_params(name: str, head_dim: int, given: Mapping[str, int] | None = None,
                   gpu: str | None = None) -> tuple[dict[str, int], str]:
    """(template parameters, where_from) of any kernel: ladder kernels as :func:`resolve_tiles`
    ({'tile_rows', 'tile_kv'}); flash kernels take the registry's per-D defaults, overridden by
    ``given``, each checked against its allowed values."""
    spec = get_spec(name)
    given = {k: v for k, v in (given or {}).items() if v is not None}
    if not spec.flash:
        unknown = set(given) - {"tile_rows", "tile_kv"}
        if unknown:
            raise ValueError(f"kernel {name!r} takes tile_rows/tile_kv, not {', '.join(sorted(unknown))}")
        tr, tkv, where = resolve_tiles(name, head_dim, given.get("tile_rows"), given.get("tile_kv"), gpu)
        return {"tile_rows": tr, "tile_kv": tkv}, where
    check_head_dim(head_dim, spec)
    allowed = {p.name: p.choices for p in spec.params}
    unknown = set(given) - set(allowed)
    if unknown:
        raise ValueError(f"kernel {name!r} has no parameter {', '.join(sorted(unknown))}; "
                         f"its parameters: {', '.join(allowed) or 'none'}")
    p = {**spec.defaults[head_dim], **given}
    for k, v in p.items():
        if v not in allowed[k]:
            raise ValueError(f"{name}: {k}={v} not supported: choose from {allowed[k]}")
    problem = spec.constraint(head_dim, p) if spec.constraint else None
    if problem:
        raise ValueError(f"{name}: {problem}")
    return {k: int(v) for k, v in p.items()}, ("caller" if given else "default")


# ---------------------------------------------------------------- input validation

def validate_qkv(q, k, v, *, needs_alignment: bool = False, dtypes: tuple[str, ...] = (FLOAT32,),
                 head_dims: tuple[int, ...] = SUPPORTED_HEAD_DIMS) -> tuple[int, int, int, int]:
    """Check q, k, v and return (B, H, N, D); every failure names the violated constraint.

    Shape, dtype and layout are checked first, on any array (NumPy and CPU torch too, so the checks
    run without a GPU); that the arrays live on one CUDA device is checked last.
    """
    arrays = {"q": q, "k": k, "v": v}
    kinds = {n: array_kind(a) for n, a in arrays.items()}
    if len(set(kinds.values())) != 1:
        raise ValueError(f"q, k, v must all be CuPy arrays or all torch tensors, got {kinds}")
    for n, a in arrays.items():
        if a.ndim != 4:
            raise ValueError(f"{n} must have shape [B, H, N, D] (4 dims), got {a.ndim} dims {tuple(a.shape)}")
        if dtype_name(a) not in dtypes:
            raise ValueError(f"{n} must be {' or '.join(dtypes)} for this kernel, got {dtype_name(a)}")
        if not is_contiguous(a):
            raise ValueError(f"{n} must be C-contiguous (the kernels ignore strides); call .copy() / .contiguous()")
    if len({dtype_name(a) for a in arrays.values()}) != 1:
        raise ValueError(f"q, k, v must share one dtype, got {[dtype_name(a) for a in arrays.values()]}")
    shapes = {n: tuple(a.shape) for n, a in arrays.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"q, k, v must share one shape [B, H, N, D], got {shapes}")
    B, H, N, D = shapes["q"]
    if min(B, H, N) < 1:
        raise ValueError(f"B, H and N must be at least 1, got B={B}, H={H}, N={N}")
    if D not in head_dims:
        raise ValueError(f"unsupported head dim D={D}: this kernel supports D in {tuple(head_dims)}")
    for n, a in arrays.items():
        require_device(n, a)
    devices = {n: device_id(a) for n, a in arrays.items()}
    if len(set(devices.values())) != 1:
        raise ValueError(f"q, k, v must be on one device, got {devices}")
    if needs_alignment:
        for n, a in arrays.items():
            if data_ptr(a) % 16:
                raise ValueError(f"{n} is not 16-byte aligned (address {data_ptr(a):#x}): this kernel's "
                                 "16-byte loads need aligned rows; pass a fresh allocation or a copy")
    return B, H, N, D


# ---------------------------------------------------------------- launching

@dataclass(frozen=True)
class LaunchPlan:
    spec: AttentionKernel
    kernel: Any            # cupy.RawKernel
    head_dim: int
    params: Mapping[str, int]   # tile_rows/tile_kv for the ladder, the template parameters for flash kernels
    tiles_from: str             # 'caller', 'tuned', 'default' or 'untiled'
    dtype: str
    causal: bool
    block: int
    smem_bytes: int
    slots: int = 0              # Stream-K kernels: resident blocks on this GPU (SMs x blocks per SM)
    plain_kernel: Any = None    # Stream-K kernels: spec.plain_function, for launches on the plain grid

    @property
    def tile_rows(self) -> int:
        return self.params.get("tile_rows", 0)

    @property
    def tile_kv(self) -> int:
        return self.params.get("tile_kv", 0)

    def persistent(self, bh: int, n: int) -> bool:
        """Whether this launch takes a Stream-K kernel's persistent grid: not causal, and not on
        the plain grid (a plain function, and the plain grid's rounds at least FILL % full)."""
        return (self.spec.stream_k and not self.causal
                and not (self.plain_kernel is not None and stream_k_plain(bh, n, self.params, self.slots)))

    def grid(self, bh: int, n: int) -> tuple[int, int, int]:
        if self.persistent(bh, n):
            return (stream_k_grid(bh, n, self.params, self.slots), 1, 1)
        return self.spec.launch(bh, n, self.head_dim, self.params)[0]


_PLANS: dict[tuple, LaunchPlan] = {}


def max_dynamic_smem() -> int:
    import cupy as cp

    return cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                              cp.cuda.Device().id)


def _compute_capability() -> int:
    import cupy as cp

    return int(cp.cuda.Device().compute_capability)


def get_kernel(name: str, head_dim: int, tile_rows: int | None = None, tile_kv: int | None = None,
               gpu: str | None = None, *, dtype: str = FLOAT32, causal: bool = False,
               params: Mapping[str, int] | None = None) -> LaunchPlan:
    """Compile (once) the kernel for this head dim and parameters, and say how to launch it."""
    from ..compile import load_kernel

    spec = get_spec(name)
    if causal and not spec.causal:
        raise ValueError(f"kernel {name!r} has no causal variant; causal kernels: "
                         f"{', '.join(n for n, s in KERNELS.items() if s.causal)}")
    if dtype not in spec.dtypes:
        raise ValueError(f"kernel {name!r} takes {' or '.join(spec.dtypes)} inputs, not {dtype}")
    given = dict(params or {})
    if tile_rows is not None or tile_kv is not None:
        given.update(tile_rows=tile_rows, tile_kv=tile_kv)
    p, where = resolve_params(name, head_dim, given, gpu)
    key = (name, head_dim, tuple(sorted(p.items())), dtype, causal)
    plan = _PLANS.get(key)
    if plan is None:
        if spec.min_cc and _compute_capability() < spec.min_cc:
            raise ValueError(f"kernel {name!r} needs compute capability {spec.min_cc / 10:.1f} or newer; "
                             f"this GPU is {_compute_capability() / 10:.1f}")
        if spec.arch and int(spec.arch[3:].rstrip("a")) != _compute_capability():
            raise ValueError(f"kernel {name!r} is built for {spec.arch} (Hopper's wgmma and TMA) and runs only on "
                             f"compute capability {spec.arch[3]}.{spec.arch[4]} GPUs such as the H100/H200; this GPU "
                             f"is {_compute_capability() / 10:.1f}: use notebook 10's kernels (fa2_tuned) instead")
        _, block, smem = spec.launch(1, 1, head_dim, p)
        if smem > max_dynamic_smem():
            raise ValueError(f"{name} with D={head_dim}, {p} needs {smem} bytes of shared memory; "
                             f"this GPU allows {max_dynamic_smem()} per block")
        targs = (spec.flash_template_args(head_dim, p, dtype, causal) if spec.flash
                 else spec.template_args(head_dim, p["tile_rows"], p["tile_kv"]))

        def load(function: str):
            kernel = load_kernel(spec.source, function, targs, arch=spec.arch)
            if smem > 48 * 1024:
                kernel.max_dynamic_shared_size_bytes = smem  # opt in above the 48 KB default
                if spec.flash:
                    # ask for the largest shared-memory carveout: two big tiles per SM need it all
                    kernel.preferred_shared_memory_carveout = 100
            return kernel

        kernel = load(spec.function)
        slots, plain = 0, None
        if spec.stream_k:
            import cupy as cp
            from ..occupancy import driver_blocks
            slots = driver_blocks(kernel, block, smem) * cp.cuda.Device().attributes["MultiProcessorCount"]
            if spec.plain_function and not causal:
                plain = load(spec.plain_function)
        plan = LaunchPlan(spec, kernel, head_dim, p, where, dtype, causal, block, smem, slots, plain)
        _PLANS[key] = plan
    elif plan.tiles_from != where:
        plan = LaunchPlan(**{**plan.__dict__, "tiles_from": where})
    return plan


def prepare_attention(name: str, q, k, v, tile_rows: int | None = None, tile_kv: int | None = None,
                      out=None, scale: float | None = None, gpu: str | None = "auto", *,
                      causal: bool = False, params: Mapping[str, int] | None = None) -> Callable[[], Any]:
    """Validate the inputs, compile and plan once, and return a no-argument callable that only
    launches the kernel (and returns O). What :func:`run_attention` does in one go; timing loops
    call the launch alone, so validation and planning stay out of the timed region."""
    spec = get_spec(name)
    B, H, N, D = validate_qkv(q, k, v, needs_alignment=spec.vector_loads, dtypes=spec.dtypes,
                              head_dims=spec.head_dims)
    if gpu == "auto":
        from ..env import device_name, gpu_slug
        gpu = gpu_slug(device_name())
    dtype = dtype_name(q)
    qc, kc, vc = as_cupy(q), as_cupy(k), as_cupy(v)
    import cupy as cp

    if out is None:
        if array_kind(q) == "torch":
            import torch
            out_user = torch.empty_like(q)
            oc = as_cupy(out_user)
        else:
            out_user = oc = cp.empty_like(qc)
    else:
        if (array_kind(out) != array_kind(q) or tuple(out.shape) != tuple(q.shape) or dtype_name(out) != dtype
                or not is_contiguous(out)):
            raise ValueError(f"out must be a C-contiguous {dtype} array of shape {tuple(q.shape)}, like q")
        out_user, oc = out, as_cupy(out)
    plan = get_kernel(name, D, tile_rows, tile_kv, gpu, dtype=dtype, causal=causal, params=params)
    grid = plan.grid(B * H, N)
    if grid[0] > MAX_GRID_X or grid[1] > 65535:
        raise ValueError(f"B*H*N too large for this kernel's grid {grid} (limits: x <= {MAX_GRID_X}, y <= 65535)")
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    if spec.tma:
        from ..tma import tensor_map_3d
        p = plan.params
        qkv = [tensor_map_3d(data_ptr(a), dtype, B * H, N, D, rows)
               for a, rows in ((qc, p["BM"]), (kc, p["BN"]), (vc, p["BN"]))]
    else:
        qkv = [qc, kc, vc]
    args = (*qkv, oc, np.int32(N), np.float32(scale))
    kernel, block, smem = plan.kernel, (plan.block,), plan.smem_bytes
    if spec.stream_k and (causal or plan.persistent(B * H, N)):
        # B·H, the workspace for split row blocks and their counters (zero; each merge re-zeroes its
        # own; causal launches split nothing: a workspace for one block)
        ws_floats, n_counters = stream_k_workspace(D, plan.block, grid[0] if not causal else 1, B * H, N,
                                                   plan.params["BM"])
        args += (np.int32(B * H), cp.empty(ws_floats, dtype=cp.float32), cp.zeros(n_counters, dtype=cp.int32))
    elif spec.stream_k:
        kernel = plan.plain_kernel   # nearly full rounds: the plain kernel (10g's arguments) on the plain grid

    def launch():
        kernel(grid, block, args, shared_mem=smem)
        return out_user
    return launch


def run_attention(name: str, q, k, v, tile_rows: int | None = None, tile_kv: int | None = None,
                  out=None, scale: float | None = None, gpu: str | None = "auto", *,
                  causal: bool = False, params: Mapping[str, int] | None = None):
    """Launch kernel ``name`` on q, k, v ([B, H, N, D]) and return O = softmax(scale·QKᵀ)V.

    Inputs are float32 for the fp32 kernels (01-09) and bfloat16 or float16 for the 16-bit ones
    (10 on; torch tensors, or CuPy float16 arrays). CuPy inputs give a CuPy output, torch inputs a
    torch tensor (zero-copy, same memory). ``out`` (optional) must match q and is overwritten.
    ``scale`` defaults to 1/sqrt(D). ``causal`` masks keys after each query (kernels whose
    registry entry says ``causal``).
    Ladder kernels (01-04b): a tile the caller leaves out comes from ``data/tuned/<gpu>.json``:
    ``gpu="auto"`` (default) means this device's file; ``gpu=None`` means the seed's built-in
    defaults. Flash kernels (08 on): ``params`` overrides the registry's per-D template parameters.
    """
    return prepare_attention(name, q, k, v, tile_rows, tile_kv, out, scale, gpu, causal=causal, params=params)()
