"""Run the KDA launchers (lib/attnlab/delta/kernels.py) end to end on the CPU.

A stand-in ``cupy`` module (NumPy arrays that look like CuPy's) plus a stand-in RawKernel that
compiles the requested instantiation of a kernels/ file with g++ against the CPU model (ladder_emu.h)
into a shared library and launches it through ctypes. The arguments are marshalled from the
kernel's own parameter list (parsed from the source), so a launcher passing arguments in the
wrong order, of the wrong kind (a Python int where the kernel takes ``int``), or a grid, block
or dynamic shared-memory size the kernel does not expect, fails here, on a machine with no GPU.
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import sys
import types
from pathlib import Path

import numpy as np

import emu_build  # tests/emu_build.py (tests/ is on sys.path under pytest): g++ builds cached by content

ROOT = Path(__file__).resolve().parents[2]
EMU = Path(__file__).resolve().parent
LADDER_EMU = ROOT / "tests" / "ladder_emu" / "ladder_emu.h"


# ----------------------------------------------------------------------------- fake cupy

class _Device:
    def __init__(self, i: int = 0):
        self.id = i
        self.compute_capability = "90"
        self.attributes = {"MultiProcessorCount": 132}


class ndarray(np.ndarray):
    """A NumPy array that passes for a CuPy one (module name, .device, .get())."""

    @property
    def device(self):
        return _Device(0)

    def get(self):
        return np.array(self)

    @property
    def data(self):   # CuPy's MemoryPointer: .ptr, the address (the launchers check alignment with it)
        return types.SimpleNamespace(ptr=self.ctypes.data)


ndarray.__module__ = "cupy"


def _wrap(a) -> ndarray:
    return np.asarray(a).view(ndarray)


GUARD_BYTE = 0xA5


def _guarded(shape, dtype) -> ndarray:
    """An uninitialised array followed, in the same allocation, by a guard as large as itself filled
    with GUARD_BYTE: a kernel writing past the array's end (up to twice its size) lands in the guard,
    which EmuKernel checks after each launch, instead of in some other allocation."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    buf = np.empty(2 * n + 64 // dtype.itemsize + 1, dtype)
    buf.view(np.uint8)[n * dtype.itemsize:] = GUARD_BYTE
    a = buf[:n].reshape(shape).view(ndarray)
    a._guard = buf.view(np.uint8)[n * dtype.itemsize:]
    return a


def _guarded_copy(x, dtype=None) -> ndarray:
    x = np.ascontiguousarray(x, dtype=dtype)
    a = _guarded(x.shape, x.dtype)
    a[...] = x
    return a


def guard_intact(a) -> bool:
    g = getattr(a, "_guard", None)
    return g is None or bool((g == GUARD_BYTE).all())


class _Pool:
    """Counts the bytes of live arrays made by the fake cupy.empty and cupy.zeros (like CuPy's pool.used_bytes)."""

    def __init__(self):
        self.used = 0

    def alloc(self, shape, dtype):
        import weakref

        a = _guarded(shape, dtype)
        n = a.nbytes
        self.used += n
        weakref.finalize(a, self._free, n)
        return a

    def _free(self, n):
        self.used -= n

    def used_bytes(self):
        return self.used

    def total_bytes(self):
        return self.used

    def free_all_blocks(self):
        pass


_POOL = _Pool()


class _Event:
    def __init__(self, stream):
        self.stream = stream


class _Stream:
    """Stands in for ``cupy.cuda.Stream``. The CPU model runs one kernel at a time, so a launch made while a
    side stream is current waits, in order, until another stream waits on that stream's event (or it
    synchronizes): 21 -> 22 side by side (22 on the side stream, launched first) then runs 21 to its end and
    22 after it, an order in which every ready flag 22 waits for is set (kda_wait_ready's CPU model aborts
    on one that is not)."""
    stack: list = []

    def __init__(self, non_blocking: bool = False, priority: int = 0):
        self.pending: list = []

    def __enter__(self):
        _Stream.stack.append(self)
        return self

    def __exit__(self, *exc):
        _Stream.stack.pop()

    def record(self):
        return _Event(self)

    def wait_event(self, event):
        event.stream.synchronize()

    def synchronize(self):
        while self.pending:
            self.pending.pop(0)()


