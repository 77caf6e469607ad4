"""KDA kernels: input validation, static build, CPU emulation of the CUDA code, GPU correctness.

CPU-only parts run everywhere: the launchers' ValueErrors, an nvcc build of every kernel for
sm_75 and sm_90 (no spills at K = V = 128), and the kernels themselves executed by a small CPU
model of CUDA (tests/delta_emu/), compared stage by stage with the NumPy mirror. GPU tests are
marked ``gpu`` and skip only when no CUDA device is usable.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from attnlab.delta import chunk_stages_model, kda_recurrent_fp64, random_inputs
from attnlab.delta import kernels as dk
from attnlab.delta.model import chunk_cost, cost_table, recurrent_cost, workspace_bytes
from attnlab.static import nvcc_path, static_build

import emu_build  # tests/emu_build.py: g++ builds cached by content

ROOT = Path(__file__).resolve().parents[1]
EMU_DIR = ROOT / "tests" / "delta_emu"


def rel(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    nb = np.linalg.norm(b)
    if not np.all(np.isfinite(a)):
        return float("inf")
    return float(np.linalg.norm(a - b) / nb) if nb > 0 else float(np.linalg.norm(a - b))


# ----------------------------------------------------------------------------- validation (CPU)

def _inputs(**kw):
    x = random_inputs(1, 8, 2, 64, 64, initial_state=True)
    x.update(kw)
    return x


BAD_INPUTS = {
    "positive-g": (lambda x: x["g"].__setitem__((0, 3, 1, 5), 0.5), "g must be a log-space decay"),
    "nan-g": (lambda x: x["g"].__setitem__((0, 0, 0, 0), np.nan), "g must be a log-space decay"),
    "minus-inf-g": (lambda x: x["g"].__setitem__((0, 2, 0, 1), -np.inf), "g must be a log-space decay"),
    "k-shape": (lambda x: x.__setitem__("k", x["k"][:, :7].copy()), "k must have q's shape"),
    "v-batch": (lambda x: x.__setitem__("v", np.zeros((2, 8, 2, 64), np.float32)), "v must be"),
    "beta-shape": (lambda x: x.__setitem__("beta", np.zeros((1, 8), np.float32)), "beta must be"),
    "state-shape": (lambda x: x.__setitem__("initial_state", np.zeros((1, 2, 64, 32), np.float32)),
                    "initial_state must be"),
    "q-float64": (lambda x: x.__setitem__("q", x["q"].astype(np.float64)), "q must be float32"),
    "v-float16": (lambda x: x.__setitem__("v", x["v"].astype(np.float16)), "v must be float32"),
    "k-noncontiguous": (lambda x: x.__setitem__("k", np.asfortranarray(x["k"])), "k must be C-contiguous"),
    "K-96": (lambda x: [x.__setitem__(n, np.zeros((1, 8, 2, 96), np.float32)) for n in ("q", "k", "g")]
             and x.__setitem__("initial_state", None), "K .* must be one of"),
    "V-32": (lambda x: x.__setitem__("v", np.zeros((1, 8, 2, 32), np.float32))
             or x.__setitem__("initial_state", None), "V .* must be one of"),
    "host-numpy": (lambda x: None, "must be a CUDA array"),
    "not-an-array": (lambda x: x.__setitem__("beta", [[0.5] * 2] * 8), "beta must be"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_invalid_inputs_raise_value_error_naming_the_constraint(case):
    mutate, match = BAD_INPUTS[case]
    x = _inputs()
    mutate(x)
    with pytest.raises(ValueError, match=match):
        dk.validate_inputs(**x)


def test_torch_cpu_tensor_is_rejected_as_wrong_device():
    torch = pytest.importorskip("torch")
    x = {n: torch.from_numpy(a) for n, a in _inputs().items()}
    with pytest.raises(ValueError, match="CUDA device"):
        dk.validate_inputs(**x)
    x["q"] = x["q"].double()
    with pytest.raises(ValueError, match="q must be float32"):
        dk.validate_inputs(**x)
    x["q"] = x["k"].transpose(1, 2).contiguous().transpose(1, 2)   # right shape, wrong strides
    with pytest.raises(ValueError, match="q must be C-contiguous"):
        dk.validate_inputs(**x)


@pytest.mark.parametrize("kw, match", [
    (dict(chunk_size=48), "chunk_size must be one of"),
    (dict(chunk_size=256), "chunk_size must be one of"),
    (dict(chunk_size=64, bv=8), "bv"),
    (dict(chunk_size=64, bv=64), "bv"),
    (dict(rg=2), "rg"),
    (dict(rg=3), "rg"),
], ids=["C48", "C256", "BV8", "BV64", "RG2", "RG3"])
def test_unsupported_tilings(kw, match):
    with pytest.raises(ValueError, match=match):
        dk.validate_config(128, 128, **kw)


def test_rg_must_fit_the_head():
    dk.validate_config(128, 128, rg=32)
    with pytest.raises(ValueError, match="rg"):
        dk.validate_config(64, 64, rg=32)      # 64 rows cannot be split 4 x 32


def test_state_pass_shared_memory_fits_every_supported_tiling():
    for K in dk.SUPPORTED_K:
        for V in dk.SUPPORTED_V:
            for C in dk.SUPPORTED_CHUNK:
                for bv in dk.SUPPORTED_BV:
                    nbytes = 4 * dk.state_smem_floats(K, V, C, bv)
                    assert nbytes <= 227 * 1024, (K, V, C, bv, nbytes)
    # The default H200 shape fits the 48 KB that needs no opt-in.
    assert 4 * dk.state_smem_floats(128, 128, 64, 16) <= 48 * 1024


def test_tensor_core_state_pass_shared_memory_and_choice():
    for K in dk.SUPPORTED_K:
        for C in dk.TC_CHUNK:
            for bv in dk.SUPPORTED_BV:
                assert 4 * dk.state_tc_smem_floats(K, K, C, bv) <= 227 * 1024, (K, C, bv)
    assert 4 * dk.state_tc_smem_floats(128, 128, 128, 32) > 227 * 1024   # why C = 128 is not offered
    assert dk.resolve_state_kernel("auto", 32, 90) == "tc"
    assert dk.resolve_state_kernel("auto", 128, 90) == "simt"
    assert dk.resolve_state_kernel("auto", 32, 75) == "simt"
    assert dk.resolve_state_kernel("simt", 32, 90) == "simt"
    with pytest.raises(ValueError, match="chunk_size must be one of"):
        dk.resolve_state_kernel("tc", 128, 90)
    with pytest.raises(ValueError, match="compute capability >= 8.0"):
        dk.resolve_state_kernel("tc", 32, 75)
    with pytest.raises(ValueError, match="state must be one of"):
        dk.resolve_state_kernel("wgmma", 32, 90)
    with pytest.raises(ValueError, match="state must be one of"):
        dk.prepare_chunk(**_inputs(), state="fast")


def test_default_value_block_keeps_half_the_gpu_busy():
    assert dk.default_bv(2, 16, 128, 132) == 32     # 128 blocks of 32 columns on 132 SMs
    assert dk.default_bv(1, 2, 128, 132) == 16      # 8 blocks of 32 would idle most SMs
    assert dk.default_bv(8, 16, 128, 132) == 32
    assert dk.solve_cols_per_thread(16) == 2 and dk.solve_cols_per_thread(32) == 1
    assert dk.solve_cols_per_thread(128) == 1


def test_workspace_shapes_pad_the_last_chunk():
    s = dk.chunk_workspace_shapes(2, 100, 3, 64, 128, 32)
    assert s["Akk"] == (2, 3, 4, 32, 32) and s["W"] == (2, 3, 128, 64) and s["U"] == (2, 3, 128, 128)
    total = 4 * sum(int(np.prod(v)) for v in s.values())
    assert total == workspace_bytes(2, 100, 3, 64, 128, 32)


def test_cost_model():
    r, c = recurrent_cost(128, 128), chunk_cost(128, 128, 64)
    assert r.flops == 7 * 128 * 128 + 2 * 128 + 128
    assert r.bytes == 4 * (3 * 128 + 2 * 128 + 1)
    # The chunked form does more arithmetic and traffic, but T/C sequential steps instead of T.
    assert 1.2 < c.flops / r.flops < 1.6
    assert c.bytes > 3 * r.bytes
    assert c.sequential_steps_per_token == 1 / 64
    df = cost_table(128, 128, (16, 64), stages=True)
    assert list(df["form"])[:2] == ["recurrent", "chunked"] and len(df) == 1 + 2 * 4


# ----------------------------------------------------------------------------- static build (CPU)

BAR_PROD = 2   # kernels/delta/wgmma_recurrence.cuh's KdaWgBars::PROD: WG_E's own barrier


def fenced_bar_syncs(ptx: str) -> set:
    """(barrier id, thread count) of every ``bar.sync`` whose previous instruction (past the moves of
    its operands) is a ``fence.proxy.async``: ids and counts as the PTX moves them into registers."""
    imm, prev, out = {}, None, set()
    for line in ptx.splitlines():
        ins = line.strip().rstrip(";")
        if not ins or ins.startswith("//") or ins.endswith(":"):
            continue
        m = re.fullmatch(r"mov\.u32\s+(%r\d+),\s*(\d+)", ins)
        if m:
            imm[m.group(1)] = int(m.group(2))
            continue
        m = re.fullmatch(r"bar\.sync\s+(%r\d+),\s*(%r\d+)", ins)
        if m and prev is not None and prev.startswith("fence.proxy.async"):
            out.add((imm.get(m.group(1)), imm.get(m.group(2))))
        prev = ins
    return out


STATIC = [(K, inst) for K in (128, 64)
          for inst in dk.static_instantiations(K, K, forms=("recurrent", "chunked", "tc", "cluster", "wgmma"))]


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
@pytest.mark.parametrize("K, inst", STATIC, ids=[f"K{K}-{i[1]}<{','.join(map(str, i[2]))}>" for K, i in STATIC])
def test_delta_kernels_build_without_spills(K, inst, arch):
    source, function, args = inst
    spec = next(k for k in dk.DELTA_KERNELS if k.source == source)   # 14's file holds two kernels
    if int(arch.split("_")[1]) < spec.min_cc:
        pytest.skip(f"{function} needs sm_{spec.min_cc}+ (the registry's min_cc)")
    (r,) = static_build(source, function, [args], dk.static_arch(function, arch))
    assert r.registers > 0
    allowed = dk.SPILL_ALLOWANCE.get(function, 0)   # 21: a small spill, measured faster than the form without one
    assert max(r.spill_store_bytes, r.spill_load_bytes) <= allowed, f"{r.name} spills on {arch}: {r.spill_store_bytes} B stored"
    assert r.stack_bytes <= allowed, f"{r.name} uses a {r.stack_bytes} B stack frame on {arch}"
    # ptxas may make every wgmma wait for the one before it (its C751x warnings): then nothing overlaps
    assert not r.wgmma_serialized, f"{r.name}: ptxas serialized its wgmmas ({r.wgmma_serialized}) on {arch}"
    # Registers must allow at least one block of the launch size (07: the blocks per SM it is built
    # for, dk.prep_blocks_per_sm).
    if spec.form == "tc":   # the launch size the launcher uses (07: its blocks per SM)
        threads = dk.tc_threads(function, args)
    else:
        threads = {"kda_recurrent": dk.RECURRENT_WARPS * 32, "kda_chunk_intra": 4 * args[1] if len(args) == 2 else 0,
                   "kda_chunk_solve": (args[0] + args[1]) // (args[3] if len(args) == 4 else 1),
                   "kda_chunk_state": (args[0] // 4) * (args[-1] // 4),
                   "kda_chunk_state_tc": 2 * args[0]}[function]
    assert r.registers * threads <= 65536
    if function == "kda_chunk_state":
        assert "ld.shared.v4.f32" in r.ptx, "the state pass should read shared memory as float4"
    if function == "kda_chunk_state_tc":
        assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in r.ptx
        assert "cp.async.cg.shared.global" in r.ptx
        assert "cvt.rna.tf32" not in r.ptx, "the TF32 split should round with integer ops, not conversions"
    if function == "kda_chunk_state_wgrs":
        # 16: every product with A from registers (a chunk: P1 3 K / 16 wgmmas, P2 6, P4 6), B MN-major for P1,
        # K-major for P2 and P4; nothing of the chain through stmatrix; 07's rows by tensor copies
        assert r.ptx.count("wgmma.mma_async.sync.aligned.m64n") == 3 * args[0] // 16 + 12
        assert "stmatrix" not in r.ptx and "mma.sync" not in r.ptx
        assert "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes" in r.ptx
    elif function == "kda_chunk_state_hilo":
        # 23: 16's turned-around chain at 32 value columns (a column's hi / lo terms a row pair): a chunk's P1 two
        # m64n64 wgmmas a k step (B hi, lo), P2 and A2 X four m64n32 each, P4 eight m64n(K/2) (two halves of the
        # channels); every A from registers; nothing of the chain through stmatrix, and WG_E's tensor copies as in 19
        wg = [ln for ln in r.ptx.splitlines() if "wgmma.mma_async.sync.aligned.m64n" in ln]
        shapes = {n: sum(f".m64n{n}k16." in ln for ln in wg) for n in (32, 64, 128)}
        want = {32: 8, 64: 2 * K // 16, 128: 0}
        want[K // 2] += 8
        assert shapes == want, f"{r.name}: wgmma shapes {shapes}, expected {want}"
        assert all("}, {" in ln for ln in wg), f"{r.name}: a wgmma with A from shared memory"
        assert "stmatrix" not in r.ptx and "mma.sync" not in r.ptx
        assert "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes" in r.ptx
        assert "fence.proxy.async.shared::cta" in r.ptx
    elif function in ("kda_chunk_state_wgmma", "kda_chunk_state_mc", "kda_chunk_state_tma", "kda_chunk_state_diet",
                      "kda_chunk_state_single", "kda_chunk_state_ahead", "kda_chunk_state_tile", "kda_chunk_state_wide",
                      "kda_chunk_state_pre", "kda_chunk_state_kdreg", "kda_chunk_state_wy", "kda_chunk_state_share",
                      "kda_chunk_state_side", "kda_chunk_state_pair", "kda_chunk_state_late"):
        # the products as warpgroup MMAs (A from registers and from shared memory), transposed tiles
        # out by stmatrix, and every generic-proxy tile fenced for the async proxy
        assert "wgmma.mma_async.sync.aligned.m64n" in r.ptx and "wgmma.wait_group.sync.aligned" in r.ptx
        assert "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in r.ptx and "fence.proxy.async.shared::cta" in r.ptx
        assert "mma.sync" not in r.ptx
        if function == "kda_chunk_state_pre":   # 22: the operands by a plain bulk copy, no element-wise arithmetic
            assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in r.ptx and "ex2.approx" not in r.ptx
        if function == "kda_chunk_state_kdreg":   # 24: 19's build with P4's Kd^T fragments loaded by ldmatrix.x4
            (r19,) = static_build(dk.TILE_SRC, "kda_chunk_state_tile", [args], dk.static_arch(function, arch))
            ldm = lambda ptx: ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16")  # noqa: E731
            assert ldm(r.ptx) > ldm(r19.ptx), f"{r.name}: P4's Kd^T fragments are not loaded by ldmatrix.x4"
        if function == "kda_chunk_state_late":   # 30: 24's products and fragment loads, count for count (o stored later)
            (r24,) = static_build(dk.KDREG_SRC, "kda_chunk_state_kdreg", [args], dk.static_arch(function, arch))
            for ins in ("wgmma.mma_async.sync.aligned.m64n", "ldmatrix.sync.aligned.m8n8.x4.shared.b16"):
                assert r.ptx.count(ins) == r24.ptx.count(ins), f"{r.name}: {ins} {r.ptx.count(ins)}, 24 {r24.ptx.count(ins)}"
        if function == "kda_chunk_state_wy":   # 25: 24's products and U's six (two k steps, three terms) in P1;
            (r24,) = static_build(dk.KDREG_SRC, "kda_chunk_state_kdreg", [args + (False,)], dk.static_arch(function, arch))
            wg = lambda ptx: ptx.count("wgmma.mma_async.sync.aligned.m64n")  # noqa: E731
            assert wg(r.ptx) == wg(r24.ptx) + 6, f"{r.name}: {wg(r.ptx)} wgmmas, 24 has {wg(r24.ptx)}"
            # 07's T words land with the staging tile by one bulk copy (WG_E makes W from them)
            assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in r.ptx
        if function == "kda_chunk_state_share":   # 26: 22's chain and bulk copies (22's wgmmas), the maker's tensor
            (r22,) = static_build(dk.PRE_SRC, "kda_chunk_state_pre", [args + (False,)], dk.static_arch(function, arch))
            wg = lambda ptx: ptx.count("wgmma.mma_async.sync.aligned.m64n")  # noqa: E731
            assert wg(r.ptx) == wg(r22.ptx), f"{r.name}: {wg(r.ptx)} wgmmas, 22 has {wg(r22.ptx)}"
            # copies of g, k, q, its exp2s, its bulk stores of the images to global memory and the flags' release / acquire
            assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in r.ptx
            assert "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes" in r.ptx
            assert "ex2.approx" in r.ptx and "cp.async.bulk.global.shared::cta.bulk_group" in r.ptx
            assert "cp.async.bulk.wait_group 0" in r.ptx
            assert "st.release.gpu.global.s32" in r.ptx and "ld.acquire.gpu.global.s32" in r.ptx
        if function == "kda_chunk_state_side":   # 27: 24's products, every one m64n64 (64 value columns), 24's count;
            (r24,) = static_build(dk.KDREG_SRC, "kda_chunk_state_kdreg", [args[:3] + (32, False)],   # v in two tensor
                                  dk.static_arch(function, arch))                                  # copies a chunk, and
            wg = [ln for ln in r.ptx.splitlines() if "wgmma.mma_async.sync.aligned.m64n" in ln]   # 07's flags acquired
            assert len(wg) == r24.ptx.count("wgmma.mma_async.sync.aligned.m64n") and all(".m64n64k16." in ln for ln in wg)
            tma = "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
            assert r.ptx.count(tma) > r24.ptx.count(tma), f"{r.name}: v's second box"
            assert "ld.acquire.gpu.global.s32" in r.ptx and "fence.proxy.async.global" in r.ptx
        if function == "kda_chunk_state_pair":   # 28: 24's products, count for count; clusters of two, the other
            (r24,) = static_build(dk.KDREG_SRC, "kda_chunk_state_kdreg", [args + (False,)],   # block's half by bulk copies
                                  dk.static_arch(function, arch))                           # shared -> shared::cluster on
            wg = lambda ptx: ptx.count("wgmma.mma_async.sync.aligned.m64n")  # noqa: E731     # its mbarrier, the hand-
            assert wg(r.ptx) == wg(r24.ptx), f"{r.name}: {wg(r.ptx)} wgmmas, 24 has {wg(r24.ptx)}"   # overs at cluster scope
            assert ".reqnctapercluster 2, 1, 1" in r.ptx and "mapa.shared::cluster.u32" in r.ptx
            assert "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes" in r.ptx
            assert "mbarrier.arrive.release.cluster.shared::cluster.b64" in r.ptx
            assert "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64" in r.ptx
            assert "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes" in r.ptx
    elif spec.form == "tc":
        assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in r.ptx
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in r.ptx
        assert "cvt.rn.bf16x2.f32" in r.ptx
    if function == "kda_chunk_state_mc" and args[5] > 1:
        # 14 on a cluster: the q, k, g rows as multicast bulk copies completing on mbarriers, released
        # by remote arrivals across the cluster
        assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster" in r.ptx
        assert "mbarrier.arrive.release.cluster.shared::cluster.b64" in r.ptx and "mapa.shared::cluster.u32" in r.ptx
        assert "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64" in r.ptx and ".reqnctapercluster" in r.ptx
    elif function in ("kda_chunk_state_tma", "kda_chunk_state_diet", "kda_chunk_state_single", "kda_chunk_state_ahead",
                      "kda_chunk_state_tile", "kda_chunk_state_wide", "kda_chunk_state_kdreg"):
        # 14's TMA form (and 15's, 17's, 18's, 19's, 20's): a 4-D tensor copy per array and chunk, no cluster, no row copies
        assert "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes" in r.ptx
        assert "multicast" not in r.ptx and ".reqnctapercluster" not in r.ptx
    elif function == "kda_chunk_state_mc":
        # 14 alone: plain bulk copies into the block's tile, no cluster protocol
        assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [" in r.ptx
        assert "multicast" not in r.ptx and "mapa" not in r.ptx
    if function in ("kda_chunk_state_mc", "kda_chunk_state_tma", "kda_chunk_state_diet", "kda_chunk_state_single",
                    "kda_chunk_state_ahead", "kda_chunk_state_tile", "kda_chunk_state_wgrs", "kda_chunk_state_wide",
                    "kda_chunk_state_hilo", "kda_chunk_state_kdreg"):
        # 14-20: the copy engine (async proxy) refills the staging tile once WG_E's barrier releases it, so
        # WG_E's loads of it are fenced for the async proxy before that barrier (scripts/stress_delta.py
        # caught 19 reading the next chunk's g, k without it): a barrier of WG_E's threads, all but WG_C's 128
        ne = dk.tc_threads(function, args) - 128
        assert (BAR_PROD, ne) in fenced_bar_syncs(r.ptx), f"{r.name}: the staging tile's release is not fenced"
    if function in ("kda_chunk_state_tile", "kda_chunk_state_wide", "kda_chunk_state_kdreg"):
        # 19 (and 20, 24): P1 with A MN-major from shared memory (tnspA = 1: K / 16 wgmmas a term, three terms at fp32,
        # one at bf16), none with A from registers in P1 (P2's three terms: six a chunk); 24's P4 from registers too
        # (two k steps, the state's K / 64 m64 tiles, three terms at fp32, one at bf16)
        n_mna = r.ptx.count("p, 1, 1, 1, 0;")
        assert n_mna == (1 if args[4] else 3) * args[0] // 16, f"{r.name}: {n_mna} MN-major-A wgmmas"
        n_rs = sum(1 for ln in r.ptx.splitlines() if "wgmma.mma_async" in ln and "}, {" in ln)
        p4 = 2 * (args[0] // 64) * (1 if args[4] else 3) if function == "kda_chunk_state_kdreg" else 0
        assert n_rs == 6 + p4, f"{r.name}: {n_rs} wgmmas with A from registers ({6 + p4} expected: P2's six, P4's {p4})"
    if function == "kda_chunk_state_cluster":
        # one cluster-barrier phase per chunk (split arrive / wait), P1 written through mapa'd addresses
        assert "barrier.cluster.arrive.release.aligned" in r.ptx and "barrier.cluster.wait.acquire.aligned" in r.ptx
        assert "mapa.u64" in r.ptx and ".reqnctapercluster" in r.ptx
    if function in ("kda_chunk_state_ws", "kda_chunk_state_lean"):
        assert "bar.arrive" in r.ptx and "bar.sync" in r.ptx, "09 and 10 hand buffers over with named barriers"
    if function == "kda_chunk_state_lean":
        assert "cp.async.cg.shared.global" in r.ptx, "10 still copies v and 07's words with cp.async"
        # q, k, g reach the producers as 8-byte global loads; Kd^T leaves them as 16-byte (K = 128)
        # or 8-byte (K = 64) shared stores
        assert "ld.global.nc.v2.f32" in r.ptx or "ld.global.v2.f32" in r.ptx
        assert ("st.shared.v4.u32" if K == 128 else "st.shared.v2.u32") in r.ptx


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
@pytest.mark.parametrize("function, bf", [("kda_chunk_state_kdreg", False), ("kda_chunk_state_kdreg", True),
                                          ("kda_chunk_state_pre", False)], ids=["24-fp32", "24-bf16", "22-fp32"])
def test_wy_chain_probe_builds(function, bf):
    """KDA_NO_P2 (the WY form's chain, a timing build in notebook 13's probe table) builds for sm_90a as the recorded
    builds do: no spill, no serialized wgmma; and it is a different chain: P2's wgmmas are still issued (behind P4),
    but no X^T tile is stored, so a chunk has fewer stmatrix stores than the plain build's."""
    src = {"kda_chunk_state_kdreg": dk.KDREG_SRC, "kda_chunk_state_pre": dk.PRE_SRC}[function]
    args = (128, 128, 32, 32, bf)
    arch = dk.static_arch(function, "sm_90")
    (plain,) = static_build(src, function, [args], arch)
    (probe,) = static_build(src, function, [args], arch, defines={"KDA_NO_P2": 1})
    assert max(probe.spill_store_bytes, probe.spill_load_bytes, probe.stack_bytes) == 0, probe.spill_store_bytes
    assert not probe.wgmma_serialized, probe.wgmma_serialized
    wg = lambda ptx: ptx.count("wgmma.mma_async.sync.aligned.m64n")  # noqa: E731
    stm = lambda ptx: ptx.count("stmatrix.sync.aligned")  # noqa: E731
    assert wg(probe.ptx) == wg(plain.ptx), "the probe issues the plain build's products"
    assert stm(probe.ptx) < stm(plain.ptx), "the probe still stores the X^T tile"


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_wy_clock_stamp_build():
    """25's clock-stamp build (KDA_PROBE=3, notebook 13's phase table via fast.WG_STAMP_IMPLS) builds for sm_90a with no
    spill and reads the SM clock (the CPU model has no clock: its stamps are checked on a GPU only)."""
    from attnlab.delta import fast

    (r,) = static_build(dk.WY_SRC, "kda_chunk_state_wy", [(128, 128, 32, 32)], dk.static_arch("kda_chunk_state_wy"),
                        defines={"KDA_PROBE": 3, "KDA_NSTAMP": fast.STAMP_CHUNKS})
    assert max(r.spill_store_bytes, r.spill_load_bytes, r.stack_bytes) == 0 and not r.wgmma_serialized
    assert "%clock64" in r.ptx and "wy" in fast.WG_STAMP_IMPLS


