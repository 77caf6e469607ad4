#!/usr/bin/env python3
"""Does the test suite catch deliberate bugs? Plant one at a time and see.

    python scripts/mutation_check.py              # every mutation; exit 1 if any survives
    python scripts/mutation_check.py --list       # the mutations and the tests meant to catch them
    python scripts/mutation_check.py -k timing    # only mutations whose name contains 'timing'

The working tree (tracked files plus untracked files git does not ignore, as they are now) is
copied to a scratch directory. There, for each mutation -- (file, exact old text, new text, the
pytest selection that must catch it) -- the old text is replaced (it must occur exactly once in
the file, else the script stops with an error), the selection runs, and the file is restored. A
mutation whose selection still passes SURVIVED: the tests cannot tell the bug from the code.

Before any mutation each selection runs once on the unmodified copy and must pass; a selection
that errors (collection error, no test selected) is reported as an error, never as a catch.
Exit status: 0 all caught, 1 some survived, 2 errors (bad mutation text, failing baseline, ...).
Bytecode is not written in the copy (PYTHONDONTWRITEBYTECODE), so no stale .pyc of a mutated
module can leak into the next run.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str            # relative to the repository root
    old: str             # must occur exactly once in the file (unless edit is given)
    new: str
    selection: tuple[str, ...]   # pytest arguments (node ids) that must fail once the bug is in
    why: str = ""
    edit: Callable[[str], str] | None = None   # instead of old -> new: the file's text -> mutated text


def csv_row_edit(field: str, value: Callable[[dict], str], where: Callable[[dict], bool] = lambda r: True):
    """A mutation of a recorded table that survives re-recording: in the first row where ``where``
    holds, ``field`` becomes ``value(row)`` (MutationError when no row qualifies)."""
    def edit(text: str) -> str:
        rows = list(csv.DictReader(io.StringIO(text)))
        hit = next((r for r in rows if where(r)), None)
        if hit is None:
            raise MutationError(f"no row of the table qualifies for the {field!r} edit")
        hit[field] = value(hit)
        out = io.StringIO()
        w = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        return out.getvalue()
    return edit


TIMING = "lib/attnlab/timing.py"
ATTENTION = "lib/attnlab/attention/kernels.py"
ENV = "lib/attnlab/env.py"
TILED = "kernels/attention/02_tiled.cu"
NAIVE_TIMING = "data/results/h200/01_naive__timing.csv"
LADDER_ASAN = ("tests/test_ladder_emu.py::test_ladder_kernels_under_sanitizers",)
DELTA_ASAN = ("tests/test_delta_kernels.py::test_cuda_kernels_under_sanitizers",)
STREAM_K = "kernels/attention/10h_stream_k.cu"
OCCUPANCY = "kernels/attention/10g_occupancy.cu"
COPY_WARPS_CASES = ("tests/test_emu_10_bf16_ladder.py::test_flash_ladder_on_cpu_model["
                    "D128-BM64-BN48-W4-bf16-full-S2-B1H2N100-normal]",)
STREAM_K_CASES = tuple(f"tests/test_emu_10_bf16_ladder.py::test_flash_ladder_on_cpu_model[{c}]" for c in (
    "D128-BM96-BN48-W6-bf16-full-S2-B2H1N130-ramp", "D64-BM64-BN64-W4-bf16-full-S2-B1H1N97-nan"))

MUTATIONS: tuple[Mutation, ...] = (
    # ---- timing (tests/test_timing.py, a simulated device)
    Mutation("timing: L2 flush inside the timed region", TIMING,
             "                if flush_l2:\n                    dev.flush()\n                dev.record(start)\n",
             "                dev.record(start)\n                if flush_l2:\n                    dev.flush()\n",
             ("tests/test_timing.py",), "every sample would include the flush"),
    Mutation("timing: convergence target 10x looser (the constant)", TIMING,
             "TARGET_REL_IQR = 0.02\n", "TARGET_REL_IQR = 0.2\n",
             ("tests/test_timing.py",)),
    Mutation("timing: convergence test 10x looser (summarize's comparison)", TIMING,
             "converged = med > 0 and (q3 - q1) / med <= target_rel_iqr",
             "converged = med > 0 and (q3 - q1) / med <= 10 * target_rel_iqr",
             ("tests/test_timing.py",)),
    Mutation("timing: budget ignored", TIMING,
             "if done_rounds >= floor and (all(t.converged for t in timings.values()) or elapsed >= total_budget):",
             "if done_rounds >= floor and all(t.converged for t in timings.values()):",
             ("tests/test_timing.py",)),
    Mutation("timing: no warm-up", TIMING,
             "        for _ in range(warmup):\n", "        for _ in range(0):\n",
             ("tests/test_timing.py",)),
    Mutation("timing: min_repeats ignored", TIMING,
             "floor = max(3, min(min_repeats, int(total_budget / per_round)))", "floor = 3",
             ("tests/test_timing.py",)),
    Mutation("timing: interleaved, the same order every round", TIMING,
             "            shift = (done_rounds + r) % len(names)", "            shift = 0",
             ("tests/test_timing.py",), "a kernel always timed right after the same neighbour"),
    # ---- provenance (tests/test_provenance.py, a scratch git repository and a stand-in nvidia-smi)
    Mutation("env: untracked code not dirty", ENV,
             '"--untracked-files=normal"', '"--untracked-files=no"',
             ("tests/test_provenance.py",)),
    Mutation("env: clocks of the last GPU nvidia-smi lists", ENV,
             "    return rows[which] if which < len(rows) else rows[0]",
             "    return rows[-1]",
             ("tests/test_provenance.py",)),
    # ---- launch geometry (CPU)
    Mutation("attention: ladder grid with floor instead of ceil", ATTENTION,
             "bh * math.ceil(n / tile_rows)", "bh * math.floor(n / tile_rows)",
             ("tests/test_launch_geometry.py",)),
    Mutation("attention: flash grid with floor instead of ceil (registry test)", ATTENTION,
             'math.ceil(n / p["BM"])', 'math.floor(n / p["BM"])',
             ("tests/test_attention_launcher.py::test_registry_entry_is_consistent",),
             "caught only while a flash kernel is registered"),
    Mutation("attention: flash grid with floor instead of ceil (geometry test)", ATTENTION,
             'math.ceil(n / p["BM"])', 'math.floor(n / p["BM"])',
             ("tests/test_launch_geometry.py",)),
    Mutation("attention: ladder grid with floor instead of ceil (launch on the CPU model)", ATTENTION,
             "bh * math.ceil(n / tile_rows)", "bh * math.floor(n / tile_rows)",
             ("tests/test_attention_launch_emu.py::test_launcher_runs_the_kernel_on_the_cpu_model[tiled-full]",),
             "the last row tile is never launched: its outputs stay NaN-poisoned"),
    Mutation("attention: Stream-K workspace for one part a block (launch on the CPU model)", ATTENTION,
             "    return 2 * blocks * (4 * (head_dim // 8) + 4) * threads, bh * math.ceil(n / bm)",
             "    return blocks * (4 * (head_dim // 8) + 4) * threads, bh * math.ceil(n / bm)",
             ("tests/test_attention_launch_emu.py::test_launcher_runs_the_kernel_on_the_cpu_model[stream_k-full]",),
             "the launcher allocates half the workspace the kernel writes"),
    Mutation("attention: the smem opt-in skipped (launch on the CPU model)", ATTENTION,
             "                kernel.max_dynamic_shared_size_bytes = smem  # opt in above the 48 KB default",
             "                pass",
             ("tests/test_attention_launch_emu.py::test_launcher_runs_the_kernel_on_the_cpu_model[fa2_tuned-full]",),
             "a launch above 48 KB of dynamic shared memory without the attribute fails on a GPU"),
    # ---- kernels under the sanitizer build of the CPU models
    Mutation("02_tiled: Q tile read past n", TILED,
             "q_tile[idx] = idx < q_valid ? q_head[(long long)row0 * D + idx] : 0.0f;",
             "q_tile[idx] = q_head[(long long)row0 * D + idx];",
             LADDER_ASAN, "rows past n are never used, so only the out-of-bounds read shows"),
    Mutation("02_tiled: V tile placed past the shared memory asked for", TILED,
             "float* v_tile = k_tile + TILE_KV * D;      // [TILE_KV][D]",
             "float* v_tile = k_tile + TILE_KV * D + D;  // [TILE_KV][D]",
             LADDER_ASAN, "consistent layout, right answer; only the shared-memory guard sees it"),
    Mutation("02_chunk_intra: beta read past T", "kernels/delta/02_chunk_intra.cu",
             "sBeta[i] = t < TT ? beta[(b * TT + t) * H + h] : 0.0f;",
             "sBeta[i] = beta[(b * TT + t) * H + h];",
             DELTA_ASAN),
    Mutation("09_tf32_mma: max kept raw, rescale recomputed as m_old * c - m_new * c",
             "kernels/attention/09_tf32_mma.cu",
             "            const float m_new = fmaxf(m_run[h], mx * sl2);   // fmaxf skips NaN scores\n"
             "            // A row whose every score so far is -inf (or NaN) keeps m = -inf: subtract 0.\n"
             "            const float m_sub = m_new == ATTNLAB_NEG_INF ? 0.0f : m_new;\n"
             "            alpha[h] = fast_exp2(m_run[h] - m_sub);",
             "            const float m_new = fmaxf(m_run[h], mx);\n"
             "            const float m_sub = m_new == ATTNLAB_NEG_INF ? 0.0f : m_new * sl2;\n"
             "            alpha[h] = fast_exp2(m_run[h] * sl2 - m_sub);",
             ("tests/test_emu_09_tf32_mma.py::test_3xtf32_long_sequence",),
             "the recorded H200 bug: FMA contraction makes alpha 1 + 1e-7 on every tile; only a CPU "
             "model built with contraction and a long sequence of small tiles sees it"),
    # ---- the 3xBF16 delta kernels 06-11 on the ladder CPU model (tests/test_emu_delta_tc.py)
    Mutation("09: consumers start a chunk without waiting for its operands",
             "kernels/delta/09_chunk_state_ws.cu",
             "        named_bar_sync(BAR_FULL + (n & 1), NTH);   // chunk n's operands; S^T of chunk n complete\n",
             "",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T17-logsigmoid-h00-K64V64BV32]",), "the race the FULL barrier prevents; the model also counts unmatched arrivals"),
    Mutation("09: producers hand over the last chunk before 07's words have landed",
             "kernels/delta/09_chunk_state_ws.cu",
             "            } else {\n                cp_async_wait<0>();\n            }",
             "            } else {\n            }",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T17-logsigmoid-h00-K64V64BV32]",),
             "the model writes a cp.async destination only at the wait that retires it, and stops a thread that "
             "exits with copies never waited for. (The same missing wait in the middle of a sequence is a race the "
             "model does not reliably lose: a trial survived.)"),
    Mutation("07: off-diagonal block of T with the wrong sign", "kernels/delta/07_chunk_prep_tc.cu",
             "            s0 -= tm * sY[m * 17 + j];",
             "            s0 += tm * sY[m * 17 + j];",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T17-logsigmoid-h00-K64V64BV32]",)),
    Mutation("07: no exact path for strong decays", "kernels/delta/07_chunk_prep_tc.cu",
             "    if (!(gl0 >= FAST_MIN_G && gl1 >= FAST_MIN_G)) *sFlag = 1;\n",
             "",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T100-const-h01-K64V64BV32]",), "g = -50 per step: e^-G overflows fp32 in the factored pair products"),
    Mutation("mma.cuh: 3xBF16 split without its low part", "kernels/mma.cuh",
             "    lo = pack_bf16x2(x0 - __uint_as_float(hi << 16), x1 - __uint_as_float(hi & 0xffff0000u));",
             "    lo = 0u;",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T17-logsigmoid-h00-K64V64BV32]",), "one bf16 MMA per product: ~1e-3 relative error instead of ~1e-5"),
    Mutation("mma.cuh: transposed accumulator store, odd lanes one row off", "kernels/mma.cuh",
             "    const int m = even ? m0 + g : m0 + g + 7;",
             "    const int m = even ? m0 + g : m0 + g + 5;",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T17-logsigmoid-h00-K64V64BV32]",)),
    Mutation("09: beta array placed past the shared memory asked for", "kernels/delta/09_chunk_state_ws.cu",
             "    static constexpr int WORDS = OFF_BETA + C;",
             "    static constexpr int WORDS = OFF_BETA;",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_under_sanitizers",),
             "consistent layout, right answer; only the shared-memory guard of the sanitizer build sees it"),
    Mutation("10: Kd^T stored without its row swizzle (the consumers read it swizzled)",
             "kernels/delta/lean_producer.cuh",
             "                const int w = kdt_word<LC>(c0 + ch, r0 / 2);",
             "                const int w = (c0 + ch) * LC + r0 / 2;",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T17-logsigmoid-h00-K64V64BV32]",)),
    Mutation("10: producers never load the next chunk's q, k, g", "kernels/delta/lean_producer.cuh",
             "        if (n + 1 < NC) load_regs(n + 1);                        // lands while the consumers work\n",
             "",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "every chunk after the first would reuse the first chunk's registers"),
    Mutation("12: the state's decay of odd channels taken from the even channel", "kernels/delta/12_chunk_state_regs.cu",
             "        st[j][0] *= d0; st[j][1] *= d1;", "        st[j][0] *= d0; st[j][1] *= d0;",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "a lane holds channels 2t and 2t+1 of each n8 tile: each needs its own 2^G_L"),
    Mutation("12: two roles, V' handed over without its low bf16 half", "kernels/delta/12_chunk_state_regs.cu",
             "                    vxn[(8 * kk + 4 + e) * 32] = val[kk][e];",
             "                    vxn[(8 * kk + 4 + e) * 32] = vah[kk][e];",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "role 1's O and its copy of the state would then differ from role 0's"),
    Mutation("13: WG_E stores Kd^T without the 128-byte swizzle (the wgmma reads it swizzled)",
             "kernels/delta/wgmma_recurrence.cuh",
             "                    *reinterpret_cast<U4*>(kd + ((ch ^ (c % 8)) * 16)) =",
             "                    *reinterpret_cast<U4*>(kd + (ch * 16)) =",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "the CPU model's wgmma decodes the descriptor's swizzle from the address bits, as the GPU does"),
    Mutation("13: P2's low-half term reads X's hi half", "kernels/delta/wgmma_recurrence.cuh",
             "            wgmma_rs_kb<BV, true>(p2, ta[0][s], desc(bt + 64 + 32 * s), 1);",
             "            wgmma_rs_kb<BV, true>(p2, ta[0][s], desc(bt + 32 * s), 1);",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "X's lo tile sits 64 bytes into each row: read as hi, the hi product is counted twice"),
    Mutation("13: two staging tiles, chunk n read before its copies are waited for",
             "kernels/delta/13_chunk_state_wgmma.cu",
             "            if (NST == 2 && n + 1 < NC) cp_async_wait<1>();          // chunk n landed (n + 1 may be in flight)",
             "            if (NST == 2 && n + 1 < NC) cp_async_wait<2>();          // chunk n landed (n + 1 may be in flight)",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "the CPU model lands a cp.async group only at the wait that retires it: the tile still holds chunk n - 2"),
    Mutation("14: a block multicasts the next chunk's rows before every block of the cluster has read its tile",
             "kernels/delta/14_chunk_state_multicast.cu",
             "                    if (e < 32) mbar_wait_cluster(empty_t, n & 1);    // every block has read its tile\n",
             "",
             ("tests/test_emu_delta_tc.py::test_cluster_kernels_in_eager_order",),
             "the CPU model delivers a bulk copy when its block waits: the early copies land on top of the tile "
             "(or complete the barrier's next phase before its arrival)"),
    Mutation("14: the tile's mbarrier is told one row too few", "kernels/delta/14_chunk_state_multicast.cu",
             "            if (e == 0) mbar_arrive_expect_tx(tile_bar(n), TILE + L::TW_BYTES);   // each block receives the whole tile",
             "            if (e == 0) mbar_arrive_expect_tx(tile_bar(n), TILE + L::TW_BYTES - ROW);   // each block receives the whole tile",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T17-logsigmoid-h00-K64V64BV32]",),
             "the phase completes only when the transaction count returns to zero: it never does"),
    Mutation("14: WG_C's slot barrier waited with the wrong phase", "kernels/delta/wgmma_recurrence.cuh",
             "            if (KDA_PROBE != 4 || n == 0) mbar_wait(slot_bar + 8 * (n & 1), (n >> 1) & 1);",
             "            if (KDA_PROBE != 4 || n == 0) mbar_wait(slot_bar + 8 * (n & 1), 0);",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "from a slot's second use on, parity 0 has completed already: chunk n's T, A2 and v would be read before they land"),
    Mutation("14, TMA form: each chunk's box starts one token late",
             "kernels/delta/14_chunk_state_multicast.cu",
             "                            tma_load_4d(cx.base + tile_of(n) + ar * C * ROW, maps[ar], 0, h, n * C, b, tile_bar(n));",
             "                            tma_load_4d(cx.base + tile_of(n) + ar * C * ROW, maps[ar], 0, h, n * C + 1, b, tile_bar(n));",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "the CPU model reads the box at the coordinates given, from the map's dimensions and strides"),
    Mutation("14, TMA form: the launcher passes the tensor maps as q, k, g (the kernel takes g, k, q)",
             "lib/attnlab/delta/kernels.py",
             'for n in ("g", "k", "q"))',
             'for n in ("q", "k", "g"))',
             ("tests/test_emu_delta_tc.py::test_launcher_and_notebook_functions_under_cpu_emulation",),
             "the launch path runs on the CPU model with the driver's encoder replaced by the same plan"),
    Mutation("14, tensor-copy slots: T / A2 read as if unswizzled", "kernels/delta/wgmma_recurrence.cuh",
             "kda_slot_sw<SLOT == 2 ? 64 : 0>(", "kda_slot_sw<0>(",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T17-logsigmoid-h00-K64V64BV32]",),
             "the CPU model's tensor copies land their 16-byte pieces where the copy engine's swizzle puts them"),
    Mutation("14, tensor-copy slots: the v box read with a 32-byte swizzle", "kernels/delta/wgmma_recurrence.cuh", "", "",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T17-logsigmoid-h00-K64V64BV32]",),
             "the swizzle of a box row's bytes (the map's) differs from a narrower one after the first 256 bytes "
             "(every read of the box: X's, and 25's beta v)",
             edit=lambda t: t.replace("kda_slot_sw<SLOT == 2 ? BV * (int)sizeof(TIn) : 0>(", "kda_slot_sw<SLOT == 2 ? 32 : 0>(")),
    Mutation("14, three Kd^T buffers: WG_E writes Kd^T without waiting for P4 to free its buffer",
             "kernels/delta/wgmma_recurrence.cuh",
             "                    if (n >= 3) named_bar_sync(KdaWgBars::EMPTY_KD + n % 3, L::NTH);",
             "                    if (n >= 3 && false) named_bar_sync(KdaWgBars::EMPTY_KD + n % 3, L::NTH);",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T100-const-h01-K64V64BV32]",),
             "chunk n + 3's Kd^T overwrites chunk n's while P4 may still read it"),
    Mutation("14, three Kd^T buffers: WG_C never frees a Kbg / Qg buffer",
             "kernels/delta/wgmma_recurrence.cuh",
             "            if (L::NKD == 3 && n + 3 < NC) named_bar_arrive(BAR_EMPTY + ((n + 1) & 1), L::NTH);",
             "            if (L::NKD == 3 && n + 3 < NC && false) named_bar_arrive(BAR_EMPTY + ((n + 1) & 1), L::NTH);",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T100-const-h01-K64V64BV32]",),
             "WG_E waits for a release that never comes: the CPU model reports the hang"),
    Mutation("15: 2^(G_L - G_u) takes token u's own factor", "kernels/delta/wgmma_recurrence.cuh",
             "                for (int u = TPT - 1; u >= 0; --u) { ed[u] = suf; suf *= xe[u]; }",
             "                for (int u = TPT - 1; u >= 0; --u) { suf *= xe[u]; ed[u] = suf; }",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T17-logsigmoid-h00-K64V64BV32]",),
             "15's output and final state are checked against the float64 recurrence"),
    Mutation("15: the chain forgets beta (WG_E no longer applies it)", "kernels/delta/wgmma_recurrence.cuh",
             "                x[2 * j] = beta_i * (vv.x - p1[4 * j]);",
             "                x[2 * j] = (vv.x - p1[4 * j]);",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T17-logsigmoid-h00-K64V64BV32]",),
             "15's output and final state are checked against the float64 recurrence"),
    Mutation("16: 07's rows land in 07's order (T hi, T lo, A2 hi, A2 lo), not [T; A2] hi then lo",
             "kernels/delta/16_chunk_state_wgrs.cu", "tma_load_4d(slot(n) + ((a & 1) * 2 + (a >> 1)) *",
             "tma_load_4d(slot(n) + a *",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T17-logsigmoid-h00-K64V64BV32]",),
             "16's output and final state are checked against the float64 recurrence"),
    Mutation("16: the decay of S^T's rows g8 + 8 takes the neighbouring channel's 2^G_L",
             "kernels/delta/16_chunk_state_wgrs.cu",
             "sacc[4 * j] *= d.x; sacc[4 * j + 1] *= d.y; sacc[4 * j + 2] *= d.x; sacc[4 * j + 3] *= d.y;",
             "sacc[4 * j] *= d.x; sacc[4 * j + 1] *= d.y; sacc[4 * j + 2] *= d.y; sacc[4 * j + 3] *= d.x;",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "a multi-chunk case with an initial state and per-channel gates"),
    Mutation("16: X^T without beta", "kernels/delta/16_chunk_state_wgrs.cu",
             "split_bf16x2(bc[2 * (e0 / 4)] * (vc[e0] - p1[e0]),", "split_bf16x2((vc[e0] - p1[e0]),",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T17-logsigmoid-h00-K64V64BV32]",),
             "16's output and final state are checked against the float64 recurrence"),
    Mutation("16: P1's lo term reads the hi tile of [Kg^T | Qg^T]", "kernels/delta/16_chunk_state_wgrs.cu",
             "wgmma_rs<64, true>(p1, ah[s], dmn(b1l + s * 2048), 1);",
             "wgmma_rs<64, true>(p1, ah[s], dmn(b1h + s * 2048), 1);",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "3xBF16 without the operand's low half misses the fp32 bound (a case with a state to multiply)"),
    Mutation("17: P1's one term reads the lo tile of S^T (which 17 never writes)", "kernels/delta/wgmma_recurrence.cuh",
             "                wgmma_rs_kb<BV, true>(p1, ah[s], desc(sth_a + off), s > 0);\n                continue;",
             "                wgmma_rs_kb<BV, true>(p1, ah[s], desc(stl_a + off), s > 0);\n                continue;",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "17 is held to the float64 model of its roundings"),
    Mutation("17: S^T's hi tile stored with the column groups swapped", "kernels/delta/wgmma_recurrence.cuh",
             "stmatrix_x4_trans(kda_sw128(sth_a + mt * (BV * 128), 8 * (j + mi / 2) + r, 2 * warp + (mi & 1)), m);",
             "stmatrix_x4_trans(kda_sw128(sth_a + mt * (BV * 128), 8 * (j + (mi & 1)) + r, 2 * warp + mi / 2), m);",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "17 is held to the float64 model of its roundings"),
    Mutation("17: P4 keeps three terms (a three-term kernel passed off as 17)", "kernels/delta/wgmma_recurrence.cuh",
             "for (int term = L::ONE ? 2 : 0; term < 3; ++term)", "for (int term = 0; term < 3; ++term)",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",
              "tests/test_delta_kernels.py::test_17_issues_a_third_of_15s_p1_and_p4_wgmmas"),
             "the model's bound tells one term from three; the PTX count too"),
    Mutation("07: the gates' running sums widen row ii's q in place of its g", "kernels/delta/07_chunk_prep_tc.cu",
             "            const float2 gg = kda_widen2<BF>(xg[ii]);", "            const float2 gg = kda_widen2<BF>(xq[ii]);",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "every 07 -> recurrence pair is checked against the float64 recurrence"),
    Mutation("18: W from the Kd^T of its own chunk (not the chunk before)", "kernels/delta/wgmma_recurrence.cuh",
             "            const unsigned kd_a = base + opb(m > 0 ? m - 1 : 0);   // chunk 0 has no W",
             "            const unsigned kd_a = base + opb(m);   // chunk 0 has no W",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "18 is held to the float64 recurrence within 17's error"),
    Mutation("18: P1b's hi x hi term dropped (W V' as its small terms only)", "kernels/delta/wgmma_recurrence.cuh",
             "                    wgmma_rs_kb<BV, true>(pb, wh[s], desc(svp_a + 32 * s), 1);\n", "",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "18 is held to the float64 recurrence within 17's error"),
    Mutation("18: no barrier between chunk 0's PQ and the S^T it overwrites", "kernels/delta/wgmma_recurrence.cuh",
             "        named_bar_sync(BAR_CONS, 128);   // every warp's PQ has read S^T before chunk 0 overwrites it\n", "",
             ("tests/test_emu_delta_tc.py::test_cluster_kernels_in_eager_order",),
             "the CPU model reads a wgmma's shared memory at the wait that retires it, per thread; in eager order "
             "one warp runs ahead and overwrites S^T first"),
    Mutation("18: Kd^T of chunk n - 1 handed back before P4 of chunk n - 1 completes", "kernels/delta/wgmma_recurrence.cuh",
             "            wgmma_wait<0>();   // P4 of chunk n - 1: S_n\n#pragma unroll\n            for (int mt = 0; mt < MT; ++mt) fence_regs(sacc[mt]);\n"
             "            if (n >= 1 && n + 1 < NC) named_bar_arrive(KdaWgBars::EMPTY_KD + ((n - 1) & 1), L::NTH);   // Kd^T of n - 1 read\n",
             "            if (n >= 1 && n + 1 < NC) named_bar_arrive(KdaWgBars::EMPTY_KD + ((n - 1) & 1), L::NTH);   // Kd^T of n - 1 read\n"
             "            wgmma_wait<0>();   // P4 of chunk n - 1: S_n\n#pragma unroll\n            for (int mt = 0; mt < MT; ++mt) fence_regs(sacc[mt]);\n",
             ("tests/test_emu_delta_tc.py::test_18_hands_buffers_back_only_after_the_wgmmas_that_read_them",),
             "a race the CPU model cannot lose (a wgmma wait never yields): the order is checked in the source"),
    Mutation("23: P1^T's lo term dropped (S^T times the tile's hi words only)", "kernels/delta/wgmma_recurrence.cuh",
             "            wgmma_rs<64, true>(p1, sf[hv][s], dmn(row + K * 128), 1);       // x [Kg; Qg]^T lo\n", "",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "Kg and Qg rounded to one bf16 term: ~1e-3 from float64 and from 19"),
    Mutation("23: the state's lo row left out of the decay", "kernels/delta/wgmma_recurrence.cuh",
             "x[0] *= d.x; x[1] *= d.y; x[2] *= d.x; x[3] *= d.y;",
             "x[0] *= d.x; x[1] *= d.y;",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",)),
    Mutation("23: V'^T from its hi row only (X^T's lo terms dropped)", "kernels/delta/wgmma_recurrence.cuh",
             "split_bf16x2(p2[4 * jj] + p2[4 * jj + 2], p2[4 * jj + 1] + p2[4 * jj + 3], vf[jj / 2][2 * (jj % 2)],",
             "split_bf16x2(p2[4 * jj], p2[4 * jj + 1], vf[jj / 2][2 * (jj % 2)],",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",)),
    Mutation("23: P4's second half multiplies the first half's Kd^T rows", "kernels/delta/wgmma_recurrence.cuh",
             "const unsigned row = kd + hv * (KH * 128) + 32 * s;", "const unsigned row = kd + 32 * s;",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",)),
    Mutation("23: o's A2 X read from the slot's T rows", "kernels/delta/wgmma_recurrence.cuh",
             "wgmma_rs_kb<32, true>(p3, xf[s], dk64(ta + 2 * TA_ROWS + 32 * s), 1);   // A2 hi",
             "wgmma_rs_kb<32, true>(p3, xf[s], dk64(ta + 32 * s), 1);   // A2 hi",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",)),
    Mutation("23, two staging tiles: a tile's mbarrier waited with the one-tile parity", "kernels/delta/14_chunk_state_multicast.cu",
             "if (!LDG && (KDA_PROBE != 4 || n == 0)) mbar_wait(tile_bar(n), (n / NST) & 1);",
             "if (!LDG && (KDA_PROBE != 4 || n == 0)) mbar_wait(tile_bar(n), n & 1);",
             ("tests/test_emu_delta_tc.py::test_register_operand_probe_builds_reproduce_the_recorded_builds[K128V128BV32]",),
             "chunk 2 passes its tile's first phase, already complete, and reads chunk 0's q, k, g"),
    Mutation("19: Kg and Qg pieces of the [Kg; Qg]^T tile exchanged", "kernels/delta/wgmma_recurrence.cuh",
             "*reinterpret_cast<U4*>(kq + (((2 * ch) ^ (c % 8)) * 16)) = U4{kh[0], kh[1], kh[2], kh[3]};",
             "*reinterpret_cast<U4*>(kq + (((2 * ch + 1) ^ (c % 8)) * 16)) = U4{kh[0], kh[1], kh[2], kh[3]};",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "19 must reproduce 15 bit for bit"),
    Mutation("19: P1's lo x hi term dropped", "kernels/delta/wgmma_recurrence.cuh",
             "                    wgmma_ss_mna<BV>(p1, mna(kq + K * 128), desc(sth_a + off), s > 0);   // lo x hi\n", "",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "19 must reproduce 15 bit for bit"),
    Mutation("19: P1's k steps 1024 bytes apart (half a step)", "kernels/delta/wgmma_recurrence.cuh",
             "const unsigned kq = base + cx.kq_of(n) + s * 2048;", "const unsigned kq = base + cx.kq_of(n) + s * 1024;",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "19 must reproduce 15 and 17 bit for bit"),
    Mutation("19: the tile's lo words stored over the hi tile", "kernels/delta/wgmma_recurrence.cuh",
             "*reinterpret_cast<U4*>(kq + K * 128 + (((2 * ch + 1) ^ (c % 8)) * 16)) = U4{ql[0], ql[1], ql[2], ql[3]};",
             "*reinterpret_cast<U4*>(kq + (((2 * ch + 1) ^ (c % 8)) * 16)) = U4{ql[0], ql[1], ql[2], ql[3]};",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "19 must reproduce 15 bit for bit"),
    Mutation("20: a part's 2^G scaled by its own part's product as well as the earlier parts'",
             "kernels/delta/wgmma_recurrence.cuh",
             "                        if (p < part) pre *= t;", "                        if (p <= part) pre *= t;",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K128V128BV32]",),
             "20 (two threads a channel at K = 128) is checked against the float64 recurrence and 19; 2^G scales "
             "Kg and Qg, which meet a state only from the second chunk on or with an initial state (T = 17 without "
             "one is a single chunk from S = 0: this bug leaves it untouched)"),
    Mutation("20: WG_E reads the parts' products before every part has written them", "kernels/delta/wgmma_recurrence.cuh",
             "                    sTot[part * K + c] = run;\n                    named_bar_sync(BAR_PROD, L::NE);\n                    gl2 = 1.f;",
             "                    sTot[part * K + c] = run;\n                    gl2 = 1.f;",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T17-logsigmoid-h00-K128V128BV32]",),
             "the CPU model runs part 0's threads up to the next barrier first: they read the last chunk's products"),
    Mutation("20: WG_E's staging tile released by a barrier of one warpgroup's threads", "kernels/delta/14_chunk_state_multicast.cu",
             "            named_bar_sync(BAR_PROD, L::NE);\n            if (n + 1 < NC) {",
             "            named_bar_sync(BAR_PROD, 128);\n            if (n + 1 < NC) {",
             ("tests/test_delta_kernels.py::test_delta_kernels_build_without_spills[K128-kda_chunk_state_wide<128,128,32,32,False>-sm_90]",),
             "the static check wants the fenced release barrier to count all of 20's 256 element-wise threads"),
    Mutation("21: the lane pair's Kg / Qg halves stored to the wrong chunk of the row", "kernels/delta/ops_image.cuh",
             "unsigned char* const r0p = kq + kda_ops_sw(cb + cc, 2 * j + (odd ? 1 : 0)) + sub;",
             "unsigned char* const r0p = kq + kda_ops_sw(cb + cc, 2 * j + (odd ? 0 : 1)) + sub;",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K128V128BV32]",),
             "22 on 21's images is held to the float64 rounding model: Kg and Qg swapped give O(1) errors once P1 "
             "meets a state (from the second chunk on, or an initial state: a single chunk from S = 0 hides it)"),
    Mutation("21: Kd from 2^(G_L) alone, not 2^(G_L - G)", "kernels/delta/ops_image.cuh",
             "vk[t] = (cc ? kv.y : kv.x) * fast_exp2(gl - (G[u + t][cc] + off));",
             "vk[t] = (cc ? kv.y : kv.x) * fast_exp2(gl);",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "Kd feeds P4, the state's update: the final state and every later chunk's o move"),
    Mutation("22: K = 128's second m64 tile of Kd^T read from the first tile's bytes", "kernels/delta/wgmma_recurrence.cuh",
             "const unsigned a = L::FOLD ? kd_a + 64 * mt + 32 * s ", "const unsigned a = L::FOLD ? kd_a + 32 * s ",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T17-logsigmoid-h00-K128V128BV32]",),
             "the folded Kd^T layout: channels 64-127 would update with channels 0-63's words"),
    Mutation("21 (fp32): the [Kg; Qg]^T lo words not stored", "kernels/delta/ops_image.cuh",
             "        if constexpr (LO) put_pair(img + KD + K * 128, cc, kgl, qgl);\n", "",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "22's three-term P1 would read the poisoned lo tile once it meets a state (an initial state here: from "
             "S = 0 a single chunk hides it): 21 -> 22 on fp32 inputs is held to 1e-4 and to 19"),
    Mutation("21 (fp32): Kd^T's lo words over its hi words", "kernels/delta/ops_image.cuh",
             "put(img + kda_ops_sw(c, 4 + j) + sub, kdl);", "put(img + kda_ops_sw(c, j) + sub, kdl);",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T17-logsigmoid-h00-K64V64BV32]",),
             "P4's Kd^T hi term would be the lo words: the state's update off by O(1)"),
    Mutation("22: the producer refills a buffer without waiting for WG_C to be done with it", "kernels/delta/14_chunk_state_multicast.cu",
             "            __syncwarp();\n            if (n >= 2) named_bar_sync(BAR_EMPTY + (n & 1), L::NTH);\n",
             "            __syncwarp();\n",
             ("tests/test_emu_delta_tc.py::test_cluster_kernels_in_eager_order",),
             "in eager order the producer warp runs ahead and overwrites buffers and slots still being read"),
    Mutation("launcher: 21 launched on 07's grid (NC, H, B), not its chunk-major (B H, NC)", "lib/attnlab/delta/kernels.py",
             '"prep": dict(grid=(B * H, NC, 1) if self.impl in PRE_IMPLS + SIDE_IMPLS else (NC, H, B),',
             '"prep": dict(grid=(B * H, NC, 1) if self.impl in SIDE_IMPLS else (NC, H, B),',
             ("tests/test_delta_kernels.py::test_pre_launches_21_chunk_major_and_22_with_its_layout",),
             "21 reads its chunk from blockIdx.y and its head from blockIdx.x: 07's grid would write the wrong chunks"),
    Mutation("launcher: 21 -> 22 side by side even where 22's grid fills every SM", "lib/attnlab/delta/kernels.py",
             "    return B * H * (V // bv) < sms", "    return B * H * (V // bv) <= sms",
             ("tests/test_delta_kernels.py::test_side_by_side_only_where_an_sm_holds_no_block_of_22",),
             "with no SM free of 22, 21's progress would rest on how the hardware places its blocks beside 22"),
    Mutation("launcher: every recurrence launched with its fp32 layout's shared memory, whatever the inputs",
             "lib/attnlab/delta/kernels.py",
             '    if io == "bf16" and "bf16" in inspect.signature(words).parameters:', "    if False:",
             ("tests/test_delta_kernels.py::test_launcher_shared_memory_is_the_static_tables_for_each_io",),
             "the launcher's shared memory is held to tc_smem_bytes' for both I/O types"),
    Mutation("19: the CPU model reads an MN-major A as K-major", "tests/ladder_emu/ladder_emu.h",
             "    auto arow = [da](int, int row, int k) { return emu_smem_half<true, true>(da, row, k); };",
             "    auto arow = [da](int, int row, int k) { return emu_smem_half<true, false>(da, row, k); };",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "the model's tnspA read is what 19's bit-for-bit check rests on"),
    Mutation("19: the m64n32 MN-major-A wgmma issued with tnspA = 0", "kernels/hopper.cuh",
             '"{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 1, 0;\\n}\\n"',
             '"{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\\n}\\n"',
             ("tests/test_delta_kernels.py::test_delta_kernels_build_without_spills",),
             "the CPU model has its own wgmma_ss_mna; the device's transpose flag is checked in the PTX"),
    Mutation("14-19: the staging tile released to the next tensor copy without a proxy fence",
             "kernels/delta/14_chunk_state_multicast.cu",
             "#if KDA_STAGE_RELEASE\n            if constexpr (!LDG) fence_proxy_async();\n", "#if KDA_STAGE_RELEASE\n",
             ("tests/test_delta_kernels.py::test_delta_kernels_build_without_spills[K128-kda_chunk_state_tile<128,128,32,32,False>-sm_90]",),
             "the race stress_delta.py caught on the H200 (19, fp32); the static build checks the fence"),
    Mutation("stress_delta: a differing element's row in its chunk taken as the chunk", "scripts/stress_delta.py",
             "row=t % C,", "row=t // C,",
             ("tests/test_delta_kernels.py::test_stress_diff_map_locates_differences",),
             "the map is what located 19's race: rows 30, 31 of a chunk"),
    Mutation("18: P4 issued under a branch (ptxas then serializes every wgmma)", "kernels/delta/wgmma_recurrence.cuh",
             "                issue_p4(n > 0 ? n - 1 : 0);", "                if (n > 0) issue_p4(n - 1);",
             ("tests/test_delta_kernels.py::test_delta_kernels_build_without_spills",),
             "the static build checks ptxas's wgmma serialization warnings"),
    Mutation("static: ptxas's wgmma serialization warning not read", "lib/attnlab/static.py",
             "(?P<code>C75\\d\\d)", "(?P<code>C76\\d\\d)",
             ("tests/test_compile_static.py::test_parse_ptxas_verbose_wgmma_serialization",),
             "a sample of nvcc 13's wording is parsed"),
    Mutation("07, bf16: Akk and Aqk stored into the operands' space before every warp has read it",
             "kernels/delta/07_chunk_prep_tc.cu",
             "    if constexpr (L::AL) __syncthreads();   // every operand read", "    if constexpr (false) __syncthreads();   // every operand read",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",
              "tests/test_emu_delta_tc.py::test_cluster_kernels_in_eager_order"),
             "every bf16-I/O pair is checked against the float64 recurrence on the rounded inputs"),
    Mutation("07, bf16: the output arrays' upper blocks left as operands", "kernels/delta/07_chunk_prep_tc.cu",
             "    } else if (L::AL && warp != 0) {   // meanwhile (ALIAS)", "    } else if (false && warp != 0) {   // meanwhile (ALIAS)",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "T's upper block multiplies X's second half in P2: garbage there is O(1)"),
    Mutation("07, KDA_PREP_LEAN: the copy out reads row 15's zero block from shared memory", "kernels/delta/07_chunk_prep_tc.cu",
             "        if (r >= 16 || qd < QW / 2) w = ", "        if (r >= 15 || qd < QW / 2) w = ",
             ("tests/test_emu_delta_tc.py::test_register_operand_probe_builds_reproduce_the_recorded_builds[K128V128BV32]",),
             "the lean build never writes the zero blocks to shared memory: what is there is not zero"),
    Mutation("29 (07's body, INV): each step's pivot taken from the next row's lane", "kernels/delta/07_chunk_prep_tc.cu",
             "m < 8 ? x0 : x1, (lane & ~7) | (m & 7));", "m < 8 ? x0 : x1, (lane & ~7) | ((m + 1) & 7));",
             ("tests/test_emu_delta_tc.py::test_register_operand_probe_builds_reproduce_the_recorded_builds[K128V128BV32]",),
             "T's diagonal blocks from the wrong pivots: the words differ from warp 0's inverse, o with them"),
    Mutation("launcher: 07 beside 27 launched on 07's grid (NC, H, B), not 21's chunk-major (B H, NC)",
             "lib/attnlab/delta/kernels.py",
             '"prep": dict(grid=(B * H, NC, 1) if self.impl in PRE_IMPLS + SIDE_IMPLS else (NC, H, B),',
             '"prep": dict(grid=(B * H, NC, 1) if self.impl in PRE_IMPLS else (NC, H, B),',
             ("tests/test_emu_delta_tc.py::test_side_recurrence_reproduces_24_under_cpu_emulation[K64-T100-side-by-side]",),
             "kda_chunk_prep_side reads its chunk from blockIdx.y: 07's grid would write other chunks' words, and leave flags unset"),
    Mutation("27: v's second box of 32 columns read from the first", "kernels/delta/wgmma_recurrence.cuh",
             "return SPLIT ? (c / VB) * (L::C * VB) + kda_slot_sw<VSW>", "return SPLIT ? 0 * (L::C * VB) + kda_slot_sw<VSW>",
             ("tests/test_emu_delta_tc.py::test_side_recurrence_reproduces_24_under_cpu_emulation[K64-T100-side-by-side]",),
             "value columns 32-63 would take columns 0-31's v: o far off in half the columns"),
    Mutation("28: both blocks of a pair stage channels 0-63 (the tensor copies' channel coordinate)",
             "kernels/delta/14_chunk_state_multicast.cu",
             "maps[ar], (int)rank * KE, h, n * C, b, tile_bar(n));", "maps[ar], 0 * KE, h, n * C, b, tile_bar(n));",
             ("tests/test_emu_delta_tc.py::test_pair_recurrence_matches_float64_and_24[T70-mixed-h0-H3]",),
             "the second block would make channels 64-127's operands from channels 0-63's g, k, q: o far off"),
    Mutation("28: the copy to the other block sends the [Kg; Qg]^T hi rows where the lo rows go",
             "kernels/delta/14_chunk_state_multicast.cu",
             "bulk_copy_to_peer(kq + K * 128, kq + K * 128, HALF, bar, to);", "bulk_copy_to_peer(kq + K * 128, kq, HALF, bar, to);",
             ("tests/test_emu_delta_tc.py::test_pair_recurrence_matches_float64_and_24[T70-mixed-h0-H3]",),
             "half of P1's lo terms would repeat its hi terms: o off far past fp32 accuracy"),
    Mutation("28: each block writes its half of the operands into rows 0-63 (its channels' rows unshifted)",
             "kernels/delta/wgmma_recurrence.cuh",
             "const int ci = c + (L::PAIR ? (int)cluster_ctarank() * L::KE : 0);", "const int ci = c;",
             ("tests/test_emu_delta_tc.py::test_pair_recurrence_matches_float64_and_24[T70-mixed-h0-H3]",),
             "rows 64-127 of every buffer would keep whatever was there (poisoned): o far off or not finite"),
    Mutation("26: the maker refills a ring slot without the head's acknowledgements", "kernels/delta/14_chunk_state_multicast.cu",
             "        if (m >= KDA_SHARE_SLOTS && e < NB)", "        if (false && m >= KDA_SHARE_SLOTS && e < NB)",
             ("tests/test_emu_delta_tc.py::test_share_recurrence_reproduces_24_under_cpu_emulation[K64V64BV16-eager-4-slots]",),
             "in eager order a block lands a slot's next image in place of the one it has yet to land"),
    Mutation("26: the made flag published before the image's bulk store completes", "kernels/delta/14_chunk_state_multicast.cu",
             """            bulk_store_wait_all();   // written (and the tile read): published, and free for the next chunk's copies
            kda_flag_release(made + bh * NC + m, epoch);""",
             """            kda_flag_release(made + bh * NC + m, epoch);
            bulk_store_wait_all();   // written (and the tile read): published, and free for the next chunk's copies""",
             ("tests/test_emu_delta_tc.py::test_share_recurrence_reproduces_24_under_cpu_emulation[K64V64BV16-eager-4-slots]",),
             "the CPU model writes a bulk store at its wait, after the others ran: a block lands the slot's old bytes"),
    Mutation("26: the producer warp lands the next slot's image", "kernels/delta/14_chunk_state_multicast.cu",
             "SHR ? ring + (cx.bh * KDA_SHARE_SLOTS + n % KDA_SHARE_SLOTS)",
             "SHR ? ring + (cx.bh * KDA_SHARE_SLOTS + (n + 1) % KDA_SHARE_SLOTS)",
             ("tests/test_emu_delta_tc.py::test_share_recurrence_reproduces_24_under_cpu_emulation[K64V64BV32-ring-reused]",),
             "another chunk's operands: o is 1e-1 away"),
    Mutation("notebook 13: a cell without its id", "notebooks/13_fast_delta.ipynb",
             '"id": "d3c34fdb"', '"id": ""',
             ("tests/test_repository.py::test_source_notebook_cells_have_unique_ids",),
             "nbformat 4.5 cells carry ids"),
    Mutation("rounding model: P4's one term rounds only Kd", "lib/attnlab/delta/chunk.py",
             'np.swapaxes(r["P4"](Kd), -1, -2) @ r["P4"](Vp)', 'np.swapaxes(r["P4"](Kd), -1, -2) @ Vp',
             ("tests/test_delta_reference.py::test_chunk_rounding_model_rounds_only_what_it_is_told",),
             "the model's one-term product is checked against an independent bf16 product"),
    Mutation("CPU model: wgmma's 64-byte swizzle read unswizzled", "tests/ladder_emu/ladder_emu.h",
             "        return logical ^ (((logical >> 7) & 3) << 4);", "        return logical;",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T17-logsigmoid-h00-K64V64BV32]",),
             "the copy engine's 64-byte swizzle and the wgmma's must agree for 16's P2"),
    Mutation("16, launcher: 07's rows land with the 128-byte swizzle (the wgmma reads the 64-byte one)",
             "lib/attnlab/delta/kernels.py", "C // 2, C, swizzle=64),)", "C // 2, C, swizzle=128),)",
             ("tests/test_emu_delta_tc.py::test_launcher_and_notebook_functions_under_cpu_emulation",),
             "the launch path runs on the CPU model with the driver's encoder replaced by the same plan"),
    Mutation("targets: fla's eager call always, its CUDA-graph replay ignored", "lib/attnlab/delta/fast.py",
             "    who = min(ms, key=ms.get)\n    return ms[who], who", "    who = next(iter(ms))\n    return ms[who], who",
             ("tests/test_emu_delta_tc.py::test_ratios_against_fla_use_its_faster_call_and_a_host_bound_eager_call_is_named",),
             "a synthetic table where the replay is the faster call at one T and the eager call at the other"),
    Mutation("describe_fla_calls: host-bound judged the wrong way round", "lib/attnlab/delta/fast.py",
             "for T, e, g in pairs if e >= host_bound * g]", "for T, e, g in pairs if g >= host_bound * e]",
             ("tests/test_emu_delta_tc.py::test_ratios_against_fla_use_its_faster_call_and_a_host_bound_eager_call_is_named",),
             "the generated line must name the T where the eager call is slow, and only it"),
    Mutation("wgmma-rate probe: MACs per wgmma without the warpgroups", "lib/attnlab/delta/fast.py",
             "    return 64 * n * 16 * wgmmas * nwg / cycles", "    return 64 * n * 16 * wgmmas / cycles",
             ("tests/test_delta_kernels.py::test_wgmma_rate_arithmetic_and_shapes",),
             "the pure arithmetic is checked against hand-computed counts"),
    Mutation("11: producers refill a buffer without waiting for the cluster",
             "kernels/delta/11_chunk_state_cluster.cu",
             "            if (n >= 1) cluster_wait();                              // phase n-1: chunk n-2 done everywhere\n",
             "",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",),
             "the model's split cluster barrier refuses a second arrive before a wait (on the GPU: a race)"),
    Mutation("KDA_P1_LDA probe: P1's A fragments take the Qg rows' matrix for the Kg rows' second k half",
             "kernels/delta/wgmma_recurrence.cuh",
             "kda_sw128(base + cx.kq_of(n), 8 * (mi / 2) + r, 2 * warp + (mi & 1));",
             "kda_sw128(base + cx.kq_of(n), 8 * (mi & 1) + r, 2 * warp + (mi / 2));",
             ("tests/test_emu_delta_tc.py::test_register_operand_probe_builds_reproduce_the_recorded_builds[K64V64BV16]",),
             "the probe builds' outputs are compared with the recorded builds' bit for bit"),
    Mutation("24 (and the KDA_P4_LDA probe): P4's Kd^T fragments read the lo words for hi",
             "kernels/delta/wgmma_recurrence.cuh",
             "kda_sw128(kd_a + mt * 8192, row, 2 * s + mi / 2 + (hl ? 0 : 4));",
             "kda_sw128(kd_a + mt * 8192, row, 2 * s + mi / 2 + (hl ? 4 : 0));",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T70-mixed-h01-K64V64BV32]",
              "tests/test_emu_delta_tc.py::test_register_operand_probe_builds_reproduce_the_recorded_builds[K64V64BV16]"),
             "24's outputs are compared with 19's bit for bit, the probe builds' with the recorded builds'"),
    Mutation("probe KDA_P1_CHAINS: the hi x lo term's chain multiplies S^T hi", "kernels/delta/wgmma_recurrence.cuh",
             "wgmma_ss_mna<BV>(ph, mna(kq), desc(stl_a + off), s > 0);             // hi x lo",
             "wgmma_ss_mna<BV>(ph, mna(kq), desc(sth_a + off), s > 0);             // hi x lo",
             ("tests/test_emu_delta_tc.py::test_chain_probe_builds_hold_to_float64_and_the_recorded_sums",),
             "the chain probes' sums are held within rounding of the recorded builds'"),
    Mutation("probe KDA_P4_CHAINS: P4's lo terms never added to the state", "kernels/delta/wgmma_recurrence.cuh",
             "                for (int x = 0; x < BV / 2; ++x) sacc[mt][x] += p4c[mt][x];\n", "",
             ("tests/test_emu_delta_tc.py::test_chain_probe_builds_hold_to_float64_and_the_recorded_sums",),
             "the chain probes' sums are held within rounding of the recorded builds'"),
    Mutation("30 (and probe KDA_O_LATE): the kept o is the chunk's V'", "kernels/delta/wgmma_recurrence.cuh",
             "            ol[2 * j] = ob[2 * j] + p2[4 * j + 2];", "            ol[2 * j] = p2[4 * j];",
             ("tests/test_emu_delta_tc.py::test_register_operand_probe_builds_reproduce_the_recorded_builds[K64V64BV16]",
              "tests/test_emu_delta_tc.py::test_late_steps_reproduce_07_and_24[K128-T70-h0-H3]"),
             "the probe builds' outputs are compared with the recorded builds' bit for bit, and 30's with 24's"),
    Mutation("probe KDA_O_BULK: each token's o row stored from the row before", "kernels/delta/wgmma_recurrence.cuh",
             "base + L::OT_OFF + lane * L::OT_LD * 4, BV * 4);",
             "base + L::OT_OFF + (lane > 0 ? lane - 1 : 0) * L::OT_LD * 4, BV * 4);",
             ("tests/test_emu_delta_tc.py::test_register_operand_probe_builds_reproduce_the_recorded_builds[K64V64BV16]",),
             "the probe builds' outputs are compared with the recorded builds' bit for bit"),
    Mutation("probe KDA_O_WARP: the store warp's lane r stores the tile's next row", "kernels/delta/wgmma_recurrence.cuh",
             "reinterpret_cast<const float*>(cx.sm + L::OT_OFF) + lane * L::OT_LD;",
             "reinterpret_cast<const float*>(cx.sm + L::OT_OFF) + ((lane + 1) % 32) * L::OT_LD;",
             ("tests/test_emu_delta_tc.py::test_register_operand_probe_builds_reproduce_the_recorded_builds[K64V64BV16]",),
             "the probe builds' outputs are compared with the recorded builds' bit for bit"),
    Mutation("24's probe KDA_KD_EARLY: the buffer handed back before load_kd has read Kd^T",
             "kernels/delta/wgmma_recurrence.cuh", "", "",
             ("tests/test_emu_delta_tc.py::test_register_operand_probe_builds_reproduce_the_recorded_builds[K64V64BV16]",),
             "WG_E may overwrite the tile while the chain's ldmatrix still reads it: 24's results change in the probe build",
             edit=lambda t: t.replace(
                 "        if (KD_EARLY && n + 2 < NC) named_bar_arrive(BAR_EMPTY + (n & 1), L::NTH);\n", "", 1).replace(
                 "        load_kd(n);   // 24", "        if (KD_EARLY && n + 2 < NC) named_bar_arrive(BAR_EMPTY + (n & 1), L::NTH);\n"
                 "        load_kd(n);   // 24", 1)),
    Mutation("probe KDA_NO_P2: o's product reads the X^T tile, not V'^T", "kernels/delta/wgmma_recurrence.cuh",
             "issue_p2(p2, ta, false, svp_a);   // o's product behind P4, off the chain",
             "issue_p2(p2, ta, false, sx_a);   // o's product behind P4, off the chain",
             ("tests/test_emu_delta_tc.py::test_wy_chain_probe_computes_its_model",),
             "a timing build must still issue the products it claims, on the tiles it names"),
    Mutation("probe KDA_NO_P2: o's product waited for after the barrier that frees V'^T", "kernels/delta/wgmma_recurrence.cuh",
             "", "", ("tests/test_emu_race.py::test_delta_kernels_have_no_unordered_shared_memory_access[K64V64BV16-KDA_NO_P2]",),
             "the next chunk's V'^T store may land while the wgmma still reads the tile: the race check reports it",
             edit=lambda t: t.replace(
                 "            if (n + 1 < NC) named_bar_sync(BAR_CONS, 128);\n            continue;",
                 "            continue;", 1).replace(
                 "            wgmma_wait<0>();   // o's product (it read V'^T",
                 "            if (n + 1 < NC) named_bar_sync(BAR_CONS, 128);\n            wgmma_wait<0>();   // o's product (it read V'^T", 1)),
    Mutation("25: U = T beta v left out of P1", "kernels/delta/wgmma_recurrence.cuh",
             "            issue_p2(p1, tu, true, sx_a);\n", "",
             ("tests/test_emu_delta_tc.py::test_wy_kernel_matches_float64[T70-mixed-h0]",), "V' = -W S alone: every chunk's new values lost"),
    Mutation("25: W made from T without beta", "kernels/delta/14_chunk_state_multicast.cu",
             "for (int u = 0; u < 8; ++u) t8[u] *= __shfl_sync(ATTNLAB_FULL_MASK, bl, j0 + u);",
             "for (int u = 0; u < 8; ++u) t8[u] *= 1.f;",
             ("tests/test_emu_delta_tc.py::test_wy_kernel_matches_float64[T70-mixed-h0]",), "W = T Kbg: Kbg carries beta (15's Kg does not)"),
    Mutation("25: U's A fragments keep Aqk's rows (not zeroed)", "kernels/delta/wgmma_recurrence.cuh",
             "tu[hl][s][1] = 0u; tu[hl][s][2] = ta[hl][s][2]; tu[hl][s][3] = 0u;",
             "tu[hl][s][1] = ta[hl][s][1]; tu[hl][s][2] = ta[hl][s][2]; tu[hl][s][3] = ta[hl][s][3];",
             ("tests/test_emu_delta_tc.py::test_wy_kernel_matches_float64[T70-mixed-h0]",), "Ob's rows would gain Aqk beta v: o off, the state right"),
    Mutation("25: 07 hands over A2 = Aqk T, not Aqk", "lib/attnlab/delta/kernels.py",
             "*(i for i in TMA_IMPLS if i not in PREP_AQK_IMPLS)", "*TMA_IMPLS",
             ("tests/test_emu_delta_tc.py::test_wy_kernel_matches_float64[T70-mixed-h0]",), "o = Qg S + Aqk V' (A2 belongs to 24's o = Ob + A2 X)"),
    Mutation("25: the next chunk's (beta v)^T written while this chunk's P1 may still read the tile",
             "kernels/delta/wgmma_recurrence.cuh", "", "",
             ("tests/test_emu_race.py::test_delta_kernels_have_no_unordered_shared_memory_access[K128V128BV32]",),
             "P1's U part reads the tile through the async proxy until its wait: the race check orders nothing else",
             edit=lambda t: t.replace(
                 "            load_kd(n);   // P4's A fragments while P1 runs\n",
                 "            load_kd(n);   // P4's A fragments while P1 runs\n"
                 "            if (n + 1 < NC) { wait_slot(n + 1); write_bv(n + 1, kda_widen1<BF>(rbeta)); }\n", 1)),
    Mutation("25: slot n & 1 refilled before every thread has read its T words", "kernels/delta/wgmma_recurrence.cuh",
             "", "", ("tests/test_emu_race.py::test_delta_kernels_have_no_unordered_shared_memory_access[K128V128BV32]",),
             "chunk n + 2's copy may land while a thread still loads chunk n's T words from the slot: the race check reports it",
             edit=lambda t: t.replace(
                 "            if (n + 2 < NC && KDA_PROBE != 4) copy_slot(n + 2);   // into slot n & 1: a chunk's time to land\n", "", 1)
             .replace("            load_ta(n, ta);\n#pragma unroll\n            for (int hl = 0; hl < 2; ++hl)",
                      "            load_ta(n, ta);\n            if (n + 2 < NC) copy_slot(n + 2);\n#pragma unroll\n"
                      "            for (int hl = 0; hl < 2; ++hl)", 1)),
    Mutation("25, W a token at a time (KDA_WY_WLOOP=2): rows above the token's quad skipped", "kernels/delta/wgmma_recurrence.cuh",
             "for (int rq = (L::TPC == 1 ? j / 4 : 0); rq < TPT / 4; ++rq) {",
             "for (int rq = (L::TPC == 1 ? j / 4 + 1 : 0); rq < TPT / 4; ++rq) {",
             ("tests/test_emu_delta_tc.py::test_wy_token_loop_matches_float64",),
             "the diagonal quad's entries of W (T' is lower triangular, not strictly) would be lost"),
    Mutation("25 at K = 64: the channel's other Kg read back without WG_E's barrier", "kernels/delta/wgmma_recurrence.cuh",
             "                            named_bar_sync(BAR_PROD, L::NE);\n    #pragma unroll\n                            for (int u = 0; u < L::C; u += 4) {",
             "    #pragma unroll\n                            for (int u = 0; u < L::C; u += 4) {",
             ("tests/test_emu_race.py::test_delta_kernels_have_no_unordered_shared_memory_access[K64V64BV16]",),
             "the other thread of the channel may not have stored its 16 tokens yet: the race check reports the pair"),
    Mutation("KDA_E_SHARE probe: the define read but not applied (WG_E at all of its tokens)",
             "kernels/delta/14_chunk_state_multicast.cu",
             "(KDA_PROBE == 6 ? 2 : 1) / KDA_E_SHARE;", "(KDA_PROBE == 6 ? 2 : 1);",
             ("tests/test_emu_delta_tc.py::test_e_share_probe_builds_run_and_take_effect",),
             "the probe would time 24 itself and the bounds would call it the cluster's gain"),
    Mutation("KDA_E_LDG=3: the next chunk's k loaded from q", "kernels/delta/14_chunk_state_multicast.cu",
             "for (int u = 8 * qd; u < 8 * qd + 8; ++u) { ak[u] = ld_tok(k, m, u);",
             "for (int u = 8 * qd; u < 8 * qd + 8; ++u) { ak[u] = ld_tok(q, m, u);",
             ("tests/test_emu_delta_tc.py::test_global_load_build_reproduces_24[K128-T70-h0]",),
             "P4's Kd and P1's Kg of every chunk after the first from q: o far off"),
    Mutation("KDA_E_LDG: every thread loads channel 0", "kernels/delta/14_chunk_state_multicast.cu",
             "kda_bthd(b, in ? t : 0, h, c, TT, H, K)", "kda_bthd(b, in ? t : 0, h, 0, TT, H, K)",
             ("tests/test_emu_delta_tc.py::test_global_load_build_reproduces_24[K128-T70-h0]",),
             "the global-load build must read the thread's own channel, as the staging tile gave it"),
    Mutation("describe_recurrence_bounds: the probe's time added to the whole call", "lib/attnlab/delta/fast.py",
             "total = call - base + t", "total = call + t",
             ("tests/test_emu_delta_tc.py::test_recurrence_bounds_lines_come_from_the_tables",),
             "each bound replaces 24's time in the call by the probe's, it does not add to it"),
    Mutation("describe_probes: 22's fp32 probe set against 22 on bf16 inputs", "lib/attnlab/delta/fast.py",
             "impl_of = {label: (impl, probe_io(label, impl))", "impl_of = {label: (impl, \"bf16\")",
             ("tests/test_emu_delta_tc.py::test_wgmma_family_stamps_and_generated_lines",),
             "a probe of the fp32 form would be read against the bf16 form's time"),
    Mutation("describe_probes: a probe within the noise band called faster", "lib/attnlab/delta/fast.py",
             "return abs(r - 1) < PROBE_NOISE", "return False",
             ("tests/test_emu_delta_tc.py::test_wgmma_family_stamps_and_generated_lines",),
             "a 0.2 % difference must read as neither faster nor slower"),
    Mutation("24: P4 issued from 19's shared-memory A (the step's loads unused)", "kernels/delta/wgmma_recurrence.cuh",
             "constexpr bool P4L = (KDA_P4_LDA || L::P4R) && !L::AHEAD;",
             "constexpr bool P4L = KDA_P4_LDA && !L::AHEAD;",
             ("tests/test_delta_kernels.py::test_delta_kernels_build_without_spills[K128-kda_chunk_state_kdreg<128,128,32,32,False>-sm_90]",),
             "the static build counts P4's wgmmas with A from registers in 24 (same results, so only the build can tell)"),
    Mutation("KDA_P4_LDA probe (22, bf16): K = 128's folded second m64 tile read from the first",
             "kernels/delta/wgmma_recurrence.cuh",
             "kda_sw128(kd_a, row, 4 * mt + 2 * s + mi / 2)", "kda_sw128(kd_a, row, 2 * s + mi / 2)",
             ("tests/test_emu_delta_tc.py::test_register_operand_probe_builds_reproduce_the_recorded_builds[K128V128BV32]",),
             "only K = 128 has a second tile, folded into the rows' second half on bf16 inputs"),
    Mutation("CPU launch path: a probe build's defines dropped", "tests/delta_emu/fake_device.py",
             "EmuKernel(str(source), function, template_args, build_dir, defines))",
             "EmuKernel(str(source), function, template_args, build_dir, None))",
             ("tests/test_emu_delta_tc.py::test_register_operand_probe_forms_through_the_launcher",),
             "a define that changes the results must change them"),
    Mutation("launcher: 07's probe defines not passed to its build", "lib/attnlab/delta/kernels.py",
             'else load_kernel(PREP_SRC, "kda_chunk_prep", prep_args, defines=prep_defines))',
             'else load_kernel(PREP_SRC, "kda_chunk_prep", prep_args))',
             ("tests/test_emu_delta_tc.py::test_register_operand_probe_forms_through_the_launcher",),
             "the plan must carry the build's defines (07's earlier layout, launched with its larger shared memory)"),
    Mutation("07 (aliased layout): the Akk / Aqk blocks stored before every warp has read the operands",
             "kernels/delta/07_chunk_prep_tc.cu",
             "    if constexpr (L::AL) __syncthreads();   // every operand read",
             "    if constexpr (BF) __syncthreads();   // every operand read",
             ("tests/test_emu_delta_tc.py::test_register_operand_probe_builds_reproduce_the_recorded_builds[K64V64BV16]",),
             "07's earlier layout (the probe build) is compared with the aliased one bit for bit"),
    Mutation("delta_io: bf16 widening swaps the two halves of a word", "kernels/delta/delta_io.cuh",
             "    if constexpr (BF) return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));",
             "    if constexpr (BF) return make_float2(__uint_as_float(w & 0xffff0000u), __uint_as_float(w << 16));",
             ("tests/test_emu_delta_tc.py::test_tensor_core_kernels_match_float64[T17-logsigmoid-h00-K64V64BV32]",),
             "bf16 I/O: adjacent channels exchanged in q, k, g"),
    Mutation("banks: row reads at stride D instead of the padded stride", "lib/attnlab/banks.py",
             "            out.append(tuple(base + BANK_BYTES * (r * stride + lane + WARP * i) for lane in range(WARP)))",
             "            out.append(tuple(base + BANK_BYTES * (r * D + lane + WARP * i) for lane in range(WARP)))",
             ("tests/test_banks.py",), "the conflict verdict does not change; the addresses do"),
    # ---- 10h (Stream-K) on the ladder CPU model (tests/test_emu_10_bf16_ladder.py)
    Mutation("10h: the merge skips the last other part", STREAM_K,
             "for (long long cc = c_lo; cc <= c_hi; ++cc) {", "for (long long cc = c_lo; cc < c_hi; ++cc) {",
             STREAM_K_CASES, "a row block split over three blocks loses a third of its keys"),
    Mutation("10h: the merging block leaves its counter set", STREAM_K,
             "            if (tid == 0) counters[u] = 0;\n", "",
             STREAM_K_CASES, "the next launch would merge too early; the model checks every counter ends at 0"),
    Mutation("10h: parts stored to one slot", STREAM_K,
             "float* mine = ws + ((c * 2 + slot) * REC) * THREADS + tid;",
             "float* mine = ws + ((c * 2) * REC) * THREADS + tid;",
             STREAM_K_CASES, "a block whose share begins and ends inside split row blocks overwrites its first part"),
    Mutation("delta: a non-array input reaches the shape checks", "lib/attnlab/delta/naive.py",
             '        if not (hasattr(a, "shape") and hasattr(a, "ndim")):',
             '        if False:',
             ("tests/test_delta_kernels.py::test_invalid_inputs_raise_value_error_naming_the_constraint",),
             "a list fails with AttributeError deep in the checks instead of a one-line ValueError"),
    Mutation("10h: workspace for one part a block, not two (the C++ size helper)", STREAM_K,
             "    return 2ull * (unsigned long long)P * (unsigned long long)attn10h::record_floats(D)",
             "    return 1ull * (unsigned long long)P * (unsigned long long)attn10h::record_floats(D)",
             STREAM_K_CASES + ("tests/test_emu_10_bf16_ladder.py::test_stream_k_and_copy_warps_under_sanitizers",),
             "a block's second part lands past the workspace: the model's guard behind it reports the write"),
    # ---- 10i (copies by CW warps) on the ladder CPU model
    Mutation("10i: odd copy passes take the even passes' swizzle pattern", OCCUPANCY,
             "            if constexpr (TWO) cp_async16(d + i * RPP * D + ((i & 1) ? odd : 0), src + i * RPP * D);",
             "            if constexpr (TWO) cp_async16(d + i * RPP * D, src + i * RPP * D);",
             COPY_WARPS_CASES, "rows r + 4 land in row r's chunk order: ldmatrix reads the wrong columns"),
    Mutation("10i: one copying warp too few", OCCUPANCY,
             "return COPIERS == THREADS || (int)threadIdx.x < COPIERS; }",
             "return COPIERS == THREADS || (int)threadIdx.x < COPIERS - 32; }",
             COPY_WARPS_CASES, "half the rows of every tile are never copied (NaN-poisoned shared memory)"),
    Mutation("attention: 10h takes the plain grid only above FILL % (not at it)", ATTENTION,
             '    return 100 * U >= p["FILL"] * (-(-U // slots)) * slots',
             '    return 100 * U > p["FILL"] * (-(-U // slots)) * slots',
             ("tests/test_launch_geometry.py",)),
    # ---- the one timing loop, the CPU model's scheduler, the compile caches
    Mutation("timing: time_rows never interleaves", TIMING, "    if interleaved and timed:", "    if False and timed:",
             ("tests/test_timing.py",)),
    Mutation("timing: time_rows TFLOP/s off by 1000", TIMING,
             '                row["tflops"] = flops[i] / (found[i].median_ms * 1e-3) / 1e12',
             '                row["tflops"] = flops[i] / (found[i].median_ms * 1e-3) / 1e9',
             ("tests/test_timing.py",)),
    Mutation("emulator: waiting threads switched to again (eager order quadratic)", "tests/emu_fibers.h",
             "            if (f.waiting()) continue;", "            ;", ("tests/test_emu_fibers.py",)),
    Mutation("race check: fiber switches order everything (TSan blind)", "tests/emu_fibers.h", "", "",
             ("tests/test_emu_race.py::test_race_check_controls[handover_war]",),
             "a switch that synchronises puts every access after every earlier one: no race is ever reported",
             edit=lambda t: t.replace("__tsan_switch_to_fiber_no_sync)", "0)")),
    Mutation("race check: bar.sync does not acquire (every hand-over a race)", "tests/ladder_emu/ladder_emu.h",
             "    if (wait) emu_hb_acquire(&b.hb[gen % EMU_HB_GENS]);\n", "",
             ("tests/test_emu_race.py::test_race_check_controls[handover_ok]",)),
    Mutation("race check: the asynchronous unit's work not released to its waiters", "tests/emu_fibers.h",
             "    __tsan_release(done);\n", "",
             ("tests/test_emu_race.py::test_race_check_controls[bulk_ok]",),
             "the tile a bulk copy landed would look unordered with every read of it after the mbarrier"),
    Mutation("race check: the asynchronous unit's work not after its issue", "tests/emu_fibers.h",
             "    __tsan_acquire(&f->hb_issue);\n", "",
             ("tests/test_emu_race.py::test_race_check_controls[bulk_ok]",)),
    Mutation("race check: a cp.async's bytes not shown to TSan", "tests/ladder_emu/ladder_emu.h",
             "    emu_hb_async(&emu_cp_async_channel, &r, 1, true, emu_self().cp_hb.open_obj());", "    (void)r;",
             ("tests/test_emu_race.py::test_race_check_controls[cp_async_late]",)),
    Mutation("race check: a wgmma's operands not shown to TSan", "tests/ladder_emu/ladder_emu.h",
             "        emu_hb_async(&emu_wgmma_channel, r, nr, false, me.wg_hb.open_obj());", "        (void)nr;",
             ("tests/test_emu_race.py::test_race_check_controls[wgmma_late]",)),
    Mutation("race check: a shuffle orders memory", "tests/ladder_emu/ladder_emu.h",
             "    std::memcpy(&w.buf[lane], &x, 4);\n    w.bar.arrive_and_wait(false);",
             "    std::memcpy(&w.buf[lane], &x, 4);\n    w.bar.arrive_and_wait(true);",
             ("tests/test_emu_race.py::test_race_check_controls[warp_shfl]",),
             "shfl.sync is no memory barrier in the PTX model: a lane's store is not ordered before another's load"),
    Mutation("race check: one asynchronous unit for every completion channel", "tests/emu_fibers.h",
             "        if (ch == channel) unit = u;", "        unit = u;",
             ("tests/test_emu_race.py::test_race_check_controls[channel_raw]",),
             "waiting on one mbarrier would order the reads after another barrier's copy, still in flight"),
    Mutation("race check: 14's WG_E refills a buffer without waiting for EMPTY", "kernels/delta/14_chunk_state_multicast.cu",
             "            if (n >= 2) named_bar_sync(BAR_EMPTY + (n & 1), L::NTH);   // WG_C is done with chunk n - 2 (NKD = 3: its Kbg, Qg)",
             "            if (n >= 2) named_bar_arrive(BAR_EMPTY + (n & 1), L::NTH);",
             ("tests/test_emu_race.py::test_delta_kernels_have_no_unordered_shared_memory_access[K64V64BV16]",),
             "WG_E may overwrite a buffer WG_C still reads: reported whatever order the model runs the threads in"),
    Mutation("cubins: the byte CuPy drops not put back", "lib/attnlab/compile.py",
             "    if end - len(image) == 1 and ph_end == end:", "    if False:",
             ("tests/test_cubin_image.py",)),
    Mutation("caches: a compile cache the user set is overridden", "lib/attnlab/paths.py",
             "        if not os.environ.get(var):", "        if True:",
             ("tests/test_report_runner.py::test_compile_caches_live_under_the_lab_cache_root_unless_set",)),
    # ---- recorded data checked by value (tests/test_recorded_data.py)
    Mutation("data: converged claimed at a spread above 5 %", NAIVE_TIMING, "", "", ("tests/test_recorded_data.py",),
             edit=csv_row_edit("converged", lambda r: "True",
                               lambda r: r["converged"] == "False" and float(r["rel_iqr"]) > 0.05)),
    Mutation("data: a negative latency", NAIVE_TIMING, "", "", ("tests/test_recorded_data.py",),
             edit=csv_row_edit("median_ms", lambda r: "-" + r["median_ms"])),
    Mutation("data: a row measured with uncommitted code", NAIVE_TIMING, "", "", ("tests/test_recorded_data.py",),
             edit=csv_row_edit("git_dirty", lambda r: "True")),
)


