"""Thread-block clusters: the helpers in kernels/common.cuh (rank, cluster barrier, distributed
shared memory) compile to the PTX the ISA specifies, and the CPU model's clusters
(tests/ladder_emu/ladder_emu.h: emu_launch_cluster) behave as those instructions do."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from attnlab.static import nvcc_path

import emu_build  # tests/emu_build.py: g++ builds cached by content

ROOT = Path(__file__).resolve().parents[1]
GXX = shutil.which("g++")


@pytest.mark.skipif(GXX is None, reason="g++ (C++20) is needed to build the CPU model")
def test_cpu_model_clusters_match_the_ptx_semantics(tmp_path):
    exe = tmp_path / "harness_cluster"
    cmd = [GXX, "-std=c++20", "-O1", "-pthread", "-include", str(ROOT / "tests/ladder_emu/ladder_emu.h"),
           "-I", str(ROOT / "kernels"), str(ROOT / "tests/ladder_emu/harness_cluster.cpp"), "-o", str(exe)]
    res = emu_build.run(cmd)
    assert res.returncode == 0, res.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "cluster selftest ok" in run.stdout, run.stdout + run.stderr


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_cluster_helpers_compile_to_cluster_ptx(tmp_path):
    src = tmp_path / "cluster_probe.cu"
    src.write_text('#include "common.cuh"\n'
                   "__global__ void __cluster_dims__(4, 1, 1) probe(float* out) {\n"
                   "    extern __shared__ float s[];\n"
                   "    s[threadIdx.x] = (float)cluster_ctarank();\n"
                   "    cluster_sync();\n"
                   "    out[threadIdx.x] = cluster_map_shared(s, (cluster_ctarank() + 1) % cluster_nctarank())[threadIdx.x];\n"
                   "}\n")
    ptx = tmp_path / "cluster_probe.ptx"
    res = subprocess.run([nvcc_path(), "-std=c++17", "-arch=sm_90", "-ptx", "-I", str(ROOT / "kernels"), str(src),
                          "-o", str(ptx)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    text = ptx.read_text()
    for needle in ("%cluster_ctarank", "%cluster_nctarank", "barrier.cluster.arrive.release.aligned",
                   "barrier.cluster.wait.acquire.aligned", "mapa.u64", ".reqnctapercluster 4, 1, 1"):
        assert needle in text, needle