def test_registry_lists_every_delta_kernel_file_once():
    files = sorted(p.name for p in (ROOT / "kernels" / "delta").glob("[0-9][0-9]_*.cu"))
    assert sorted(Path(k.source).name for k in dk.DELTA_KERNELS) == files
    assert [k.step for k in dk.DELTA_KERNELS] == sorted(k.step for k in dk.DELTA_KERNELS)
    for k in dk.DELTA_KERNELS:
        text = (ROOT / "kernels" / k.source).read_text()
        assert text.startswith(f"// {k.step} "), f"{k.source} should open with its step number"
        assert f" {k.function}(" in text or f"\n{k.function}(" in text, f"{k.function} not defined in {k.source}"
    assert dk.delta_kernel("09").function == "kda_chunk_state_ws"
    with pytest.raises(ValueError, match="no delta kernel step"):
        dk.delta_kernel("99")


def test_tensor_core_launcher_mirrors_the_kernel_layouts_and_errors():
    # shared-memory mirrors at the sizes the kernels' static_asserts and the CPU model agree on
    assert 4 * dk.ws_smem_words(128, 128, 32) <= 227 * 1024
    assert dk.lean_smem_words(128, 128, 32) == dk.ws_smem_words(128, 128, 32) - 3 * 32 * 128
    assert 4 * dk.cluster_smem_words(128, 128, 16) <= 227 * 1024
    assert 4 * dk.fused_smem_words(128, 128, 32) <= 227 * 1024
    # 07 is built for four blocks per SM on both paths (its aliased layout; three in the fp32 probe build
    # KDA_PREP_ALIAS=0, whose late arrays have their own space): each block's shared memory and the 1 KB the SM
    # reserves per block
    for alias, blocks in ((True, 4), (False, 3)):
        assert dk.prep_blocks_per_sm(False, alias) == blocks
        assert blocks * (4 * dk.prep_smem_words(128, alias=alias) + 1024) <= 228 * 1024 < \
            (blocks + 1) * (4 * dk.prep_smem_words(128, alias=alias) + 1024), alias
    assert dk.prep_blocks_per_sm(True) == dk.prep_blocks_per_sm(False) == 4
    assert dk.prep_smem_words(128) < dk.prep_smem_words(128, alias=False)
    assert dk.prep_alias(False, None) and not dk.prep_alias(False, {"KDA_PREP_ALIAS": 0})
    assert dk.prep_alias(True, None, ops=True) and not dk.prep_alias(False, None, ops=True)   # 21: bf16 inputs only
    assert dk.ta_workspace_shape(2, 33, 3) == (2, 3, 2, 4, 32, 16)
    with pytest.raises(ValueError, match=r"compute capability >= 8\.0.*7\.5.*state='simt'"):
        dk.check_tc_device(75)
    dk.check_tc_device(90)
    x = _inputs()
    with pytest.raises(ValueError, match="impl must be one of"):
        dk.prepare_tc(**{n: x[n] for n in ("q", "k", "v", "g", "beta")}, impl="bogus")


