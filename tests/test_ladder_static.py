"""Static build of the ladder kernels 02-05 (nvcc on the CPU): they compile for sm_75 and sm_90
at the seed's tiles and at extreme tiles, spill nothing, fit 1024-thread blocks, and their PTX
shows the step each file is about (scalar copies in 02, 128-bit loads in 03-05, cp.async in 05
on sm_90 only)."""

import pytest

from attnlab.attention import get_spec
from attnlab.static import has_vector_global_loads, nvcc_path, static_build

pytestmark = pytest.mark.skipif(nvcc_path() is None, reason="nvcc is needed for the static build")

KERNELS = ("tiled", "vec_load", "vec_padded", "double_buffer")
# (D, TILE_ROWS, TILE_KV): the seed's three tiles, one warp per block, and 32 warps with long tiles
TILES = [(32, 8, 32), (64, 8, 16), (128, 8, 8), (32, 1, 8), (128, 32, 128)]


@pytest.fixture(scope="module")
def reports():
    out = {}
    for name in KERNELS:
        spec = get_spec(name)
        for arch in ("sm_75", "sm_90"):
            reps = static_build(spec.source, spec.function, [spec.template_args(*t) for t in TILES], arch)
            for t, r in zip(TILES, reps):
                out[(name, arch, t)] = r
    return out


@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
@pytest.mark.parametrize("name", KERNELS)
def test_no_spills_and_1024_thread_blocks_fit(reports, name, arch):
    for t in TILES:
        r = reports[(name, arch, t)]
        assert r.registers > 0, "ptxas reported nothing"
        assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, f"{name}{t} spills on {arch}"
        assert r.stack_bytes == 0, f"{name}{t} uses a stack frame on {arch}"
        if t[1] == 32:
            assert r.registers <= 64, f"{name}{t}: {r.registers} registers cannot run 1024 threads per block"
        assert r.static_smem_bytes == 0, "all shared memory is dynamic (sized by the launcher)"


@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_ptx_shows_each_step(reports, arch):
    for t in TILES:
        assert not has_vector_global_loads(reports[("tiled", arch, t)].ptx)
        for name in ("vec_load", "vec_padded", "double_buffer"):
            ptx = reports[(name, arch, t)].ptx
            assert "ld.global.nc.v4.f32" in ptx or "ld.global.v4.f32" in ptx, f"{name}{t} lacks 128-bit loads"
        db = reports[("double_buffer", arch, t)].ptx
        assert ("cp.async.cg.shared.global" in db) == (arch == "sm_90"), "cp.async only on sm_80+"
        assert ("cp.async" in reports[("vec_padded", arch, t)].ptx) is False

