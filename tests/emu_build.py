"""Build a CPU execution-model harness with g++ once per content, not once per test run.

A harness binary is cached under ``$ATTNLAB_CACHE_DIR/emu`` (default ``~/.cache/attnlab/emu``, the
root the static build's cache uses), keyed by the compiler's ``--version``, the command line (with the
checkout's path and the output name taken out, a generated source outside the checkout by its
bytes) and the bytes of every file a harness can include:
``kernels/``, ``tests/ladder_emu/``, ``tests/delta_emu/``, ``tests/sanitize/``, ``tests/emu_fibers.h``
(``SOURCES``; a header a harness includes from elsewhere must be added there). Any edit to a kernel,
a header or the emulator changes the key, so a cached binary is never stale; a build that fails is
never cached. ``ATTNLAB_EMU_CACHE=0`` turns the cache off (every call compiles).

``run(cmd)`` is a drop-in for ``subprocess.run(cmd, capture_output=True, text=True)`` on a g++
command line that holds ``-o <exe>``: on return ``<exe>`` exists (a link to, or copy of, the cached
binary) unless the build failed.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("kernels", "tests/ladder_emu", "tests/delta_emu", "tests/sanitize", "tests/emu_fibers.h")


def cache_dir() -> Path:
    from attnlab.paths import cache_dir as lab_cache

    return lab_cache("emu")


def enabled() -> bool:
    return os.environ.get("ATTNLAB_EMU_CACHE", "1") != "0"


@functools.lru_cache(maxsize=None)
def _compiler_id(compiler: str) -> str:
    res = subprocess.run([compiler, "--version"], capture_output=True, text=True)
    return res.stdout + f"\nrc={res.returncode}"


def sources_digest() -> str:
    """sha256 over every file a harness may include, path and bytes (read afresh on each call: the
    mutation check edits sources between builds)."""
    h = hashlib.sha256()
    for d in SOURCES:
        for p in ([ROOT / d] if (ROOT / d).is_file() else sorted((ROOT / d).rglob("*"))):
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(str(p.relative_to(ROOT)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _arg(a: str) -> str:
    """An argument as the key sees it: a file outside the checkout (a generated source in a
    temporary folder) by its bytes, paths inside it relative to the checkout."""
    p = Path(a)
    if p.is_absolute() and p.is_file() and ROOT not in p.parents:
        return "<file:" + hashlib.sha256(p.read_bytes()).hexdigest() + ">"
    return a.replace(str(ROOT), "<root>")


def key(cmd: list[str]) -> str:
    """The cache key of a g++ command line: compiler identity, the arguments without the output path
    (the checkout's absolute path replaced, so two clones share entries) and the sources' digest."""
    args = list(cmd)
    i = args.index("-o")
    args[i + 1] = "<exe>"
    args = args[:1] + [_arg(a) for a in args[1:]]
    h = hashlib.sha256()
    h.update(_compiler_id(args[0]).encode() + b"\0")
    h.update("\0".join(args[1:]).encode() + b"\0")
    h.update(sources_digest().encode())
    return h.hexdigest()[:40]


def _place(cached: Path, exe: Path) -> None:
    exe.parent.mkdir(parents=True, exist_ok=True)
    if exe.exists() or exe.is_symlink():
        exe.unlink()
    try:
        os.link(cached, exe)
    except OSError:
        shutil.copy2(cached, exe)


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    """Build ``cmd`` (a g++ command line with ``-o <exe>``), from the cache where it holds this
    exact build."""
    if "-o" not in cmd:
        raise ValueError("emu_build.run needs a command line with '-o <exe>'")
    exe = Path(cmd[cmd.index("-o") + 1])
    if not enabled():
        return subprocess.run(cmd, capture_output=True, text=True)
    cached = cache_dir() / key(cmd)
    if cached.is_file():
        _place(cached, exe)
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr=f"(cached build {cached.name})")
    cached.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=cached.name + ".", suffix=".tmp", dir=cached.parent)
    os.close(fd)
    build = list(cmd)
    build[build.index("-o") + 1] = tmp
    res = subprocess.run(build, capture_output=True, text=True)
    if res.returncode != 0:
        Path(tmp).unlink(missing_ok=True)
        return subprocess.CompletedProcess(cmd, res.returncode, res.stdout, res.stderr)
    os.replace(tmp, cached)  # atomic: a concurrent reader sees the whole binary or none
    _place(cached, exe)
    return subprocess.CompletedProcess(cmd, 0, res.stdout, res.stderr)