def test_bf16_io_validation_runs_without_a_gpu():
    """The bf16-I/O path takes torch bfloat16 q, k, v, g, beta (float32 initial state), on 07 -> 10
    only; every refusal is one line naming the constraint, before any device is touched."""
    torch = pytest.importorskip("torch")
    x = _inputs()
    t = {n: torch.from_numpy(np.ascontiguousarray(x[n])).to(torch.bfloat16) for n in ("q", "k", "v", "g", "beta")}
    h0 = torch.zeros(x["q"].shape[0], x["q"].shape[2], x["q"].shape[3], x["v"].shape[3])
    with pytest.raises(ValueError, match=r"bf16 inputs run on impl 'lean', 'regs', 'regs2', 'wgmma', 'wgmma2', 'bulk', 'bulk2', 'multicast', 'multicast2', 'tma', 'tma2', 'tma3', 'diet', 'wgrs', 'single', 'ahead', 'tile', 'wide', 'pre', 'kdreg', 'late' only.*or 29 -> 30\).*impl='ws'.*pass impl='lean'"):
        dk.prepare_tc(**t, impl="ws")
    # 13 with two staging tiles is a bf16-I/O path only: fp32 inputs get one line, before the device
    with pytest.raises(ValueError, match=r"impl='wgmma2' \(13 with two staging tiles\) runs on bf16 inputs only.*227 KB"):
        dk.prepare_tc(**{n: x[n] for n in ("q", "k", "v", "g", "beta")}, impl="wgmma2")
    # so is 17 (P1 and P4 as one bf16 product): not accurate enough for fp32 inputs
    with pytest.raises(ValueError, match=r"impl='single' \(17, P1 and P4 as one bf16 product\) runs on bf16 inputs only.*1e-4.*impl='diet'"):
        dk.prepare_tc(**{n: x[n] for n in ("q", "k", "v", "g", "beta")}, impl="single")
    with pytest.raises(ValueError, match=r"impl='ahead' \(18, 17 with each chunk's P1 a chunk early\) runs on bf16 inputs only.*impl='diet'"):
        dk.prepare_tc(**{n: x[n] for n in ("q", "k", "v", "g", "beta")}, impl="ahead")
    # 23 pairs each value column's hi and lo terms in the accumulator's rows: fp32 inputs only
    with pytest.raises(ValueError, match=r"impl='hilo' \(23, a value column's hi and lo terms as a pair of accumulator rows\) "
                                         r"runs on fp32 inputs only: .*lo row zero.*pass impl='pre' or float32 inputs"):
        dk.prepare_tc(**t, impl="hilo")
    # 25's element-wise warpgroup makes fp32 inputs' hi / lo tiles: fp32 inputs only (for now)
    with pytest.raises(ValueError, match=r"impl='wy' \(25, the WY form's chain\) runs on fp32 inputs only: .*pass "
                                         r"impl='kdreg' or float32 inputs"):
        dk.prepare_tc(**t, impl="wy")
    # all five in bf16, the initial state in float32: only the device check is left
    with pytest.raises(ValueError, match="must be on a CUDA device"):
        dk.validate_inputs(**t, initial_state=h0, io="bf16")
    mixed = dict(t, v=t["v"].float())
    with pytest.raises(ValueError, match=r"v must be bfloat16 like q, got torch.float32"):
        dk.validate_inputs(**mixed, io="bf16")
    with pytest.raises(ValueError, match=r"initial_state must be float32, got torch.bfloat16"):
        dk.validate_inputs(**t, initial_state=h0.to(torch.bfloat16), io="bf16")
    with pytest.raises(ValueError, match=r"q must be a torch bfloat16 tensor like q \(CuPy and NumPy have no"):
        dk.validate_inputs(**dict(t, q=x["q"]), io="bf16")
    with pytest.raises(ValueError, match=r"io must be one of \('fp32', 'bf16'\)"):
        dk.validate_inputs(**t, io="fp16")
    bf = [a for _, f, a in dk.static_instantiations(128, 128, forms=("tc",))
          if (a[2] if f == "kda_chunk_prep" else a[-1]) is True]   # 07's BF flag comes before its A2 flag
    assert (128, 32, True, False) in bf and (128, 128, 32, 32, True) in bf


