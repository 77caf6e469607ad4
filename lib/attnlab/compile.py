"""Compile CUDA C from ``kernels/`` through CuPy (NVRTC) and cache the result.

A kernel is named by its file (relative to ``kernels/``), its function and its compile-time
parameters: template arguments (head dim, tile sizes) instantiated through CuPy's
``name_expressions``, and optional ``-D`` defines. Compiled modules are cached per
(file contents, includes, parameters, GPU architecture), so a notebook that launches the same
kernel a thousand times compiles it once.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from .paths import KERNELS_DIR, cache_dir, write_atomic

CXX_STANDARD = "-std=c++17"


class CompileError(RuntimeError):
    """A kernel failed to compile; the message names the file, the line and the options."""


def kernel_path(source: str | Path) -> Path:
    """Absolute path of a kernel source given relative to ``kernels/`` (or absolute)."""
    path = Path(source)
    if not path.is_absolute():
        path = KERNELS_DIR / path
    if not path.is_file():
        raise FileNotFoundError(f"no kernel source {path} (sources live under {KERNELS_DIR})")
    return path


def kernel_source(source: str | Path) -> str:
    """The text of a kernel file, for display in a notebook."""
    return kernel_path(source).read_text()


def format_template_arg(arg: Any) -> str:
    if isinstance(arg, bool):
        return "true" if arg else "false"
    if isinstance(arg, (int,)) or hasattr(arg, "__index__"):
        return str(int(arg))
    raise TypeError(f"template argument {arg!r} must be an int or bool")


def name_expression(function: str, template_args: Sequence[Any] = ()) -> str:
    """``attn_tiled<64, 8, 16>``: the exact string NVRTC instantiates and CuPy looks up."""
    if not template_args:
        return function
    return f"{function}<{', '.join(format_template_arg(a) for a in template_args)}>"


def define_options(defines: Mapping[str, Any] | None) -> tuple[str, ...]:
    if not defines:
        return ()
    opts = []
    for key, value in sorted(defines.items()):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"bad define name {key!r}: must be a C identifier")
        opts.append(f"-D{key}" if value is None else f"-D{key}={value}")
    return tuple(opts)


def compile_options(defines: Mapping[str, Any] | None = None, source_dir: Path | None = None) -> tuple[str, ...]:
    """NVRTC options shared by the live loader (the static build mirrors them for nvcc).

    NVRTC gets the source as a string, so a kernel's own folder is added to the include path
    explicitly (``#include "delta_common.cuh"`` beside the kernel), then ``kernels/`` for
    ``common.cuh``."""
    dirs = [source_dir] if source_dir is not None and source_dir != KERNELS_DIR else []
    return (CXX_STANDARD, *(f"-I{d}" for d in dirs), f"-I{KERNELS_DIR}", *define_options(defines), *lineinfo_options())


def lineinfo_options() -> tuple[str, ...]:
    """``-lineinfo`` when ATTNLAB_LINEINFO=1: source lines in the cubin (compute-sanitizer and Nsight
    Compute then name file:line; scripts/sanitize_kernels.py --lineinfo). Off by default, so recorded
    runs build what they always built; the option is part of every cache key."""
    flag = os.environ.get("ATTNLAB_LINEINFO", "0")
    if flag not in ("0", "1"):
        raise ValueError(f"ATTNLAB_LINEINFO={flag!r}: set it to 1 (source lines in the cubins) or 0")
    return ("-lineinfo",) if flag == "1" else ()


_INCLUDE_CU = re.compile(r'^\s*#\s*include\s+"([^"]+\.cu)"', re.MULTILINE)


def included_kernels(path: Path) -> list[Path]:
    """Kernel files (.cu) that ``path`` includes from its own folder, transitively (10h builds on
    10g's row-block body), in include order."""
    out: list[Path] = []
    todo = [path]
    while todo:
        for name in _INCLUDE_CU.findall(todo.pop().read_text()):
            dep = path.parent / name
            if dep.is_file() and dep not in out and dep != path:
                out.append(dep)
                todo.append(dep)
    return out


def source_fingerprint(path: Path) -> str:
    """Hash of a kernel file, the kernel files it includes, every header under kernels/ and (for a
    source outside kernels/, such as tests/delta_emu/race_controls_gpu.cu) the headers beside it, so
    editing common.cuh (or 10g, for 10h) recompiles."""
    digest = hashlib.sha256(path.read_bytes())
    for dep in included_kernels(path):
        digest.update(dep.read_bytes())
    headers = sorted(KERNELS_DIR.rglob("*.cuh"))
    if KERNELS_DIR not in path.parents:
        headers += sorted(path.parent.glob("*.cuh"))
    for header in headers:
        digest.update(header.read_bytes())
    return digest.hexdigest()[:16]


_ERROR_LINE = re.compile(r"^(?P<file>[^\s(]+)\((?P<line>\d+)\): (?:catastrophic )?error:? ?(?P<msg>.*)$",
                         re.MULTILINE)


def describe_compile_log(source: str | Path, log: str, options: Sequence[str]) -> str:
    """Turn a compiler log into a message naming the first error's file and line."""
    match = _ERROR_LINE.search(log)
    where = str(source)
    if match:
        file = match.group("file")
        # NVRTC names the main translation unit after a temporary file; errors in headers
        # carry the header's own path.
        if file.endswith(".cuh"):
            where = file
        where = f"{where}:{match.group('line')}: {match.group('msg').strip()}"
    return f"failed to compile {where}\n  options: {' '.join(options)}\n{log.strip()}"


@dataclass(frozen=True)
class _Key:
    path: str
    fingerprint: str
    expression: str
    options: tuple[str, ...]
    arch: str


_CACHE: dict[_Key, Any] = {}


def load_kernel(source: str | Path, function: str, template_args: Sequence[Any] = (),
                defines: Mapping[str, Any] | None = None, arch: str | None = None):
    """Compile (once) and return a ``cupy.RawKernel`` for ``function<template_args>``.

    ``source`` is relative to ``kernels/``; headers are found with ``-I kernels``. ``arch`` names
    an architecture-specific target such as ``sm_90a`` (wgmma, setmaxnreg); by default CuPy
    compiles for this GPU's plain ``sm_XY``.
    Raises :class:`CompileError` naming the file, line and options when NVRTC fails.
    """
    import cupy as cp

    path = kernel_path(source)
    expression = name_expression(function, template_args)
    options = compile_options(defines, path.parent)
    device_arch = "sm_" + cp.cuda.Device().compute_capability
    if arch is not None and arch.rstrip("a") != device_arch:
        raise ValueError(f"{source} is built for {arch} only; this GPU is {device_arch}")
    key = _Key(str(path), source_fingerprint(path), expression, options, arch or device_arch)
    kernel = _CACHE.get(key)
    if kernel is not None:
        return kernel
    if arch is not None:
        kernel = _load_arch_specific(path, source, expression, options, arch)
        _CACHE[key] = kernel
        return kernel
    # CuPy's on-disk cache keys on the source text and options, not on what it includes: the
    # fingerprint as a trailing comment (no line numbers move) makes an edited header recompile
    code = path.read_text() + f"\n// attnlab sources {source_fingerprint(path)}\n"
    module = cp.RawModule(code=code, options=options, name_expressions=[expression] if template_args else None)
    try:
        module.compile()
        kernel = module.get_function(expression)
    except cp.cuda.compiler.CompileException as exc:
        raise CompileError(describe_compile_log(source, exc.get_message(), options)) from None
    _CACHE[key] = kernel
    return kernel


def elf_extent(image: bytes) -> int:
    """How many bytes an ELF64 (little-endian) image says it spans: the end of its program header
    table, of its section header table and of every section's data that the file holds (the header
    and both tables' entries, as far as ``image`` has them)."""
    if len(image) < 64 or image[:4] != b"\x7fELF" or image[4] != 2 or image[5] != 1:
        raise CompileError("not an ELF64 little-endian image (a cubin is one)")
    u16 = lambda o: int.from_bytes(image[o:o + 2], "little")
    u64 = lambda o: int.from_bytes(image[o:o + 8], "little")
    phoff, shoff = u64(0x20), u64(0x28)
    phentsize, phnum, shentsize, shnum = u16(0x36), u16(0x38), u16(0x3A), u16(0x3C)
    end = max(64, phoff + phentsize * phnum if phnum else 0, shoff + shentsize * shnum if shnum else 0)
    SHT_NOBITS = 8
    for i in range(shnum):
        h = shoff + i * shentsize
        if h + 64 <= len(image) and int.from_bytes(image[h + 4:h + 8], "little") != SHT_NOBITS:
            end = max(end, u64(h + 0x18) + u64(h + 0x20))   # sh_offset + sh_size
    return end


def whole_cubin(image: bytes) -> bytes:
    """The cubin NVRTC produced, whole. CuPy's ``nvrtc.getCUBIN`` drops the image's last byte (it strips
    a trailing NUL, as from PTX text, from a binary), and NVRTC's cubins end with the program header
    table, whose last byte is the high byte of the last entry's 64-bit alignment: zero. That byte is
    put back; an image short by more, or ending elsewhere, is an error (CompileError), not a guess."""
    end = elf_extent(image)
    if len(image) >= end:
        return image
    ph_end = int.from_bytes(image[0x20:0x28], "little") + int.from_bytes(image[0x36:0x38], "little") * \
        int.from_bytes(image[0x38:0x3A], "little")
    if end - len(image) == 1 and ph_end == end:
        return image + b"\0"
    short = end - len(image)
    raise CompileError(f"the cubin is {short} byte{'s' if short > 1 else ''} shorter than its ELF header says "
                       f"({len(image)} of {end}): not the one byte CuPy's getCUBIN drops, a damaged image")


def _load_arch_specific(path: Path, source, expression: str, options: tuple[str, ...], arch: str):
    """NVRTC straight (CuPy's compiler always appends its own ``-arch=sm_XY``, and an ``a`` target
    cannot be named through it): cubin for ``arch``, written to a private cache file and loaded
    with ``cupy.RawModule(path=...)``."""
    import cupy as cp
    from cupy_backends.cuda.libs import nvrtc

    opts = (*options, f"--gpu-architecture={arch}")
    # One cubin per build, kept across processes (CuPy loads a path module lazily, per device, so the
    # file must stay): a second process with the same source, expression and options compiles nothing.
    key = (source_fingerprint(path), expression, opts, nvrtc.getVersion())
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:24]
    cubin_path = cache_dir("cubin") / f"{digest}.cubin"
    name_path = cubin_path.with_suffix(".name")
    if cubin_path.is_file() and name_path.is_file():
        image = cubin_path.read_bytes()
        try:
            whole = whole_cubin(image)
        except CompileError:   # a damaged entry: built again below
            whole = None
        if whole is not None:
            if whole != image:   # an entry written before whole_cubin: made whole in place
                write_atomic(cubin_path, whole)
            return cp.RawModule(path=str(cubin_path)).get_function(name_path.read_text())
    prog = nvrtc.createProgram(path.read_text(), str(path), (), ())
    try:
        nvrtc.addNameExpression(prog, expression)
        try:
            nvrtc.compileProgram(prog, list(opts))
        except nvrtc.NVRTCError:
            raise CompileError(describe_compile_log(source, nvrtc.getProgramLog(prog), opts)) from None
        lowered = nvrtc.getLoweredName(prog, expression)
        cubin = whole_cubin(nvrtc.getCUBIN(prog))
    finally:
        nvrtc.destroyProgram(prog)
    write_atomic(cubin_path, cubin)
    write_atomic(name_path, lowered)   # second: its presence says the cubin beside it is whole
    return cp.RawModule(path=str(cubin_path)).get_function(lowered)


def clear_cache() -> None:
    _CACHE.clear()
