"""TF32 arithmetic in NumPy: what the tensor-core state pass (``05_chunk_state_tc.cu``) does to its
operands, so its accuracy argument can be computed on any machine.

TF32 is fp32 with the mantissa cut to 10 bits. The kernel rounds an operand to TF32 by integer
arithmetic (add half a TF32 ulp to the bit pattern, clear the 13 low bits: round to nearest, ties
away from zero), and the tensor core itself reads only the top 10 mantissa bits of whatever it is
given (truncation). ``matmul_tf32`` emulates ``mma.sync ... .tf32`` products that way, with fp32
accumulation; ``passes=3`` is the kernel's 3xTF32 split.
"""

from __future__ import annotations

import numpy as np

_LOW13 = np.uint32(0x1FFF)
_HALF_ULP = np.uint32(0x1000)


def _bits(x) -> np.ndarray:
    return np.array(x, dtype=np.float32).view(np.uint32)   # a contiguous copy, shape kept


def round_tf32(x) -> np.ndarray:
    """x rounded to TF32 (nearest, ties away from zero), as float32. Finite inputs well below FLT_MAX."""
    return ((_bits(x) + _HALF_ULP) & ~_LOW13).view(np.float32)


def truncate_tf32(x) -> np.ndarray:
    """The top 10 mantissa bits of x: what a tensor core reads from a float32 register."""
    return (_bits(x) & ~_LOW13).view(np.float32)


def split_tf32(x) -> tuple[np.ndarray, np.ndarray]:
    """x = hi + lo as the kernel splits it: hi = round_tf32(x), lo = x - hi (exact in float32)."""
    x = np.asarray(x, dtype=np.float32)
    hi = round_tf32(x)
    return hi, (x - hi).astype(np.float32)


def matmul_tf32(a, b, passes: int = 1, round_operands: bool = False) -> np.ndarray:
    """a @ b as tensor-core TF32 MMAs with fp32 accumulation.

    ``passes=1``: one MMA per product, on the operands as given (the hardware truncates them) or,
    with ``round_operands``, rounded to TF32 first. ``passes=3``: 3xTF32,
    a_hi b_hi + a_hi b_lo + a_lo b_hi (small terms first, as the kernel does).
    """
    if passes not in (1, 3):
        raise ValueError(f"passes must be 1 or 3, got {passes}")
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    if passes == 1:
        if round_operands:
            a, b = round_tf32(a), round_tf32(b)
        return truncate_tf32(a) @ truncate_tf32(b)
    ahi, alo = split_tf32(a)
    bhi, blo = split_tf32(b)
    t = lambda x: truncate_tf32(x)  # noqa: E731 — every MMA operand is read at TF32 precision
    out = t(alo) @ t(bhi)
    out += t(ahi) @ t(blo)
    out += t(ahi) @ t(bhi)
    return out


# ----------------------------------------------------------------------------- bf16 (kernels 06-09)

def round_bf16(x) -> np.ndarray:
    """x rounded to bf16 (nearest, ties to even, as cvt.rn.bf16x2.f32), as float32. Finite inputs."""
    u = _bits(x)
    return ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)).view(np.float32)


def split_bf16(x) -> tuple[np.ndarray, np.ndarray]:
    """x ~= hi + lo as kernels 06-09 split it: hi = round_bf16(x), lo = round_bf16(x - hi); 16
    significant bits, a relative error of at most 2^-17."""
    x = np.asarray(x, dtype=np.float32)
    hi = round_bf16(x)
    return hi, round_bf16((x - hi).astype(np.float32))


def matmul_bf16(a, b, passes: int = 1) -> np.ndarray:
    """a @ b as bf16 MMAs with fp32 accumulation: ``passes=1`` one MMA per product on operands
    rounded to bf16; ``passes=3`` the kernels' 3xBF16, a_lo b_hi + a_hi b_lo + a_hi b_hi."""
    if passes not in (1, 3):
        raise ValueError(f"passes must be 1 or 3, got {passes}")
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    if passes == 1:
        return round_bf16(a) @ round_bf16(b)
    ahi, alo = split_bf16(a)
    bhi, blo = split_bf16(b)
    out = alo @ bhi
    out += ahi @ blo
    out += ahi @ bhi
    return out
