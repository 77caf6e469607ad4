"""Kernel loading and the static (CPU-only) build."""

import pytest

from attnlab.attention import KERNELS, SUPPORTED_HEAD_DIMS, default_tiles
from attnlab.compile import CompileError, define_options, describe_compile_log, kernel_path, name_expression
from attnlab.static import (count_ptx_loads, has_vector_global_loads, parse_ptxas_verbose, split_ptx_functions,
                            static_build, template_args_of)


def test_name_expression_formats_template_arguments():
    assert name_expression("attn_naive", (64,)) == "attn_naive<64>"
    assert name_expression("attn_tiled", (64, 8, 16)) == "attn_tiled<64, 8, 16>"
    assert name_expression("k", (True, 3)) == "k<true, 3>"
    assert name_expression("plain") == "plain"
    with pytest.raises(TypeError):
        name_expression("k", ("64",))


def test_define_options_reject_non_identifiers():
    assert define_options({"TILE": 8, "FLAG": None}) == ("-DFLAG", "-DTILE=8")
    with pytest.raises(ValueError, match="C identifier"):
        define_options({"BAD-NAME": 1})


def test_missing_kernel_file_is_named():
    with pytest.raises(FileNotFoundError, match="no_such_kernel.cu"):
        kernel_path("attention/no_such_kernel.cu")


def test_compile_log_names_file_line_and_options():
    log = "/tmp/tmpab12/kern.cu(17): error: identifier \"foo\" is undefined\n1 error detected"
    msg = describe_compile_log("attention/01_naive.cu", log, ["-std=c++17", "-DX=1"])
    assert "attention/01_naive.cu:17" in msg and 'identifier "foo"' in msg and "-DX=1" in msg


def test_static_build_reports_compile_errors_with_file_and_line(tmp_path):
    bad = tmp_path / "broken.cu"
    bad.write_text("template <int D>\n__global__ void broken(float* x) {\n    x[0] = undefined_name;\n}\n")
    with pytest.raises(CompileError) as exc:
        static_build(bad, "broken", [(32,)], "sm_90")
    text = str(exc.value)
    assert "broken.cu" in text and ":3" in text and "-std=c++17" in text


@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
@pytest.mark.parametrize("name", sorted(n for n, s in KERNELS.items() if not s.flash))
def test_every_ladder_kernel_builds_without_spills(name, arch):
    """The seed's ladder at its default tiles (the flash kernels: tests/test_flash_study.py)."""
    spec = KERNELS[name]
    if not kernel_path(spec.source).is_file():
        pytest.fail(f"{spec.source} is registered but missing")
    args = [spec.template_args(d, *default_tiles(d)) for d in SUPPORTED_HEAD_DIMS]
    reports = static_build(spec.source, spec.function, args, arch)
    assert [r.template_args for r in reports] == args
    for r in reports:
        assert r.registers > 0, "ptxas reported no registers"
        assert not r.spills, f"{r.name} spills on {arch}: {r.spill_store_bytes} B stored"
        assert ".entry " in r.ptx.split("\n", 1)[0], "PTX of the function was not captured"
        assert has_vector_global_loads(r.ptx) == spec.vector_loads, (
            f"{r.name}: 128-bit global loads {'missing' if spec.vector_loads else 'unexpected'}")


def test_parse_ptxas_verbose_sample():
    log = """ptxas info    : Compiling entry function '_Z10attn_naiveILi64EEvPKfS1_S1_Pfif' for 'sm_90'
ptxas info    : Function properties for _Z10attn_naiveILi64EEvPKfS1_S1_Pfif
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 31 registers, used 1 barriers, 2048 bytes smem
"""
    info = parse_ptxas_verbose(log)["_Z10attn_naiveILi64EEvPKfS1_S1_Pfif"]
    assert info == dict(stack_bytes=8, spill_store_bytes=4, spill_load_bytes=12, registers=31,
                        static_smem_bytes=2048, barriers=1)



