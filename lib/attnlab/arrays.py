"""What kind of array a caller passed, and zero-copy CuPy views of device arrays.

Checks that need no device (shape, dtype, contiguity) run on NumPy arrays, CPU torch tensors,
CuPy arrays and CUDA tensors alike, so a launcher's validation is testable on a machine without a
GPU; only :func:`require_device` refuses host arrays, and it runs last.
"""

from __future__ import annotations

import numpy as np

#: dtype names the kernels know, as the registry spells them.
FLOAT32, BFLOAT16, FLOAT16 = "float32", "bfloat16", "float16"


def array_kind(x) -> str:
    """'numpy', 'cupy' or 'torch'; ValueError for anything else. (The module is asked first: the CPU
    tests' stand-in CuPy arrays are NumPy subclasses that say they are CuPy's.)"""
    mod = type(x).__module__
    if mod.startswith("cupy"):
        return "cupy"
    if isinstance(x, np.ndarray):
        return "numpy"
    if mod.startswith("torch"):
        return "torch"
    raise ValueError(f"expected a CuPy array or a CUDA torch tensor, got {type(x).__name__}")


def dtype_name(x) -> str:
    """'float32', 'bfloat16', 'float16', ... for NumPy, CuPy and torch arrays."""
    if array_kind(x) == "torch":
        return str(x.dtype).removeprefix("torch.")
    return np.dtype(x.dtype).name


def is_contiguous(x) -> bool:
    return bool(x.is_contiguous()) if array_kind(x) == "torch" else bool(x.flags.c_contiguous)


def on_device(x) -> bool:
    kind = array_kind(x)
    return kind == "cupy" or (kind == "torch" and bool(x.is_cuda))


def require_device(name: str, x) -> None:
    """ValueError naming what to do when ``x`` lives on the host."""
    if on_device(x):
        return
    where = "a CPU torch tensor" if array_kind(x) == "torch" else "a NumPy array on the host"
    raise ValueError(f"{name} must be on a CUDA device, got {where}: move it with cupy.asarray(...) or "
                     "tensor.cuda()")


def array_module(x):
    """NumPy, or CuPy for a device array (a CuPy array or a CUDA torch tensor): float64 reference maths
    runs where the data is. Anything that is not an array counts as host data."""
    try:
        device = on_device(x)
    except ValueError:
        device = False
    if device:
        import cupy as cp

        return cp
    return np


def float_view(x):
    """(xp, ``x`` as an xp array): a device array stays on its device (a CUDA tensor viewed through
    DLPack, bfloat16 widened to float32 exactly); host data becomes a NumPy array."""
    xp = array_module(x)
    if xp is np:
        return np, to_numpy(x)
    if array_kind(x) == "torch":
        import torch

        x = x.detach()
        return xp, xp.from_dlpack(x.float() if x.dtype == torch.bfloat16 else x)
    return xp, x


def as_cupy(x):
    """A zero-copy CuPy view of a device array. 16-bit torch tensors are viewed as int16 bit
    patterns (CuPy has no bfloat16), which is what the kernels read."""
    import cupy as cp

    if array_kind(x) == "cupy":
        return x
    import torch

    if x.dtype in (torch.bfloat16, torch.float16):
        x = x.view(torch.int16)
    return cp.from_dlpack(x.detach())


def device_id(x) -> int:
    return int(x.device.id) if array_kind(x) == "cupy" else int(x.device.index or 0)


def data_ptr(x) -> int:
    return int(x.data.ptr) if array_kind(x) == "cupy" else int(x.data_ptr())


# ---------------------------------------------------------------- host copies and error measures

def to_numpy(x) -> np.ndarray:
    """NumPy copy of a NumPy, CuPy or torch array (bf16 tensors widened to float32, exactly)."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "detach"):  # torch: bf16 has no NumPy dtype
        import torch
        x = x.detach()
        return (x.float() if x.dtype == torch.bfloat16 else x).cpu().numpy()
    if hasattr(x, "get"):  # cupy
        return x.get()
    return np.asarray(x)


def _float64_pair(out, ref):
    """out and ref as float64 arrays of one module: CuPy when either lives on a GPU (no copy to the
    host for large outputs), else NumPy."""
    def kind(a):
        try:
            return array_kind(a)
        except ValueError:
            return "numpy"
    if any(kind(a) == "cupy" or (kind(a) == "torch" and a.is_cuda) for a in (out, ref)):
        import cupy as xp

        def conv(a):
            if kind(a) == "torch":
                import torch
                a = a.detach()
                a = xp.from_dlpack(a.float() if a.dtype in (torch.bfloat16, torch.float16) else a) if a.is_cuda \
                    else xp.asarray(to_numpy(a))
            return xp.asarray(a, dtype=xp.float64)
    else:
        xp = np

        def conv(a):
            return to_numpy(a).astype(np.float64)
    return xp, conv(out), conv(ref)


def rel_error(out, ref) -> float:
    """‖out − ref‖_F / ‖ref‖_F in float64; NaN or Inf anywhere in ``out`` gives inf."""
    xp, o, r = _float64_pair(out, ref)
    if o.shape != r.shape:
        raise ValueError(f"shapes differ: {o.shape} vs {r.shape}")
    if not bool(xp.isfinite(o).all()):
        return float("inf")
    denom = float(xp.linalg.norm(r))
    diff = float(xp.linalg.norm(o - r))
    return diff / denom if denom > 0 else diff


def max_abs_error(out, ref) -> float:
    xp, o, r = _float64_pair(out, ref)
    if not bool(xp.isfinite(o).all()):
        return float("inf")
    return float(xp.abs(o - r).max()) if o.size else 0.0