_MAIN_STREAM = _Stream()


def _current_stream() -> _Stream:
    return _Stream.stack[-1] if _Stream.stack else _MAIN_STREAM


def make_fake_cupy() -> types.ModuleType:
    cp = types.ModuleType("cupy")
    cp.ndarray = ndarray
    cp.float32, cp.float64, cp.uint8, cp.uint32 = np.float32, np.float64, np.uint8, np.uint32
    cp.float16, cp.int16, cp.uint16, cp.int32 = np.float16, np.int16, np.uint16, np.int32
    cp.empty = lambda shape, dtype=np.float32: _POOL.alloc(shape, dtype)

    def zeros(shape, dtype=np.float32):   # from the pool, as CuPy's are (21 -> 22's images and flags)
        a = _POOL.alloc(shape, dtype)
        a[...] = 0
        return a

    cp.zeros = zeros
    cp.asarray = lambda a, dtype=None: a if (isinstance(a, ndarray) and dtype is None) else _guarded_copy(a, dtype)
    cp.ascontiguousarray = lambda a, dtype=None: _wrap(np.ascontiguousarray(a, dtype=dtype))
    cp.from_dlpack = lambda a: _wrap(np.from_dlpack(a))
    cp.abs = lambda a: _wrap(np.abs(a))
    cp.asfortranarray = lambda a: _wrap(np.asfortranarray(a))
    cp.isfinite = lambda a: _wrap(np.isfinite(a))
    cp.linalg = types.SimpleNamespace(norm=lambda a: np.linalg.norm(np.asarray(a)))

    def _fallback(name):   # anything else: the NumPy function, results viewed as fake arrays
        fn = getattr(np, name)
        if not callable(fn):
            return fn
        return lambda *a, **k: (lambda r: _wrap(r) if isinstance(r, np.ndarray) else r)(fn(*a, **k))

    cp.__getattr__ = _fallback
    cp.get_default_memory_pool = lambda: _POOL
    cuda = types.SimpleNamespace(
        get_current_stream=_current_stream,
        Stream=_Stream,
        Device=_Device,
        runtime=types.SimpleNamespace(getDeviceProperties=lambda i: {"multiProcessorCount": 132,
                                                                    "name": b"CPU emulation"},
                                      # an H200's opt-in shared memory per block (227 KiB)
                                      cudaDevAttrMaxSharedMemoryPerBlockOptin=97,
                                      deviceGetAttribute=lambda attr, dev: {97: 232448}[attr]),
        is_available=lambda: False,
    )
    cp.cuda = cuda
    return cp


# ----------------------------------------------------------------------------- fake RawKernel

def _source_text(source: str) -> str:
    """A kernel file and the kernel files it builds on (10h includes 10g, 10i 10h), concatenated."""
    from attnlab.compile import included_kernels

    path = ROOT / "kernels" / source
    return "\n".join(p.read_text() for p in (path, *included_kernels(path)))