def test_static_list_has_a_tensor_core_state_pass_for_each_small_chunk():
    insts = dk.static_instantiations(128, 128, chunk_sizes=(32, 128))
    tc = [a for _, f, a in insts if f == "kda_chunk_state_tc"]
    assert tc == [(128, 128, 32, 16), (128, 128, 32, 32)]       # none for C = 128
    assert not [f for _, f, _ in dk.static_instantiations(tensor_cores=False) if f.endswith("_tc")]


# ----------------------------------------------------------------------------- CPU emulation

EMU_CASES = [
    # B, T, H, K, V, C, BV, RG, CPT, gate, initial state
    (1, 40, 2, 32, 32, 16, 16, 8, 2, "logsigmoid", True),
    (2, 17, 1, 32, 32, 16, 16, 8, 2, "logsigmoid", True),     # T not a multiple of C, B = 2
    (1, 1, 1, 32, 32, 16, 16, 8, 2, "logsigmoid", True),      # T = 1
    (1, 100, 2, 64, 64, 32, 16, 16, 2, "logsigmoid", False),
    (1, 70, 1, 64, 64, 64, 32, 8, 2, "const", True),           # g = -50 per step
    (1, 150, 1, 64, 64, 128, 16, 16, 1, "zero", True),        # C = 128, g = 0
    (1, 100, 1, 64, 64, 64, 16, 8, 2, "mixed", True),         # fast and exact paths in one chunk
    (1, 130, 1, 32, 32, 64, 16, 8, 2, "strong", False),       # chunks on both sides of the threshold
]


def _emu_id(c):
    B, T, H, K, V, C, BV, RG, CPT, gate, init = c
    return f"B{B}-T{T}-H{H}-K{K}-V{V}-C{C}-BV{BV}-RG{RG}-{gate}-{'h0' if init else 'noh0'}"


