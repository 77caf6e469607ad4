"""ncu command line and CSV parsing, on hand-written samples of ``ncu --csv --page raw`` output
(header row, units row, one row per launch; ==PROF== chatter around it)."""
from __future__ import annotations

import pytest

from attnlab import ncu, roofline

# Base units (--print-units base), as scripts/ncu_profile.py asks for them. Launch 0 is the
# naive kernel, 1 the marker, 2-3 two kernels of one torch SDPA call, 4 the marker.
SAMPLE_BASE = '''==PROF== Connected to process 41817 (/usr/bin/python3.11)
==PROF== Profiling "attn_naive": 0%....50%....100% - 3 passes
==PROF== Profiling "fma_peak_config": 0%....50%....100% - 3 passes
==PROF== Profiling "fmha_cutlassF_f32_aligned_64x64_rf_sm80": 0%....50%....100% - 3 passes
==PROF== Profiling "softmax_warp_forward": 0%....50%....100% - 3 passes
==PROF== Profiling "fma_peak_config": 0%....50%....100% - 3 passes
==PROF== Disconnected from process 41817
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes.sum","gpu__time_duration.sum","l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum","lts__t_sector_hit_rate.pct","sm__sass_thread_inst_executed_op_ffma_pred_on.sum","sm__warps_active.avg.pct_of_peak_sustained_active"
"","","","","","","","","","","","byte","nsecond","","%","inst","%"
"0","41817","python3.11","127.0.0.1","void attn_naive<64>(const float *, const float *, const float *, float *, int, float)","1","7","(32, 1, 1)","(8192, 1, 1)","0","9.0","16,908,288","1,234,567","0","97.53","1,073,741,824","88.10"
"1","41817","python3.11","127.0.0.1","fma_peak_config","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0","0","1,856","0","0","0","1.56"
"2","41817","python3.11","127.0.0.1","fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)","1","7","(32, 4, 1)","(8, 16, 2)","0","9.0","2,000,000","300,000","12","50","500,000,000","40"
"3","41817","python3.11","127.0.0.1","void softmax_warp_forward<float, float, float, 7, false>(float *, const float *, int, int, int)","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","1,000,000","100,000","n/a","90","0","80"
"4","41817","python3.11","127.0.0.1","fma_peak_config","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0","0","1,700","0","0","0","1.5"
'''

# Auto-scaled units (no --print-units base) as an interactive ncu prints them.
SAMPLE_SCALED = '''"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes.sum","gpu__time_duration.sum","lts__t_bytes.sum","sm__sass_thread_inst_executed_op_ffma_pred_on.sum"
"","","","","","","","","","","","Mbyte","usecond","Gbyte","Minst"
"0","7","python","h","void attn_tiled<128, 8, 8>(const float *, const float *, const float *, float *, int, float)","1","7","(256, 1, 1)","(1024, 1, 1)","0","9.0","16.91","1,234.50","2.5","1.5"
'''


