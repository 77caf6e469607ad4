"""Tensor maps for Hopper's bulk tensor copy engine (TMA), built on the host.

A kernel that copies tiles with ``cp.async.bulk.tensor`` takes a ``CUtensorMap`` (128 opaque
bytes) describing the global tensor, the box it copies and the shared-memory swizzle. The driver
builds it (``cuTensorMapEncodeTiled``); this module calls it through ctypes (no extra package) and
returns the bytes as a one-element NumPy array, which CuPy passes to a kernel by value (the
kernel's ``const __grid_constant__ TmaMap`` parameter, kernels/hopper.cuh).

For attention, q, k, v of shape [B, H, N, D] (16-bit, contiguous) are described as a 3-D tensor
(D, N, B·H), innermost first, so a box of ``rows`` × 64 columns never crosses into the next head:
rows past N are zero-filled by the engine.

For delta attention (kernels/delta/14's TMA forms), q, k, g of shape [B, T, H, K] (fp32 or bf16) are
described as a 4-D tensor (K, H, T, B) without swizzle, copied in boxes of K channels × one head ×
``rows`` tokens × one batch, and v ([B, T, H, V]) likewise in boxes of a value block's BV channels: a
box never crosses into another head or batch, and tokens past T are zero-filled.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

# cuda.h enums (CUDA 12/13)
DATA_TYPE = {"float16": 6, "bfloat16": 9}
ROWS_DATA_TYPE = {"float32": 7, "bfloat16": 9}   # the delta maps' element types (cuda.h: FLOAT32 = 7)
ELEM_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}
L2_PROMOTION_256B = 3
INTERLEAVE_NONE = 0
OOB_FILL_ZERO = 0
MAP_BYTES = 128
#: np.dtype of one tensor map passed by value
MAP_DTYPE = np.dtype((np.void, MAP_BYTES))


class TensorMapError(RuntimeError):
    """The driver refused a tensor map (bad address alignment, strides or box)."""


@functools.lru_cache(maxsize=1)
def _driver():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise RuntimeError(f"the CUDA driver library (libcuda.so.1) is needed for tensor maps: {exc}") from None
    fn = lib.cuTensorMapEncodeTiled
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                   ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                   ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return fn


def box_plan(bh: int, n: int, d: int, rows: int, cols: int = 64, elem_bytes: int = 2) -> dict:
    """The encode arguments for a [bh, n, d] tensor copied in boxes of rows × cols (pure; tested on CPU)."""
    if d % cols:
        raise ValueError(f"head dim {d} must be a multiple of the box width {cols}")
    if cols * elem_bytes > 128:
        raise ValueError(f"a 128-byte-swizzled box row holds at most {128 // elem_bytes} values, not {cols}")
    if not 1 <= rows <= 256:
        raise ValueError(f"box rows must be 1..256 (got {rows})")
    if min(bh, n, d) < 1:
        raise ValueError(f"empty tensor [{bh}, {n}, {d}]")
    return {"dims": (d, n, bh), "strides": (d * elem_bytes, n * d * elem_bytes), "box": (cols, rows, 1)}


def tensor_map_3d(ptr: int, dtype: str, bh: int, n: int, d: int, rows: int, cols: int = 64,
                  swizzle: int = 128) -> np.ndarray:
    """A CUtensorMap for the contiguous 16-bit tensor at device address ``ptr``, shape [bh, n, d],
    copied in boxes of ``rows`` × ``cols`` with the given shared-memory swizzle (bytes)."""
    if dtype not in DATA_TYPE:
        raise ValueError(f"tensor maps here are for {' or '.join(DATA_TYPE)}, not {dtype}")
    if ptr % 16:
        raise ValueError(f"the tensor's address must be 16-byte aligned for the copy engine (got {ptr:#x})")
    plan = box_plan(bh, n, d, rows, cols)
    buf = np.zeros(MAP_BYTES + 64, dtype=np.uint8)   # the driver writes a 64-byte-aligned CUtensorMap
    off = (-buf.ctypes.data) % 64
    out = buf[off:off + MAP_BYTES].view(MAP_DTYPE)
    u64x3, u64x2, u32x3 = ctypes.c_uint64 * 3, ctypes.c_uint64 * 2, ctypes.c_uint32 * 3
    status = _driver()(out.ctypes.data, DATA_TYPE[dtype], 3, ctypes.c_void_p(ptr), u64x3(*plan["dims"]),
                       u64x2(*plan["strides"]), u32x3(*plan["box"]), u32x3(1, 1, 1), INTERLEAVE_NONE,
                       SWIZZLE[swizzle], L2_PROMOTION_256B, OOB_FILL_ZERO)
    if status != 0:
        raise TensorMapError(f"cuTensorMapEncodeTiled failed (CUresult {status}) for [{bh}, {n}, {d}] {dtype}, "
                             f"box {rows}x{cols}, swizzle {swizzle} B")
    return out


def rows_plan(b: int, t: int, h: int, k: int, rows: int, elem_bytes: int, cols: int | None = None,
              swizzle: int = 0) -> dict:
    """The encode arguments for a [b, t, h, k] tensor copied in boxes of ``rows`` tokens × ``cols``
    channels (default: all k) of one head, landing unswizzled or with a ``swizzle`` of 32, 64 or 128
    bytes (a box row of at most that many bytes; pure; tested on CPU)."""
    cols = k if cols is None else cols
    if swizzle not in SWIZZLE:
        raise ValueError(f"swizzle must be one of {sorted(SWIZZLE)} bytes, got {swizzle}")
    if swizzle and cols * elem_bytes > swizzle:
        raise ValueError(f"a {swizzle}-byte swizzle takes box rows of at most {swizzle} bytes, not {cols} x {elem_bytes}")
    if min(b, t, h, k) < 1:
        raise ValueError(f"empty tensor [{b}, {t}, {h}, {k}]")
    if not 1 <= rows <= 256 or not 1 <= cols <= min(k, 256):
        raise ValueError(f"box dimensions must be 1..256 and within the tensor (got {cols} of {k} channels x {rows} tokens)")
    if (cols * elem_bytes) % 16 or (k * elem_bytes) % 16:
        raise ValueError(f"a box row of {cols} x {elem_bytes} bytes (and a token row of {k}) must be a multiple of 16 bytes")
    return {"dims": (k, h, t, b), "strides": (k * elem_bytes, h * k * elem_bytes, t * h * k * elem_bytes),
            "box": (cols, 1, rows, 1), "swizzle": swizzle}


def tensor_map_rows(ptr: int, dtype: str, b: int, t: int, h: int, k: int, rows: int,
                    cols: int | None = None, swizzle: int = 0) -> np.ndarray:
    """A CUtensorMap for the contiguous [b, t, h, k] tensor at device address ``ptr``, copied in boxes
    of ``rows`` tokens × ``cols`` (default k) channels of one head, with the given shared-memory
    swizzle (bytes; :func:`rows_plan`)."""
    if dtype not in ROWS_DATA_TYPE:
        raise ValueError(f"row tensor maps here are for {' or '.join(ROWS_DATA_TYPE)}, not {dtype}")
    if ptr % 16:
        raise ValueError(f"the tensor's address must be 16-byte aligned for the copy engine (got {ptr:#x})")
    plan = rows_plan(b, t, h, k, rows, ELEM_BYTES[dtype], cols, swizzle)
    buf = np.zeros(MAP_BYTES + 64, dtype=np.uint8)
    off = (-buf.ctypes.data) % 64
    out = buf[off:off + MAP_BYTES].view(MAP_DTYPE)
    u64x4, u64x3, u32x4 = ctypes.c_uint64 * 4, ctypes.c_uint64 * 3, ctypes.c_uint32 * 4
    status = _driver()(out.ctypes.data, ROWS_DATA_TYPE[dtype], 4, ctypes.c_void_p(ptr), u64x4(*plan["dims"]),
                       u64x3(*plan["strides"]), u32x4(*plan["box"]), u32x4(1, 1, 1, 1), INTERLEAVE_NONE,
                       SWIZZLE[swizzle], L2_PROMOTION_256B, OOB_FILL_ZERO)
    if status != 0:
        raise TensorMapError(f"cuTensorMapEncodeTiled failed (CUresult {status}) for [{b}, {t}, {h}, {k}] {dtype}, "
                             f"box {rows} tokens x {plan['box'][0]} channels, swizzle {swizzle} B")
    return out
