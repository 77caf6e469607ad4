"""Occupancy calculator: hand-checked cases (one per limiter, per arch quirk) and the recorded
comparison with the CUDA driver."""
from __future__ import annotations

import pytest

from attnlab import occupancy as occ
from attnlab.paths import RESULTS_DIR

KB = 1024


# (id, arch, threads, regs, static, dynamic) -> (blocks, limiter, occupancy)
# Each expectation is worked out by hand in the comment beside it.
CASES = [
    # 8 warps/block; warp slots 64/8 = 8; regs 32*32 = 1024/warp -> 16 warps per sub-partition
    # -> 64/8 = 8 (a tie: 'warps' is named first); smem 1 KB reserved -> 228 blocks.
    ("sm90-T256-R32-warps", "sm_90", 256, 32, 0, 0, 8, "warps", 1.0),
    # 1 warp/block: 64 warp slots, but at most 32 blocks -> half the warps
    ("sm90-T32-R32-blocks", "sm_90", 32, 32, 0, 0, 32, "blocks", 0.5),
    # 128 regs -> 4096/warp -> 4 warps per sub-partition -> 16 warps -> 2 blocks of 8 warps
    ("sm90-T256-R128-registers", "sm_90", 256, 128, 0, 0, 2, "registers", 0.25),
    # 33 regs -> 1056 rounded up to 1280/warp -> 12 warps/sub-partition -> 48 warps -> 6 blocks
    # (without the 256-register rounding it would be 15 -> 60 -> 7)
    ("sm90-T256-R33-rounding", "sm_90", 256, 33, 0, 0, 6, "registers", 0.75),
    # 80 regs -> 2560/warp: 16384 // 2560 = 6 per sub-partition -> 24 warps (not 65536//2560 = 25)
    ("sm90-T32-R80-subpartition", "sm_90", 32, 80, 0, 0, 24, "registers", 24 / 64),
    # 48 KB + 1 KB reserved = 50176 B (already a multiple of 128) -> 233472 // 50176 = 4
    ("sm90-T256-R32-S48K-smem", "sm_90", 256, 32, 0, 48 * KB, 4, "shared memory", 0.5),
    # 10000 + 1024 = 11024 -> 11136 (x128) -> 233472 // 11136 = 20; warps limit 64/4 = 16 wins
    ("sm90-T128-R32-S10000", "sm_90", 128, 32, 10000, 0, 16, "warps", 1.0),
    # the opt-in maximum fits exactly once; one byte more fits zero times
    ("sm90-optin-max", "sm_90", 128, 32, 0, 227 * KB, 1, "shared memory", 4 / 64),
    ("sm90-optin-over", "sm_90", 128, 32, 0, 227 * KB + 1, 0, "shared memory", 0.0),
    # a 1024-thread block at 65 regs: 2080 -> 2304/warp x 32 warps = 73728 > 64K per block
    ("sm90-T1024-R65-regs-per-block", "sm_90", 1024, 65, 0, 0, 0, "registers", 0.0),
    # 64 regs: 2048/warp -> 8 warps per sub-partition -> 32 warps = 1 block (warp slots allow 2)
    ("sm90-T1024-R64", "sm_90", 1024, 64, 0, 0, 1, "registers", 0.5),
    # Turing: 32 warp slots, 16 blocks, 64 KB smem with no reserve and 256-byte granularity
    ("sm75-T1024-R32", "sm_75", 1024, 32, 0, 0, 1, "warps", 1.0),
    ("sm75-T32-R32-blocks", "sm_75", 32, 32, 0, 0, 16, "blocks", 0.5),
    # 10000 -> 10240 (x256) -> 65536 // 10240 = 6 blocks of 4 warps = 24/32
    ("sm75-T128-R32-S10000-smem", "sm_75", 128, 32, 10000, 0, 6, "shared memory", 0.75),
    ("sm75-T256-R32-S48K-smem", "sm_75", 256, 32, 0, 48 * KB, 1, "shared memory", 0.25),
    ("sm75-optin-max", "sm_75", 64, 32, 0, 64 * KB, 1, "shared memory", 2 / 32),
    ("sm75-optin-over", "sm_75", 64, 32, 0, 64 * KB + 1, 0, "shared memory", 0.0),
    # Ampere A100: 164 KB per SM, 163 KB per block
    ("sm80-T256-R32-S80K", "sm_80", 256, 32, 0, 80 * KB, 2, "shared memory", 0.25),
    # Ampere/Ada consumer: 48 warp slots; 1536 // 512 = 3 blocks of 16 warps
    ("sm86-T512-R32", "sm_86", 512, 32, 0, 0, 3, "warps", 1.0),
    # sm_86 has 16 blocks, sm_89 24: 1-warp blocks hit that cap
    ("sm86-T32-R16-blocks", "sm_86", 32, 16, 0, 0, 16, "blocks", 16 / 48),
    ("sm89-T32-R16-blocks", "sm_89", 32, 16, 0, 0, 24, "blocks", 24 / 48),
    # 48 threads still take 2 warp slots: 64 // 2 = 32 (ties with the block cap)
    ("sm90-T48-partial-warp", "sm_90", 48, 32, 0, 0, 32, "warps", 1.0),
]


