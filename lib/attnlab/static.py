"""Static build of kernels without a GPU: registers, shared memory, spills, stack and PTX.

``nvcc`` compiles a small translation unit that includes the kernel file and takes the address
of each requested template instantiation (which forces it to exist without restating the
kernel's signature). ``ptxas -v`` reports resources per function; ``-ptx`` keeps the PTX so a
notebook can show, e.g., that the float4 kernels issue 128-bit global loads.

When ``nvcc`` is absent, NVRTC from the ``cuda-bindings`` / ``nvidia-cuda-nvrtc`` wheels is used
instead (same front end as CuPy's live loader). Results are cached on disk, keyed by the
sources, the instantiations, the architecture and the compiler version.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .compile import (CompileError, compile_options, define_options, describe_compile_log, kernel_path,
                      lineinfo_options, name_expression, source_fingerprint, CXX_STANDARD)
from .paths import KERNELS_DIR, cache_dir, write_atomic

#: Architectures every kernel is built for: the seed's Turing GPU and the H200 (Hopper).
DEFAULT_ARCHS = ("sm_75", "sm_90")


@dataclass(frozen=True)
class StaticReport:
    source: str
    function: str
    template_args: tuple
    arch: str
    registers: int
    static_smem_bytes: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    barriers: int
    ptx: str = field(repr=False, default="")
    #: ptxas's reason code where it serialized the function's wgmmas (C7511, C7514, C7515: a warpgroup
    #: MMA then waits for the one before it, and nothing overlaps), "" where it did not
    wgmma_serialized: str = ""

    @property
    def name(self) -> str:
        return name_expression(self.function, self.template_args)

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0

    def row(self) -> dict[str, Any]:
        """A flat dict for a DataFrame row (PTX left out)."""
        d = asdict(self)
        d.pop("ptx")
        d["template_args"] = ",".join(str(a) for a in self.template_args)
        d["kernel"] = self.name
        return d


# ---------------------------------------------------------------- parsing compiler output

_PROPS = re.compile(r"Function properties for (?P<mangled>\S+)\s*\n\s*(?P<stack>\d+) bytes stack frame, "
                    r"(?P<st>\d+) bytes spill stores, (?P<ld>\d+) bytes spill loads")
_USED = re.compile(r"Compiling entry function '(?P<mangled>[^']+)' for '(?P<arch>sm_\w+)'\s*\n"
                   r"(?:.*\n)*?.*?Used (?P<regs>\d+) registers(?P<rest>[^\n]*)")


_SERIAL = re.compile(r"\((?P<code>C75\d\d)\) Potential Performance Loss: wgmma\.mma_async instructions are "
                     r"serialized.*? in the function '(?P<mangled>\w+)'")


def parse_ptxas_verbose(log: str) -> dict[str, dict[str, Any]]:
    """Resources per mangled function name from ``ptxas -v`` output (and ``wgmma_serialized``: the
    reason code of ptxas's wgmma serialization warning, where it gave one)."""
    out: dict[str, dict[str, Any]] = {}
    for m in _SERIAL.finditer(log):
        out.setdefault(m.group("mangled"), {})["wgmma_serialized"] = m.group("code")
    for m in _PROPS.finditer(log):
        out.setdefault(m.group("mangled"), {}).update(
            stack_bytes=int(m.group("stack")), spill_store_bytes=int(m.group("st")),
            spill_load_bytes=int(m.group("ld")))
    # "Used" lines follow the entry function they belong to; walk the log line by line.
    current = None
    for line in log.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?(_Z\w+|\w+)'?", line)
        if m and "entry function" in line:
            current = m.group(1)
        m = re.search(r"Used (\d+) registers", line)
        if m and current:
            info = out.setdefault(current, {})
            info["registers"] = int(m.group(1))
            smem = re.search(r"(\d+) bytes smem", line)
            info["static_smem_bytes"] = int(smem.group(1)) if smem else 0
            bar = re.search(r"used (\d+) barriers", line)
            info["barriers"] = int(bar.group(1)) if bar else 0
    return out


def split_ptx_functions(ptx: str) -> dict[str, str]:
    """PTX text of each ``.entry`` keyed by mangled name (from its header to the next entry's, or the
    end: inline assembly's own ``{ }`` blocks put closing braces in column 0 inside a function)."""
    marks = list(re.finditer(r"^\.(?:visible|weak) \.entry (\w+)\(", ptx, re.MULTILINE))
    return {m.group(1): ptx[m.start():(marks[i + 1].start() if i + 1 < len(marks) else len(ptx))]
            for i, m in enumerate(marks)}


def demangle(names: Iterable[str]) -> dict[str, str]:
    names = list(names)
    tool = shutil.which("c++filt") or shutil.which("cu++filt")
    if not tool or not names:
        return {n: n for n in names}
    res = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=True)
    return dict(zip(names, res.stdout.splitlines()))


