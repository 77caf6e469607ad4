"""Validation and launchers for the KDA CUDA kernels in ``kernels/delta/``.

Two entry points, both returning ``(o [B, T, H, V], final_state [B, H, K, V] or None)`` as
**CuPy arrays** (whatever the inputs were: CuPy arrays or torch CUDA tensors, which are viewed
zero-copy through DLPack; ``torch.from_dlpack(o)`` turns a result back into a tensor):

* :func:`kda_recurrent` — ``01_recurrent.cu``: one launch, sequential over T;
* :func:`kda_chunk` — ``02_chunk_intra.cu`` → ``03_chunk_solve.cu`` → a state pass: ``05_chunk_state_tc.cu``
  (tensor cores, 3xTF32; chunks of 16/32/64 on sm_80+) or ``04_chunk_state.cu`` (fp32 FMAs, any
  chunk, any GPU), chosen by ``state="auto" | "tc" | "simt"``;
* :func:`kda_tc` — tensor cores with 3xBF16 products, chunks of 32, sm_80+ (notebook 13):
  ``07_chunk_prep_tc.cu`` → ``10_chunk_state_lean.cu`` (``impl="lean"``, the default), → ``13``
  (``"wgmma"``: warpgroup MMAs, sm_90a only, after 07 with its A2 output), → ``14`` (``"bulk"``: 13 with
  the inputs fetched by bulk copies; ``"multicast"``: multicast to a cluster of the head's value blocks;
  ``"tma"``: three TMA tensor copies a chunk; ``"tma2"``: and WG_C's T / A2 and v by one bulk and one
  tensor copy; ``"tma3"``: and three Kd^T buffers; sm_90a), → ``15`` (``"diet"``: 14 ``"tma2"`` with
  the element-wise warpgroup on fewer instructions; sm_90a), → ``16`` (``"wgrs"``: the chain turned around,
  S^T in the accumulators and every A operand from registers, 64 value columns a block; sm_90a), → ``17``
  (``"single"``: 15 with P1 and P4 as one bf16 product, bf16 inputs only; sm_90a), → ``18`` (``"ahead"``: 17
  with each chunk's P1 taken a chunk early, bf16 inputs only; sm_90a), → ``19`` (``"tile"``: 15, and 17 for
  bf16 inputs, with P1's A operand stored by the element-wise warpgroup in the wgmma's shared-memory
  layout; sm_90a), → ``20`` (``"wide"``: 19 with two element-wise warpgroups; sm_90a), → ``23`` (``"hilo"``: 19's
  element-wise warpgroup with 16's chain turned around at 32 value columns, each column's hi and lo terms a pair of
  accumulator rows; fp32 inputs only; sm_90a), → ``24`` (``"kdreg"``: 19 with P4's A operand, Kd^T, loaded into
  registers while P2 runs; sm_90a), → ``25`` (``"wy"``: 24 in the WY form, W = T Kbg made by the element-wise
  warpgroup and U = T beta v added in P1, so no P2 on the chain; 07 hands over Aqk; fp32 inputs only; sm_90a), → ``26``
  (``"share"``: 22's chain, each chunk's operand image made once per head by one of its value blocks into a ring in L2),
  → ``27`` (``"side"``: 24 at 64 value columns a block, 07 beside it in 21's grid order), → ``28`` (``"pair"``: 24 with a
  head's value blocks in clusters of two, each block's element-wise warpgroup making half of the channels' operands and
  copying them into the other block's shared memory; K = 128), the last three measured slower than 24 (fp32 inputs only;
  sm_90a), or (``"late"``) ``29_chunk_prep_inv.cu`` (07 with its inverse's diagonal blocks on every warp) → ``30`` (24
  with each chunk's o stored behind the next chunk's first product; sm_90a),
  → ``12`` (``"regs"``),
  or (``"pre"``) ``21_chunk_prep_ops.cu`` (07 that also stores the recurrence's element-wise operands: one bf16
  term each on bf16 inputs, hi and lo words on fp32, a workspace of about the inputs' q, k and g) → ``22`` (19's
  chain on them, no element-wise warpgroup; sm_90a),
  → ``11`` (``"cluster"``), → ``09`` (``"ws"``) or → ``08`` (``"split"``); or
  ``06_chunk_fused_tc.cu`` alone (``"fused"``).

Every kernel is a step of :data:`DELTA_KERNELS`, the family's registry.

For timing, :func:`prepare_recurrent` / :func:`prepare_chunk` validate once, allocate outputs and
workspaces, and return a plan whose ``run()`` only launches kernels.

Inputs: float32, C-contiguous, on the current CUDA device; q, k, g ``[B, T, H, K]``,
v ``[B, T, H, V]``, beta ``[B, T, H]``, optional initial_state ``[B, H, K, V]``; g ≤ 0 (log-space
decay). K and V must be 64 or 128, the chunk size 16, 32, 64 or 128 (16, 32 or 64 for the
tensor-core state pass). Anything else raises
``ValueError`` naming the constraint. The CPU-side checks (:func:`validate_config`,
:func:`validate_inputs`) work without a GPU, on NumPy arrays too (they then only fail later,
at the device check).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..arrays import array_kind, as_cupy as arrays_as_cupy, dtype_name, is_contiguous
from .naive import check_shapes

SUPPORTED_K = (64, 128)
SUPPORTED_V = (64, 128)
SUPPORTED_CHUNK = (16, 32, 64, 128)
SUPPORTED_BV = (16, 32)
SUPPORTED_RG = (4, 8, 16, 32)
SUPPORTED_STATE = ("auto", "tc", "simt")
TC_CHUNK = (16, 32, 64)          # chunk sizes of the tensor-core state pass (shared memory bound)
TC_MIN_CC = 80                   # TF32 mma.sync and cp.async: sm_80+
RECURRENT_WARPS = 4

FUSED_CHUNK = 32                 # 06 inverts two 16 x 16 blocks: chunks of 32 rows
FUSED_MIN_CC = 80                # bf16 mma.sync and cp.async: sm_80+
FUSED_THREADS = 256
WS_THREADS = 512                 # 09-11: eight consumer warps, eight producer warps
CLUSTER_MIN_CC = 90              # 11: thread-block clusters and distributed shared memory
SUPPORTED_IO = ("fp32", "bf16")   # kda_tc's input/output storage: fp32, or bf16 (BF16_IMPLS only)
IO_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
BF16_IMPLS = ("lean", "regs", "regs2", "wgmma", "wgmma2", "bulk", "bulk2", "multicast", "multicast2", "tma", "tma2", "tma3", "diet",
              "wgrs", "single", "ahead", "tile", "wide", "pre", "kdreg", "late")
#: impls that run on bf16 inputs only, and why (the launcher's one-line error for fp32 inputs)
BF16_ONLY_WHY = {
    "wgmma2": ("13 with two staging tiles", "two fp32 tiles do not fit in a block's 227 KB of shared memory",
               "impl='wgmma'"),
    "single": ("17, P1 and P4 as one bf16 product", "its products are bf16-accurate (~1e-3), not the 1e-4 that fp32 "
               "inputs are held to", "impl='diet'"),
    "ahead": ("18, 17 with each chunk's P1 a chunk early", "it takes 17's one-term (bf16-accurate, ~1e-3) products, not "
              "the 1e-4 that fp32 inputs are held to", "impl='diet'"),
}
BF16_ONLY_IMPLS = tuple(BF16_ONLY_WHY)
#: impls that run on fp32 inputs only, and why (bf16 inputs are refused by the BF16_IMPLS check, naming them)
FP32_ONLY_WHY = {
    "hilo": ("23, a value column's hi and lo terms as a pair of accumulator rows", "bf16 inputs' one-term products "
             "would leave every lo row zero, half of each wgmma", "impl='pre'"),
    "wy": ("25, the WY form's chain", "its element-wise warpgroup is built for fp32 inputs' hi / lo tiles (no bf16 "
           "form yet)", "impl='kdreg'"),
    "share": ("26, the operand images made once per head in the kernel", "its maker is 19's fp32 element-wise "
              "arithmetic into fp32 images (no bf16 form yet)", "impl='pre'"),
    "side": ("27, 24's loop at 64 value columns beside 07", "its v slots are laid out for fp32 rows (no bf16 form yet; "
             "the bf16-I/O target is met by 07 + 20)", "impl='kdreg'"),
    "pair": ("28, 24 with a pair of value blocks sharing the element-wise work", "its element-wise warpgroup makes fp32 "
             "inputs' hi / lo tiles (no bf16 form yet)", "impl='kdreg'"),
}
FP32_ONLY_IMPLS = tuple(FP32_ONLY_WHY)
WGMMA_ARCH = "sm_90a"             # 13, 14: wgmma (architecture-specific target: H100 / H200)
WGMMA_THREADS = 256               # 13, 14: the chain warpgroup and the element-wise warpgroup
WIDE_THREADS = 384                # 20: the chain warpgroup and two element-wise warpgroups
PRE_THREADS = 160                 # 22: the chain warpgroup and one warp that issues the operands' bulk copies
SHARE_THREADS = 288               # 26: 22's, and the maker warpgroup
SHARE_SLOTS = 8                   # 26: images in a head's ring (KDA_SHARE_SLOTS's default, 14_chunk_state_multicast.cu)
SIDE_BV = 64                      # 27: value columns a block (24's loop at m64n64 wgmmas), half 24's grid
PAIR_CLUSTER = 2                  # 28: value blocks a cluster (each one's WG_E makes half of the channels' operands)
PAIR_K = 128                      # 28: two WG_E threads a channel of K / 2 (the channels of K = 64 would need four)


# ----------------------------------------------------------------------------- registry

@dataclass(frozen=True)
class DeltaKernel:
    """One step of the delta-attention ladder: a file in ``kernels/delta/`` and what it adds."""
    step: str            # the file's number
    source: str          # path under kernels/
    function: str        # the __global__ template
    form: str            # "recurrent" | "chunked" (02 -> 03 -> 04/05) | "tc" (06; 07 -> 08/09)
    role: str            # what the kernel computes
    min_cc: int          # lowest compute capability it runs on (x10)
    summary: str         # what changed from its predecessor, in one line


#: Every delta kernel, in step order. Tables, static builds and notebooks 07 and 13 derive from it.
DELTA_KERNELS: tuple[DeltaKernel, ...] = (
    DeltaKernel("01", "delta/01_recurrent.cu", "kda_recurrent", "recurrent", "token by token", 70,
                "the definition: a (K x BV) state slice per block, one token after another"),
    DeltaKernel("02", "delta/02_chunk_intra.cu", "kda_chunk_intra", "chunked", "pair sums, scaled operands", 70,
                "chunked form, stage 1: Akk, Aqk and the gated operands per chunk (fp32 FMA)"),
    DeltaKernel("03", "delta/03_chunk_solve.cu", "kda_chunk_solve", "chunked", "triangular solve -> W, U", 70,
                "stage 2: (I + Akk) W = Kbg, (I + Akk) U = beta V by substitution (fp32 FMA)"),
    DeltaKernel("04", "delta/04_chunk_state.cu", "kda_chunk_state", "chunked", "state pass (fp32 FMA)", 70,
                "stage 3: the sequential pass over chunks, state in registers"),
    DeltaKernel("05", "delta/05_chunk_state_tc.cu", "kda_chunk_state_tc", "chunked", "state pass (3xTF32)", 80,
                "stage 3 on tensor cores, 3xTF32 for fp32 accuracy"),
    DeltaKernel("06", "delta/06_chunk_fused_tc.cu", "kda_chunk_fused", "tc", "everything, one kernel (3xBF16)", 80,
                "one kernel, no workspace: each value block rebuilds its chunk operands; 3xBF16 products"),
    DeltaKernel("07", "delta/07_chunk_prep_tc.cu", "kda_chunk_prep", "tc", "pair products + inverse (3xBF16)", 80,
                "token-parallel: Akk, Aqk and T = (I + Akk)^-1 once per (chunk, head), 8 KB out per chunk"),
    DeltaKernel("08", "delta/08_chunk_state_onchip.cu", "kda_chunk_state_onchip", "tc", "recurrence (3xBF16)", 80,
                "06's state pass reading 07's T and Aqk: element-wise operands rebuilt on chip"),
    DeltaKernel("09", "delta/09_chunk_state_ws.cu", "kda_chunk_state_ws", "tc", "recurrence, warp-specialised", 80,
                "08 with 8 producer warps building chunk n+1 while 8 consumer warps run chunk n"),
    DeltaKernel("10", "delta/10_chunk_state_lean.cu", "kda_chunk_state_lean", "tc", "recurrence, lean producers", 80,
                "09 with q, k, g read into registers (no staging) and conflict-free swizzled Kd^T stores"),
    DeltaKernel("11", "delta/11_chunk_state_cluster.cu", "kda_chunk_state_cluster", "tc",
                "recurrence, P1 shared by a cluster", 90,
                "10 with a head's value blocks as one cluster, each building P1 for its share of the channels "
                "into every block's shared memory (DSMEM)"),
    DeltaKernel("12", "delta/12_chunk_state_regs.cu", "kda_chunk_state_regs", "tc", "recurrence, state in registers",
                80, "10's producers; each consumer warp keeps 16 value columns of the state in registers as the MMAs' "
                "A operand and runs a chunk's products with no barrier"),
    DeltaKernel("13", "delta/13_chunk_state_wgmma.cu", "kda_chunk_state_wgmma", "tc",
                "recurrence on warpgroup MMAs (sm_90a)", 90,
                "one warpgroup runs each chunk's products as wgmmas with the state in its accumulators; the other "
                "builds the element-wise operands once per element, a chunk ahead (07 hands over T and Aqk T)"),
    DeltaKernel("14", "delta/14_chunk_state_multicast.cu", "kda_chunk_state_mc", "tc",
                "recurrence on warpgroup MMAs, inputs multicast (sm_90a)", 90,
                "13 with a head's value blocks as one cluster: each q, k, g row of a chunk is one bulk copy from L2, "
                "multicast into every block's staging tile and completed on an mbarrier"),
    DeltaKernel("15", "delta/15_chunk_state_diet.cu", "kda_chunk_state_diet", "tc",
                "recurrence on warpgroup MMAs, element-wise warpgroup on fewer instructions (sm_90a)", 90,
                "14's tensor-copy form with one exp2 per element (2^G and 2^(G_L - G) as running products of "
                "2^g) and beta applied by the chain warpgroup: WG_E's instruction stream set the chunk period"),
    DeltaKernel("16", "delta/16_chunk_state_wgrs.cu", "kda_chunk_state_wgrs", "tc",
                "recurrence on warpgroup MMAs, the chain turned around (sm_90a)", 90,
                "15's element-wise arithmetic; the chain keeps S^T in its accumulators and takes every A operand "
                "from registers (P1^T = S^T [Kg^T | Qg^T], X^T [T^T | A2^T], V'^T Kd): nothing of the chain through "
                "shared memory, one barrier a chunk, 64 value columns a block"),
    DeltaKernel("17", "delta/17_chunk_state_single.cu", "kda_chunk_state_single", "tc",
                "recurrence on warpgroup MMAs for bf16 inputs, one-term products (sm_90a)", 90,
                "15 with P1 and P4 as one bf16 wgmma each (8 and 4 a chunk in place of 24 and 12) and S^T, Kd^T "
                "stored as bf16 only: with bf16 inputs their rounding, not the products', sets the error"),
    DeltaKernel("18", "delta/18_chunk_state_ahead.cu", "kda_chunk_state_ahead", "tc",
                "recurrence on warpgroup MMAs for bf16 inputs, each chunk's first product a chunk early (sm_90a)", 90,
                "17 with P1 of chunk n + 1 split as [Kg; Qg] (D S)_n + W V'_n, W = [Kg; Qg] Kd_n^T: both K = 128 "
                "products issued during chunk n behind its P2, the chain between V'_n and X_{n+1} keeping only "
                "W V'_n (two k steps)"),
    DeltaKernel("19", "delta/19_chunk_state_tile.cu", "kda_chunk_state_tile", "tc",
                "recurrence on warpgroup MMAs, P1's A operand from shared memory (sm_90a)", 90,
                "15 (17's one-term products for bf16 inputs) with [Kg; Qg] stored by the element-wise warpgroup "
                "as the wgmma's MN-major A tile (bf16 hi / lo, eight 16-byte stores a thread): the chain "
                "warpgroup builds no A fragments, P1 reads shared memory as P4 does"),
    DeltaKernel("20", "delta/20_chunk_state_wide.cu", "kda_chunk_state_wide", "tc",
                "recurrence on warpgroup MMAs, two element-wise warpgroups (sm_90a)", 90,
                "19 with the element-wise work over 256 threads (384 a block): two threads a channel, 16 tokens "
                "each, their running products joined through shared memory: WG_E's chunk, the longest stage of "
                "19's, at half the length a thread"),
    DeltaKernel("21", "delta/21_chunk_prep_ops.cu", "kda_chunk_prep_ops", "tc",
                "pair products + inverse, and the recurrence's operands", 80,
                "07 (A2) that also stores each chunk's Kd^T, [Kg; Qg]^T and 2^G_L (bf16; hi and lo words on fp32 "
                "inputs) as the byte image of the recurrence's operand buffer: made once per chunk and head instead "
                "of once per value block"),
    DeltaKernel("22", "delta/22_chunk_state_pre.cu", "kda_chunk_state_pre", "tc",
                "recurrence on warpgroup MMAs, operands from 21, no element-wise warpgroup (sm_90a)", 90,
                "19's chain with each chunk's operands landed by one bulk copy of 21's image: one producer "
                "warp in place of WG_E (160 threads), no staging tile; 21 and 22 run side by side, 22 waiting for "
                "each chunk's ready flag in its producer warp"),
    DeltaKernel("23", "delta/23_chunk_state_hilo.cu", "kda_chunk_state_hilo", "tc",
                "recurrence on warpgroup MMAs, the chain turned around at 32 value columns (sm_90a)", 90,
                "19's element-wise warpgroup and copies; the chain keeps S^T in its accumulators and takes every A "
                "operand from registers (16's products), a value column's hi and lo terms as one row pair of the "
                "wgmma's 64: 32 columns a block as in 19, 32 wgmmas a chunk in place of 42, nothing of the chain "
                "through shared memory (fp32 inputs)"),
    DeltaKernel("24", "delta/24_chunk_state_kdreg.cu", "kda_chunk_state_kdreg", "tc",
                "recurrence on warpgroup MMAs, P4's A operand from registers (sm_90a)", 90,
                "19 with the chunk's Kd^T loaded by ldmatrix into registers while P2 runs (off the chain): P4's "
                "twelve wgmmas (fp32 inputs; four on bf16) read only V'^T from shared memory, the same products in "
                "the same order (bit for bit 19's results); and 07 on fp32 inputs in its aliased layout, four "
                "blocks per SM"),
    DeltaKernel("25", "delta/25_chunk_state_wy.cu", "kda_chunk_state_wy", "tc",
                "recurrence on warpgroup MMAs in the WY form, two products a chunk on the chain (sm_90a)", 90,
                "24 with W = T Kbg made off the chain by the element-wise warpgroup (fp32 FMAs, T with beta folded "
                "in, from 07's words) into P1's A tile, and U = T beta v added in P1 from a (beta v)^T tile: P1 "
                "gives V' itself, no X^T tile, barrier or P2 before P4; o's product (07's Aqk times V') behind P4 "
                "(fp32 inputs)"),
    DeltaKernel("26", "delta/26_chunk_state_share.cu", "kda_chunk_state_share", "tc",
                "recurrence on warpgroup MMAs, each chunk's operands made once per head in the kernel (sm_90a)", 90,
                "22's chain and producer warp with the operand images made in the kernel: value block r's maker "
                "warpgroup makes every (V / BV)-th chunk of its head (19's arithmetic, from a staging tile) into a "
                "ring of eight images in global memory (L2), published by a flag; every block lands every chunk "
                "from the ring and acknowledges it (fp32 inputs, the whole grid resident)"),
    DeltaKernel("27", "delta/27_chunk_state_side.cu", "kda_chunk_state_side", "tc",
                "recurrence on warpgroup MMAs at 64 value columns a block, 07 beside it (sm_90a)", 90,
                "24's loop with every wgmma m64n64 (64 value columns a block, half 24's grid; X^T and V'^T share a "
                "tile to fit 227 KB), so that 07 runs beside it on the SMs its grid leaves free, in 21's grid order; "
                "WG_C waits for each chunk on 07's ready flag (fp32 inputs; an unrecorded probe found it slower "
                "than 24, its 27_chunk_state_side.cu header says why)"),
    DeltaKernel("28", "delta/28_chunk_state_pair.cu", "kda_chunk_state_pair", "tc",
                "recurrence on warpgroup MMAs, a pair of value blocks sharing the element-wise work (sm_90a)", 90,
                "24 with a head's value blocks in clusters of two: each block stages half of the channels' g, k, q, "
                "its element-wise warpgroup makes their operands, and one thread copies them into the other block's "
                "buffer by bulk copies between the shared memories, the hand-overs spanning the pair on mbarriers "
                "(fp32 inputs, K = 128; an unrecorded probe found it slower than 24, its 28_chunk_state_pair.cu "
                "header says why)"),
    DeltaKernel("29", "delta/29_chunk_prep_inv.cu", "kda_chunk_prep_inv", "tc",
                "pair products + inverse, the inverse on every warp", 80,
                "07 with T's two diagonal 16 x 16 blocks solved by all eight warps (a thread holds two rows of one "
                "column, each step's pivot from its column's lanes by a shuffle), not by warp 0 while the other seven "
                "wait at the barrier: the same updates in the same order, 07's words bit for bit"),
    DeltaKernel("30", "delta/30_chunk_state_late.cu", "kda_chunk_state_late", "tc",
                "recurrence on warpgroup MMAs, o stored a chunk late (sm_90a)", 90,
                "24 (after 29) with each chunk's o kept in registers and stored while the next chunk's P1 runs, not "
                "before V'^T's proxy fence, whose membar waited for those stores on the chain: 24's words bit for "
                "bit"),
)


(RECURRENT_SRC, INTRA_SRC, SOLVE_SRC, STATE_SRC, STATE_TC_SRC, FUSED_SRC, PREP_SRC, ONCHIP_SRC,
 WS_SRC, LEAN_SRC, CLUSTER_SRC, REGS_SRC, WGMMA_SRC, MC_SRC, DIET_SRC, WGRS_SRC, SINGLE_SRC, AHEAD_SRC, TILE_SRC,
 WIDE_SRC, PREP_OPS_SRC, PRE_SRC, HILO_SRC, KDREG_SRC, WY_SRC, SHARE_SRC, SIDE_SRC, PAIR_SRC, PREP_INV_SRC, LATE_SRC) = (
    k.source for k in DELTA_KERNELS)


def delta_kernel(step: str) -> DeltaKernel:
    """The registry entry of a step ("01" ... "11"); a one-line error for an unknown one."""
    for k in DELTA_KERNELS:
        if k.step == step:
            return k
    raise ValueError(f"no delta kernel step {step!r}; known: {', '.join(k.step for k in DELTA_KERNELS)}")


# ----------------------------------------------------------------------------- configuration

#: Default chunk: C=32 (with BV=32 and the tensor-core state pass) is the fastest total in notebook
#: 07's recorded H200 sweep at issue 5's shape. The intra-chunk pair work and the solve grow with C
#: per token; the state pass's per-chunk overhead (two barriers, fragment loads) shrinks as 1/C.
DEFAULT_CHUNK = 32

def default_rg(K: int) -> int:
    """Lanes per state column in the recurrent kernel: 8 (3 shuffle levels, K/8 rows per lane)."""
    return 8


def default_bv(B: int, H: int, V: int, num_sms: int = 132) -> int:
    """Value columns per state-pass block: 32 when that keeps at least half the SMs busy, else 16.

    Wider blocks re-read W and the state less often; on the H200 smoke run (B=2, H=16, K=V=128:
    128 blocks of 32 columns on 132 SMs) BV=32 beat BV=16 at every chunk size, so a block per SM
    is not needed — the chunk sweep in notebook 07 records the comparison."""
    return 32 if B * H * (V // 32) >= num_sms // 2 else 16


def solve_cols_per_thread(C: int) -> int:
    """Columns per thread in the triangular solve: 2 at C = 16, else 1.

    Two columns give each thread two independent update chains, which pays when the chain is short;
    from C = 32 on, the doubled register footprint (fewer resident blocks) costs more than it
    brings: one column per thread was faster at C = 32 and 64, slower at C = 16, on the H200 at
    issue 5's shape (``scripts/probe_delta_state.py --solve-cpt`` measures it)."""
    return 2 if C <= 16 else 1