@pytest.mark.parametrize("arch,threads,regs,static,dynamic,blocks,limiter,frac",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hand_checked(arch, threads, regs, static, dynamic, blocks, limiter, frac):
    r = occ.occupancy(arch, threads, regs, static, dynamic)
    assert r.blocks_per_sm == blocks, r
    assert r.limiter == limiter, r
    assert r.occupancy == pytest.approx(frac)
    assert r.active_warps == blocks * r.warps_per_block
    assert limiter in r.limiters


def test_ties_are_all_listed():
    r = occ.occupancy("sm_90", 256, 32)
    assert r.limiters == ("warps", "registers")
    assert r.limits == {"warps": 8, "blocks": 32, "registers": 8, "shared memory": 228}


def test_sm75_vs_sm90_same_kernel():
    # the seed's best D=64 tile: 256 threads, ~11 KB smem; assume 40 registers
    t, s = occ.occupancy("sm_75", 256, 40, 11 * KB), occ.occupancy("sm_90", 256, 40, 11 * KB)
    # sm_75: warps 32/8 = 4; regs 1280/warp -> 12/sub -> 48/8 = 6; smem 65536 // 11264 = 5 -> 4 blocks
    assert (t.blocks_per_sm, t.limiter, t.occupancy) == (4, "warps", 1.0)
    # sm_90: warps 8; regs 6; smem (11264 + 1024) -> 233472 // 12288 = 19 -> 6 blocks, registers
    assert (s.blocks_per_sm, s.limiter) == (6, "registers")
    assert s.occupancy == pytest.approx(48 / 64)
    # the reserved kilobyte exists only from sm_80 on
    assert t.smem_allocated == 11 * KB and s.smem_allocated == 12 * KB


def test_seed_d128_has_two_blocks_on_turing_smem():
    # the seed says D=128 tiles use ~20 KB and allow 2 blocks/SM on the 1660 Ti: with the
    # 64 KB carveout the smem limit is 3 (65536 // 20480), registers decide the rest
    r = occ.occupancy("sm_75", 256, 32, 20 * KB)
    assert r.limits["shared memory"] == 3


def test_dynamic_attr_not_opted_in_gives_zero():
    # 64 KB dynamic with the default 48 KB attribute: the driver refuses (0 blocks)
    r = occ.occupancy("sm_90", 128, 32, 0, 64 * KB, max_dynamic_smem_attr=48 * KB)
    assert (r.blocks_per_sm, r.limiter) == (0, "shared memory")
    ok = occ.occupancy("sm_90", 128, 32, 0, 64 * KB, max_dynamic_smem_attr=64 * KB)
    assert ok.blocks_per_sm == 3   # 66560 -> 233472 // 66560 = 3


def test_max_dynamic_smem():
    assert occ.max_dynamic_smem("sm_90") == 232448
    assert occ.max_dynamic_smem("sm_90", static_smem=1024) == 231424
    assert occ.max_dynamic_smem("sm_75") == 65536
    assert occ.max_dynamic_smem("sm_86") == 99 * KB
    assert occ.needs_optin(48 * KB + 1) and not occ.needs_optin(48 * KB)


@pytest.mark.parametrize("spelling", ["sm_90", "sm90", "90", 90, "9.0", "compute_90", "SM_90"])
def test_arch_spellings(spelling):
    assert occ.normalize_arch(spelling) == "sm_90"


@pytest.mark.parametrize("bad", [
    dict(arch="sm_70"), dict(arch="sm_100"), dict(threads=0), dict(threads=1025),
    dict(regs=256), dict(regs=-1), dict(static=-1), dict(dynamic=-5), dict(threads=1.5)])
def test_invalid_inputs_raise(bad):
    args = dict(arch="sm_90", threads=128, regs=32, static=0, dynamic=0) | bad
    with pytest.raises(ValueError):
        occ.occupancy(args["arch"], args["threads"], args["regs"], args["static"], args["dynamic"])


def test_unknown_arch_message_lists_known():
    with pytest.raises(ValueError, match="sm_75, sm_80, sm_86, sm_89, sm_90"):
        occ.arch_spec("sm_61")


def test_occupancy_monotone_in_smem():
    # more shared memory never gives more blocks
    prev = 10**9
    for smem in range(0, 227 * KB, 997):
        b = occ.occupancy("sm_90", 256, 40, 0, smem).blocks_per_sm
        assert b <= prev
        prev = b


def test_table_and_recheck():
    df = occ.occupancy_table([dict(block_threads=256, regs=32, static_smem=0, dynamic_smem=48 * KB, D=64),
                              dict(block_threads=32, regs=32, static_smem=0, dynamic_smem=0, D=32)],
                             arch="sm_90")
    assert list(df["model_blocks"]) == [4, 32]
    assert list(df["D"]) == [64, 32]
    rec = df.assign(driver_blocks=[4, 31])
    checked = occ.recheck_recorded(rec)
    assert list(checked["agree_now"]) == [True, False]


# ------------------------------------------------------------------ recorded driver comparison

RECORDED = RESULTS_DIR / "h200" / "05_occupancy_scan__occupancy_check.csv"


def test_recorded_driver_agreement():
    """Calculator = driver on 100 % of the configurations recorded on the H200 (notebook 05, live)."""
    if not RECORDED.is_file():
        pytest.skip(f"{RECORDED.relative_to(RESULTS_DIR.parent.parent)} not recorded yet: run "
                    "notebooks/05_occupancy_scan.ipynb live on the H200 to record the driver comparison")
    import pandas as pd
    df = pd.read_csv(RECORDED)
    for col in ("arch", "block_threads", "regs", "driver_blocks", "model_blocks"):
        assert col in df.columns, f"{RECORDED.name} lacks column {col}"
    assert len(df) > 0, "recorded comparison is empty"
    bad = df[df["driver_blocks"] != df["model_blocks"]]
    assert bad.empty, f"model != driver at recording time on {len(bad)}/{len(df)} rows:\n{bad.head(10)}"
    # and the current code still reproduces the driver's figures
    now = occ.recheck_recorded(df)
    bad = now[~now["agree_now"]]
    assert bad.empty, f"current model != recorded driver on {len(bad)}/{len(df)} rows:\n{bad.head(10)}"


def test_with_theoretical():
    import pandas as pd
    df = pd.DataFrame([dict(block_threads=256, regs=32, static_smem=0, dynamic_smem=48 * KB),
                       dict(block_threads=1024, regs=65, static_smem=0, dynamic_smem=0)])
    t = occ.with_theoretical(df, "sm_90")
    assert list(t["model_blocks"]) == [4, 0]
    assert list(t["limiter"]) == ["shared memory", "registers"]
    assert t["theo_occupancy"].tolist() == [0.5, 0.0]