class MutationError(RuntimeError):
    pass


# ----------------------------------------------------------------------------- the scratch copy

def tree_files(root: Path) -> list[Path]:
    """Tracked files plus untracked files git does not ignore (the working tree as it is now)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=root, capture_output=True, check=True).stdout
        names = sorted({n for n in out.decode().split("\0") if n})
    except (OSError, subprocess.CalledProcessError):
        # No git (a tarball): everything but the usual clutter.
        skip = {".git", ".venv", "__pycache__", ".pytest_cache", ".ipynb_checkpoints"}
        names = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                       if p.is_file() and not skip & set(p.relative_to(root).parts))
    return [Path(n) for n in names if (root / n).is_file() or (root / n).is_symlink()]


def copy_tree(root: Path, dest: Path) -> int:
    files = tree_files(root)
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, dest / rel, follow_symlinks=False)
    return len(files)


def mutated_text(root: Path, m: Mutation) -> str:
    """The file's text with the bug in (check_mutation's conditions hold first)."""
    check_mutation(root, m)
    text = (root / m.file).read_text()
    return m.edit(text) if m.edit else text.replace(m.old, m.new, 1)


def check_mutation(root: Path, m: Mutation) -> None:
    path = root / m.file
    if not path.is_file():
        raise MutationError(f"{m.name}: no file {m.file}")
    if m.edit is not None:
        text = path.read_text()
        try:
            if m.edit(text) == text:
                raise MutationError(f"{m.name}: the edit changes nothing in {m.file}")
        except MutationError as e:
            raise MutationError(f"{m.name}: {e}") from None
        return
    n = path.read_text().count(m.old)
    if n != 1:
        raise MutationError(f"{m.name}: the old text occurs {n} times in {m.file} (must be exactly once):\n"
                            f"    {m.old!r}")
    if m.old == m.new:
        raise MutationError(f"{m.name}: old and new text are the same")


# ----------------------------------------------------------------------------- running

def test_env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNLAB_GIT_")}
    env.update(PYTHONPATH=os.pathsep.join([str(work / "lib"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               ATTNLAB_ROOT=str(work), PYTHONDONTWRITEBYTECODE="1")
    return env


def check_imports_from_copy(work: Path) -> None:
    out = subprocess.run([sys.executable, "-c", "import attnlab, attnlab.paths as p; "
                          "print(attnlab.__file__); print(p.REPO_ROOT)"],
                         cwd=work, env=test_env(work), capture_output=True, text=True)
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) != 2 or not all(Path(x).resolve().is_relative_to(work.resolve())
                                                          for x in lines):
        raise MutationError(f"attnlab does not import from the scratch copy {work}: {out.stdout}{out.stderr}")


@dataclass
class Outcome:
    status: str          # 'caught', 'survived', 'error' (or 'pass'/'fail' for a baseline)
    seconds: float
    detail: str


def run_selection(work: Path, selection: tuple[str, ...], timeout: float) -> tuple[int, str, float]:
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *selection]
    t0 = time.perf_counter()
    try:
        res = subprocess.run(cmd, cwd=work, env=test_env(work), capture_output=True, text=True, timeout=timeout)
        return res.returncode, res.stdout + res.stderr, time.perf_counter() - t0
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return -1, out + f"\n(timed out after {timeout:.0f} s)", time.perf_counter() - t0


def first_failure(output: str) -> str:
    for line in output.splitlines():
        if line.startswith(("FAILED", "ERROR")):
            return line[:200]
    tail = [l for l in output.splitlines() if l.strip()]
    return tail[-1][:200] if tail else ""


def mutate_and_run(work: Path, m: Mutation, timeout: float) -> Outcome:
    path = work / m.file
    original = path.read_text()
    path.write_text(mutated_text(work, m))
    try:
        rc, out, secs = run_selection(work, m.selection, timeout)
    finally:
        path.write_text(original)
    if rc == 0:
        return Outcome("survived", secs, "the selection passed with the bug in")
    if rc == 1:           # pytest: tests ran and some failed
        return Outcome("caught", secs, first_failure(out))
    return Outcome("error", secs, f"pytest exit {rc}: {first_failure(out)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", dest="match", default="", help="only mutations whose name contains this text")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copy (its path is printed)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per pytest run (default 600)")
    ap.add_argument("--root", type=Path, default=ROOT, help="the repository to copy (default: this one)")
    args = ap.parse_args(argv)

    chosen = [m for m in MUTATIONS if args.match.lower() in m.name.lower()]
    if args.list:
        for m in chosen:
            change = "an edit of its first qualifying row" if m.edit else f"{m.old!r} -> {m.new!r}"
            print(f"{m.name}\n    {m.file}: {change}\n    caught by: {' '.join(m.selection)}")
        return 0
    if not chosen:
        print(f"no mutation matches {args.match!r}", file=sys.stderr)
        return 2
    try:
        for m in chosen:
            check_mutation(args.root, m)
    except MutationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    work = Path(tempfile.mkdtemp(prefix="attnlab-mutation-"))
    try:
        n = copy_tree(args.root, work)
        print(f"copied {n} files of {args.root} to {work}")
        check_imports_from_copy(work)

        errors = 0
        for sel in dict.fromkeys(m.selection for m in chosen):
            rc, out, secs = run_selection(work, sel, args.timeout)
            ok = rc == 0
            print(f"baseline  {'pass' if ok else 'FAIL'}  {secs:6.1f} s  {' '.join(sel)}"
                  + ("" if ok else f"\n          {first_failure(out)}"))
            errors += not ok
        if errors:
            print("error: a selection fails without any mutation; its verdicts would mean nothing", file=sys.stderr)
            return 2

        results: list[tuple[Mutation, Outcome]] = []
        for m in chosen:
            try:
                o = mutate_and_run(work, m, args.timeout)
            except MutationError as e:
                o = Outcome("error", 0.0, str(e))
            results.append((m, o))
            print(f"{o.status.upper():9} {o.seconds:6.1f} s  {m.name}\n          {o.detail}", flush=True)

        survived = [m for m, o in results if o.status == "survived"]
        failed = [m for m, o in results if o.status == "error"]
        caught = len(results) - len(survived) - len(failed)
        print(f"\n{caught} caught, {len(survived)} survived, {len(failed)} errors (of {len(results)})")
        for m in survived:
            print(f"  SURVIVED: {m.name} ({m.file}; {' '.join(m.selection)})")
        for m in failed:
            print(f"  ERROR:    {m.name}")
        return 2 if failed else (1 if survived else 0)
    except MutationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if args.keep:
            print(f"scratch copy kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