@pytest.fixture(scope="session")
def emu_build_dir(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed (needed for the CPU emulation of the kernels)")
    return tmp_path_factory.mktemp("delta_emu")


def _emu_binary(build_dir: Path, K, V, C, BV, RG, CPT) -> Path:
    exe = build_dir / f"harness_{K}_{V}_{C}_{BV}_{RG}_{CPT}"
    if not exe.exists():
        cmd = ["g++", "-std=c++20", "-O1", "-pthread", "-include", str(ROOT / "tests" / "ladder_emu" / "ladder_emu.h"),
               "-I", str(ROOT / "kernels"), f"-DEMU_K={K}", f"-DEMU_V={V}", f"-DEMU_C={C}",
               f"-DEMU_BV={BV}", f"-DEMU_RG={RG}", f"-DEMU_CPT={CPT}", str(EMU_DIR / "harness.cpp"),
               "-o", str(exe)]
        res = emu_build.run(cmd)
        assert res.returncode == 0, res.stderr[-3000:]
    return exe


@pytest.mark.parametrize("case", EMU_CASES, ids=_emu_id)
def test_cuda_kernels_under_cpu_emulation(case, emu_build_dir, tmp_path):
    B, T, H, K, V, C, BV, RG, CPT, gate, init = case
    x = random_inputs(B, T, H, K, V, seed=T, gate=gate, initial_state=init)
    exe = _emu_binary(emu_build_dir, K, V, C, BV, RG, CPT)
    names = ["q", "k", "v", "g", "beta"] + (["initial_state"] if init else [])
    for n in names:
        x[n].tofile(tmp_path / ("h0" if n == "initial_state" else n))
    res = subprocess.run([str(exe), str(tmp_path), str(B), str(T), str(H), repr(K ** -0.5), str(int(init))],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    read = lambda n, shape: np.fromfile(tmp_path / n, dtype=np.float32).reshape(shape)  # noqa: E731
    ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
    model = chunk_stages_model(**x, chunk_size=C, dtype=np.float64)
    NT = -(-T // C)
    Tp = NT * C
    shapes = dict(Akk=(B, H, NT, C, C), Aqk=(B, H, NT, C, C), Qg=(B, H, Tp, K), Kd=(B, H, Tp, K),
                  Kbg=(B, H, Tp, K), gL=(B, H, NT, K), W=(B, H, Tp, K), U=(B, H, Tp, V))
    # With strong gates many A entries are tiny (down to ~1e-22 at g = -50) and carry the fp32
    # error of their exponent, |G|·2^-24, relative: looser bounds for those arrays.
    tol = {n: {"const": 1e-4, "mixed": 1e-4, "strong": 2e-5}.get(gate, 2e-6) for n in shapes}
    # Relative error, except for arrays whose true values all underflow fp32 (e^{-3200} with
    # g = -50): there the absolute error is what counts.
    errors = {n: rel(read(n, s), model[n]) if np.max(np.abs(model[n])) > 1e-30
              else float(np.max(np.abs(read(n, s) - model[n]))) for n, s in shapes.items()}
    errors["recurrent o"] = rel(read("rec_o", (B, T, H, V)), ref_o)
    errors["recurrent state"] = rel(read("rec_ht", (B, H, K, V)), ref_s)
    errors["chunked o"] = rel(read("o", (B, T, H, V)), ref_o)
    errors["chunked state"] = rel(read("ht", (B, H, K, V)), ref_s)
    if C <= 64:   # 05_chunk_state_tc (3xTF32 MMAs) on the same stage-1/2 outputs
        errors["chunked o (tensor cores)"] = rel(read("tc_o", (B, T, H, V)), ref_o)
        errors["chunked state (tensor cores)"] = rel(read("tc_ht", (B, H, K, V)), ref_s)
    bad = {n: e for n, e in errors.items() if not e < tol.get(n, 2e-6)}
    assert not bad, f"stages off the float64 model: {bad}"


# ----------------------------------------------------------------------------- GPU

GPU_CASES = [
    # B, T, H, K, V, C, gate, initial state
    (1, 1, 1, 64, 64, 64, "logsigmoid", False),
    (2, 17, 2, 64, 64, 16, "logsigmoid", True),
    (2, 100, 4, 128, 128, 64, "logsigmoid", True),
    (1, 300, 2, 128, 64, 32, "logsigmoid", False),
    (1, 129, 2, 64, 128, 128, "logsigmoid", True),
    (1, 200, 2, 128, 128, 64, "const", True),     # g = -50 per step
    (1, 160, 2, 128, 128, 64, "zero", True),
    (1, 160, 2, 128, 128, 64, "mixed", True),     # strong and mild channels in one chunk
    (2, 300, 2, 128, 128, 64, "strong", False),   # chunks on both sides of the fast-path threshold
]


def _gpu_id(c):
    B, T, H, K, V, C, gate, init = c
    return f"B{B}-T{T}-H{H}-K{K}-V{V}-C{C}-{gate}-{'h0' if init else 'noh0'}"


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=_gpu_id)
def test_gpu_kernels_match_float64(case):
    import cupy as cp

    B, T, H, K, V, C, gate, init = case
    x = random_inputs(B, T, H, K, V, seed=7, gate=gate, initial_state=init)
    ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
    d = {n: cp.asarray(a) for n, a in x.items()}
    rp = dk.prepare_recurrent(**d, output_final_state=True)
    rp.poison()
    o, s = rp.run()
    assert rel(o.get(), ref_o) < 1e-5 and rel(s.get(), ref_s) < 1e-5
    for state in (("tc", "simt") if C in dk.TC_CHUNK else ("simt",)):
        for bv in (16, 32):
            cp_ = dk.prepare_chunk(**d, output_final_state=True, chunk_size=C, bv=bv, state=state)
            assert cp_.state_kernel == state
            cp_.poison()
            o, s = cp_.run()
            assert rel(o.get(), ref_o) < 1e-5, f"chunked o, BV={bv}, state pass {state}"
            assert rel(s.get(), ref_s) < 1e-5, f"chunked state, BV={bv}, state pass {state}"


@pytest.mark.gpu
def test_gpu_chunk_stages_match_model():
    import cupy as cp

    B, T, H, K, V, C = 2, 90, 2, 128, 128, 32
    x = random_inputs(B, T, H, K, V, seed=3, initial_state=True)
    m = chunk_stages_model(**x, chunk_size=C, dtype=np.float64)
    plan = dk.prepare_chunk(**{n: cp.asarray(a) for n, a in x.items()}, chunk_size=C, bv=32,
                            output_final_state=True)
    plan.poison()
    plan.run(stages=(1,))
    for n in ("Akk", "Aqk", "Qg", "Kd", "gL"):
        assert rel(plan.ws[n].get(), m[n]) < 2e-6, f"stage 1 (02_chunk_intra) output {n}"
    assert rel(plan.ws["W"].get(), m["Kbg"]) < 2e-6, "stage 1 output Kbg"
    plan.run(stages=(2,))
    assert rel(plan.ws["W"].get(), m["W"]) < 2e-6, "stage 2 (03_chunk_solve) output W"
    assert rel(plan.ws["U"].get(), m["U"]) < 2e-6, "stage 2 (03_chunk_solve) output U"
    ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
    assert plan.state_kernel == "tc"
    plan.run(stages=(3,))
    assert rel(plan.o.get(), ref_o) < 1e-5, "stage 3 (05_chunk_state_tc) output o"
    assert rel(plan.final_state.get(), ref_s) < 1e-5, "stage 3 (05_chunk_state_tc) final state"
    # The fp32-FMA state pass on the same stage-1/2 workspaces.
    simt = dk.prepare_chunk(**{n: cp.asarray(a) for n, a in x.items()}, chunk_size=C, bv=32,
                            output_final_state=True, state="simt")
    simt.ws = plan.ws
    simt.poison_outputs()
    simt.run(stages=(3,))
    assert rel(simt.o.get(), ref_o) < 1e-5, "stage 3 (04_chunk_state) output o"
    assert rel(simt.final_state.get(), ref_s) < 1e-5, "stage 3 (04_chunk_state) final state"


@pytest.mark.gpu
def test_gpu_torch_inputs_and_errors():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    x = random_inputs(1, 50, 2, 64, 64, seed=1)
    t = {n: torch.from_numpy(a).cuda() for n, a in x.items()}
    o, s = dk.kda_chunk(**t, chunk_size=16)
    assert s is None and rel(o.get(), kda_recurrent_fp64(**x)[0]) < 1e-5
    t["g"] = t["g"].abs()
    with pytest.raises(ValueError, match="g must be a log-space decay"):
        dk.kda_recurrent(**t)


#: bf16-input impls whose P1 and P4 are one bf16 product (17, 18, and 19, 20, 22 on bf16 inputs): bf16-accurate
ONE_TERM_BF16 = (*dk.BF16_ONLY_IMPLS, "tile", "wide", "pre")
# their bounds, ~2.5x what the H200 gave on these cases (o 1.5e-3, state 2.3e-3 at worst; the three-term
# impls 1.6e-4 and 4.8e-6 against 5e-4 and 3e-5)
ONE_TERM_O, ONE_TERM_STATE = 4e-3, 6e-3


@pytest.mark.gpu
@pytest.mark.parametrize("K, T", [(64, 77), (128, 200)])
def test_gpu_bf16_io_matches_float64_on_its_rounded_inputs(K, T):
    """Every bf16-I/O impl this GPU runs (notebook 13's list, attnlab.delta.fast.bf16_io_impls), with torch
    bfloat16 inputs, chunk tails, an initial state, o poisoned first: o (bf16) is the float64 result on the
    bf16-rounded inputs, rounded to bf16, and the fp32 final state fp32-accurate (as the CPU model checks);
    the one-term impls (ONE_TERM_BF16) to bf16 accuracy."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    from attnlab.delta import fast
    from attnlab.delta.tf32 import round_bf16

    x = random_inputs(2, T, 3, K, K, seed=K + T, initial_state=True)
    xb = {n: round_bf16(np.asarray(x[n], np.float32)) for n in ("q", "k", "v", "g", "beta")}
    t = {n: torch.from_numpy(np.ascontiguousarray(xb[n])).to(torch.bfloat16).cuda() for n in xb}
    ref_o, ref_s = kda_recurrent_fp64(**xb, initial_state=x["initial_state"], output_final_state=True)
    errors = {}
    for label, impl, _ in fast.bf16_io_impls():
        plan = dk.prepare_tc(**t, initial_state=torch.from_numpy(x["initial_state"]).cuda(), output_final_state=True,
                             impl=impl)
        plan.poison()
        o, s = plan.run()
        assert o.dtype == torch.bfloat16 and o.shape == (2, T, 3, K), label
        eo, es = rel(o.float().cpu().numpy(), round_bf16(ref_o.astype(np.float32))), rel(s.get(), ref_s)
        errors[label] = (eo, es)
        bo, bs = (ONE_TERM_O, ONE_TERM_STATE) if impl in ONE_TERM_BF16 else (5e-4, 3e-5)
        assert eo < bo and es < bs, f"{label}: o {eo:.2e} (bound {bo:.0e}), state {es:.2e} (bound {bs:.0e})"
    print(errors)


# ----------------------------------------------------------------------------- launchers, emulated

LAUNCH_CASES = [
    # B, T, H, K, V, C, BV, initial state
    (1, 37, 2, 64, 64, 16, 16, True),
    (2, 20, 1, 64, 128, 32, 32, False),
]


@pytest.mark.parametrize("case", LAUNCH_CASES, ids=lambda c: f"B{c[0]}-T{c[1]}-H{c[2]}-K{c[3]}-V{c[4]}-C{c[5]}-BV{c[6]}")
def test_launchers_end_to_end_under_cpu_emulation(case, emu_build_dir, monkeypatch):
    """The real launch path (validation, workspaces, grids, blocks, argument order and kinds,
    dynamic shared memory) driving the kernels, on the CPU through tests/delta_emu/."""
    import sys as _sys

    _sys.path.insert(0, str(EMU_DIR))
    try:
        import fake_device
    finally:
        _sys.path.remove(str(EMU_DIR))
    cp = fake_device.install(monkeypatch, emu_build_dir)
    B, T, H, K, V, C, BV, init = case
    x = random_inputs(B, T, H, K, V, seed=9, initial_state=init)
    ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
    d = {n: cp.asarray(a) for n, a in x.items()}
    rp = dk.prepare_recurrent(**d, output_final_state=True)
    rp.poison()
    o, s = rp.run()
    assert rel(o, ref_o) < 1e-5 and rel(s, ref_s) < 1e-5
    for state, smem in (("tc", dk.state_tc_smem_floats), ("simt", dk.state_smem_floats)):
        plan = dk.prepare_chunk(**d, output_final_state=True, chunk_size=C, bv=BV, state=state)
        plan.poison()
        o, s = plan.run()
        assert rel(o, ref_o) < 1e-5 and rel(s, ref_s) < 1e-5, state
        launch = plan.kernels["state"].launches[-1]
        threads = 2 * K if state == "tc" else (K // 4) * (BV // 4)
        assert launch["shared_mem"] == 4 * smem(K, V, C, BV) and launch["block"][0] == threads, state
    o, s = dk.kda_chunk(**d, chunk_size=C)        # default value block and state pass, no final state
    assert s is None and rel(o, ref_o) < 1e-5


# ----------------------------------------------------------------------------- notebook helpers (pure)

def _latency_frame(with_fla: bool):
    import pandas as pd

    rows = [dict(implementation="recurrent", dtype="fp32", T=16384, config="RG=8", median_ms=20.0),
            dict(implementation="chunked", dtype="fp32", T=16384, config="C=64 BV=16", median_ms=2.5),
            dict(implementation="recurrent", dtype="fp32", T=4096, config="RG=8", median_ms=5.0),
            dict(implementation="chunked", dtype="fp32", T=4096, config="C=64 BV=16", median_ms=0.8)]
    if with_fla:
        rows += [dict(implementation="fla chunk_kda", dtype="bf16", T=16384, config="default", median_ms=1.95),
                 dict(implementation="fla chunk_kda", dtype="fp32", T=16384, config="default", median_ms=6.0)]
    df = pd.DataFrame(rows)
    df["B"], df["H"], df["K"], df["V"] = 2, 16, 128, 128
    return df


def test_targets_are_computed_and_misses_reported():
    import pandas as pd

    from attnlab.delta import bench as db

    sweep = pd.DataFrame([dict(T=16384, stage="all", chunk_size=32, bv=16, median_ms=2.0),
                          dict(T=16384, stage="intra", chunk_size=32, bv=16, median_ms=0.5)])
    acc = pd.DataFrame([dict(implementation="recurrent (01)", dtype="fp32", T=16384, rel_err_o=3e-7),
                        dict(implementation="chunked (02-04)", dtype="fp32", T=16384, rel_err_o=2e-6),
                        dict(implementation="fla chunk_kda", dtype="bf16", T=16384, rel_err_o=4e-3)])
    v = db.targets(_latency_frame(True), sweep, acc, 16384)
    speed = v[v["target"].str.contains("10×")].iloc[0]
    assert speed["value"] == pytest.approx(20.0 / 2.0) and bool(speed["met"])     # best of latency and sweep
    fla = v[v["target"].str.contains("fla")]
    assert list(fla["value"].round(3)) == [round(1.95 / 2.0, 3), round(6.0 / 2.0, 3)]
    err = v[v["target"].str.contains("error")].iloc[0]
    assert err["value"] == 2e-6 and bool(err["met"])                              # fla's bf16 error not ours
    v2 = db.targets(_latency_frame(False), None, acc, 16384)
    assert bool(v2[v2["target"].str.contains("10×")]["met"].iloc[0]) is False    # 8× is a miss
    assert "not installed" in v2[v2["target"].str.contains("fla")]["detail"].iloc[0]


def test_roofline_points_use_the_cost_model():
    from attnlab.delta import bench as db

    pts = db.roofline_points(_latency_frame(True))
    assert set(pts["kernel"]) == {"recurrent", "chunked"} and len(pts) == 4
    r = pts[(pts["kernel"] == "recurrent") & (pts["T"] == 16384)].iloc[0]
    assert r["achieved_flops"] == pytest.approx(recurrent_cost(128, 128).flops * 2 * 16384 * 16 / 20e-3)
    assert r["intensity"] == pytest.approx(recurrent_cost(128, 128).intensity)


def test_correctness_grid_covers_the_edge_cases():
    from attnlab.delta import bench as db

    cases = db.correctness_cases()
    assert {c["T"] for c in cases} >= {1, 17, 64, 100, 300}
    assert {c["gate"] for c in cases} == {"logsigmoid", "const", "mixed", "strong"}
    assert {c["chunk_size"] for c in cases} == set(dk.SUPPORTED_CHUNK)
    assert any(c["init"] for c in cases) and any(not c["init"] for c in cases)


# ----------------------------------------------------------------------------- CPU emulation, sanitized

# One small case of the emulation built with AddressSanitizer + UBSan. The model's dynamic shared
# memory is a vector of exactly the launch's bytes and every input, workspace and output is sized
# exactly, so any read or write past one of them (or undefined behaviour) aborts the run.
# T = 17 with C = 16: a last chunk of one step; B = 2; an initial state.
SANITIZE_FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g"]
SANITIZER_REPORT = ("AddressSanitizer", "runtime error:", "UndefinedBehaviorSanitizer", "LeakSanitizer")


def test_cuda_kernels_under_sanitizers(emu_build_dir, tmp_path):
    import os

    B, T, H, K, V, C, BV, RG, CPT, gate, init = 2, 17, 1, 32, 32, 16, 16, 8, 2, "logsigmoid", True
    exe = emu_build_dir / f"harness_asan_{K}_{V}_{C}_{BV}_{RG}_{CPT}"
    if not exe.exists():
        probe = tmp_path / "probe.cpp"
        probe.write_text("int main() { return 0; }\n")
        if subprocess.run(["g++", *SANITIZE_FLAGS, str(probe), "-o", str(tmp_path / "probe")],
                          capture_output=True).returncode != 0:
            pytest.skip("g++ cannot build with -fsanitize=address,undefined here (libasan/libubsan missing)")
        cmd = ["g++", "-std=c++20", "-O1", "-pthread", *SANITIZE_FLAGS, "-include", str(ROOT / "tests" / "ladder_emu" / "ladder_emu.h"),
               "-I", str(ROOT / "kernels"), f"-DEMU_K={K}", f"-DEMU_V={V}", f"-DEMU_C={C}",
               f"-DEMU_BV={BV}", f"-DEMU_RG={RG}", f"-DEMU_CPT={CPT}", str(EMU_DIR / "harness.cpp"),
               "-o", str(exe)]
        res = emu_build.run(cmd)
        assert res.returncode == 0, res.stderr[-3000:]
    x = random_inputs(B, T, H, K, V, seed=T, gate=gate, initial_state=init)
    for n in ["q", "k", "v", "g", "beta", "initial_state"]:
        x[n].tofile(tmp_path / ("h0" if n == "initial_state" else n))
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
    res = subprocess.run([str(exe), str(tmp_path), str(B), str(T), str(H), repr(K ** -0.5), "1"],
                         capture_output=True, text=True, timeout=600, env=env)
    report = [line for line in res.stderr.splitlines() if any(s in line for s in SANITIZER_REPORT)]
    assert res.returncode == 0 and not report, f"sanitizer report (exit {res.returncode}):\n{res.stderr[-6000:]}"
    ref_o, ref_s = kda_recurrent_fp64(**x, output_final_state=True)
    read = lambda n, shape: np.fromfile(tmp_path / n, dtype=np.float32).reshape(shape)  # noqa: E731
    for o, s in (("rec_o", "rec_ht"), ("o", "ht"), ("tc_o", "tc_ht")):
        assert rel(read(o, (B, T, H, V)), ref_o) < 2e-6, o
        assert rel(read(s, (B, H, K, V)), ref_s) < 2e-6, s


def test_tc_impls_follow_the_registry_minimum_compute_capability():
    from attnlab.delta import fast

    assert fast.tc_impls(90) == fast.TC_IMPLS
    on_a100 = fast.tc_impls(80)
    sm90 = {"cluster", "wgmma", "bulk", "tma", "tma2", "diet", "wgrs", "tile", "wide", "hilo", "kdreg", "wy",
            "late"}   # 11, 13-16, 19, 20, 23-25, 30: clusters, wgmma, bulk and tensor copies
    # (17, "single", and 18, "ahead", are bf16-I/O paths only)
    assert not sm90 & {x[1] for x in on_a100} and len(on_a100) == len(fast.TC_IMPLS) - len(sm90)
    assert fast.tc_impls(75) == ()
    assert {x[1] for x in fast.bf16_io_impls(80)} == {fast.BEST_IMPL}
    assert fast.bf16_io_impls(90) == fast.BF16_IO_IMPLS


def test_tc_smem_bytes_is_the_launchers_shared_memory_for_every_static_build():
    rows = dk.static_instantiations(128, 128, forms=("tc", "cluster", "wgmma"))
    assert {fn for _, fn, _ in rows} >= {"kda_chunk_fused", "kda_chunk_prep", "kda_chunk_state_lean",
                                         "kda_chunk_state_cluster", "kda_chunk_state_wgmma", "kda_chunk_state_mc"}
    for _, fn, args in rows:
        assert 0 < dk.tc_smem_bytes(fn, args) <= 227 * 1024, fn
    assert dk.tc_smem_bytes("kda_chunk_state_lean", (128, 128, 32, 32, False)) == 4 * dk.lean_smem_words(128, 128, 32)
    # 13 with two staging tiles fits on the bf16 path only: two fp32 tiles would pass 227 KB
    assert dk.tc_smem_bytes("kda_chunk_state_wgmma", (128, 128, 32, 32, True, 2)) <= 227 * 1024
    assert dk.wgmma_smem_words(128, 128, 32, nst=2) * 4 > 227 * 1024
    with pytest.raises(ValueError, match="not a tensor-core delta kernel"):
        dk.tc_smem_bytes("kda_chunk_state", (128, 128, 32, 32))


def test_launcher_shared_memory_is_the_static_tables_for_each_io():
    """Each recurrence is launched with the shared memory its layout needs for the I/O type (bf16 inputs:
    smaller staging tiles and v, 19's and 20's one-term tiles), as tc_smem_bytes lists it for the static build."""
    for impl, (_, fn, _, _) in dk.STATE_IMPLS.items():
        bv = dk.FIXED_BV.get(impl, 32)
        for io in dk.SUPPORTED_IO:
            bf = io == "bf16"
            if (bf and impl not in dk.BF16_IMPLS) or (not bf and impl in dk.BF16_ONLY_IMPLS) or impl in dk.CLUSTER_IMPLS:
                continue
            args = (128, 128, dk.FUSED_CHUNK, bv, bf) + dk.state_extra_args(impl, 128, bv)
            assert dk.state_smem_bytes(impl, 128, 128, bv, io) == dk.tc_smem_bytes(fn, args), (impl, io)
    # 19's bf16 layout leaves an SM room for a block of 07 beside it; its fp32 layout does not
    room = 228 * 1024 - 2 * 1024
    assert dk.state_smem_bytes("tile", 128, 128, 32, "bf16") + 4 * dk.prep_smem_words(128) <= room
    assert dk.state_smem_bytes("tile", 128, 128, 32, "fp32") + 4 * dk.prep_smem_words(128) > room
    # 22 (no staging tile, no WG_E) fits two blocks per SM at either width (its __launch_bounds__)
    for bv in dk.SUPPORTED_BV:
        assert 2 * (dk.state_smem_bytes("pre", 128, 128, bv, "bf16") + 1024) <= 228 * 1024, bv
    # and 21 three (its __launch_bounds__): 07's shared memory
    assert dk.PREP_OPS_BLOCKS_PER_SM * (dk.tc_smem_bytes("kda_chunk_prep_ops", (128, 32, True)) + 1024) <= 228 * 1024
    # fp32 inputs: 22's hi / lo operand buffers leave room beside it for one block of 21 (07's earlier fp32 layout, which
    # 21 keeps), not two
    pre32 = dk.state_smem_bytes("pre", 128, 128, 32, "fp32") + 1024
    prep32 = dk.tc_smem_bytes("kda_chunk_prep_ops", (128, 32, False)) + 1024
    assert pre32 + prep32 <= 228 * 1024 < pre32 + 2 * prep32
    assert dk.prep_ops_blocks_per_sm(False) == dk.prep_blocks_per_sm(False, alias=False) == 3
    # ... and the kernels are built for those counts (their __launch_bounds__ minimum blocks)
    src21 = (ROOT / "kernels" / "delta" / "21_chunk_prep_ops.cu").read_text()
    assert re.search(r"__launch_bounds__\(256, BF \? KDA_PREP_OPS_MINB : (\d+)\)", src21).group(1) == \
        str(dk.PREP_OPS_FP32_BLOCKS_PER_SM)
    src07 = (ROOT / "kernels" / "delta" / "07_chunk_prep_tc.cu").read_text()
    assert re.search(r"__launch_bounds__\(256, BF \|\| KDA_PREP_ALIAS \? (\d+) : (\d+)\)", src07).groups() == \
        (str(dk.prep_blocks_per_sm(False)), str(dk.prep_blocks_per_sm(False, alias=False)))


def test_pre_launches_21_chunk_major_and_22_with_its_layout():
    """21 -> 22 ("pre"): 21's grid is (B H, NC), every head's chunk n dispatched before any chunk n + 1 (the order
    22 reads them in when the two run side by side), 256 threads and 07's shared memory; 22's grid is the
    recurrences' (V / BV, H, B) with 160 threads and its layout's shared memory, two blocks of which fit an SM."""
    plan = dk.TcPlan(arrays={}, dims=(2, 100, 3, 128, 128), scale=np.float32(128 ** -0.5), bv=32, impl="pre", ws={},
                     o=None, final_state=None, io="bf16")
    cfg = plan.launch_configs()
    assert cfg["prep"]["grid"] == (6, 4, 1) and cfg["prep"]["block"] == (dk.FUSED_THREADS, 1, 1)
    assert cfg["prep"]["smem"] == dk.tc_smem_bytes("kda_chunk_prep_ops", (128, 32, True))
    assert cfg["state"]["grid"] == (4, 3, 2) and cfg["state"]["block"] == (dk.PRE_THREADS, 1, 1)
    assert cfg["state"]["smem"] == 4 * dk.pre_smem_words(128, 128, 32, bf16=True) and 2 * (cfg["state"]["smem"] + 1024) <= 228 * 1024
    assert not plan.overlap and plan.epoch == 0   # side by side only where prepare_tc finds 22's grid fits the SMs
    assert dk.ops_workspace_shape(2, 100, 3, 128) == (2, 3, 4, (64 * 128 + 128 * 128 + 128 * 4) // 4)
    # fp32 inputs: the hi / lo image (19's fp32 operand buffer: Kd^T, the [Kg; Qg]^T hi and lo tiles, 2^G_L)
    assert dk.ops_workspace_shape(2, 100, 3, 128, bf16=False) == (2, 3, 4, (3 * 128 * 128 + 128 * 4) // 4)
    plan = dk.TcPlan(arrays={}, dims=(2, 100, 3, 128, 128), scale=np.float32(128 ** -0.5), bv=32, impl="pre", ws={},
                     o=None, final_state=None, io="fp32")
    cfg = plan.launch_configs()
    assert cfg["prep"]["smem"] == dk.tc_smem_bytes("kda_chunk_prep_ops", (128, 32, False)) == \
        4 * dk.prep_smem_words(128, alias=False)
    assert cfg["state"]["smem"] == 4 * dk.pre_smem_words(128, 128, 32, bf16=False)


def test_static_builds_table_follows_the_instantiation_list(monkeypatch):
    """fast.static_builds compiles in parallel but returns the rows in static_instantiations' order, each
    with its target and launch shared memory."""
    import attnlab.static
    from attnlab.delta import fast

    class Rep:
        def __init__(self, function, args, arch):
            self.d = dict(kernel=f"{function}<{','.join(map(str, args))}>", arch=arch)

        def row(self):
            return self.d

    monkeypatch.setattr(attnlab.static, "static_build", lambda s, f, inst, arch: [Rep(f, inst[0], arch)])
    rows = dk.static_instantiations(128, 128, forms=("tc", "wgmma"))
    t = fast.static_builds(128, 128, forms=("tc", "wgmma"), workers=4)
    assert list(t["kernel"]) == [f"{f}<{','.join(map(str, a))}>" for _, f, a in rows]
    assert list(t["arch"]) == [dk.static_arch(f, "sm_90") for _, f, _ in rows]
    assert list(t["dynamic_smem_KiB"]) == [dk.tc_smem_bytes(f, a) / 1024 for _, f, a in rows]


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is needed for the static build")
def test_15_has_half_the_exponentials_of_14():
    """15's element-wise warpgroup takes one exp2 per element where 14's takes two (2^G and 2^(G_L - G)),
    and no shuffle for beta: counted in the PTX of the same instantiation."""
    from attnlab.static import static_build

    args = (128, 128, dk.FUSED_CHUNK, 32, False)
    (r14,) = static_build(dk.MC_SRC, "kda_chunk_state_tma", [args + (True, 2)], "sm_90a")
    (r15,) = static_build(dk.DIET_SRC, "kda_chunk_state_diet", [args], "sm_90a")
    ex14, ex15 = r14.ptx.count("ex2.approx"), r15.ptx.count("ex2.approx")
    assert ex14 >= 64 and ex15 <= ex14 // 2 + 2, (ex14, ex15)
    assert "shfl.sync" in r14.ptx and r15.ptx.count("shfl.sync") < r14.ptx.count("shfl.sync")


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is needed for the static build")
def test_17_issues_a_third_of_15s_p1_and_p4_wgmmas():
    """17 (bf16 inputs) runs P1 and P4 as one bf16 product: per chunk K / 16 + 2 K / 64 wgmmas where 15
    issues three times as many, P2's six unchanged; and half of 15's stmatrix for S^T."""
    from attnlab.static import static_build

    args = (128, 128, dk.FUSED_CHUNK, 32, True)
    (r15,) = static_build(dk.DIET_SRC, "kda_chunk_state_diet", [args], "sm_90a")
    (r17,) = static_build(dk.SINGLE_SRC, "kda_chunk_state_single", [args], "sm_90a")
    count = lambda r: r.ptx.count("wgmma.mma_async.sync.aligned.m64n")  # noqa: E731
    p1, p4, p2 = 128 // 16, 2 * 128 // 64, 6
    assert count(r15) == 3 * (p1 + p4) + p2 and count(r17) == p1 + p4 + p2, (count(r15), count(r17))
    st = lambda r: r.ptx.count("stmatrix.sync.aligned.m8n8.x4.trans")  # noqa: E731
    assert st(r17) < st(r15)
    assert not r17.spills and not r15.spills


def test_wgmma_rate_arithmetic_and_shapes():
    """The wgmma-rate probe's MACs per SM cycle (64 N 16 per wgmma, per warpgroup), its errors, and
    that its shapes cover what the recurrences issue (15: N = 32; 16: 64, 128) from one and two
    warpgroups, A from registers and from shared memory."""
    from attnlab.delta import fast

    assert fast.wgmma_macs_per_cycle(32, 100, 1, 3200.0) == 64 * 32 * 16 * 100 / 3200.0
    assert fast.wgmma_macs_per_cycle(64, 10, 2, 1000.0) == 2 * 64 * 64 * 16 * 10 / 1000.0
    for bad in ((0, 1, 1, 1.0), (32, 1, 1, 0.0), (32, 1, 0, 5.0)):
        with pytest.raises(ValueError, match="positive"):
            fast.wgmma_macs_per_cycle(*bad)
    shapes = set(fast.WGMMA_RATE_SHAPES)
    for n in (32, 64, 128):
        for nwg in (1, 2):
            assert (n, True, nwg, 1) in shapes and (n, False, nwg, 1) in shapes


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is needed for the static build")
def test_wgmma_rate_benchmark_builds_for_every_shape():
    """kernels/bench/04_wgmma_rate.cu: every probed shape and form builds for sm_90a without spills, issues the
    wgmma of its shape (A from registers or from shared memory; form 1 with the shared-memory operand MN-major)
    and reads the SM clock."""
    from attnlab.delta import fast
    from attnlab.static import static_build

    inst = [(*s, 0) for s in fast.WGMMA_RATE_SHAPES] + [(n, rs, 1, 1, f) for n, rs, f in fast.WGMMA_FORM_SHAPES]
    reps = static_build(fast.WGMMA_RATE_SOURCE, "wgmma_rate", inst, "sm_90a")
    for (n, rs, nwg, ch, form), r in zip(inst, reps):
        assert not r.spills and r.stack_bytes == 0, r.name
        assert r.registers * 128 * nwg <= 65536, r.name
        shape = f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16"
        assert shape in r.ptx and "%clock64" in r.ptx, r.name
        operands = r.ptx.split(shape)[1].split(";")[0]   # {accumulators}, A ({registers} or a descriptor), B, ...
        assert ("}, {%r" in operands) == rs, (r.name, operands[-80:])
        flags = operands.replace(" ", "").split(",")[-3 if rs else -4:]   # scale-a, scale-b, [tnspA,] tnspB
        assert flags[-1 if rs else -2] == ("1" if form == 1 else "0"), (r.name, flags)   # the MN-major operand


def test_rounding_table_and_generated_bf16_lines():
    """fast.rounding_table (the float64 model of the bf16 roundings, CPU) orders its cases as the maths
    says, and the notebook's generated lines (describe_rounding, describe_bf16) quote the table's values."""
    import pandas as pd

    from attnlab.delta import fast

    t = fast.rounding_table(T=96, H=2, K=64, V=64).set_index("case")
    worst = t[["rel_err_o", "rel_err_state"]].max(axis=1)
    assert worst.iloc[0] < 1e-12 < 1e-3 < worst[fast.BF16_IO_CASE]
    assert worst[fast.BF16_IO_CASE] <= worst[fast.SINGLE_CASE] <= worst["bf16 I/O, every product one term"]
    line = fast.describe_rounding(t.reset_index())
    assert f"{worst[fast.BF16_IO_CASE]:.2e}" in line and f"{worst[fast.SINGLE_CASE]:.2e}" in line
    lab = "07+17 bf16 I/O"
    lat = pd.DataFrame([dict(implementation=lab, dtype="bf16", T=16384, stage="all", median_ms=1.2),
                        dict(implementation=lab, dtype="bf16", T=16384, stage="17", median_ms=0.8),
                        dict(implementation="07+15 bf16 I/O", dtype="bf16", T=16384, stage="all", median_ms=1.4),
                        dict(implementation="07+15 bf16 I/O", dtype="bf16", T=16384, stage="07", median_ms=0.4),
                        dict(implementation=fast.FLA, dtype="bf16", T=16384, stage="all", median_ms=1.92)])
    lines = fast.describe_bf16(lat, 16384)
    assert lines[0] == f"- Fastest bf16-I/O path at T=16384: {lab}, 1.200 ms, 1.60× fla bf16 (1.920 ms); 2.5× needs ≤ 0.768 ms."
    assert lines[1] == "- Its parts, each alone: 07 (bf16 inputs) 0.400 ms, recurrence 17 0.800 ms; their sum 1.200 ms against 1.200 ms for the call."
    # a path whose own 07 row is timed (07+15) is still described by its own recurrence, not by its 07 row
    faster15 = lat.assign(median_ms=lat["median_ms"].where(lat["implementation"] != "07+15 bf16 I/O", 0.9))
    faster15 = pd.concat([faster15, pd.DataFrame([dict(implementation="07+15 bf16 I/O", dtype="bf16", T=16384,
                                                       stage="15", median_ms=0.5)])])
    assert fast.describe_bf16(faster15, 16384)[1] == ("- Its parts, each alone: 07 (bf16 inputs) 0.900 ms, recurrence 15 "
                                                      "0.500 ms; their sum 1.400 ms against 0.900 ms for the call.")
    assert fast.describe_bf16(lat[lat["implementation"] == fast.FLA], 16384) == []


def test_generated_fp32_image_lines_quote_the_tables():
    """fast.describe_fp32_images (21 -> 22 on fp32 inputs beside 07 -> 19) quotes the latency and memory tables:
    the calls, what 22 saves against 19 and 21 adds to 07, and the workspace against the bound; nothing where a
    time is missing."""
    import pandas as pd

    from attnlab.delta import fast

    a, b = fast.FP32_IMAGES, fast.IMAGES_BASE
    row = lambda impl, stage, ms, **kw: dict(implementation=impl, dtype="fp32", T=16384, stage=stage, median_ms=ms, **kw)
    lat = pd.DataFrame([row(a, "all", 1.30, overlap=True), row(a, "21", 0.65), row(a, "22", 0.66),
                        row(f"{a} one after the other", "all", 1.29, overlap=False),
                        row(b, "all", 1.28), row(b, "07", 0.36), row(b, "19", 0.94)])
    mem = pd.DataFrame([dict(implementation=a, dtype="fp32", T=16384, extra_bytes=900 * 2**20),
                        dict(implementation=fast.FLA, dtype="bf16", T=16384, extra_bytes=1200 * 2**20)])
    lines = fast.describe_fp32_images(lat, mem, 16384)
    assert lines[0] == ("- At T=16384, 21 → 22 on fp32 inputs takes 1.300 ms (side by side), 1.290 ms one after the "
                        "other; 07 → 19 takes 1.280 ms: 0.98× its speed (slower).")
    assert lines[1] == ("- 22 alone takes 0.660 ms against 19's 0.940 ms (0.280 ms less: 19's element-wise warpgroup's "
                        "share of the recurrence); 21 alone takes 0.650 ms against 07's 0.360 ms (0.290 ms more: the "
                        "hi / lo images written). The images take back 104% of what they save.")
    assert lines[2] == "- Its workspace (07's words, the images, the ready flags) is 900 MiB, 0.75× fla's (bf16) 1200 MiB: past the 0.6× bound."
    assert fast.describe_fp32_images(lat[lat["stage"] != "21"], mem, 16384) == []
    assert len(fast.describe_fp32_images(lat, mem.iloc[:0], 16384)) == 2   # no memory rows: no workspace line


def test_coresident_layouts_count_blocks_beside_each_recurrence():
    """fast.coresident_layouts: no block of 29 fits beside one of 30 (fp32), one of 21 beside 22 on fp32 inputs and two
    on bf16 (21's header), and shedding the stated bytes from the recurrence's layout is exactly what one (two) more
    need: a granule less is not enough."""
    from attnlab.delta import fast

    lay = fast.coresident_layouts(128, 128, 32).set_index("call")
    assert list(lay["fit_beside"]) == [0, 1, 2]
    for call, r in lay.iterrows():
        for n, shed in ((1, r.shed_for_one), (2, r.shed_for_two)):
            if shed:
                assert fast._blocks_beside(r.recurrence_bytes - shed, r.token_parallel_bytes, "sm_90")[0] == n
                assert fast._blocks_beside(r.recurrence_bytes - shed + 128, r.token_parallel_bytes, "sm_90")[0] == n - 1
            else:
                assert r.fit_beside >= n


def test_generated_coresidency_lines_quote_the_tables():
    """fast.describe_coresidency: 29 -> 30, 30 alone, and 29 -> 30 with 29 hidden as much as 21 was beside 22 (against
    one after the other on fp32, the stages' sum on bf16), each against goal x fla; nothing without 29 -> 30 or fla."""
    import pandas as pd

    from attnlab.delta import fast

    row = lambda impl, stage, ms, dtype="fp32": dict(implementation=impl, dtype=dtype, T=16384, stage=stage, median_ms=ms)
    lat = pd.DataFrame([row("29+30", "all", 1.20), row("29+30", "29", 0.30), row("29+30", "30", 0.90),
                        row("21+22", "all", 1.30), row("21+22", "21", 0.60), row("21+22", "22", 0.65),
                        row("21+22 one after the other", "all", 1.24),
                        row("21+22 bf16 I/O", "all", 0.70, "bf16"), row("21+22 bf16 I/O", "21", 0.40, "bf16"),
                        row("21+22 bf16 I/O", "22", 0.50, "bf16"), row(fast.FLA_GRAPH, "all", 1.90, "bf16")])
    lines = fast.describe_coresidency(lat, 16384, 128, 128, 32)
    assert len(lines) == 4 and lines[0].startswith("- Shared memory at K=128, BV=32: a block of 30 takes 206880 bytes")
    assert lines[1] == (f"- At T=16384, fla takes 1.900 ms (bf16, {fast.FLA_GRAPH}) and 29 → 30 1.200 ms: 1.58× fla, 1.9× "
                        "missed (needs ≤ 1.000 ms); 29 alone 0.300 ms, 30 alone 0.900 ms. With 29 hidden entirely the "
                        "call would take 30's time: 2.11× fla, 1.9× met (needs ≤ 1.000 ms).")
    assert "side by side 1.300 ms against 1.240 ms (one after the other), so side by side lost 10% of 21's 0.600 ms" in lines[2]
    assert "29 → 30 losing that share of 29: 1.200 + 0.10 × 0.300 = 1.230 ms, 1.54× fla, 1.9× missed" in lines[2]
    assert "side by side 0.700 ms against 0.900 ms (21 and 22 each alone), so 50% of 21's 0.400 ms" in lines[3]
    assert lines[3].endswith("1.200 - 0.50 × 0.300 = 1.050 ms, 1.81× fla, 1.9× missed (needs ≤ 1.000 ms); with 2 of "
                             "29's blocks beside each of 30's, which needs 30 to shed 85632 bytes.")
    small = fast.describe_coresidency(lat, 16384, 64, 64, 16)   # K = 64: blocks of 29 fit beside 30 as built
    assert small[0].endswith("3 of 29 fit beside one of 30.")
    assert small[2].endswith("with 2 of 29's blocks beside each of 30's, which 30's layout leaves room for.")
    assert small[3].endswith("(needs ≤ 1.000 ms).")   # five of 21 beside 22: past the one or two this line asks of 30
    assert fast.describe_coresidency(lat[lat["stage"] != "29"], 16384, 128, 128, 32) == []
    assert fast.describe_coresidency(lat[lat["implementation"] != fast.FLA_GRAPH], 16384, 128, 128, 32) == []
    assert len(fast.describe_coresidency(lat[~lat["implementation"].str.contains("bf16")], 16384, 128, 128, 32)) == 3


def test_stress_diff_map_locates_differences():
    """scripts/stress_delta.py maps the elements where two runs differ to (b, h, chunk, value block),
    with the chunk's rows and the block's columns that differ as bit masks (fp32 and bf16 bits)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("stress_delta", ROOT / "scripts" / "stress_delta.py")
    sd = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sd)
    rng = np.random.default_rng(0)
    o0 = rng.standard_normal((2, 100, 3, 64)).astype(np.float32)
    assert sd.diff_map(o0.copy(), o0, 32, 32).empty
    o = o0.copy()
    o[1, 33:35, 2, 40] += 1.0    # b 1, h 2, chunk 1 (rows 1, 2), value block 1 (column 8)
    o[0, 5, 0, 3] -= 2.0         # b 0, h 0, chunk 0 (row 5), value block 0 (column 3)
    d = sd.diff_map(o, o0, 32, 32).sort_values(["b", "h"]).reset_index(drop=True)
    assert d[["b", "h", "chunk", "vblock", "n"]].values.tolist() == [[0, 0, 0, 0, 1], [1, 2, 1, 1, 2]]
    assert list(d["rows"]) == ["0x00000020", "0x00000006"] and list(d["cols"]) == ["0x00000008", "0x00000100"]
    assert np.allclose(d["max_absdiff"], [2.0, 1.0], rtol=1e-6)
    b0 = (o0.view(np.uint32) >> 16).astype(np.uint16).view(np.int16)   # bf16 bit patterns, as the bf16 path stores o
    b1 = b0.copy()
    b1[0, 99, 1, 63] ^= 1
    d = sd.diff_map(b1, b0, 32, 32)
    assert d[["b", "h", "chunk", "vblock", "n", "rows", "cols"]].values.tolist() == [[0, 1, 3, 1, 1, "0x00000008", "0x80000000"]]


def test_prefer_shared_memory_asks_for_the_largest_carveout():
    """21 -> 22 share SMs only if both kernels run at the largest shared-memory carveout (21's header): the
    launcher asks for 100 % (CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) on each kernel it is given."""
    class Kernel:
        preferred_shared_memory_carveout = -1   # the driver's own choice

    k = Kernel()
    dk.prefer_shared_memory(k)
    assert k.preferred_shared_memory_carveout == 100
    dk.prefer_shared_memory(k, -1)   # the probe's way back to the driver's choice
    assert k.preferred_shared_memory_carveout == -1


def test_side_by_side_only_where_an_sm_holds_no_block_of_22():
    """21 -> 22 side by side needs an SM that 22 leaves free (21 then always makes progress): the target shape
    (B 2, H 16, V 128, BV 32: 128 blocks on the H200's 132 SMs) runs side by side; a grid of 22 that fills or
    exceeds the SMs runs one kernel after the other."""
    assert dk.side_by_side_safe(2, 16, 128, 32, 132)
    assert not dk.side_by_side_safe(1, 33, 128, 32, 132)   # 132 blocks: every SM holds one
    assert not dk.side_by_side_safe(4, 16, 128, 32, 132)
    assert dk.side_by_side_safe(2, 3, 128, 32, 132)          # the GPU test's shape