def template_args_of(demangled: str) -> tuple[str, ...]:
    """``void attn_tiled<64, 8, 16>(float const*, ...)`` -> ('64', '8', '16')."""
    head = demangled.split("(", 1)[0]
    if "<" not in head:
        return ()
    inner = head[head.index("<") + 1: head.rindex(">")]
    return tuple(a.strip() for a in inner.split(","))


def count_ptx_loads(ptx: str) -> dict[str, int]:
    """Global/shared load and store instructions by width, e.g. {'ld.global.v4.f32': 12, ...}."""
    counts: dict[str, int] = {}
    for m in re.finditer(r"\b((?:ld|st|cp\.async)\.[\w.]+)", ptx):
        op = m.group(1)
        if ".global" in op or ".shared" in op or op.startswith("cp.async"):
            counts[op] = counts.get(op, 0) + 1
    return counts


def has_vector_global_loads(ptx: str) -> bool:
    """True when the PTX holds 128-bit global loads (``ld.global[.nc].v4.f32`` or ``.v4.u32`` ...)
    or 16-byte ``cp.async`` copies from global memory."""
    return bool(re.search(r"ld\.global(?:\.\w+)*\.v4\.", ptx) or
                re.search(r"cp\.async\.(?:cg|ca)\.shared\.global(?:\.\w+)*\s*\[[^\]]+\],\s*\[[^\]]+\],\s*16", ptx))


# ---------------------------------------------------------------- building

#: bump when what a cached report holds changes (2: per-function PTX split at the next entry)
_CACHE_VERSION = 3


def _cache_dir() -> Path:
    path = cache_dir("static")
    path.mkdir(parents=True, exist_ok=True)
    return path


def nvcc_path() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    return None


def compiler_version() -> str:
    nvcc = nvcc_path()
    if nvcc:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"release ([\d.]+), V([\d.]+)", out)
        return f"nvcc {m.group(2)}" if m else "nvcc"
    try:
        from cuda.bindings import nvrtc  # type: ignore
        err, major, minor = nvrtc.nvrtcVersion()
        return f"nvrtc {major}.{minor}"
    except Exception:  # noqa: BLE001 - any import failure means "no compiler"
        return "none"


def _instantiation_unit(path: Path, function: str, instantiations: Sequence[Sequence[Any]]) -> str:
    exprs = [name_expression(function, args) for args in instantiations]
    refs = ",\n    ".join(f"(void*)&{e}" for e in exprs)
    # Taking each instantiation's address forces it to be compiled, without restating the
    # kernel's parameter list here.
    return f'#include "{path}"\nvoid* attnlab_static_instances[] = {{\n    {refs}\n}};\n'


def _run_nvcc(nvcc: str, unit: Path, arch: str, options: Sequence[str], out: Path, mode: str,
              source: str) -> str:
    if arch.endswith("a"):   # sm_90a: `-arch=sm_90a` would also run a plain sm_90 pass that rejects wgmma
        cc = arch[3:]
        target = [f"-gencode=arch=compute_{cc},code={'sm' if mode == '-cubin' else 'compute'}_{cc}"]
    else:
        target = [f"-arch={arch}"]
    cmd = [nvcc, *options, *target, mode, "-o", str(out), str(unit)]
    if mode == "-cubin":
        cmd[1:1] = ["-Xptxas", "-v"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    log = res.stdout + res.stderr
    if res.returncode != 0:
        raise CompileError(describe_compile_log(source, log, cmd))
    return log


def _build_with_nvcc(nvcc, path, function, instantiations, arch, defines, source):
    options = (CXX_STANDARD, f"-I{KERNELS_DIR}", *define_options(defines))
    with tempfile.TemporaryDirectory(prefix="attnlab-static-") as tmp:
        unit = Path(tmp) / "instances.cu"
        unit.write_text(_instantiation_unit(path, function, instantiations))
        log = _run_nvcc(nvcc, unit, arch, options, Path(tmp) / "out.cubin", "-cubin", source)
        _run_nvcc(nvcc, unit, arch, options, Path(tmp) / "out.ptx", "-ptx", source)
        ptx = (Path(tmp) / "out.ptx").read_text()
    return log, ptx


def _nvrtc_run(path: Path, function: str, instantiations, options: list[str], source: str,
               want_ptx: bool) -> tuple[str, str]:
    from cuda.bindings import nvrtc  # type: ignore

    err, prog = nvrtc.nvrtcCreateProgram(path.read_bytes(), str(path).encode(), 0, [], [])
    for args in instantiations:
        nvrtc.nvrtcAddNameExpression(prog, name_expression(function, args).encode())
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, log)
    log = log.decode(errors="replace")
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(describe_compile_log(source, log, options))
    ptx = ""
    if want_ptx:
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        buf = b" " * size
        nvrtc.nvrtcGetPTX(prog, buf)
        ptx = buf.decode(errors="replace").rstrip("\x00")
    nvrtc.nvrtcDestroyProgram(prog)
    return log, ptx