def kernel_params(source: str, function: str) -> list[tuple[str, str]]:
    """[(kind, name)] of a __global__ function's parameters; kind is 'ptr' (float*), 'uptr'
    (unsigned*), 'hptr' (unsigned short*: 16-bit values), 'cptr' (unsigned char*: bytes), 'iptr' (int*),
    'int', 'float' or 'tmap' (a TMA tensor map passed by value)."""
    text = _source_text(source)
    text = re.sub(r"//[^\n]*", "", text)
    m = re.search(r"__global__[^;{]*?\b" + re.escape(function) + r"\s*\(", text)
    if not m:
        raise ValueError(f"no __global__ {function} in {source}")
    depth, i = 1, m.end()
    while depth:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    plist = text[m.end():i - 1].strip()
    # a parameter list given as one object-like macro (kernels/delta/14's KDA_TMA_STATE_PARAMS): its body
    macros = {d.group(1): d.group(2).replace("\\\n", " ")
              for d in re.finditer(r"#define (\w+)[ \t]+((?:[^\n]*\\\n)*[^\n]*)", text)}
    plist = macros.get(plist, plist)
    params = []
    for p in plist.split(","):
        p = " ".join(p.split())
        name = re.findall(r"(\w+)\s*$", p)[0]
        if "TmaMap" in p:
            params.append(("tmap", name))
            continue
        kind = (("hptr" if re.match(r"(const )?unsigned short\b", p) else "cptr" if re.match(r"(const )?unsigned char\b", p)
                 else "uptr" if re.match(r"(const )?unsigned\b", p)
                 else "iptr" if re.match(r"(const )?int\b", p) else "ptr") if "*" in p else
                ("int" if re.match(r"(const )?int\b", p) else "float" if re.match(r"(const )?float\b", p) else "?"))
        if kind == "?":
            raise ValueError(f"unsupported parameter {p!r} of {function}")
        params.append((kind, name))
    return params


_LIBS: dict[str, ctypes.CDLL] = {}


