"""The CPU models' build cache (tests/emu_build.py) and their fiber scheduler (tests/emu_fibers.h):
a cached harness is never stale, a failed build is never cached, and a barrier that can never turn
aborts with a message instead of hanging."""

import re
import shutil
import subprocess

import pytest

import emu_build

GXX = shutil.which("g++")
needs_gxx = pytest.mark.skipif(GXX is None, reason="g++ (C++20) is needed to build the CPU models")
ROOT = emu_build.ROOT


def test_every_header_a_harness_includes_is_in_the_cache_key():
    """A quoted #include reachable from the harnesses must lie in emu_build.SOURCES, or an edit to it
    would leave a stale binary in the cache."""
    covered = [ROOT / s for s in emu_build.SOURCES]
    files = [p for d in ("tests", "kernels") for p in (ROOT / d).rglob("*")
             if p.suffix in (".h", ".cuh", ".cpp", ".cu") and p.is_file()]
    assert files
    for f in files:
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', f.read_text(), flags=re.M):
            target = (f.parent / inc).resolve()
            if not target.exists():
                target = (ROOT / "kernels" / inc).resolve()   # -I kernels
            assert target.exists(), f"{f.relative_to(ROOT)} includes {inc}, found nowhere"
            assert any(target == c or c in target.parents for c in covered), \
                f"{f.relative_to(ROOT)} includes {target.relative_to(ROOT)}, outside emu_build.SOURCES"


def test_the_key_follows_the_sources_and_the_command(tmp_path, monkeypatch):
    cmd = [GXX or "g++", "-std=c++20", "-DX=1", str(ROOT / "tests/ladder_emu/harness.cpp"), "-o", str(tmp_path / "a")]
    k = emu_build.key(cmd)
    assert emu_build.key(cmd[:-1] + [str(tmp_path / "b")]) == k          # the output name is not part of it
    assert emu_build.key([*cmd[:2], "-DX=2", *cmd[3:]]) != k              # a define is
    monkeypatch.setattr(emu_build, "sources_digest", lambda: "edited")
    assert emu_build.key(cmd) != k                                        # and so is every source's content


def test_generated_sources_outside_the_checkout_count_by_content(tmp_path):
    a, b = tmp_path / "x" / "k.cpp", tmp_path / "y" / "k.cpp"
    for p in (a, b):
        p.parent.mkdir()
        p.write_text("int main() { return 0; }\n")
    key = lambda src: emu_build.key(["g++", str(src), "-o", str(tmp_path / "out")])  # noqa: E731
    assert key(a) == key(b)
    b.write_text("int main() { return 1; }\n")
    assert key(a) != key(b)


@needs_gxx
def test_a_build_is_reused_and_a_failed_one_is_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "ok.cpp"
    src.write_text("int main() { return 7; }\n")
    first = emu_build.run([GXX, str(src), "-o", str(tmp_path / "one")])
    assert first.returncode == 0 and "cached" not in first.stderr
    second = emu_build.run([GXX, str(src), "-o", str(tmp_path / "two")])
    assert second.returncode == 0 and "cached" in second.stderr
    assert subprocess.run([str(tmp_path / "two")]).returncode == 7
    bad = tmp_path / "bad.cpp"
    bad.write_text("int main() { return }\n")
    for _ in range(2):
        res = emu_build.run([GXX, str(bad), "-o", str(tmp_path / "bad")])
        assert res.returncode != 0 and "error" in res.stderr
    assert len(list((tmp_path / "cache" / "emu").iterdir())) == 1          # only the good build, no temp files


DEADLOCK = r"""
#include <vector>
int main(int argc, char**) {
    std::vector<float> out(64, 0.0f);
    emu_launch(1, 64, 0, [&] {
        out[threadIdx.x] = 1.0f;
        if (threadIdx.x != 0 || argc > 1) __syncthreads();   // thread 0 skips it unless asked not to
        out[threadIdx.x] += 1.0f;
    });
    std::printf("%g\n", out[63]);
    return 0;
}
"""


@needs_gxx
def test_a_barrier_that_cannot_turn_aborts_with_a_message(tmp_path):
    src = tmp_path / "deadlock.cpp"
    src.write_text(DEADLOCK)
    exe = tmp_path / "deadlock"
    res = emu_build.run([GXX, "-std=c++20", "-O1", "-include", str(ROOT / "tests/ladder_emu/ladder_emu.h"),
                         f"-I{ROOT / 'kernels'}", str(src), "-o", str(exe)])
    assert res.returncode == 0, res.stderr[-3000:]
    ok = subprocess.run([str(exe), "all"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.strip() == "2"
    stuck = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert stuck.returncode != 0 and "deadlock: 63 of 64 threads" in stuck.stderr
