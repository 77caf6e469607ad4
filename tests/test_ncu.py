"""ncu command line and CSV parsing, on hand-written samples of ``ncu --csv --page raw`` output
(header row, units row, one row per launch; ==PROF== chatter around it)."""
from __future__ import annotations

import pytest

from attnlab import ncu

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
    full = ncu.build_plan("full")
    keys = [(e["kernel"], e["N"], e["D"]) for e in full]
    assert len(keys) == len(set(keys))
    assert sum(e["kernel"] == "torch_sdpa" for e in full) == 3
    assert len([e for e in full if e["purpose"] in ("grid", "grid+l2_sweep")]) == 5 * 3 * 2
    sweep = sorted(e["N"] for e in full if "l2_sweep" in e["purpose"])
    assert sweep == [256, 512, 1024, 2048, 4096, 8192, 16384]
    assert (full[-1]["kernel"], full[-1]["N"]) == ("naive", 16384)      # slowest launch last
    assert all(e["B"] == 2 and e["H"] == 8 for e in full)
    quick = ncu.build_plan("quick")
    assert len(quick) < len(full) / 3
    with pytest.raises(ValueError):
        ncu.build_plan("huge")


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