def state_smem_floats(K: int, V: int, C: int, BV: int) -> int:
    """Dynamic shared memory of ``kda_chunk_state`` in floats (mirrors ``KdaStateLayout``)."""
    slab = 16 * (K // 4) * (BV // 4)
    SK = min(K, slab // (2 * C))
    SJ = min(C, slab // C)
    SI = min(C, slab // K)
    LS, LW, LA, LK = BV + 4, SK + 4, SJ + 4, K + 4
    stage = max(2 * C * LW, C * LA, SI * LK)
    return K * LS + C * LS + stage


def state_tc_smem_floats(K: int, V: int, C: int, BV: int) -> int:
    """Dynamic shared memory of ``kda_chunk_state_tc`` in floats (mirrors ``KdaStateTcLayout``):
    S [K][BV+8], V' [C][BV+8], then per operand stage (two up to C = 32, one at C = 64) W and Qg
    [C][K+4], Kd [C][K+8], Aqk [C][C+4]."""
    stages = 2 if C <= 32 else 1
    return K * (BV + 8) + C * (BV + 8) + stages * (2 * C * (K + 4) + C * (K + 8) + C * (C + 4))


def resolve_state_kernel(state: str, chunk_size: int, compute_capability: int) -> str:
    """"tc" or "simt" for a requested state pass: "auto" takes the tensor cores where they can run
    (chunk of 16/32/64, sm_80+); asking for "tc" where they cannot is an error, not a fallback."""
    if state not in SUPPORTED_STATE:
        raise ValueError(f"state must be one of {SUPPORTED_STATE}, got {state!r}")
    tc_ok = chunk_size in TC_CHUNK and compute_capability >= TC_MIN_CC
    if state == "auto":
        return "tc" if tc_ok else "simt"
    if state == "tc" and not tc_ok:
        why = (f"chunk_size must be one of {TC_CHUNK}, got {chunk_size}" if chunk_size not in TC_CHUNK
               else f"needs compute capability >= {TC_MIN_CC / 10:.1f}, this GPU has {compute_capability / 10:.1f}")
        raise ValueError(f"the tensor-core state pass (state='tc') {why}; use state='simt'")
    return state


def validate_config(K: int, V: int, chunk_size: int | None = None, bv: int | None = None,
                    rg: int | None = None) -> None:
    """Raise ``ValueError`` for head sizes, chunk sizes or tilings the kernels do not support."""
    if K not in SUPPORTED_K:
        raise ValueError(f"K (key head size) must be one of {SUPPORTED_K}, got {K}")
    if V not in SUPPORTED_V:
        raise ValueError(f"V (value head size) must be one of {SUPPORTED_V}, got {V}")
    if chunk_size is not None and chunk_size not in SUPPORTED_CHUNK:
        raise ValueError(f"chunk_size must be one of {SUPPORTED_CHUNK}, got {chunk_size}")
    if bv is not None and (bv not in SUPPORTED_BV or V % bv):
        raise ValueError(f"bv (value columns per state-pass block) must be one of {SUPPORTED_BV} "
                         f"and divide V={V}, got {bv}")
    if rg is not None:
        if rg not in SUPPORTED_RG or K % (4 * rg):
            raise ValueError(f"rg (lanes per state column) must be one of {SUPPORTED_RG} with K % (4*rg) == 0; "
                             f"got rg={rg}, K={K}")
        if V % (RECURRENT_WARPS * 32 // rg):
            raise ValueError(f"V={V} must be a multiple of the {RECURRENT_WARPS * 32 // rg} columns per block "
                             f"of rg={rg}")


# ----------------------------------------------------------------------------- inputs

def _kind(a) -> str | None:
    """attnlab.arrays' name for what ``a`` is ('numpy', 'cupy', 'torch'), None for a non-array."""
    try:
        return array_kind(a)
    except ValueError:
        return None


def _is_torch_bf16(a) -> bool:
    return _kind(a) == "torch" and dtype_name(a) == "bfloat16"


def _describe(a) -> str:
    return f"{type(a).__module__}.{type(a).__name__}"


def _check_array(name: str, a, dtype: str = "float32") -> None:
    """dtype and layout checks that work on NumPy, CuPy and torch arrays alike (``dtype``
    'float32', or 'bfloat16' for the bf16-I/O path, which only torch tensors can carry)."""
    kind = _kind(a)
    if kind is None:
        raise ValueError(f"{name} must be a CuPy array or torch CUDA tensor, got {_describe(a)}")
    if kind == "torch":
        if dtype_name(a) != dtype:
            raise ValueError(f"{name} must be {dtype}" + (" like q" if name != "q" and dtype == "bfloat16" else "")
                             + f", got {a.dtype}")
        if not is_contiguous(a):
            raise ValueError(f"{name} must be C-contiguous (the kernels ignore strides); call .contiguous()")
        return
    if dtype == "bfloat16":
        raise ValueError(f"{name} must be a torch bfloat16 tensor like q (CuPy and NumPy have no bfloat16), "
                         f"got {_describe(a)} of {a.dtype}")
    if dtype_name(a) != "float32":
        raise ValueError(f"{name} must be float32, got {a.dtype}")
    if not is_contiguous(a):
        raise ValueError(f"{name} must be C-contiguous (the kernels ignore strides); use ascontiguousarray")


def as_cupy(name: str, a, *, allow_none: bool = False, dtype: str = "float32"):
    """A zero-copy CuPy view of a CuPy array or torch CUDA tensor, after dtype/layout/device checks
    (a bfloat16 tensor is viewed as its int16 bit patterns: CuPy has no bfloat16)."""
    if a is None:
        if allow_none:
            return None
        raise ValueError(f"{name} is required")
    _check_array(name, a, dtype)
    if _kind(a) == "torch":
        if not a.is_cuda:
            raise ValueError(f"{name} must be on a CUDA device, got a torch tensor on {a.device}")
        return arrays_as_cupy(a)
    if _kind(a) != "cupy":
        raise ValueError(f"{name} must be a CUDA array (CuPy array or torch CUDA tensor), got a NumPy "
                         f"array on the host; move it with cupy.asarray")
    import cupy as cp

    if a.device.id != cp.cuda.Device().id:
        raise ValueError(f"{name} is on device {a.device.id}, the current device is {cp.cuda.Device().id}")
    return a


def validate_inputs(q, k, v, g, beta, initial_state=None, *, chunk_size: int | None = None,
                    check_gate: bool = True, io: str = "fp32"):
    """Check shapes, sizes, dtypes, layout, the gate sign and the device; return CuPy views and dims.

    ``io="bf16"``: q, k, v, g, beta must be torch bfloat16 tensors (the initial state stays float32).
    Returns ``(arrays dict, (B, T, H, K, V))``. Everything but the device check also works on
    NumPy arrays and CPU tensors, so the errors are testable on a machine without a GPU.
    """
    if io not in SUPPORTED_IO:
        raise ValueError(f"io must be one of {SUPPORTED_IO}, got {io!r}")
    dtype = IO_DTYPES[io]
    B, T, H, K, V = check_shapes(q, k, v, g, beta, initial_state)
    validate_config(K, V, chunk_size)
    named = dict(q=q, k=k, v=v, g=g, beta=beta)
    if initial_state is not None:
        named["initial_state"] = initial_state
    for name, a in named.items():
        _check_array(name, a, "float32" if name == "initial_state" else dtype)
    if check_gate:
        gmax, gmin = float(g.max()), float(g.min())
        if not (gmax <= 0.0 and np.isfinite(gmin)):   # NaN fails the first test, -inf the second
            raise ValueError(f"g must be a log-space decay: finite and <= 0 everywhere; "
                             f"got min(g) = {gmin}, max(g) = {gmax}")
    arrays = {name: as_cupy(name, a, dtype="float32" if name == "initial_state" else dtype)
              for name, a in named.items()}
    arrays.setdefault("initial_state", None)
    return arrays, (B, T, H, K, V)


def _scale(K: int, scale) -> np.float32:
    s = K ** -0.5 if scale is None else float(scale)
    if not np.isfinite(s):
        raise ValueError(f"scale must be finite, got {scale}")
    return np.float32(s)


_NULL = np.uint64(0)   # a null pointer argument (8 bytes, like a device pointer)


def _ptr(a):
    return _NULL if a is None else a


# ----------------------------------------------------------------------------- recurrent

@dataclass
class RecurrentPlan:
    """Validated inputs, outputs and launch configuration of ``01_recurrent.cu``."""
    arrays: dict
    dims: tuple
    scale: np.float32
    rg: int
    o: Any
    final_state: Any
    kernel: Any = field(repr=False, default=None)

    @property
    def grid(self) -> tuple[int, int, int]:
        B, T, H, K, V = self.dims
        return (V // (RECURRENT_WARPS * 32 // self.rg), H, B)

    @property
    def block(self) -> tuple[int, int, int]:
        return (RECURRENT_WARPS * 32, 1, 1)

    def poison(self) -> None:
        """Fill the outputs with NaN, so anything a kernel fails to write shows up."""
        self.o.fill(np.nan)
        if self.final_state is not None:
            self.final_state.fill(np.nan)

    def run(self):
        B, T, H, K, V = self.dims
        a = self.arrays
        self.kernel(self.grid, self.block,
                    (a["q"], a["k"], a["v"], a["g"], a["beta"], _ptr(a["initial_state"]), self.o,
                     _ptr(self.final_state), np.int32(T), np.int32(H), self.scale))
        return self.o, self.final_state


def prepare_recurrent(q, k, v, g, beta, scale: float | None = None, initial_state=None,
                      output_final_state: bool = False, rg: int | None = None,
                      check_gate: bool = True) -> RecurrentPlan:
    import cupy as cp

    from ..compile import load_kernel

    arrays, dims = validate_inputs(q, k, v, g, beta, initial_state, check_gate=check_gate)
    B, T, H, K, V = dims
    rg = default_rg(K) if rg is None else int(rg)
    validate_config(K, V, rg=rg)
    kernel = load_kernel(RECURRENT_SRC, "kda_recurrent", (K, V, rg, RECURRENT_WARPS))
    o = cp.empty((B, T, H, V), dtype=cp.float32)
    fs = cp.empty((B, H, K, V), dtype=cp.float32) if output_final_state else None
    return RecurrentPlan(arrays, dims, _scale(K, scale), rg, o, fs, kernel)


def kda_recurrent(q, k, v, g, beta, scale: float | None = None, initial_state=None,
                  output_final_state: bool = False, rg: int | None = None):
    """Recurrent KDA on the GPU (fp32). Returns CuPy ``(o, final_state or None)``."""
    return prepare_recurrent(q, k, v, g, beta, scale, initial_state, output_final_state, rg).run()


# ----------------------------------------------------------------------------- chunked

def chunk_workspace_shapes(B: int, T: int, H: int, K: int, V: int, C: int) -> dict[str, tuple]:
    """Shapes of the chunked form's fp32 workspaces (the last chunk is padded to C rows)."""
    NT = -(-T // C)
    Tp = NT * C
    return dict(Akk=(B, H, NT, C, C), Aqk=(B, H, NT, C, C), Qg=(B, H, Tp, K), Kd=(B, H, Tp, K),
                W=(B, H, Tp, K), U=(B, H, Tp, V), gL=(B, H, NT, K))


@dataclass
class ChunkPlan:
    """Validated inputs, workspaces, outputs and launch configurations of the chunked kernels."""
    arrays: dict
    dims: tuple
    scale: np.float32
    chunk_size: int
    bv: int
    state_kernel: str          # "tc" (05_chunk_state_tc.cu) or "simt" (04_chunk_state.cu)
    ws: dict
    o: Any
    final_state: Any
    kernels: dict = field(repr=False, default_factory=dict)

    @property
    def num_chunks(self) -> int:
        return -(-self.dims[1] // self.chunk_size)

    def launch_configs(self) -> dict[str, dict]:
        B, T, H, K, V = self.dims
        C, NT = self.chunk_size, self.num_chunks
        cpt = solve_cols_per_thread(C)
        if self.state_kernel == "tc":
            state = dict(grid=(V // self.bv, H, B), block=(2 * K, 1, 1),
                         smem=4 * state_tc_smem_floats(K, V, C, self.bv))
        else:
            state = dict(grid=(V // self.bv, H, B), block=((K // 4) * (self.bv // 4), 1, 1),
                         smem=4 * state_smem_floats(K, V, C, self.bv))
        return {
            "intra": dict(grid=(NT, H, B), block=(4 * C, 1, 1), smem=0),
            "solve": dict(grid=(NT, H, B), block=((K + V) // cpt, 1, 1), smem=0),
            "state": state,
        }

    def poison(self) -> None:
        """NaN in every workspace and output, so anything a stage fails to write shows up."""
        for a in (*self.ws.values(), self.o, self.final_state):
            if a is not None:
                a.fill(np.nan)

    def poison_outputs(self) -> None:
        """NaN in o and the final state only (to rerun the state pass on existing workspaces)."""
        for a in (self.o, self.final_state):
            if a is not None:
                a.fill(np.int16(0x7FC0) if a.dtype == np.int16 else np.nan)   # bf16 NaN bits on the bf16 path

    def run(self, stages=(1, 2, 3)):
        B, T, H, K, V = self.dims
        a, w, cfg = self.arrays, self.ws, self.launch_configs()
        if 1 in stages:
            c = cfg["intra"]
            self.kernels["intra"](c["grid"], c["block"],
                                  (a["q"], a["k"], a["g"], a["beta"], w["Akk"], w["Aqk"], w["Qg"], w["Kd"],
                                   w["W"], w["gL"], np.int32(T), np.int32(H), self.scale))
        if 2 in stages:
            c = cfg["solve"]
            self.kernels["solve"](c["grid"], c["block"],
                                  (w["Akk"], w["W"], a["v"], a["beta"], w["U"], np.int32(T), np.int32(H)))
        if 3 in stages:
            c = cfg["state"]
            self.kernels["state"](c["grid"], c["block"],
                                  (w["W"], w["U"], w["Qg"], w["Kd"], w["Aqk"], w["gL"],
                                   _ptr(a["initial_state"]), self.o, _ptr(self.final_state),
                                   np.int32(T), np.int32(H), np.int32(self.num_chunks)),
                                  shared_mem=c["smem"])
        return self.o, self.final_state

    def workspace_bytes(self) -> int:
        return int(sum(x.nbytes for x in self.ws.values()))


def prepare_chunk(q, k, v, g, beta, scale: float | None = None, initial_state=None,
                  output_final_state: bool = False, chunk_size: int = DEFAULT_CHUNK, bv: int | None = None,
                  check_gate: bool = True, state: str = "auto") -> ChunkPlan:
    """Validate, allocate and compile once; ``state`` picks the state pass ("auto": tensor cores
    where they can run, see :func:`resolve_state_kernel`)."""
    if state not in SUPPORTED_STATE:   # before anything touches the device
        raise ValueError(f"state must be one of {SUPPORTED_STATE}, got {state!r}")
    import cupy as cp

    from ..compile import load_kernel

    arrays, dims = validate_inputs(q, k, v, g, beta, initial_state, chunk_size=chunk_size,
                                   check_gate=check_gate)
    B, T, H, K, V = dims
    C = int(chunk_size)
    device = cp.cuda.Device()
    state_kernel = resolve_state_kernel(state, C, int(device.compute_capability))
    if bv is None:
        sms = cp.cuda.runtime.getDeviceProperties(device.id)["multiProcessorCount"]
        bv = default_bv(B, H, V, sms)
    validate_config(K, V, C, bv=bv)
    if state_kernel == "tc":
        state_kernel_fn = load_kernel(STATE_TC_SRC, "kda_chunk_state_tc", (K, V, C, bv))
        smem = 4 * state_tc_smem_floats(K, V, C, bv)
    else:
        state_kernel_fn = load_kernel(STATE_SRC, "kda_chunk_state", (K, V, C, bv))
        smem = 4 * state_smem_floats(K, V, C, bv)
    kernels = {
        "intra": load_kernel(INTRA_SRC, "kda_chunk_intra", (K, C)),
        "solve": load_kernel(SOLVE_SRC, "kda_chunk_solve", (K, V, C, solve_cols_per_thread(C))),
        "state": state_kernel_fn,
    }
    if smem > 48 * 1024:
        kernels["state"].max_dynamic_shared_size_bytes = smem
    ws = {name: cp.empty(shape, dtype=cp.float32)
          for name, shape in chunk_workspace_shapes(B, T, H, K, V, C).items()}
    o = cp.empty((B, T, H, V), dtype=cp.float32)
    fs = cp.empty((B, H, K, V), dtype=cp.float32) if output_final_state else None
    return ChunkPlan(arrays, dims, _scale(K, scale), C, int(bv), state_kernel, ws, o, fs, kernels)


def kda_chunk(q, k, v, g, beta, scale: float | None = None, initial_state=None,
              output_final_state: bool = False, chunk_size: int = DEFAULT_CHUNK, bv: int | None = None,
              state: str = "auto"):
    """Chunked KDA on the GPU (fp32 in and out, three kernels). Returns CuPy ``(o, final_state or None)``."""
    return prepare_chunk(q, k, v, g, beta, scale, initial_state, output_final_state, chunk_size, bv,
                         state=state).run()


# ----------------------------------------------------------------------------- tensor cores, 3xBF16 (06; 07 -> 08)

def fused_smem_words(K: int, V: int, BV: int, C: int = FUSED_CHUNK) -> int:
    """Dynamic shared memory of ``kda_chunk_fused`` (06) in 32-bit words (mirrors ``KdaFusedLayout``)."""
    LK, LC, LA = K // 2 + 4, C // 2 + 4, C + 2
    NQ = FUSED_THREADS // (K // 2)
    fp32 = 3 * C * K + C * BV + C * K + C * BV + 2 * C * LA + 16 * 17 + K + NQ * K + C + 4
    pairs = 2 * (3 * C * LK + K * LC + BV * LK + 2 * BV * LC + 2 * C * LC)
    return fp32 + pairs


def prep_smem_words(K: int, C: int = FUSED_CHUNK, alias: bool = True) -> int:
    """Dynamic shared memory of ``kda_chunk_prep`` (07) and ``kda_chunk_prep_ops`` (21) in words (mirrors
    ``KdaPrepLayout``). ``alias``: Akk, T and the output arrays share the operands' space, as 07 is built on both
    paths and 21 on bf16 inputs; ``alias=False``: 21 on fp32 inputs, and 07's probe build KDA_PREP_ALIAS=0 (its
    earlier fp32 layout; :func:`prep_alias`)."""
    LK, LC, LA = K // 2 + 4, C // 2 + 4, C + 2
    NQ = FUSED_THREADS // (K // 2)
    late = 0 if alias else 2 * C * LA + 16 * 17 + 4 * C * LC
    return max(6 * C * LK, 3 * C * K) + late + NQ * K + C + 4


def prep_alias(bf16: bool, prep_defines: dict | None, ops: bool = False) -> bool:
    """Whether the token-parallel kernel shares the operands' space with its late arrays: 07 on both paths (since
    step 24; at fp32 its probe build KDA_PREP_ALIAS=0 does not, 07_chunk_prep_tc.cu), 21 (``ops``) on bf16 inputs
    only."""
    if ops:
        return bf16
    return bf16 or bool(int((prep_defines or {}).get("KDA_PREP_ALIAS", 1)))   # "0" (a define's text) is 0


def prep_blocks_per_sm(bf16: bool, alias: bool = True) -> int:
    """The blocks per SM 07 is built for (its ``__launch_bounds__``): four in its aliased layout (both paths; 64
    registers a thread, no spill), three in the probe build KDA_PREP_ALIAS=0 at fp32."""
    return 4 if bf16 or alias else 3


#: 21's __launch_bounds__ on bf16 inputs: four blocks per SM, 64 registers (a small spill; 21_chunk_prep_ops.cu
#: says why); on fp32 inputs three (07's earlier fp32 layout, which 21 keeps)
PREP_OPS_BLOCKS_PER_SM = 4
PREP_OPS_FP32_BLOCKS_PER_SM = 3


def prep_ops_blocks_per_sm(bf16: bool) -> int:
    """The blocks per SM 21 is built for: :data:`PREP_OPS_BLOCKS_PER_SM` on bf16 inputs,
    :data:`PREP_OPS_FP32_BLOCKS_PER_SM` on fp32."""
    return PREP_OPS_BLOCKS_PER_SM if bf16 else PREP_OPS_FP32_BLOCKS_PER_SM
#: Spill bytes (stores, loads, stack) a kernel's static build may show; every other kernel builds without
#: spills. 21 at 64 registers spills a few dozen bytes and ran faster alone than at 80 without (0.40 against
#: 0.44 ms, scripts/probe_delta_timeline.py), and only at 64 do two of its blocks fit beside one of 22.
SPILL_ALLOWANCE = {"kda_chunk_prep_ops": 32, "kda_chunk_prep_side": 16,   # 07 beside 27: 8 bytes (its flag's two arguments)
                   "kda_chunk_prep_inv": 16}   # 29: a register or two (nvcc 13.0: 4 to 8 bytes), 64 registers for 4 blocks


def onchip_smem_words(K: int, V: int, BV: int, C: int = FUSED_CHUNK) -> int:
    """Dynamic shared memory of ``kda_chunk_state_onchip`` (08) in words (mirrors ``KdaOnchipLayout``)."""
    LK, LC = K // 2 + 4, C // 2 + 4
    NQ = FUSED_THREADS // (K // 2)
    fp32 = 3 * C * K + C * BV + 2 * 4 * C * LC + C * BV + K + NQ * K + C
    pairs = 2 * (2 * C * LK + K * LC + BV * LK + 2 * BV * LC)
    return fp32 + pairs


def ws_smem_words(K: int, V: int, BV: int, C: int = FUSED_CHUNK) -> int:
    """Dynamic shared memory of ``kda_chunk_state_ws`` (09) in words (mirrors ``KdaWsLayout``)."""
    LK, LC = K // 2 + 4, C // 2 + 4
    NQ = (WS_THREADS - 256) // (K // 2)
    pbuf = 2 * C * LK + 2 * C * LK + 2 * K * LC + 4 * C * LC + C * BV + K
    return 3 * C * K + C * BV + 2 * pbuf + 2 * BV * LK + 4 * BV * LC + NQ * K + C


def lean_smem_words(K: int, V: int, BV: int, C: int = FUSED_CHUNK) -> int:
    """Dynamic shared memory of ``kda_chunk_state_lean`` (10) in words (mirrors ``KdaLeanLayout``):
    09's without the q, k, g staging."""
    return ws_smem_words(K, V, BV, C) - 3 * C * K


def cluster_smem_words(K: int, V: int, BV: int, C: int = FUSED_CHUNK) -> int:
    """Dynamic shared memory of ``kda_chunk_state_cluster`` (11) in words (mirrors
    ``KdaClusterLayout``): 10's, with group sums for two-row groups of this block's channels."""
    NB = V // BV
    return lean_smem_words(K, V, BV, C) - (WS_THREADS - 256) // (K // 2) * K + (C // 2) * (K // NB)


def regs_threads(BV: int, roles: int = 1) -> int:
    """Block size of ``kda_chunk_state_regs`` (12): ``roles`` consumer warps per 16 value columns,
    eight producers."""
    return 32 * (roles * BV // 16 + 8)


def regs_smem_words(K: int, V: int, BV: int, C: int = FUSED_CHUNK, roles: int = 1) -> int:
    """Dynamic shared memory of ``kda_chunk_state_regs`` (12) in words (mirrors ``KdaRegsLayout``):
    10's without the consumers' S^T, X^T and V'^T arrays (12 keeps them in registers); with two roles,
    plus the V' hand-over (two chunk parities x 16 fragment words x 32 lanes per 16 columns)."""
    LK, LC = K // 2 + 4, C // 2 + 4
    handover = 2 * (BV // 16) * 16 * 32 if roles == 2 else 0
    return lean_smem_words(K, V, BV, C) - 2 * BV * LK - 4 * BV * LC + handover


def wgmma_smem_words(K: int, V: int, BV: int, C: int = FUSED_CHUNK, bf16: bool = False, nst: int = 1,
                     nkd: int = 2) -> int:
    """Dynamic shared memory of ``kda_chunk_state_wgmma`` (13) in words (mirrors ``KdaWgLayout``):
    S^T hi and lo (K x BV bf16 each), X^T and V'^T (BV rows of 128 bytes); two operand buffers, each
    Kd^T (K rows of 128 bytes), Kbg and Qg (C x (K + 8) fp32) and 2^G_L (K fp32), rounded up to 1 KiB;
    two copy slots, each T and A2 hi/lo (4 x C x (C/2 + 4) words) and v (C x (BV + 8) elements of
    the input type); WG_E's half sums (2K fp32); its staging tile of g, k, q (3 x C x K elements of
    the input type); and 1024 bytes to align the base of the swizzled
    tiles. The bf16-I/O path (``bf16``) stores v as bf16, so it needs a little less; ``nst``
    staging tiles (13 with two: ``"wgmma2"``) add a tile each. With ``nkd=3`` (14's ``"tma3"``) the
    operand buffers are two of Kbg and Qg and three of Kd^T and 2^G_L, each rounded up to 1 KiB."""
    opb = -(-(K * 128 + 2 * C * (K + 8) * 4 + K * 4) // 1024) * 1024
    ops = 2 * opb if nkd == 2 else (2 * -(-(2 * C * (K + 8) * 4) // 1024) + 3 * -(-(K * 128 + K * 4) // 1024)) * 1024
    slot = 4 * C * (C // 2 + 4) * 4 + C * (BV + 8) * (2 if bf16 else 4)
    bytes_ = 2 * K * BV * 2 + 2 * BV * 128 + ops + 2 * slot + 2 * K * 4 + nst * 3 * C * K * (2 if bf16 else 4)
    return (bytes_ + 1024) // 4


def mc_smem_words(K: int, V: int, BV: int, C: int = FUSED_CHUNK, bf16: bool = False, nkd: int = 2) -> int:
    """Dynamic shared memory of ``kda_chunk_state_mc`` (14) in words: 13's and four mbarriers (the
    staging tile's full and empty, WG_C's two copy slots: ``KdaWgLayout<..., 4>``); ``nkd=3``: with
    three Kd^T buffers (``"tma3"``)."""
    return wgmma_smem_words(K, V, BV, C, bf16, nkd=nkd) + 8


def tile_smem_words(K: int, V: int, BV: int, C: int = FUSED_CHUNK, bf16: bool = False) -> int:
    """Dynamic shared memory of ``kda_chunk_state_tile`` (19) in words: 14's (:func:`mc_smem_words`) with
    each operand buffer's Kbg and Qg rows (2 x C x (K + 8) fp32) replaced by the [Kg; Qg]^T tiles
    (K rows of 128 bytes: hi, and lo for fp32 inputs' three-term products; ``KdaWgLayout``'s SMA)."""
    def opb(kq: int) -> int:
        return -(-(K * 128 + kq + K * 4) // 1024) * 1024
    return mc_smem_words(K, V, BV, C, bf16) - 2 * (opb(2 * C * (K + 8) * 4) - opb((1 if bf16 else 2) * K * 128)) // 4


def share_smem_words(K: int, V: int, BV: int, C: int = FUSED_CHUNK) -> int:
    """Dynamic shared memory of ``kda_chunk_state_share`` (26) in words: 19's (:func:`tile_smem_words`), its staging
    tile the maker's and K * 4 bytes larger (a chunk's image takes its place once read), and 22's two more mbarriers
    (the operand buffers', which the producer warp's copies complete on)."""
    return tile_smem_words(K, V, BV, C) + K + 4


def side_smem_words(K: int, V: int, BV: int, C: int = FUSED_CHUNK) -> int:
    """Dynamic shared memory of ``kda_chunk_state_side`` (27) in words: 24's layout (:func:`tile_smem_words`) at its
    64 value columns, less one BV x 128-byte tile (X^T and V'^T share one, ``KdaWgLayout``'s W64)."""
    return tile_smem_words(K, V, BV, C) - BV * 128 // 4


def pair_smem_words(K: int, V: int, BV: int, C: int = FUSED_CHUNK) -> int:
    """Dynamic shared memory of ``kda_chunk_state_pair`` (28) in words: 24's layout (:func:`tile_smem_words`) with a
    staging tile of half the channels (3 x C x K / 2 fp32) and four more mbarriers (PFULL and PEMPTY of each buffer,
    ``KdaWgLayout``'s PAIR)."""
    return tile_smem_words(K, V, BV, C) - 3 * C * (K // 2) + 2 * 4


def pair_fits(K: int, V: int, bv: int) -> bool:
    """Whether 28 runs at this shape: K = PAIR_K (two WG_E threads a channel of K / 2) and a head's V / bv value blocks
    in whole clusters of PAIR_CLUSTER."""
    return K == PAIR_K and (V // bv) % PAIR_CLUSTER == 0


def share_slots(defines: dict | None) -> int:
    """Images in each head's ring of 26: the build's KDA_SHARE_SLOTS (a probe's define), else its default; the launcher
    allocates exactly what the kernel addresses."""
    slots = int((defines or {}).get("KDA_SHARE_SLOTS", SHARE_SLOTS))
    if slots < 4:
        raise ValueError(f"KDA_SHARE_SLOTS must be at least 4 (26's ring), got {slots}")
    return slots


def share_resident(B: int, H: int, V: int, bv: int, sms: int) -> bool:
    """Whether every block of 26 is resident at once (one a SM: 200 KB of shared memory each), as its blocks wait for
    each other's chunks: B H V / bv blocks on at most ``sms`` SMs."""
    return B * H * (V // bv) <= sms


def wy_smem_words(K: int, V: int, BV: int, C: int = FUSED_CHUNK, bf16: bool = False) -> int:
    """Dynamic shared memory of ``kda_chunk_state_wy`` (25) in words: 24's (19's, :func:`tile_smem_words`) plus the
    staging tile's T hi / lo words (2 x C x C/2 words), WG_E's two fp32 T' buffers ([C][C + 4] each) and, at K = 64
    (two element-wise threads a channel), every channel's Kg ([K][C + 4] fp32; ``KdaWgLayout``'s WY)."""
    if bf16:
        raise ValueError("25 (impl='wy') runs on fp32 inputs only")
    two_per_channel = K == 64   # WG_E's 128 threads over K channels
    return tile_smem_words(K, V, BV, C) + 2 * C * (C // 2) + 2 * C * (C + 4) + (K * (C + 4) if two_per_channel else 0)


def wide_smem_words(K: int, V: int, BV: int, C: int = FUSED_CHUNK, bf16: bool = False) -> int:
    """Dynamic shared memory of ``kda_chunk_state_wide`` (20) in words: 19's (:func:`tile_smem_words`), WG_E's
    part products ([256 / K parts][K] floats: two at K = 128, four at K = 64) in ``KdaWgLayout``'s TOT_BYTES,
    max(2K, 256) floats: at K = 64 1 KB, not 19's 512 bytes."""
    return tile_smem_words(K, V, BV, C, bf16) + max(2 * K, 256) - 2 * K


def hilo_smem_words(K: int, V: int, BV: int = 32, C: int = FUSED_CHUNK, bf16: bool = False) -> int:
    """Dynamic shared memory of ``kda_chunk_state_hilo`` (23) in words: 19's (:func:`tile_smem_words`, fp32 inputs)
    without the S^T hi / lo (K x BV bf16 each), X^T and V'^T (BV rows of 128 bytes) tiles: its chain keeps them in
    registers (``KdaWgLayout``'s HILO)."""
    if bf16:
        raise ValueError("23 (impl='hilo') runs on fp32 inputs only")
    return tile_smem_words(K, V, BV, C) - (2 * K * BV * 2 + 2 * BV * 128) // 4


def ops_image_bytes(K: int, bf16: bool = True) -> int:
    """One chunk's operand image from 21 (``kernels/delta/ops_image.cuh``). bf16 inputs: Kd^T (64 rows of 128
    bytes), [Kg; Qg]^T (K rows of 128 bytes) and 2^G_L (K fp32); fp32 inputs (hi and lo words, 19's fp32 operand
    buffer): Kd^T (K rows of 128 bytes), the [Kg; Qg]^T hi and lo tiles, 2^G_L."""
    return 64 * 128 + K * 128 + K * 4 if bf16 else 3 * K * 128 + K * 4


def ops_workspace_shape(B: int, T: int, H: int, K: int, C: int = FUSED_CHUNK, bf16: bool = True) -> tuple:
    """21's second output, 22's input: per (b, h, chunk) the operand image, as 32-bit words."""
    return (B, H, -(-T // C), ops_image_bytes(K, bf16) // 4)


def pre_smem_words(K: int, V: int, BV: int, C: int = FUSED_CHUNK, bf16: bool = False) -> int:
    """Dynamic shared memory of ``kda_chunk_state_pre`` (22) in words (``KdaWgLayout`` with PRE): S^T hi and lo,
    X^T and V'^T, two operand buffers of 21's image (rounded up to 1 KiB), two tensor-copied slots (T and A2
    hi / lo words unpadded, v as stored), WG_C's 2K floats of part sums (unused), no staging tile, six
    mbarriers, and room to align the base."""
    opb = -(-ops_image_bytes(K, bf16) // 1024) * 1024
    slot = 4 * C * (C // 2) * 4 + C * BV * (2 if bf16 else 4)
    return (2 * K * BV * 2 + 2 * BV * 128 + 2 * opb + 2 * slot + 2 * K * 4 + 6 * 8 + 1024) // 4


WGRS_BV = 64   # 16: the chain's accumulator rows are a block's value columns (the wgmma's M)


def wgrs_smem_words(K: int, V: int, BV: int = WGRS_BV, C: int = FUSED_CHUNK, bf16: bool = False) -> int:
    """Dynamic shared memory of ``kda_chunk_state_wgrs`` (16) in words, ``KdaRsLayout``: two buffers of
    [Kg^T | Qg^T] (hi, lo) and Kd^T, 2^G_L and WG_E's half products, two slots of 07's rows (1024-aligned),
    WG_E's g, k, q tile, three mbarriers, and room to align the base."""
    b1 = K * 128
    off_slot = -(-(4 * b1 + 2 * K * 128 + 2 * K * 4 + 2 * K * 4) // 1024) * 1024
    nbytes = off_slot + 2 * 4 * C * (C // 2) * 4 + 3 * C * K * (2 if bf16 else 4) + 24 + 1024
    return -(-nbytes // 4)


def mc_cluster(V: int, bv: int, impl: str = "multicast") -> int:
    """Blocks per cluster of 14: the head's V / bv value blocks (``"multicast"``), pairs of them
    (``"multicast2"``), or none (``"bulk"``, ``"bulk2"``: plain bulk copies into each block's own tile)."""
    if impl in ("bulk", "bulk2"):
        return 1
    return 2 if impl == "multicast2" and V // bv >= 2 else V // bv


def ta_workspace_shape(B: int, T: int, H: int, C: int = FUSED_CHUNK) -> tuple:
    """07's output, 08's input: per (b, h, chunk) T hi, T lo, Aqk hi, Aqk lo as C x C/2 words."""
    return (B, H, -(-T // C), 4, C, C // 2)


def check_tc_device(compute_capability: int) -> None:
    """06-10 need bf16 mma.sync, ldmatrix and cp.async (sm_80+): a one-line error elsewhere."""
    if compute_capability < FUSED_MIN_CC:
        raise ValueError(f"kda_tc (kernels 06-10, bf16 tensor cores) needs compute capability >= "
                         f"{FUSED_MIN_CC / 10:.1f}, this GPU has {compute_capability / 10:.1f}; "
                         "use kda_chunk(..., state='simt')")


@dataclass
class TcPlan:
    """Validated inputs, outputs, workspace and launch configurations of the 3xBF16 kernels:
    ``impl="lean"`` runs 07 (token-parallel: pair products, inverse) then 10 (the recurrence, warp-
    specialised, lean producers); ``"ws"`` 07 then 09; ``"split"`` 07 then 08 (the same recurrence,
    every warp in every phase); ``"fused"`` 06 alone (everything in the recurrence, no workspace)."""
    arrays: dict
    dims: tuple
    scale: np.float32
    bv: int
    impl: str
    ws: dict
    o: Any
    final_state: Any
    kernels: dict = field(repr=False, default_factory=dict)
    chunk_size: int = FUSED_CHUNK
    io: str = "fp32"          # "bf16": o holds bf16 bit patterns (int16); run() returns a torch view
    state_maps: tuple = ()    # the recurrence's trailing tensor-map arguments (14's TMA form: g, k, q)
    # 21 -> 22: run side by side (22 on a second stream of higher priority, launched first, each chunk waited for
    # on 21's ready flag; prepare_tc sets it where 22's grid leaves an SM free, side_by_side_safe, so that 21
    # always makes progress). Set it False under a tool that runs one kernel at a time (compute-sanitizer):
    # 22 would wait for chunks that 21 cannot start to write. epoch: the value 21 stores in the flags of the
    # chunks it has written this call
    overlap: bool = False
    epoch: int = 0
    side_stream: Any = field(repr=False, default=None)
    prep_alias: bool | None = None   # 07's (21's) late arrays in the operands' space (None: as built, prep_alias)
    state_ring: bool = False         # 23's probe build with two staging tiles (stage_ring)
    extra_threads: int = 0           # 24's probe build KDA_O_WARP: its store warp, a ninth

    @property
    def state_kernel(self) -> str:
        return self.impl

    def output(self):
        """o as the caller gets it: the CuPy float32 array, or a torch bfloat16 view of the bits."""
        if self.io == "bf16":
            import torch

            return torch.from_dlpack(self.o).view(torch.bfloat16)
        return self.o

    def launch_configs(self) -> dict[str, dict]:
        B, T, H, K, V = self.dims
        NC = -(-T // FUSED_CHUNK)
        if self.impl == "fused":
            return {"fused": dict(grid=(V // self.bv, H, B), block=(FUSED_THREADS, 1, 1),
                                  smem=4 * fused_smem_words(K, V, self.bv))}
        _, _, threads, words = STATE_IMPLS[self.impl]
        threads = threads(self.bv) if callable(threads) else threads
        state = dict(grid=(V // self.bv, H, B), block=(threads + self.extra_threads, 1, 1),
                     smem=state_smem_bytes(self.impl, K, V, self.bv, self.io, self.state_ring))
        return {"prep": dict(grid=(B * H, NC, 1) if self.impl in PRE_IMPLS + SIDE_IMPLS else (NC, H, B), block=(FUSED_THREADS, 1, 1),
                             smem=4 * prep_smem_words(K, alias=prep_alias(self.io == "bf16", None, ops=self.impl in PRE_IMPLS)
                                                      if self.prep_alias is None else self.prep_alias)),
                "state": state}

    def poison(self) -> None:
        """NaN in the outputs (and the workspace: bf16 NaN pairs), so anything left unwritten shows up."""
        for a in (self.o, self.final_state):
            if a is not None:
                a.fill(np.int16(0x7FC0) if a.dtype == np.int16 else np.nan)   # bf16 NaN bits on the bf16 path
        for w in self.ws.values():
            w.fill(np.uint32(0x7FC07FC0))

    def run(self, stages=(1, 2)):
        B, T, H, K, V = self.dims
        a, cfg = self.arrays, self.launch_configs()
        h0, fs = _ptr(a["initial_state"]), _ptr(self.final_state)
        if self.impl == "fused":
            c = cfg["fused"]
            self.kernels["fused"](c["grid"], c["block"],
                                  (a["q"], a["k"], a["v"], a["g"], a["beta"], h0, self.o, fs,
                                   np.int32(T), np.int32(H), self.scale), shared_mem=c["smem"])
            return self.output(), self.final_state
        side = "READY" in self.ws and self.overlap and tuple(stages) == (1, 2)
        if side:
            self.epoch = self.epoch % (2**31 - 1) + 1
        ops = ()
        if "OPS" in self.ws:   # 21 -> 22: the operand images after 07's words, the ready flags, the epoch (0: no flags)
            ops = (self.ws["OPS"], self.ws["READY"], np.int32(self.epoch if side else 0))
        elif "READY" in self.ws:   # 07 beside 27: the ready flags, the epoch (0: no flags)
            ops = (self.ws["READY"], np.int32(self.epoch if side else 0))
        share = ()
        if "RING" in self.ws and 2 in stages:   # 26: its ring, flags and acknowledgements; a new epoch each launch
            self.epoch = self.epoch % (2**31 - 1) + 1
            share = (self.ws["RING"], self.ws["MADE"], self.ws["ACKS"], np.int32(self.epoch))

        def prep():
            c = cfg["prep"]
            self.kernels["prep"](c["grid"], c["block"],
                                 (a["q"], a["k"], a["g"], a["beta"], self.ws["TA"], *ops, np.int32(T), np.int32(H),
                                  self.scale), shared_mem=c["smem"])

        def state():
            c = cfg["state"]
            self.kernels["state"](c["grid"], c["block"],
                                  (a["q"], a["k"], a["v"], a["g"], a["beta"], self.ws["TA"], *ops, *share, h0, self.o, fs,
                                   np.int32(T), np.int32(H), self.scale, *self.state_maps), shared_mem=c["smem"])

        if side:   # 22 (27) first, on the higher-priority stream, so that its blocks hold their SMs before 21's (07's) fill them
            import cupy as cp

            main = cp.cuda.get_current_stream()
            if self.side_stream is None:   # CUDA clamps a priority past the device's range to its highest
                self.side_stream = cp.cuda.Stream(non_blocking=True, priority=-(2**20))
            self.side_stream.wait_event(main.record())
            with self.side_stream:
                state()
            prep()
            main.wait_event(self.side_stream.record())
            return self.output(), self.final_state
        if 1 in stages:
            prep()
        if 2 in stages:
            state()
        return self.output(), self.final_state

    def workspace_bytes(self) -> int:
        return int(sum(x.nbytes for x in self.ws.values()))


#: The recurrence kernel after 07 of each two-kernel impl: source, function, threads, shared words.
STATE_IMPLS = {
    "cluster": (CLUSTER_SRC, "kda_chunk_state_cluster", WS_THREADS, cluster_smem_words),
    "lean": (LEAN_SRC, "kda_chunk_state_lean", WS_THREADS, lean_smem_words),
    "regs": (REGS_SRC, "kda_chunk_state_regs", regs_threads, regs_smem_words),
    "regs2": (REGS_SRC, "kda_chunk_state_regs", lambda bv: regs_threads(bv, 2),
              lambda K, V, BV, C=FUSED_CHUNK: regs_smem_words(K, V, BV, C, roles=2)),
    "ws": (WS_SRC, "kda_chunk_state_ws", WS_THREADS, ws_smem_words),
    "split": (ONCHIP_SRC, "kda_chunk_state_onchip", FUSED_THREADS, onchip_smem_words),
    "wgmma": (WGMMA_SRC, "kda_chunk_state_wgmma", WGMMA_THREADS, wgmma_smem_words),
    "wgmma2": (WGMMA_SRC, "kda_chunk_state_wgmma", WGMMA_THREADS,
               lambda K, V, BV, C=FUSED_CHUNK: wgmma_smem_words(K, V, BV, C, bf16=True, nst=2)),
    "bulk": (MC_SRC, "kda_chunk_state_mc", WGMMA_THREADS, mc_smem_words),
    "bulk2": (MC_SRC, "kda_chunk_state_mc", WGMMA_THREADS, mc_smem_words),
    "tma": (MC_SRC, "kda_chunk_state_tma", WGMMA_THREADS, mc_smem_words),
    "tma2": (MC_SRC, "kda_chunk_state_tma", WGMMA_THREADS, mc_smem_words),
    "tma3": (MC_SRC, "kda_chunk_state_tma", WGMMA_THREADS,
             lambda K, V, BV, C=FUSED_CHUNK, bf16=False: mc_smem_words(K, V, BV, C, bf16, nkd=3)),
    "diet": (DIET_SRC, "kda_chunk_state_diet", WGMMA_THREADS, mc_smem_words),
    "wgrs": (WGRS_SRC, "kda_chunk_state_wgrs", WGMMA_THREADS, wgrs_smem_words),
    "single": (SINGLE_SRC, "kda_chunk_state_single", WGMMA_THREADS,   # bf16 inputs only: their tiles' size
               lambda K, V, BV, C=FUSED_CHUNK: mc_smem_words(K, V, BV, C, bf16=True)),
    "ahead": (AHEAD_SRC, "kda_chunk_state_ahead", WGMMA_THREADS,   # bf16 inputs only
              lambda K, V, BV, C=FUSED_CHUNK: mc_smem_words(K, V, BV, C, bf16=True)),
    "tile": (TILE_SRC, "kda_chunk_state_tile", WGMMA_THREADS, tile_smem_words),
    "wide": (WIDE_SRC, "kda_chunk_state_wide", WIDE_THREADS, wide_smem_words),
    "pre": (PRE_SRC, "kda_chunk_state_pre", PRE_THREADS, pre_smem_words),
    "hilo": (HILO_SRC, "kda_chunk_state_hilo", WGMMA_THREADS, hilo_smem_words),
    "kdreg": (KDREG_SRC, "kda_chunk_state_kdreg", WGMMA_THREADS, tile_smem_words),   # 24: 19's layout
    "late": (LATE_SRC, "kda_chunk_state_late", WGMMA_THREADS, tile_smem_words),   # 30 (after 29): 24's layout
    "wy": (WY_SRC, "kda_chunk_state_wy", WGMMA_THREADS, wy_smem_words),   # 25: 24's, plus T's words and T' buffers
    "share": (SHARE_SRC, "kda_chunk_state_share", SHARE_THREADS, share_smem_words),   # 26: 19's, two more mbarriers
    "side": (SIDE_SRC, "kda_chunk_state_side", WGMMA_THREADS, side_smem_words),   # 27: 24's at 64 columns, X^T = V'^T
    "pair": (PAIR_SRC, "kda_chunk_state_pair", WGMMA_THREADS, pair_smem_words),   # 28: 24's, half a staging tile
    "multicast": (MC_SRC, "kda_chunk_state_mc", WGMMA_THREADS, mc_smem_words),
    "multicast2": (MC_SRC, "kda_chunk_state_mc", WGMMA_THREADS, mc_smem_words),
}


def state_smem_bytes(impl: str, K: int, V: int, bv: int, io: str = "fp32", ring: bool = False) -> int:
    """Dynamic shared memory (bytes) the recurrence of a two-kernel ``impl`` is launched with: its layout's
    size for the I/O type (bf16 inputs stage half the bytes, and 19's tiles drop their lo half: 141 KB in
    place of 202 KB at K = V = 128, room beside it for a block of 07); ``ring``: 23's probe build with a
    second staging tile and its mbarrier (:func:`stage_ring`)."""
    words = STATE_IMPLS[impl][3]
    extra = 3 * FUSED_CHUNK * K * 4 + 8 if ring else 0
    if io == "bf16" and "bf16" in inspect.signature(words).parameters:
        return 4 * words(K, V, bv, bf16=True) + extra
    return 4 * words(K, V, bv) + extra


def stage_ring(impl: str, defines: dict | None) -> bool:
    """Whether the recurrence is 23's probe build with two staging tiles (KDA_STAGE_RING=1: WG_E's q, k, g copies
    issued two chunks ahead, 48 KB more shared memory at K = 128); a one-line error for any other impl."""
    ring = bool((defines or {}).get("KDA_STAGE_RING", 0))
    if ring and impl != "hilo":
        raise ValueError(f"KDA_STAGE_RING is a probe build of 23 (impl='hilo'), whose shared memory has room for a "
                         f"second staging tile; got impl={impl!r}")
    return ring


MC_IMPLS = ("bulk", "bulk2", "multicast", "multicast2")   # 14's forms with kda_chunk_state_mc
#: 14's TMA forms (kda_chunk_state_tma): the launcher passes tensor maps of g, k, q, v and 07's output;
#: "tma2" copies WG_C's T / A2 words and v by tensor copies too; "tma3" adds a third Kd^T buffer
TMA_IMPLS = ("tma", "tma2", "tma3", "diet", "single",   # diet: 15, 14 "tma2" with WG_E on fewer instructions; single: 17
             "ahead",                                    # 18: 17 with each chunk's P1 a chunk early
             "tile",                                     # 19: 15 / 17 with P1's A from WG_E's shared-memory tile
             "wide",                                     # 20: 19 with two element-wise warpgroups
             "hilo",                                     # 23: 19 with the chain turned around in registers
             "kdreg",                                    # 24: 19 with P4's A from registers
             "wy",                                       # 25: 24 in the WY form (07 hands over Aqk, not A2)
             "share",                                    # 26: 22's chain, the images made in the kernel
             "side",                                     # 27: 24 at 64 value columns, 07 beside it
             "pair",                                     # 28: 24, a pair of value blocks sharing WG_E's work
             "late")                                     # 30 (after 29): 24 with o stored a chunk late
#: impls whose recurrence is built for an architecture-specific target, and need 07 to hand over
#: A2 = Aqk T in place of Aqk (07's A2 template flag)
#: 16 ("wgrs"): its own tensor maps (g, k, q and 07's output in boxes of C rows) and 64 value columns a block
WGRS_IMPLS = ("wgrs",)
#: impls whose value-block width is fixed by their chain (the wgmma's 64 accumulator rows): 16 holds 64 columns,
#: 23 32 columns twice (hi and lo rows)
FIXED_BV = {"wgrs": WGRS_BV, "hilo": 32, "side": SIDE_BV}
#: 21 -> 22 ("pre"): 21 in place of 07 (its second output, the operand images, is 22's input); 22 takes the
#: tensor maps of v and 21's T / A2 words as the TMA forms' slots do
PRE_IMPLS = ("pre",)
#: 07 -> 26 ("share"): the ring of operand images, the made flags and acknowledgements, the call's epoch; every block
#: of the grid must be resident at once (share_resident)
SHARE_IMPLS = ("share",)
#: 07 beside 27 ("side"): 07 in 21's grid order with ready flags (kda_chunk_prep_side), the two side by side where 27's
#: grid leaves an SM free (side_by_side_safe), else one after the other
SIDE_IMPLS = ("side",)
#: 07 -> 28 ("pair"): the recurrence's value blocks in clusters of PAIR_CLUSTER, g, k, q in boxes of K / 2 channels
PAIR_IMPLS = ("pair",)
MAX_PRE_CHUNKS = 65535   # 21's grid (B H, NC), and 07's beside 27: the y axis
#: 29 -> 30 ("late"): 29 (07 with its inverse on every warp) in 07's place
PREP_INV_IMPLS = ("late",)
STATE_ARCH = {"wgmma": WGMMA_ARCH, "wgmma2": WGMMA_ARCH,
              **{i: WGMMA_ARCH for i in MC_IMPLS + TMA_IMPLS + WGRS_IMPLS + PRE_IMPLS}}
#: TMA forms whose o needs 07's Aqk, not A2 (25: o = Qg S + Aqk V')
PREP_AQK_IMPLS = ("wy",)
PREP_A2_IMPLS = ("wgmma", "wgmma2", *MC_IMPLS, *(i for i in TMA_IMPLS if i not in PREP_AQK_IMPLS), *WGRS_IMPLS)
#: impls whose recurrence runs a head's value blocks as clusters (at most 8 blocks each)
CLUSTER_IMPLS = ("cluster", "multicast", "multicast2")
SUPPORTED_TC_IMPL = (*STATE_IMPLS, "fused")
#: template arguments after (K, V, C, BV, BF) of the recurrence kernels that take more
STATE_EXTRA_ARGS = {"regs": (1,), "regs2": (2,),   # 12's consumer warps (roles) per 16 value columns
                    "wgmma": (1,), "wgmma2": (2,),   # 13's staging tiles
                    # 14's blocks per cluster (from V, bv) and whether WG_C's copies are bulk copies too
                    "bulk": (1, False), "bulk2": (1, True),
                    "tma": (False, 2), "tma2": (True, 2),   # 14's TMA form: WG_C's copies as tensor copies too
                    "tma3": (True, 3),                    # ... and three Kd^T buffers
                    "multicast": lambda V, bv: (mc_cluster(V, bv), False),
                    "multicast2": lambda V, bv: (mc_cluster(V, bv, "multicast2"), False)}


def state_step(impl: str) -> str:
    """The registry step of a two-kernel ``impl``'s recurrence (``"tile"`` -> ``"19"``)."""
    fn = STATE_IMPLS[impl][1]
    return next(k.step for k in DELTA_KERNELS if k.function == fn)


def state_extra_args(impl: str, V: int, bv: int) -> tuple:
    """Template arguments of ``impl``'s recurrence after (K, V, C, BV, BF) (:data:`STATE_EXTRA_ARGS`)."""
    extra = STATE_EXTRA_ARGS.get(impl, ())
    return extra(V, bv) if callable(extra) else extra


DEFAULT_TC_IMPL = "lean"


def prepare_tc(q, k, v, g, beta, scale: float | None = None, initial_state=None,
               output_final_state: bool = False, bv: int | None = None, check_gate: bool = True,
               impl: str = DEFAULT_TC_IMPL, defines: dict | None = None, prep_defines: dict | None = None) -> TcPlan:
    """Validate, allocate and compile once; ``run()`` only launches (07 and a recurrence of
    :data:`STATE_IMPLS`, or 06). ``defines`` go to the recurrence kernel's compiler, ``prep_defines`` to 07's
    (probe builds only; 07's shared memory follows KDA_PREP_ALIAS, :func:`prep_alias`).

    bf16 I/O: q, k, v, g, beta given as torch bfloat16 tensors select bf16 loads and a bf16 o in 07
    and the recurrence (10 or 12; the arithmetic, the initial and the final state stay fp32)."""
    if impl not in SUPPORTED_TC_IMPL:
        raise ValueError(f"impl must be one of {SUPPORTED_TC_IMPL}, got {impl!r}")
    io = "bf16" if _is_torch_bf16(q) else "fp32"
    if io == "bf16" and impl in FP32_ONLY_IMPLS:
        what, why, instead = FP32_ONLY_WHY[impl]
        raise ValueError(f"impl={impl!r} ({what}) runs on fp32 inputs only: {why}; pass {instead} or float32 inputs")
    if io == "bf16" and impl not in BF16_IMPLS:
        raise ValueError(f"bf16 inputs run on impl {', '.join(map(repr, BF16_IMPLS))} only (07 -> 10, 12, 13, 14, 15, 16, 17, 18, 19, "
                         f"20 or 24, 21 -> 22, or 29 -> 30), got "
                         f"impl={impl!r}; pass impl='lean' or float32 inputs")
    if io == "fp32" and impl in BF16_ONLY_IMPLS:
        what, why, instead = BF16_ONLY_WHY[impl]
        raise ValueError(f"impl={impl!r} ({what}) runs on bf16 inputs only: {why}; pass {instead} or torch bfloat16 inputs")
    import cupy as cp

    from ..compile import load_kernel

    arrays, dims = validate_inputs(q, k, v, g, beta, initial_state, chunk_size=FUSED_CHUNK, check_gate=check_gate,
                                   io=io)
    B, T, H, K, V = dims
    device = cp.cuda.Device()
    check_tc_device(int(device.compute_capability))
    if impl in STATE_ARCH and int(device.compute_capability) != 90:
        raise ValueError(f"impl={impl!r} (kernels 13-24, wgmma) is built for {STATE_ARCH[impl]} (H100 / H200) only; this GPU "
                         f"has compute capability {int(device.compute_capability) / 10:.1f}; use impl='lean'")
    if impl == "cluster" and int(device.compute_capability) < CLUSTER_MIN_CC:
        raise ValueError(f"impl='cluster' (kernel 11) needs thread-block clusters: compute capability >= "
                         f"{CLUSTER_MIN_CC / 10:.1f}, this GPU has {int(device.compute_capability) / 10:.1f}; "
                         "use impl='lean'")
    if impl in FIXED_BV:   # 16, 23: the block's value columns fill the chain's 64 accumulator rows
        if bv not in (None, FIXED_BV[impl]):
            raise ValueError(f"impl={impl!r} (kernel {state_step(impl)}) runs {FIXED_BV[impl]} value columns per block, "
                             f"got bv={bv}; leave bv unset")
        validate_config(K, V, FUSED_CHUNK)
        bv = FIXED_BV[impl]
    else:
        if bv is None:
            sms = cp.cuda.runtime.getDeviceProperties(device.id)["multiProcessorCount"]
            bv = default_bv(B, H, V, sms)
        validate_config(K, V, FUSED_CHUNK, bv=bv)
    if impl in PAIR_IMPLS and not pair_fits(K, V, bv):
        raise ValueError(f"impl={impl!r} (kernel 28) runs a head's value blocks in pairs, each making the operands of "
                         f"K / 2 channels with two threads a channel: it needs K = {PAIR_K} and an even V / bv, got K={K}, "
                         f"V / bv = {V // bv}; pass impl='kdreg'")
    if impl in CLUSTER_IMPLS and V // bv > 8:
        raise ValueError(f"impl={impl!r} runs a head's V / bv = {V // bv} value blocks as one cluster, at most 8; "
                         "pass bv=32 or impl='lean'")
    C = FUSED_CHUNK
    alias = prep_alias(io == "bf16", prep_defines, ops=impl in PRE_IMPLS)   # 07's (21's) layout
    ring = stage_ring(impl, defines)                 # 23's staging ring (probe build)
    slots = share_slots(defines) if impl in SHARE_IMPLS else 0   # 26's ring of images (before its build)
    if impl in PREP_INV_IMPLS and not alias:
        raise ValueError(f"impl={impl!r} runs 29, which is built in 07's aliased layout only: KDA_PREP_ALIAS=0 is a probe "
                         "build of 07 (pass impl='kdreg')")
    if prep_defines and (impl == "fused" or impl in PRE_IMPLS):
        raise ValueError(f"prep_defines are probe builds of 07; impl={impl!r} runs "
                         f"{'06 alone' if impl == 'fused' else '21 in its place'}")
    if impl == "fused":
        kernels = {"fused": load_kernel(FUSED_SRC, "kda_chunk_fused", (K, V, C, bv))}
        kernels["fused"].max_dynamic_shared_size_bytes = 4 * fused_smem_words(K, V, bv)
        ws = {}
    else:
        src, fn, _, words = STATE_IMPLS[impl]
        bf = io == "bf16"     # 07 and the BF16_IMPLS recurrences take it after (K, V, C, BV)
        prep_args = (K, C, bf, impl in PREP_A2_IMPLS)   # 07's A2 flag: Aqk T in place of Aqk (13)
        prep = (load_kernel(PREP_OPS_SRC, "kda_chunk_prep_ops", (K, C, bf)) if impl in PRE_IMPLS   # 21: 07<A2> + images
                else load_kernel(PREP_SRC, "kda_chunk_prep_side", (K, C), defines=prep_defines) if impl in SIDE_IMPLS
                else load_kernel(PREP_INV_SRC, "kda_chunk_prep_inv", prep_args, defines=prep_defines)
                if impl in PREP_INV_IMPLS   # 29: 07's body, the inverse on every warp
                else load_kernel(PREP_SRC, "kda_chunk_prep", prep_args, defines=prep_defines))
        kernels = {"prep": prep,
                   "state": load_kernel(src, fn, (K, V, C, bv) + ((bf,) if impl in BF16_IMPLS else ())
                                        + state_extra_args(impl, V, bv),
                                        defines=defines, arch=STATE_ARCH.get(impl))}
        kernels["prep"].max_dynamic_shared_size_bytes = 4 * prep_smem_words(K, alias=alias)
        kernels["state"].max_dynamic_shared_size_bytes = state_smem_bytes(impl, K, V, bv, io, ring)
        ws = {"TA": cp.empty(ta_workspace_shape(B, T, H), dtype=cp.uint32)}
        if impl in PRE_IMPLS:   # 21's operand images and ready flags, 22's inputs
            if -(-T // C) > MAX_PRE_CHUNKS:
                raise ValueError(f"impl={impl!r} runs 21 with the chunks on the grid's y axis: at most {MAX_PRE_CHUNKS} "
                                 f"chunks of {C} (T <= {MAX_PRE_CHUNKS * C}), got T={T}; split the sequence or pass "
                                 "impl='wide'")
            # zeroed once: at K = 64 half of each Kd^T row is never written by 21 (no product reads it; 22's copy
            # moves it, and compute-sanitizer's initcheck would count that as a read of uninitialised memory)
            ws["OPS"] = cp.zeros(ops_workspace_shape(B, T, H, K, bf16=bf), dtype=cp.uint32)
            ws["READY"] = cp.zeros((B, H, -(-T // C)), dtype=cp.int32)
        if impl in SIDE_IMPLS:   # 27: 07's ready flags
            if -(-T // C) > MAX_PRE_CHUNKS:
                raise ValueError(f"impl={impl!r} runs 07 in 21's grid order, the chunks on the grid's y axis: at most "
                                 f"{MAX_PRE_CHUNKS} chunks of {C} (T <= {MAX_PRE_CHUNKS * C}), got T={T}; split the "
                                 "sequence or pass impl='kdreg'")
            ws["READY"] = cp.zeros((B, H, -(-T // C)), dtype=cp.int32)
        if impl in SHARE_IMPLS:   # 26: the heads' rings of images, the made flags and the blocks' acknowledgements
            sms = cp.cuda.runtime.getDeviceProperties(device.id)["multiProcessorCount"]
            if not share_resident(B, H, V, int(bv), sms):
                raise ValueError(f"impl='share' (26) needs all of its B * H * V / bv = {B * H * (V // int(bv))} blocks "
                                 f"resident at once (one per SM; this GPU has {sms}): pass a larger bv, fewer heads, "
                                 "or impl='kdreg'")
            ws["RING"] = cp.zeros((B, H, slots, ops_image_bytes(K, bf16=False) // 4), dtype=cp.uint32)
            ws["MADE"] = cp.zeros((B, H, -(-T // C)), dtype=cp.int32)
            ws["ACKS"] = cp.zeros((B, H, -(-T // C), V // int(bv)), dtype=cp.int32)
    o = cp.empty((B, T, H, V), dtype=cp.int16 if io == "bf16" else cp.float32)
    fs = cp.empty((B, H, K, V), dtype=cp.float32) if output_final_state else None
    maps = ()
    if impl in TMA_IMPLS or impl in WGRS_IMPLS or impl in PRE_IMPLS:   # g, k, q as (K, H, T, B) tensors, boxes of one chunk
        from ..arrays import data_ptr                                          # of one head (22: none)
        from ..tma import tensor_map_rows

        kbox = K // PAIR_CLUSTER if impl in PAIR_IMPLS else K   # 28: each block stages its half of the channels
        maps = () if impl in PRE_IMPLS else tuple(tensor_map_rows(data_ptr(arrays[n]), IO_DTYPES[io], B, T, H, K, C,
                                                                  cols=kbox)
                                                  for n in ("g", "k", "q"))
        ta_rows = int(np.prod(ta_workspace_shape(B, T, H)[:4])) * C
        if ta_rows >= 2 ** 31:
            raise ValueError(f"impl={impl!r} addresses 07's output by 32-bit row coordinates: B * H * chunks * {4 * C} = "
                             f"{ta_rows} rows is too many; split the batch or pass impl='wgmma'")
        if impl in TMA_IMPLS or impl in PRE_IMPLS:
            # WG_C's slot ("tma2"): v in value blocks, a box row's swizzle; 07's T / A2 words as rows of C/2
            # words, a chunk's 4C rows a box, the 64-byte swizzle (kernels/delta/wgmma_recurrence.cuh)
            esz = 2 if io == "bf16" else 4
            vbox = min(int(bv), 128 // esz)   # 27 on fp32 inputs: boxes of 32 columns (a copy swizzles 128 bytes at most)
            maps += (tensor_map_rows(data_ptr(arrays["v"]), IO_DTYPES[io], B, T, H, V, C, cols=vbox, swizzle=vbox * esz),
                     tensor_map_rows(data_ptr(ws["TA"]), "float32", 1, ta_rows, 1, C // 2, 4 * C, swizzle=64))
        else:   # 16: 07's words in boxes of C rows (one of T hi, T lo, A2 hi, A2 lo each), the 64-byte swizzle
            maps += (tensor_map_rows(data_ptr(ws["TA"]), "float32", 1, ta_rows, 1, C // 2, C, swizzle=64),)
    plan = TcPlan(arrays, dims, _scale(K, scale), int(bv), impl, ws, o, fs, kernels, io=io, state_maps=maps,
                  prep_alias=alias, state_ring=ring,
                  extra_threads=32 if impl == "kdreg" and int((defines or {}).get("KDA_O_WARP", 0)) else 0)
    if impl in PRE_IMPLS or impl in SIDE_IMPLS:   # side by side only where 22's (27's) grid leaves an SM free
        sms = cp.cuda.runtime.getDeviceProperties(device.id)["multiProcessorCount"]
        plan.overlap = side_by_side_safe(B, H, V, int(bv), sms)
        for kern in kernels.values():   # one carveout for both: two blocks of 21 fit beside one of 22 (21's header)
            prefer_shared_memory(kern)
    return plan


def side_by_side_safe(B: int, H: int, V: int, bv: int, sms: int) -> bool:
    """Whether 21 and 22 may run side by side: 22's blocks (one per SM) must all be resident while they wait
    for 21's chunks, and 21 must always make progress. With fewer of 22's blocks than SMs, at least one SM
    holds none, and 21 runs there however the hardware places blocks beside 22 (21's header: that placement
    depends on registers and the carveout). Otherwise the two run one after the other."""
    return B * H * (V // bv) < sms


def prefer_shared_memory(kernel, percent: int = 100) -> None:
    """Ask for a shared-memory carveout, by default the largest (the driver's default, -1, follows each kernel's
    own occupancy, which left room for one block of 21 beside 22)."""
    try:
        kernel.preferred_shared_memory_carveout = percent
    except (AttributeError, TypeError):   # an older CuPy: the driver call (CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT)
        from cupy.cuda import driver

        driver.funcSetAttribute(kernel.kernel.ptr, 9, percent)


def kda_tc(q, k, v, g, beta, scale: float | None = None, initial_state=None,
           output_final_state: bool = False, bv: int | None = None, impl: str = DEFAULT_TC_IMPL):
    """Chunked KDA on tensor cores with 3xBF16 products (fp32 in and out, fp32-class accuracy):
    07 -> 10 (``impl="lean"``, default), 07 -> 13 (``"wgmma"``, sm_90a), 07 -> 12 (``"regs"``), 07 -> 11 (``"cluster"``), 07 -> 09
    (``"ws"``), 07 -> 08 (``"split"``) or 06 (``"fused"``). Returns CuPy ``(o, final_state or None)``.
    With torch bfloat16 q, k, v, g, beta (07 -> 10, 12 or 13): o is a torch bfloat16 tensor, the final
    state a CuPy float32 array."""
    return prepare_tc(q, k, v, g, beta, scale, initial_state, output_final_state, bv, impl=impl).run()


# ----------------------------------------------------------------------------- static build list

def tc_smem_bytes(function: str, args: tuple) -> int:
    """Dynamic shared memory (bytes) a tensor-core kernel (06-13) is launched with, from its
    function name and template arguments (K, V or C, ...) as :func:`static_instantiations` lists them."""
    if function == "kda_chunk_fused":
        return 4 * fused_smem_words(args[0], args[1], args[3])
    if function in ("kda_chunk_prep", "kda_chunk_prep_inv"):   # (K, C, BF, A2): aliased on both paths (29: 07's)
        return 4 * prep_smem_words(args[0])
    if function == "kda_chunk_prep_side":   # (K, C): 07's fp32 aliased layout
        return 4 * prep_smem_words(args[0])
    if function == "kda_chunk_state_side":   # (K, V, C, BV)
        return 4 * side_smem_words(args[0], args[1], args[3], args[2])
    if function == "kda_chunk_prep_ops":   # (K, C, BF): aliased on bf16 inputs only
        return 4 * prep_smem_words(args[0], alias=prep_alias(bool(args[2]), None, ops=True))
    if function == "kda_chunk_state_wgmma":   # (K, V, C, BV, BF[, NST])
        return 4 * wgmma_smem_words(args[0], args[1], args[3], args[2], bf16=bool(args[4]),
                                    nst=args[5] if len(args) > 5 else 1)
    if function == "kda_chunk_state_tma":   # (K, V, C, BV, BF[, TSLOT[, NKD]])
        return 4 * mc_smem_words(args[0], args[1], args[3], args[2], bf16=bool(args[4]),
                                 nkd=args[6] if len(args) > 6 else 2)
    if function in ("kda_chunk_state_mc", "kda_chunk_state_diet", "kda_chunk_state_single",
                    "kda_chunk_state_ahead"):   # (K, V, C, BV, BF[, CL, BSLOT])
        return 4 * mc_smem_words(args[0], args[1], args[3], args[2], bf16=bool(args[4]))
    if function in ("kda_chunk_state_tile", "kda_chunk_state_kdreg",
                    "kda_chunk_state_late"):   # (K, V, C, BV, BF): 24 (30) in 19's layout
        return 4 * tile_smem_words(args[0], args[1], args[3], args[2], bf16=bool(args[4]))
    if function == "kda_chunk_state_wy":   # (K, V, C, BV)
        return 4 * wy_smem_words(args[0], args[1], args[3], args[2])
    if function == "kda_chunk_state_wide":   # (K, V, C, BV, BF)
        return 4 * wide_smem_words(args[0], args[1], args[3], args[2], bf16=bool(args[4]))
    if function == "kda_chunk_state_pre":   # (K, V, C, BV, BF)
        return 4 * pre_smem_words(args[0], args[1], args[3], args[2], bf16=bool(args[4]))
    if function == "kda_chunk_state_hilo":   # (K, V, C, BV)
        return 4 * hilo_smem_words(args[0], args[1], args[3], args[2])
    if function == "kda_chunk_state_wgrs":   # (K, V, C, BV, BF)
        return 4 * wgrs_smem_words(args[0], args[1], args[3], args[2], bf16=bool(args[4]))
    if function == "kda_chunk_state_regs":   # (K, V, C, BV, BF[, roles])
        return 4 * regs_smem_words(args[0], args[1], args[3], args[2], roles=args[5] if len(args) > 5 else 1)
    for _, fn, _, words in STATE_IMPLS.values():
        if fn == function:
            return 4 * words(args[0], args[1], args[3])
    raise ValueError(f"{function!r} is not a tensor-core delta kernel (06-13)")


def tc_threads(function: str, args: tuple) -> int:
    """Block size a tensor-core kernel (06-13) is launched with, from its function name and template
    arguments as :func:`static_instantiations` lists them (07: the threads of the blocks per SM it is built
    for, :func:`prep_blocks_per_sm`)."""
    if function == "kda_chunk_fused":
        return FUSED_THREADS
    if function in ("kda_chunk_prep", "kda_chunk_prep_inv"):   # (K, C, BF, A2); 29 as 07
        return prep_blocks_per_sm(bool(args[2])) * FUSED_THREADS
    if function == "kda_chunk_prep_side":   # (K, C): 07's fp32 build, four blocks per SM
        return prep_blocks_per_sm(False) * FUSED_THREADS
    if function == "kda_chunk_prep_ops":   # (K, C, BF): 21 is built for four blocks per SM (fp32: three, in 07's
                                           # earlier fp32 layout)
        return prep_ops_blocks_per_sm(bool(args[2])) * FUSED_THREADS
    if function == "kda_chunk_state_regs":   # (K, V, C, BV, BF[, roles])
        return regs_threads(args[3], args[5] if len(args) > 5 else 1)
    for _, fn, threads, _ in STATE_IMPLS.values():
        if fn == function:
            return threads(args[3]) if callable(threads) else threads
    raise ValueError(f"{function!r} is not a tensor-core delta kernel (06-13)")


def static_instantiations(K: int = 128, V: int = 128, chunk_sizes=(DEFAULT_CHUNK,), bvs=(16, 32),
                          tensor_cores: bool = True, forms=("recurrent", "chunked")) -> list[tuple]:
    """(source, function, template args) of every kernel a default run at (K, V) uses, for the
    registry forms asked for ("recurrent", "chunked": notebook 07; "tc": 06-10 and 12, "cluster": 11,
    "wgmma": 13 and 07<A2>, notebook 13).
    With ``tensor_cores=False``, none that needs sm_80+."""
    out = []
    if "recurrent" in forms:
        out.append((RECURRENT_SRC, "kda_recurrent", (K, V, default_rg(K), RECURRENT_WARPS)))
    if "chunked" in forms:
        for C in chunk_sizes:
            out.append((INTRA_SRC, "kda_chunk_intra", (K, C)))
            out.append((SOLVE_SRC, "kda_chunk_solve", (K, V, C, solve_cols_per_thread(C))))
            for bv in bvs:
                out.append((STATE_SRC, "kda_chunk_state", (K, V, C, bv)))
                if tensor_cores and C in TC_CHUNK:
                    out.append((STATE_TC_SRC, "kda_chunk_state_tc", (K, V, C, bv)))
    if "tc" in forms and tensor_cores:
        out.append((PREP_SRC, "kda_chunk_prep", (K, FUSED_CHUNK, False, False)))
        out.append((PREP_SRC, "kda_chunk_prep", (K, FUSED_CHUNK, True, False)))   # bf16 I/O
        for bv in bvs:
            out.append((FUSED_SRC, "kda_chunk_fused", (K, V, FUSED_CHUNK, bv)))
            out.append((ONCHIP_SRC, "kda_chunk_state_onchip", (K, V, FUSED_CHUNK, bv)))
            out.append((WS_SRC, "kda_chunk_state_ws", (K, V, FUSED_CHUNK, bv)))
            out.append((LEAN_SRC, "kda_chunk_state_lean", (K, V, FUSED_CHUNK, bv, False)))
            out.append((LEAN_SRC, "kda_chunk_state_lean", (K, V, FUSED_CHUNK, bv, True)))   # bf16 I/O
            out.append((REGS_SRC, "kda_chunk_state_regs", (K, V, FUSED_CHUNK, bv, False, 1)))
            out.append((REGS_SRC, "kda_chunk_state_regs", (K, V, FUSED_CHUNK, bv, True, 1)))   # bf16 I/O
            out.append((REGS_SRC, "kda_chunk_state_regs", (K, V, FUSED_CHUNK, bv, False, 2)))   # two roles
    if "cluster" in forms and tensor_cores:
        out += [(CLUSTER_SRC, "kda_chunk_state_cluster", (K, V, FUSED_CHUNK, bv)) for bv in bvs if V // bv <= 8]
    if "wgmma" in forms and tensor_cores:   # 13 and the 07<A2> it reads: sm_90a (static_arch)
        out.append((PREP_SRC, "kda_chunk_prep", (K, FUSED_CHUNK, False, True)))
        out.append((PREP_SRC, "kda_chunk_prep", (K, FUSED_CHUNK, True, True)))
        for bv in bvs:
            out.append((WGMMA_SRC, "kda_chunk_state_wgmma", (K, V, FUSED_CHUNK, bv, False, 1)))
            out.append((WGMMA_SRC, "kda_chunk_state_wgmma", (K, V, FUSED_CHUNK, bv, True, 1)))   # bf16 I/O
            out.append((WGMMA_SRC, "kda_chunk_state_wgmma", (K, V, FUSED_CHUNK, bv, True, 2)))   # two staging tiles
            for impl in MC_IMPLS:   # 14: plain bulk copies (WG_E's; and WG_C's), a cluster per head, pairs
                extra = state_extra_args(impl, V, bv)
                if impl != "multicast2" or extra[0] != mc_cluster(V, bv):
                    for bf in (False, True):
                        out.append((MC_SRC, "kda_chunk_state_mc", (K, V, FUSED_CHUNK, bv, bf) + extra))
            for bf in (False, True):   # 14's TMA forms: WG_E's tile; and WG_C's copies
                for impl in TMA_IMPLS:
                    if (impl in BF16_ONLY_IMPLS and not bf) or (impl in FP32_ONLY_IMPLS and bf):
                        continue
                    if impl in FIXED_BV and bv != FIXED_BV[impl]:
                        continue
                    if impl in PAIR_IMPLS and not pair_fits(K, V, bv):   # 28: K = 128, pairs
                        continue
                    src, fn = STATE_IMPLS[impl][:2]
                    out.append((src, fn, (K, V, FUSED_CHUNK, bv) + ((bf,) if impl in BF16_IMPLS else ())
                                + state_extra_args(impl, V, bv)))
        for bf in (False, True):   # 16: 64 value columns a block, whatever the other steps' widths
            out.append((WGRS_SRC, "kda_chunk_state_wgrs", (K, V, FUSED_CHUNK, WGRS_BV, bf)))
        for bf in (False, True):   # 21 and 22: fp32 inputs' hi / lo images, bf16 inputs' one-term ones
            out.append((PREP_OPS_SRC, "kda_chunk_prep_ops", (K, FUSED_CHUNK, bf)))
            out += [(PRE_SRC, "kda_chunk_state_pre", (K, V, FUSED_CHUNK, bv, bf)) for bv in bvs]
        for bf in (False, True):   # 29 (before 30, which TMA_IMPLS lists)
            out.append((PREP_INV_SRC, "kda_chunk_prep_inv", (K, FUSED_CHUNK, bf, True)))
        if V % SIDE_BV == 0:   # 27 (64 value columns a block, fp32 inputs) and 07 in 21's grid order beside it
            out.append((PREP_SRC, "kda_chunk_prep_side", (K, FUSED_CHUNK)))
            out.append((SIDE_SRC, "kda_chunk_state_side", (K, V, FUSED_CHUNK, SIDE_BV)))
    return out


def static_arch(function: str, arch: str = "sm_90") -> str:
    """The target a kernel's static build uses where ``arch`` is asked for: 13 (wgmma) is built for
    the architecture-specific sm_90a (only sm_90 parts run it), every other kernel for ``arch``."""
    if function in ("kda_chunk_state_wgmma", "kda_chunk_state_mc", "kda_chunk_state_tma", "kda_chunk_state_diet",
                    "kda_chunk_state_wgrs", "kda_chunk_state_single", "kda_chunk_state_ahead", "kda_chunk_state_tile",
                    "kda_chunk_state_wide", "kda_chunk_state_pre", "kda_chunk_state_hilo", "kda_chunk_state_kdreg",
                    "kda_chunk_state_wy", "kda_chunk_state_share", "kda_chunk_state_side", "kda_chunk_state_pair",
                    "kda_chunk_state_late"):
        return WGMMA_ARCH
    return arch