def _build_with_nvrtc(path, function, instantiations, arch, defines, source):
    """NVRTC twice, as nvcc is run twice: real machine code for ``arch`` (ptxas -v report in the
    log), then PTX for the virtual ``compute_`` architecture."""
    base = list(compile_options(defines, path.parent))
    log, _ = _nvrtc_run(path, function, instantiations,
                        [*base, f"--gpu-architecture={arch}", "--ptxas-options=-v"], source, False)
    _, ptx = _nvrtc_run(path, function, instantiations,
                        [*base, f"--gpu-architecture={arch.replace('sm_', 'compute_')}"], source, True)
    return log, ptx


def cache_key(path: Path, function: str, instantiations: Sequence[tuple], arch: str,
              defines: Mapping[str, Any] | None) -> str:
    """The static build's cache key: the sources' fingerprint, what is built, the compiler and the
    options that change its output (defines, ATTNLAB_LINEINFO)."""
    return hashlib.sha256(json.dumps([str(path), source_fingerprint(path), function,
                                      [[str(x) for x in a] for a in instantiations], arch,
                                      sorted((defines or {}).items()), compiler_version(), _CACHE_VERSION,
                                      *lineinfo_options()],
                                     default=str).encode()).hexdigest()[:24]


def static_build(source: str | Path, function: str, instantiations: Sequence[Sequence[Any]] = ((),),
                 arch: str = "sm_90", defines: Mapping[str, Any] | None = None) -> list[StaticReport]:
    """Compile ``function<args>`` for each ``args`` in ``instantiations`` for ``arch``, no GPU needed.

    Returns one :class:`StaticReport` per instantiation, in the order given.
    Raises :class:`CompileError` (file, line, options) on a compile error.
    """
    path = kernel_path(source)
    instantiations = [tuple(a) for a in instantiations]
    cached = _cache_dir() / f"{cache_key(path, function, instantiations, arch, defines)}.json"
    if cached.is_file():
        rows = json.loads(cached.read_text())
        return [StaticReport(**{**r, "template_args": tuple(r["template_args"])}) for r in rows]

    nvcc = nvcc_path()
    if nvcc:
        log, ptx = _build_with_nvcc(nvcc, path, function, instantiations, arch, defines, str(source))
    else:
        try:
            log, ptx = _build_with_nvrtc(path, function, instantiations, arch, defines, str(source))
        except ImportError:
            raise RuntimeError("no CUDA compiler found for the static build: install the CUDA toolkit "
                               "(nvcc) or `pip install cuda-bindings nvidia-cuda-nvrtc`") from None
    resources = parse_ptxas_verbose(log)
    ptx_by_fn = split_ptx_functions(ptx)
    names = demangle(set(resources) | set(ptx_by_fn))
    by_args: dict[tuple, str] = {}
    for mangled, pretty in names.items():
        if pretty.split("(")[0].split("<")[0].split()[-1] == function:
            by_args[template_args_of(pretty)] = mangled
    reports = []
    for args in instantiations:
        wanted = tuple(str(int(a)) if not isinstance(a, bool) else ("true" if a else "false") for a in args)
        mangled = by_args.get(wanted)
        if mangled is None:
            raise CompileError(f"{source}: instantiation {name_expression(function, args)} not found in "
                               f"the compiler output (is the function name right?)")
        res = resources.get(mangled, {})
        reports.append(StaticReport(
            source=str(source), function=function, template_args=tuple(args), arch=arch,
            registers=res.get("registers", 0), static_smem_bytes=res.get("static_smem_bytes", 0),
            stack_bytes=res.get("stack_bytes", 0), spill_store_bytes=res.get("spill_store_bytes", 0),
            spill_load_bytes=res.get("spill_load_bytes", 0), barriers=res.get("barriers", 0),
            ptx=ptx_by_fn.get(mangled, ""), wgmma_serialized=res.get("wgmma_serialized", "")))
    # a unique temporary name: notebooks running in parallel may build the same kernel at once
    write_atomic(cached, json.dumps([{**asdict(r), "template_args": list(r.template_args)} for r in reports]))
    return reports