def test_parse_ptxas_verbose_wgmma_serialization():
    """ptxas's warning that it serialized a function's wgmmas (nvcc 13's wording) lands on that function
    only, as its reason code."""
    log = """ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to insufficient register resources for the wgmma pipeline in the function '_Z1fv'
ptxas info    : Compiling entry function '_Z1fv' for 'sm_90a'
ptxas info    : Used 200 registers, used 16 barriers
ptxas info    : Compiling entry function '_Z1gv' for 'sm_90a'
ptxas info    : Used 100 registers, used 1 barriers
"""
    info = parse_ptxas_verbose(log)
    assert info["_Z1fv"]["wgmma_serialized"] == "C7511" and info["_Z1fv"]["registers"] == 200
    assert "wgmma_serialized" not in info["_Z1gv"]


def test_ptx_helpers():
    ptx = (".visible .entry _Z1fv(\n)\n{\n\tld.global.nc.v4.f32 {%f1,%f2,%f3,%f4}, [%rd1];\n"
           "\tst.shared.f32 [%r1], %f1;\n}\n.visible .entry _Z1gv(\n)\n{\n\tld.global.f32 %f1, [%rd1];\n}\n")
    fns = split_ptx_functions(ptx)
    assert set(fns) == {"_Z1fv", "_Z1gv"}
    assert has_vector_global_loads(fns["_Z1fv"]) and not has_vector_global_loads(fns["_Z1gv"])
    assert count_ptx_loads(fns["_Z1fv"]) == {"ld.global.nc.v4.f32": 1, "st.shared.f32": 1}
    assert template_args_of("void attn_tiled<64, 8, 16>(float const*, int)") == ("64", "8", "16")
    assert template_args_of("void plain(float*)") == ()


@pytest.mark.parametrize("name", ["naive", "vec_load"])
def test_nvrtc_fallback_agrees_with_nvcc(name, monkeypatch, tmp_path):
    """Without nvcc the static build uses NVRTC from the PyPI wheels; it must report the same story."""
    pytest.importorskip("cuda.bindings.nvrtc")
    import attnlab.static as st

    spec = KERNELS[name]
    args = [spec.template_args(64, *default_tiles(64))]
    monkeypatch.setenv("ATTNLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(st, "nvcc_path", lambda: None)
    (rep,) = st.static_build(spec.source, spec.function, args, "sm_90")
    assert rep.registers > 0 and not rep.spills
    assert has_vector_global_loads(rep.ptx) == spec.vector_loads


def test_lineinfo_is_off_unless_asked_for(monkeypatch):
    from attnlab.compile import compile_options, lineinfo_options

    monkeypatch.delenv("ATTNLAB_LINEINFO", raising=False)
    assert lineinfo_options() == () and "-lineinfo" not in compile_options()
    monkeypatch.setenv("ATTNLAB_LINEINFO", "1")
    assert compile_options({"X": 1})[-2:] == ("-DX=1", "-lineinfo")
    monkeypatch.setenv("ATTNLAB_LINEINFO", "yes")
    with pytest.raises(ValueError, match="ATTNLAB_LINEINFO='yes': set it to 1"):
        compile_options()


def test_a_source_outside_kernels_is_fingerprinted_with_the_headers_beside_it(tmp_path):
    from attnlab.compile import source_fingerprint

    src = tmp_path / "k.cu"
    src.write_text('#include "k.cuh"\n')
    (tmp_path / "k.cuh").write_text("// one\n")
    before = source_fingerprint(src)
    (tmp_path / "k.cuh").write_text("// two\n")
    assert source_fingerprint(src) != before   # an edited header beside it rebuilds the cached cubin


def test_the_static_build_cache_keys_on_lineinfo(monkeypatch):
    from attnlab.compile import kernel_path
    from attnlab.static import cache_key

    args = (kernel_path("attention/01_naive.cu"), "attn_naive", [(64,)], "sm_90", None)
    monkeypatch.setenv("ATTNLAB_LINEINFO", "0")
    off = cache_key(*args)
    monkeypatch.setenv("ATTNLAB_LINEINFO", "1")
    assert cache_key(*args) != off