def _library(source: str, function: str, template_args: tuple, build_dir: Path, defines=None) -> ctypes.CDLL:
    params = kernel_params(source, function)
    targs = ", ".join(str(int(a)) for a in template_args)
    call_args, np_, ni, nf = [], 0, 0, 0
    for kind, _ in params:
        if kind in ("ptr", "uptr", "hptr", "iptr", "cptr"):
            ctype = {"ptr": "float", "uptr": "unsigned", "hptr": "unsigned short", "iptr": "int", "cptr": "unsigned char"}[kind]
            call_args.append(f"({ctype}*)ptrs[{np_}]")
            np_ += 1
        elif kind == "tmap":   # the map's bytes, laid out as the CPU model's TmaMap (fake_tensor_map_rows)
            call_args.append(f"*reinterpret_cast<const TmaMap*>(ptrs[{np_}])")
            np_ += 1
        elif kind == "int":
            call_args.append(f"ints[{ni}]")
            ni += 1
        else:
            call_args.append(f"floats[{nf}]")
            nf += 1
    # Every kernel runs on the one CPU model (tests/ladder_emu/ladder_emu.h: deferred cp.async, ldmatrix,
    # warp MMAs, named barriers, clusters); a delta kernel with the hooks kernels/delta/ leaves to a host
    # model (kda_hooks.h).
    text = (ROOT / "kernels" / source).read_text()
    model = LADDER_EMU
    prelude = '#include "ladder_emu/kda_hooks.h"\n' if source.startswith("delta/") else ""
    # A kernel with a compile-time cluster shape (__cluster_dims__: 11, a head's value blocks along
    # x) runs each cluster's blocks together, with distributed shared memory; 14's kda_chunk_state_mc
    # takes its cluster size as its sixth template argument (1: no cluster), and its file's TMA form
    # has none.
    cluster = "gx" if "__cluster_dims__" in text else None
    if function == "kda_chunk_state_mc":
        cluster = str(int(template_args[5])) if int(template_args[5]) > 1 else None
    elif function in ("kda_chunk_state_tma", "kda_chunk_state_diet", "kda_chunk_state_single",
                      "kda_chunk_state_ahead"):   # 15, 17, 18 include 14's file; none has one
        cluster = None
    elif function == "kda_chunk_state_pair":   # 28: pairs of value blocks (its own __cluster_dims__(2, 1, 1))
        cluster = "2"
    elif function == "kda_chunk_state_share":   # 26: no cluster on the GPU, but a head's V / BV blocks wait for each
        cluster = str(int(template_args[1]) // int(template_args[3]))   # other's chunks: the model runs them together

    launch = (f'    emu_launch_cluster(dim3{{gx, gy, gz}}, {cluster}, bx * by * bz, smem, [&] {{\n' if cluster else
              '    emu_launch3(dim3{gx, gy, gz}, bx * by * bz, smem, [&] {\n')
    # a probe build's macros (attnlab.compile.load_kernel's defines), ahead of everything the kernel includes
    prelude = "".join(f"#define {name} {int(value)}\n" for name, value in sorted((defines or {}).items())) + prelude
    code = (prelude + f'#include "{source}"\n'
            'extern "C" void emu_run(const unsigned long long* ptrs, const int* ints, const float* floats,\n'
            '                        unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,\n'
            '                        unsigned bz, unsigned long long smem) {\n' + launch +
            f'        {function}<{targs}>({", ".join(call_args)});\n'
            '    });\n}\n')
    key = hashlib.sha256((code + _source_text(source)
                          + "".join(p.read_text() for p in sorted((ROOT / "kernels").glob("*.cuh")))
                          + "".join(p.read_text() for p in sorted((ROOT / "kernels" / "delta").glob("*.cuh")))
                          + model.read_text() + (LADDER_EMU.parent / "kda_hooks.h").read_text()).encode()).hexdigest()[:16]
    if key in _LIBS:
        return _LIBS[key]
    build_dir.mkdir(parents=True, exist_ok=True)
    src = build_dir / f"emu_{function}_{key}.cpp"
    lib = build_dir / f"emu_{function}_{key}.so"
    if not lib.exists():
        src.write_text(code)
        cmd = ["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-include", str(model),
               "-I", str(ROOT / "kernels"), "-I", str(ROOT / "tests"), str(src), "-o", str(lib)]
        res = emu_build.run(cmd)
        if res.returncode != 0:
            raise RuntimeError(f"emulation build of {function}<{targs}> failed:\n{res.stderr[-3000:]}")
    _LIBS[key] = ctypes.CDLL(str(lib))
    return _LIBS[key]


class EmuKernel:
    """Stands in for ``cupy.RawKernel``: same call signature, runs on the CPU."""

    def __init__(self, source: str, function: str, template_args=(), build_dir: Path | None = None, defines=None):
        self.source, self.function, self.template_args = source, function, tuple(template_args)
        self.defines = dict(defines or {})   # a probe build's macros, as the launcher asked for them
        self.params = kernel_params(source, function)
        self.lib = _library(source, function, self.template_args, build_dir or Path("/tmp/attnlab-delta-emu"), defines)
        self.max_dynamic_shared_size_bytes = 48 * 1024
        self.num_regs = 0   # CuPy's attribute; the CPU model allocates no registers
        self.launches: list[dict] = []

    def __call__(self, grid, block, args, shared_mem: int = 0):
        if len(args) != len(self.params):
            raise TypeError(f"{self.function} takes {len(self.params)} arguments, launcher passed {len(args)}")
        if shared_mem > self.max_dynamic_shared_size_bytes:
            raise RuntimeError(f"{self.function}: {shared_mem} B of dynamic shared memory requested but "
                               f"max_dynamic_shared_size_bytes is {self.max_dynamic_shared_size_bytes}")
        ptrs, ints, floats = [], [], []
        for (kind, name), a in zip(self.params, args):
            if kind == "tmap":
                if not (isinstance(a, np.ndarray) and a.nbytes == TMAP_BYTES):
                    raise TypeError(f"{self.function}({name}): a tensor map parameter needs {TMAP_BYTES} bytes")
                ptrs.append(a.ctypes.data)
                continue
            if kind in ("ptr", "uptr", "hptr", "iptr", "cptr"):
                if isinstance(a, np.ndarray):
                    want = {"ptr": (np.float32,), "uptr": (np.uint32,), "iptr": (np.int32,),
                            "hptr": (np.float16, np.int16, np.uint16),
                            "cptr": (np.uint8, np.uint32)}[kind]   # bytes: the launcher's images are 32-bit words
                    if a.dtype not in want or not a.flags.c_contiguous:
                        raise TypeError(f"{self.function}({name}): needs a contiguous {np.dtype(want[0]).name} array")
                    ptrs.append(a.ctypes.data)
                elif isinstance(a, np.uint64) and int(a) == 0:
                    ptrs.append(0)
                else:
                    raise TypeError(f"{self.function}({name}): pointer parameter got {type(a).__name__}")
            elif kind == "int":
                if not isinstance(a, np.int32):
                    raise TypeError(f"{self.function}({name}): int parameter must be np.int32, got {type(a).__name__}")
                ints.append(int(a))
            else:
                if not isinstance(a, np.float32):
                    raise TypeError(f"{self.function}({name}): float parameter must be np.float32, "
                                    f"got {type(a).__name__}")
                floats.append(float(a))
        grid = tuple(grid) + (1,) * (3 - len(tuple(grid)))
        block = tuple(block) + (1,) * (3 - len(tuple(block)))
        self.launches.append(dict(grid=grid, block=block, shared_mem=shared_mem))
        stream = _current_stream()
        if stream is not _MAIN_STREAM:   # a side stream's launch runs when another stream waits for it
            stream.pending.append(lambda: self._run(ptrs, ints, floats, grid, block, shared_mem, args))
            return
        self._run(ptrs, ints, floats, grid, block, shared_mem, args)

    def _run(self, ptrs, ints, floats, grid, block, shared_mem, args):
        P = (ctypes.c_ulonglong * max(1, len(ptrs)))(*ptrs)
        I = (ctypes.c_int * max(1, len(ints)))(*ints)
        F = (ctypes.c_float * max(1, len(floats)))(*floats)
        self.lib.emu_run(P, I, F, *(ctypes.c_uint(x) for x in grid), *(ctypes.c_uint(x) for x in block),
                         ctypes.c_ulonglong(shared_mem))
        for (kind, name), a in zip(self.params, args):
            if kind != "tmap" and not guard_intact(a):
                raise RuntimeError(f"{self.function} wrote past the end of its argument {name}")


TMAP_BYTES = 128
#: the CPU model's TmaMap (tests/ladder_emu/ladder_emu.h): base, element size, swizzle (bytes), dims[4], strides[4]
#: (bytes, strides[0] the element size), box[4]
_TMAP = np.dtype([("base", "<u8"), ("esz", "<u4"), ("swizzle", "<u4"), ("dims", "<u8", 4), ("strides", "<u8", 4),
                  ("box", "<u4", 4)])


def fake_tensor_map_rows(ptr: int, dtype: str, b: int, t: int, h: int, k: int, rows: int,
                         cols: int | None = None, swizzle: int = 0) -> np.ndarray:
    """attnlab.tma.tensor_map_rows on the CPU: the same checks and plan, encoded as the model's TmaMap
    (what cuTensorMapEncodeTiled would be given) in 128 bytes."""
    from attnlab import tma

    if dtype not in tma.ROWS_DATA_TYPE:
        raise ValueError(f"row tensor maps here are for {' or '.join(tma.ROWS_DATA_TYPE)}, not {dtype}")
    esz = tma.ELEM_BYTES[dtype]
    plan = tma.rows_plan(b, t, h, k, rows, esz, cols, swizzle)
    rec = np.zeros(1, dtype=_TMAP)
    rec["base"], rec["esz"], rec["swizzle"], rec["dims"] = ptr, esz, plan["swizzle"], plan["dims"]
    rec["strides"], rec["box"] = (esz, *plan["strides"]), plan["box"]
    out = np.zeros(TMAP_BYTES, dtype=np.uint8)
    out[:_TMAP.itemsize] = rec.view(np.uint8)
    return out


def install(monkeypatch, build_dir: Path) -> types.ModuleType:
    """Route ``import cupy``, ``attnlab.compile.load_kernel`` and the driver's tensor-map encoder
    (``attnlab.tma.tensor_map_rows``) to the CPU stand-ins."""
    import attnlab.compile
    import attnlab.tma

    cp = make_fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setattr(attnlab.compile, "load_kernel",
                        lambda source, function, template_args=(), defines=None, arch=None:
                        EmuKernel(str(source), function, template_args, build_dir, defines))
    monkeypatch.setattr(attnlab.tma, "tensor_map_rows", fake_tensor_map_rows)
    return cp