def test_parse_base_units():
    t = ncu.parse_raw_csv(SAMPLE_BASE)
    assert list(t.columns) == ncu.TIDY_COLUMNS
    assert sorted(t["launch_id"].unique()) == [0, 1, 2, 3, 4]
    naive = t[t.launch_id == 0].set_index("metric")
    assert naive.loc["dram__bytes.sum", "value"] == 16908288
    assert naive.loc["dram__bytes.sum", "unit"] == "byte"
    assert naive.loc["gpu__time_duration.sum", ("value")] == 1234567
    assert naive.loc["gpu__time_duration.sum", "unit"] == "ns"
    assert naive.loc["lts__t_sector_hit_rate.pct", "unit"] == "%"
    assert naive.loc["sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "unit"] == ""
    assert naive.loc["sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "value"] == 2**30
    assert set(naive["function"]) == {"attn_naive"} and set(naive["template_args"]) == {"64"}
    assert set(naive["block_size"]) == {"(32, 1, 1)"}
    # 'n/a' becomes a missing value, not a crash or a zero
    soft = t[(t.launch_id == 3) & (t.metric == "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum")]
    assert soft["value"].isna().all()


def test_parse_scaled_units():
    t = ncu.parse_raw_csv(SAMPLE_SCALED).set_index("metric")
    assert t.loc["dram__bytes.sum", "value"] == pytest.approx(16.91e6)
    assert t.loc["lts__t_bytes.sum", "value"] == pytest.approx(2.5e9)
    assert t.loc["gpu__time_duration.sum", "value"] == pytest.approx(1234.5e3)
    assert t.loc["gpu__time_duration.sum", "unit"] == "ns"
    assert t.loc["sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "value"] == pytest.approx(1.5e6)
    assert t["function"].iloc[0] == "attn_tiled" and t["template_args"].iloc[0] == "128,8,8"


@pytest.mark.parametrize("name,func,targs", [
    ("void attn_tiled<64, 8, 16>(const float *, const float *, const float *, float *, int, float)",
     "attn_tiled", ("64", "8", "16")),
    ("fma_peak_config", "fma_peak_config", ()),
    ("copy_f4(const float4 *, float4 *, long long)", "copy_f4", ()),
    ("void softmax_warp_forward<float, float, float, 7, false>(float *, const float *, int, int, int)",
     "softmax_warp_forward", ("float", "float", "float", "7", "false")),
    ("void at::native::elementwise_kernel<128, 4, Foo<Bar<int>, 2>>(int, T1)",
     "at::native::elementwise_kernel", ("128", "4", "Foo<Bar<int>, 2>")),
], ids=["tiled", "extern-c", "params-only", "torch-softmax", "nested"])
def test_demangle(name, func, targs):
    assert ncu.demangle_kernel(name) == (func, targs)


@pytest.mark.parametrize("text,value", [("1,234,567", 1234567.0), ("97.53", 97.53), ("n/a", None),
                                        ("", None), ("1.5e+03", 1500.0), ("12,5", None), ("-3", -3.0)])
def test_parse_number(text, value):
    assert ncu.parse_number(text) == value


@pytest.mark.parametrize("value,unit,out", [
    (2.0, "Kbyte", (2000.0, "byte")), (2.0, "Gbyte", (2e9, "byte")), (3.0, "msecond", (3e6, "ns")),
    (3.0, "second", (3e9, "ns")), (50.0, "%", (50.0, "%")), (7.0, "", (7.0, "")),
    (7.0, "Kinst", (7000.0, "")), (2.0, "Mbyte/second", (2e6, "byte/s")), (1.0, "cycle", (1.0, "")),
], ids=lambda v: str(v))
def test_normalize_unit(value, unit, out):
    assert ncu.normalize_unit(value, unit) == out


def test_wide_and_markers_and_aggregate():
    t = ncu.parse_raw_csv(SAMPLE_BASE)
    w = ncu.wide(t)
    assert len(w) == 5 and "dram__bytes.sum" in w.columns
    groups = ncu.split_by_marker(t, "fma_peak_config")
    assert groups == [[0], [2, 3]]
    sdpa = ncu.aggregate_launches(t[t.launch_id.isin(groups[1])]).set_index("metric")
    assert sdpa.loc["dram__bytes.sum", "value"] == 3_000_000                       # sums add
    assert sdpa.loc["gpu__time_duration.sum", "value"] == 400_000
    # percentages weighted by duration: (50*300k + 90*100k) / 400k = 60
    assert sdpa.loc["lts__t_sector_hit_rate.pct", "value"] == pytest.approx(60.0)
    assert sdpa.loc["sm__warps_active.avg.pct_of_peak_sustained_active", "value"] == pytest.approx(50.0)
    assert sdpa["n_kernels"].iloc[0] == 2
    assert "softmax_warp_forward" in sdpa["kernel_names"].iloc[0]
    # a sum over one n/a and one number keeps the number
    assert sdpa.loc["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "value"] == 12


def test_build_command():
    cmd = ncu.build_command(["python", "scripts/ncu_profile.py", "--worker"], ncu="/x/ncu",
                            kernel_regex="attn_.*", launch_count=3, profile_from_start=False,
                            log_file="/tmp/n.csv")
    s = " ".join(cmd)
    assert cmd[0] == "/x/ncu"
    assert "--clock-control none" in s and "--csv" in cmd and "--page raw" in s
    assert "--metrics " + ",".join(ncu.METRICS) in s
    assert "--kernel-name regex:attn_.*" in s and "--launch-count 3" in s
    assert "--profile-from-start off" in s and "--log-file /tmp/n.csv" in s
    assert "--print-units base" in s
    assert cmd[-3:] == ["python", "scripts/ncu_profile.py", "--worker"]
    with pytest.raises(ValueError):
        ncu.build_command(["x"], metrics=["dram__bytes.sum; rm -rf /"])
    with pytest.raises(ValueError):
        ncu.build_command([])
    with pytest.raises(ValueError):
        ncu.build_command(["x"], launch_count=0)


def test_metrics_cover_design():
    for m in ("dram__bytes.sum", "lts__t_bytes.sum", "lts__t_sector_hit_rate.pct",
              "sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "sm__warps_active.avg.pct_of_peak_sustained_active",
              "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "gpu__time_duration.sum"):
        assert m in ncu.METRICS


def test_no_table_raises_with_reason():
    perm = ("==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission "
            "to access NVIDIA GPU Performance Counters on the target device 0.\n")
    with pytest.raises(ncu.NcuUnavailable, match="ERR_NVGPUCTRPERM"):
        ncu.parse_raw_csv(perm)
    assert "no kernels" in ncu.diagnose("==WARNING== No kernels were profiled.")
    assert ncu.diagnose("==ERROR== Failed to profile kernel") == "==ERROR== Failed to profile kernel"
    assert ncu.diagnose("", 3) == "ncu exited with status 3"
    assert ncu.diagnose("fine", 0) is None


def test_plan():
    full = roofline.ncu_plan("full")
    keys = [(e["kernel"], e["N"], e["D"]) for e in full]
    assert len(keys) == len(set(keys))
    assert sum(e["kernel"] == "torch_sdpa" for e in full) == 3
    assert len([e for e in full if e["purpose"] in ("grid", "grid+l2_sweep")]) == 5 * 3 * 2
    sweep = sorted(e["N"] for e in full if "l2_sweep" in e["purpose"])
    assert sweep == [256, 512, 1024, 2048, 4096, 8192, 16384]
    assert (full[-1]["kernel"], full[-1]["N"]) == ("naive", 16384)      # slowest launch last
    assert all(e["B"] == 2 and e["H"] == 8 for e in full)
    quick = roofline.ncu_plan("quick")
    assert len(quick) < len(full) / 3
    with pytest.raises(ValueError):
        roofline.ncu_plan("huge")


def test_assemble_and_wide():
    t = ncu.parse_raw_csv(SAMPLE_BASE)
    manifest = [dict(kernel="naive", B=2, H=8, N=512, D=64, tile_rows=None, tile_kv=None, purpose="grid",
                     status="launched"),
                dict(kernel="double_buffer", B=2, H=8, N=512, D=64, purpose="grid", status="skipped: no such file"),
                dict(kernel="torch_sdpa", B=2, H=8, N=4096, D=64, purpose="sdpa", status="launched")]
    long = ncu.assemble(t, manifest)
    assert set(long["kernel"]) == {"naive", "torch_sdpa"}
    w = ncu.counters_wide(long).set_index("kernel")
    assert w.loc["naive", "dram__bytes.sum"] == 16908288
    assert w.loc["torch_sdpa", "dram__bytes.sum"] == 3_000_000
    assert w.loc["torch_sdpa", "n_kernels"] == 2
    # the joined table feeds the roofline's measured-vs-modelled directly
    from attnlab import roofline as rl
    m = rl.measured_vs_modelled(w.reset_index())
    naive = m[m.kernel == "naive"].iloc[0]
    assert naive.dram_bytes == 16908288 and naive.bytes_model == rl.naive_bytes(2, 8, 512, 64)
    # a launched entry without its counters is an error, never a silent shift of labels
    with pytest.raises(ValueError, match="cannot tell"):
        ncu.assemble(t, manifest + [dict(kernel="naive", N=1, status="launched")])


# ------------------------------------------------------------------ flash notebooks (08, 09, 10)

import importlib.util
import math
import sys
from pathlib import Path

import pandas as pd

from attnlab.attention import get_spec, kernels_of_step, resolve_params

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("ncu_profile_script", ROOT / "scripts" / "ncu_profile.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


script = _script()


def _key(e):
    return (e["kernel"], e["D"], e["causal"])


def test_flash_plan_08_and_09_from_the_registry():
    for notebook, kernels, ref in (("08_register_tiling", ("vec_padded", "register_tiled"), "sdpa"),
                                   ("09_tf32_tensor_cores", ("tf32", "3xtf32"), "sdpa")):
        plan = script.build_flash_plan(notebook)
        assert [_key(e) for e in plan] == [(k, d, False) for d in (64, 128) for k in (*kernels, ref)]
        assert all((e["B"], e["H"], e["N"], e["dtype"]) == (2, 8, 4096, "float32") for e in plan)
        for e in plan:
            assert set(ncu.FLASH_LABEL_COLUMNS) <= set(e)
            if e["purpose"] == "kernel":
                p, _ = resolve_params(e["kernel"], e["D"])
                assert e["param_values"] == p and e["step"] == get_spec(e["kernel"]).step
                assert e["params"] == ",".join(f"{a}={b}" for a, b in p.items())
            else:
                assert e["kernel"] == ref and e["params"] == "library" and e["step"] == ""
    quick = script.build_flash_plan("09_tf32_tensor_cores", "quick")
    assert {e["D"] for e in quick} == {64} and len(quick) == 3


def test_flash_plan_10_every_step_causal_last():
    plan = script.build_flash_plan("10_flash_bf16")
    steps = kernels_of_step("10")
    assert len(steps) >= 2 and all(e["dtype"] == "bfloat16" for e in plan)
    nc = [_key(e) for e in plan if not e["causal"]]
    assert nc == [(k, d, False) for d in (64, 128) for k in (*steps, "sdpa_flash", "sdpa_cudnn")]
    causal = [_key(e) for e in plan if e["causal"]]
    assert causal == [(k, d, True) for d in (64, 128) for k in (steps[-1], "sdpa_flash", "sdpa_cudnn")]
    # every kernel's parameters are the registry's per-D defaults
    fa2 = [e for e in plan if e["kernel"] == steps[-1] and e["D"] == 128]
    assert all(e["param_values"] == dict(get_spec(steps[-1]).defaults[128]) for e in fa2)
    # overrides go through the registry's checks
    p = script.build_flash_plan("10_flash_bf16", "quick", params={steps[0]: {"BN": 32}})
    assert p[0]["param_values"]["BN"] == 32 and "BN=32" in p[0]["params"]
    with pytest.raises(ValueError):
        script.build_flash_plan("10_flash_bf16", params={steps[0]: {"BN": 3}})
    with pytest.raises(ValueError):
        script.build_flash_plan("07_delta_attention_chunking")
    with pytest.raises(ValueError):
        script.build_flash_plan("10_flash_bf16", "huge")


def test_flash_plan_is_json_and_keys_unique():
    import json
    for nbk in script.FLASH_NOTEBOOKS:
        plan = script.build_flash_plan(nbk)
        assert json.loads(json.dumps(plan)) == plan
        assert len({_key(e) for e in plan}) == len(plan)


def test_cli_dry_run_prints_the_flash_plan(capsys):
    assert script.main(["--notebook", "10_flash_bf16", "--dry-run"]) == 0
    out = capsys.readouterr().out
    plan = script.build_flash_plan("10_flash_bf16")
    assert f"{len(plan)} calls" in out
    for e in plan:
        assert script._describe(e) in out
    assert "data/results/<gpu>/10_flash_bf16__ncu.csv" in out
    cmd = [l for l in out.splitlines() if "command:" in l][0]
    assert "--profile-from-start off" in cmd and "--worker --notebook 10_flash_bf16" in cmd
    assert "--metrics " + ",".join(ncu.flash_metrics("90")) in cmd
    assert script.main(["--notebook", "08_register_tiling", "--profile", "quick", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "data/results/<gpu>/quick/08_register_tiling__ncu.csv" in out and "3 calls" in out


def test_cli_default_is_still_notebook_06(capsys):
    assert script.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"plan: {len(roofline.ncu_plan('full'))} calls" in out
    assert "--metrics " + ",".join(ncu.METRICS) in out and "--notebook" not in out
    assert script.main(["--notebook", "06_roofline", "--profile", "quick", "--dry-run"]) == 0
    assert f"plan: {len(roofline.ncu_plan('quick'))} calls" in capsys.readouterr().out


def test_cli_rejects_bad_arguments(capsys):
    for argv in (["--notebook", "07_delta_attention_chunking"], ["--notebook", "10_flash_bf16", "--profile", "huge"],
                 ["--timeout", "0"]):
        with pytest.raises(SystemExit) as exc:
            script.main(argv)
        assert exc.value.code == 2


def test_flash_metric_names():
    m = ncu.flash_metrics()
    assert len(m) == len(set(m)) and "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio" not in m
    assert ncu.flash_metrics(90)[-1] == "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio"
    for name in ("gpu__time_duration.sum", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
                 "sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active",
                 "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
                 "sm__inst_issued.avg.pct_of_peak_sustained_active", "sm__warps_active.avg.pct_of_peak_sustained_active",
                 "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                 "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
                 "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
                 *(f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in
                   ("barrier", "long_scoreboard", "short_scoreboard", "mio_throttle", "math_pipe_throttle", "wait",
                    "not_selected", "dispatch_stall", "lg_throttle", "tex_throttle"))):
        assert name in m
    ncu.build_command(["x"], metrics=ncu.flash_metrics(90))      # every name passes the command's check


def test_unknown_metrics():
    metrics = ncu.flash_metrics(90)
    out = ("==PROF== Connected to process 1\n"
           "==ERROR== Failed to find metric regex:^smsp__average_warps_issue_stalled_gmma_per_issue_active\\.ratio$\n"
           "==ERROR== Failed to find metric sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active\n")
    assert ncu.unknown_metrics(out, metrics) == [
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
        "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio"]
    # a base name that is a prefix of another is not confused with it
    assert ncu.unknown_metrics("==ERROR== Failed to find metric sm__pipe_tensor_op_hmma_cycles_active_x",
                               metrics) == []
    assert ncu.unknown_metrics("fine", metrics) == []


_STALLS = ",".join(f'"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio"' for r in
                   ("barrier", "long_scoreboard", "short_scoreboard", "mio_throttle", "math_pipe_throttle", "wait",
                    "gmma"))
# Launch 0: a flash kernel; 1: marker; 2-3: one SDPA call issuing two kernels (the second reports
# n/a for the ldmatrix counters and the tensor pipe); 4: marker. Units as --print-units base prints them.
SAMPLE_FLASH = f'''==PROF== Connected to process 7 (/usr/bin/python3.12)
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","gpu__time_duration.sum","launch__registers_per_thread","sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active","sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active","sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active","sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active","sm__inst_issued.avg.pct_of_peak_sustained_active","sm__warps_active.avg.pct_of_peak_sustained_active","l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum","l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum","l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum","l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum","smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum","smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ldsm.sum","device__attribute_display_name",{_STALLS}
"","","","","","","","","","","","nsecond","register/thread","%","%","%","%","%","%","","","","","","","","inst","inst","inst","inst","inst","inst","inst"
"0","7","python3.12","h","void attn_fa2_tuned<64, 64, 64, 4, true, false, 3>(const __nv_bfloat16 *, const __nv_bfloat16 *, const __nv_bfloat16 *, __nv_bfloat16 *, int, float)","1","7","(128, 1, 1)","(64, 16, 1)","0","9.0","1,000,000","168","60","55","50","5","40","12","0","800,000","100","200","0","400,000","NVIDIA H200","0.5","1.5","0.25","2","0.5","0.25","n/a"
"1","7","python3.12","h","fma_peak_config","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0","1,856","16","0","0","0","1","1","1.5","0","4","0","2","0","0","NVIDIA H200","0","0","0","0","0","0","0"
"2","7","python3.12","h","void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4, false, false, cutlass::bfloat16_t>, false, false>(Flash_fwd_params)","1","7","(128, 1, 1)","(32, 16, 1)","0","9.0","300,000","255","80","80","70","10","50","10","30","300","0","100","10","1,000","NVIDIA H200","1","2","0","0","0","1","0.5"
"3","7","python3.12","h","void at::native::vectorized_elementwise_kernel<4, Foo>(int, Foo)","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","100,000","32","n/a","0","0","30","20","70","n/a","n/a","0","50","n/a","n/a","NVIDIA H200","5","n/a","0","0","0","1","0"
"4","7","python3.12","h","fma_peak_config","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0","1,700","16","0","0","0","1","1","1.5","0","4","0","2","0","0","NVIDIA H200","0","0","0","0","0","0","0"
'''

MANIFEST_FLASH = [
    dict(kernel="fa2_tuned", step="10d", dtype="bfloat16", causal=False, B=2, H=8, N=4096, D=64,
         params="BM=64,BN=64,WARPS=4,STAGES=3", purpose="kernel", status="launched"),
    dict(kernel="sdpa_cudnn", step="", dtype="bfloat16", causal=False, B=2, H=8, N=4096, D=64,
         params="library", purpose="reference", status="skipped: RuntimeError: refused"),
    dict(kernel="sdpa_flash", step="", dtype="bfloat16", causal=False, B=2, H=8, N=4096, D=64,
         params="library", purpose="reference", status="launched"),
]


def _flash_long():
    t = ncu.parse_raw_csv(SAMPLE_FLASH)
    long = ncu.assemble(t, MANIFEST_FLASH, label_columns=ncu.FLASH_LABEL_COLUMNS)
    return ncu.keep_metrics(long, ncu.flash_metrics(90))


def test_flash_assemble_and_keep():
    long = _flash_long()
    assert list(long.columns) == ncu.FLASH_LABEL_COLUMNS + ["ncu_kernels", "n_kernels", "metric", "unit", "value"]
    assert "device__attribute_display_name" not in set(long["metric"])
    assert "launch__registers_per_thread" in set(long["metric"])
    sd = long[long.kernel == "sdpa_flash"].set_index("metric")
    assert (sd["n_kernels"] == 2).all()
    # launch attributes are the longest kernel's, not a sum
    assert sd.loc["launch__registers_per_thread", "value"] == 255
    # ratios are duration-weighted means, not sums: (1*300k + 5*100k) / 400k = 2
    assert sd.loc[ncu.stall_metric("barrier"), "value"] == pytest.approx(2.0)
    # a ratio one kernel reports as n/a: the mean of the others' (here one kernel)
    assert sd.loc[ncu.stall_metric("long_scoreboard"), "value"] == pytest.approx(2.0)


def test_flash_summary_on_canned_csv():
    s = ncu.flash_summary(_flash_long())
    assert list(s.columns) == ncu.FLASH_SUMMARY_COLUMNS
    assert list(s["kernel"]) == ["fa2_tuned", "sdpa_flash"]            # manifest order, skipped left out
    fa2, sd = s.iloc[0], s.iloc[1]
    assert fa2.duration_us == pytest.approx(1000.0) and fa2.n_kernels == 1
    assert fa2.ncu_kernels == "attn_fa2_tuned" and fa2.step == "10d" and fa2.params.startswith("BM=64")
    assert fa2.tensor_pipe_pct == 60 and fa2.hmma_inst_pct == 50 and fa2.fma_pipe_pct == 5
    assert fa2.issue_pct == 40 and fa2.occupancy_pct == 12
    assert fa2.smem_ld_conflicts == 0 and fa2.smem_ld_conflicts_per_wavefront == 0
    assert fa2.smem_st_conflicts_per_wavefront == pytest.approx(0.5)
    assert fa2.ldsm_conflicts == 0 and fa2.ldsm_conflicts_per_wavefront == 0
    # stalls: barrier .5, long_sb 1.5, short_sb .25, mio 2, math .5, wait .25, gmma n/a -> total 5
    assert fa2.stall_per_issue == pytest.approx(5.0)
    assert (fa2.stall_1, fa2.stall_2) == ("mio_throttle", "long_scoreboard")
    assert fa2.stall_1_share == pytest.approx(0.4) and fa2.stall_2_share == pytest.approx(0.3)
    assert fa2.stall_3 in ("barrier", "math_pipe_throttle") and fa2.stall_3_share == pytest.approx(0.1)
    # SDPA: two kernels, duration adds, percentages duration-weighted
    assert sd.n_kernels == 2 and sd.duration_us == pytest.approx(400.0) and sd.step == ""
    assert sd.ncu_kernels == "flash_fwd_kernel | vectorized_elementwise_kernel"
    assert sd.tensor_pipe_pct == pytest.approx(80.0)           # the second kernel's n/a is left out
    assert sd.fma_pipe_pct == pytest.approx((10 * 3 + 30) / 4)
    assert sd.occupancy_pct == pytest.approx((10 * 3 + 70) / 4)
    assert sd.smem_ld_conflicts == 30 and sd.smem_ld_conflicts_per_wavefront == pytest.approx(0.1)
    assert sd.ldsm_conflicts == 10 and sd.ldsm_conflicts_per_wavefront == pytest.approx(0.01)
    # weighted 3:1 -- barrier (1, 5) -> 2, long_scoreboard (2, n/a) -> 2, wait 1, gmma (.5, 0) -> .375
    assert sd.stall_per_issue == pytest.approx(5.375)
    assert (sd.stall_1, sd.stall_2, sd.stall_3) == ("barrier", "long_scoreboard", "wait")   # ties: list order
    assert sd.stall_1_share == pytest.approx(2 / 5.375) and sd.stall_3_share == pytest.approx(1 / 5.375)


def test_flash_summary_tolerates_missing_and_na_metrics():
    long = _flash_long()
    gone = {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
            "smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ldsm.sum",
            *(ncu.stall_metric(r) for r in ncu.STALL_REASONS + ncu.HOPPER_STALL_REASONS)}
    s = ncu.flash_summary(long[~long.metric.isin(gone)]).set_index("kernel")
    # the all-tensor metric missing: mma.sync's HMMA cycles stand in
    assert s.loc["fa2_tuned", "tensor_pipe_pct"] == 55
    # conflicts without wavefronts: no ratio (zero conflicts are zero whatever the wavefronts)
    assert math.isnan(s.loc["sdpa_flash", "ldsm_conflicts_per_wavefront"])
    assert s.loc["fa2_tuned", "ldsm_conflicts_per_wavefront"] == 0
    assert s["stall_1"].isna().all() and s["stall_per_issue"].isna().all()
    assert ncu.flash_summary(long.iloc[0:0]).empty


def test_flash_summary_reads_the_recorded_csv_form(tmp_path):
    long = _flash_long().assign(gpu_name="NVIDIA H200", gpu="h200", profile="full")
    path = tmp_path / "t.csv"
    long.to_csv(path, index=False)
    back = pd.read_csv(path)                     # SDPA's empty step reads back as NaN
    a, b = ncu.flash_summary(long), ncu.flash_summary(back)
    assert list(b["kernel"]) == list(a["kernel"]) and list(b["step"]) == ["10d", ""]
    assert b["causal"].tolist() == [False, False]
    pd.testing.assert_series_equal(a["duration_us"], b["duration_us"])
    pd.testing.assert_series_equal(a["stall_1_share"], b["stall_1_share"])


class _Mode:
    def __init__(self, live, gpu):
        self.live, self.gpu = live, gpu


def test_flash_counters_replay(tmp_path, monkeypatch):
    from attnlab import results

    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    table, note = ncu.flash_counters("10_flash_bf16", _Mode(False, "h200"), "quick", run=True)
    assert table is None and "not available" in note and "10_flash_bf16__ncu.csv" in note
    long = _flash_long()
    prov = dict(gpu_name="NVIDIA H200", driver_version="580", cuda_runtime="13020", cupy_version="14",
                torch_version="2.11", git_commit="abc", git_dirty=False, timestamp_utc="2026-01-01T00:00:00+00:00",
                profile="full")
    results.write_csv_atomic(long.assign(**prov), results.table_path("10_flash_bf16", "ncu", "h200"))
    # replay reads the full table whatever the profile; run=True does nothing without a device
    table, note = ncu.flash_counters("10_flash_bf16", _Mode(False, "h200"), "quick", run=True)
    assert list(table["kernel"]) == ["fa2_tuned", "sdpa_flash"] and "2 profiled calls" in note
    assert "NVIDIA H200" in note and "This run" not in note
    raw, _ = ncu.flash_counters("10_flash_bf16", _Mode(False, "h200"), summary=False)
    assert "metric" in raw.columns
    # live reads its own profile's folder: nothing recorded under quick/
    table, note = ncu.flash_counters("10_flash_bf16", _Mode(True, "h200"), "quick", run=False)
    assert table is None and "quick" in note


def test_flash_counters_runs_the_script_when_live(tmp_path, monkeypatch):
    from attnlab import results

    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    calls = []

    class Done:
        returncode, stdout, stderr = 0, "[ncu_profile] counters not available: ncu not found; nothing written\n", ""

    def fake_run(cmd, **kw):
        calls.append((cmd, kw))
        return Done()

    monkeypatch.setattr(ncu.subprocess, "run", fake_run)
    table, note = ncu.flash_counters("09_tf32_tensor_cores", _Mode(True, "h200"), "custom", run=True,
                                     timeout=90, echo=False)
    cmd, kw = calls[0]
    assert cmd[0] == sys.executable and cmd[1].endswith("scripts/ncu_profile.py")
    assert cmd[2:] == ["--notebook", "09_tf32_tensor_cores", "--profile", "quick", "--timeout", "90"]
    assert kw["timeout"] == 210
    assert table is None and "counters not available: ncu not found" in note and "status 0" in note


FAKE_NCU = '''#!{python}
"""A stand-in for ncu: refuses the gmma stall metric on the first run, else writes the canned
flash CSV to --log-file and the worker's manifest (never runs the target)."""
import json, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2025.3.1.0 (build 1)")
    sys.exit(0)
metrics = args[args.index("--metrics") + 1]
log = args[args.index("--log-file") + 1]
manifest = args[args.index("--manifest") + 1]
with open({calls!r}, "a") as fh:
    fh.write(" ".join(args) + "\\n")
if "stalled_gmma" in metrics:
    open(log, "w").write("==PROF== Connected to process 1\\n==ERROR== Failed to find metric "
                         "regex:^smsp__average_warps_issue_stalled_gmma_per_issue_active\\\\.ratio$\\n")
    sys.exit(1)
open(log, "w").write(open({sample!r}).read())
open(manifest, "w").write(open({manifest_src!r}).read())
'''


def test_flash_driver_end_to_end_with_a_fake_ncu(tmp_path, monkeypatch, capsys):
    import json

    from attnlab import env, results

    sample, manifest_src, calls = tmp_path / "sample.csv", tmp_path / "manifest.json", tmp_path / "calls.txt"
    sample.write_text(SAMPLE_FLASH)
    manifest_src.write_text(json.dumps(MANIFEST_FLASH))
    fake = tmp_path / "ncu"
    fake.write_text(FAKE_NCU.format(python=sys.executable, calls=str(calls), sample=str(sample),
                                    manifest_src=str(manifest_src)))
    fake.chmod(0o755)
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(script.ncu, "ncu_path", lambda: str(fake))
    monkeypatch.setattr(script, "_compute_capability", lambda: "90")
    monkeypatch.setattr(env, "resolve_mode", lambda *a, **k: env.Mode(True, "h200", "NVIDIA H200", "live", "test"))
    monkeypatch.setattr(env, "nvidia_smi_query", lambda: {})
    monkeypatch.setattr(env, "_static_provenance", lambda: dict(cupy_version="14.0", cuda_runtime="13020",
                                                                cuda_driver_api="13000", torch_version="2.11",
                                                                torch_cuda="13.0"))
    assert script.main(["--notebook", "10_flash_bf16", "--profile", "quick", "--timeout", "60"]) == 0
    out = capsys.readouterr().out
    runs = calls.read_text().splitlines()
    assert len(runs) == 2 and "stalled_gmma" in runs[0] and "stalled_gmma" not in runs[1]
    assert "ncu does not know smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio" in out
    assert "not profiled: sdpa_cudnn" in out
    path = results.table_path("10_flash_bf16", "ncu", "h200", "quick")
    assert path.is_file() and "wrote" in out
    long = pd.read_csv(path)
    assert set(long["kernel"]) == {"fa2_tuned", "sdpa_flash"} and (long["profile"] == "quick").all()
    assert set(long["metric"]) <= set(ncu.flash_metrics(90)) | set(ncu.FLASH_LAUNCH_METRICS)
    table, note = ncu.flash_counters("10_flash_bf16", env.Mode(True, "h200", "NVIDIA H200", "live", "t"), "quick")
    assert list(table["kernel"]) == ["fa2_tuned", "sdpa_flash"] and "2 profiled calls" in note
