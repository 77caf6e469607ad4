"""Validation and launchers for the KDA CUDA kernels in ``kernels/delta/``.

Two entry points, both returning ``(o [B, T, H, V], final_state [B, H, K, V] or None)`` as
**CuPy arrays** (whatever the inputs were: CuPy arrays or torch CUDA tensors, which are viewed
zero-copy through DLPack; ``torch.from_dlpack(o)`` turns a result back into a tensor):

* :func:`kda_recurrent` — ``01_recurrent.cu``: one launch, sequential over T;
* :func:`kda_chunk` — ``02_chunk_intra.cu`` → ``03_chunk_solve.cu`` → ``04_chunk_state.cu``.

For timing, :func:`prepare_recurrent` / :func:`prepare_chunk` validate once, allocate outputs and
workspaces, and return a plan whose ``run()`` only launches kernels.

Inputs: float32, C-contiguous, on the current CUDA device; q, k, g ``[B, T, H, K]``,
v ``[B, T, H, V]``, beta ``[B, T, H]``, optional initial_state ``[B, H, K, V]``; g ≤ 0 (log-space
decay). K and V must be 64 or 128, the chunk size 16, 32, 64 or 128. Anything else raises
``ValueError`` naming the constraint. The CPU-side checks (:func:`validate_config`,
:func:`validate_inputs`) work without a GPU, on NumPy arrays too (they then only fail later,
at the device check).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .naive import check_shapes

SUPPORTED_K = (64, 128)
SUPPORTED_V = (64, 128)
SUPPORTED_CHUNK = (16, 32, 64, 128)
SUPPORTED_BV = (16, 32)
SUPPORTED_RG = (4, 8, 16, 32)
RECURRENT_WARPS = 4

RECURRENT_SRC = "delta/01_recurrent.cu"
INTRA_SRC = "delta/02_chunk_intra.cu"
SOLVE_SRC = "delta/03_chunk_solve.cu"
STATE_SRC = "delta/04_chunk_state.cu"


# ----------------------------------------------------------------------------- configuration

#: Default chunk: C=32 was the fastest total on the H200 smoke run at T=4096 (the intra-chunk
#: matrices and the triangular solve grow as C², the state pass as 1/C); notebook 07 sweeps C.
DEFAULT_CHUNK = 32

def default_rg(K: int) -> int:
    """Lanes per state column in the recurrent kernel: 8 (3 shuffle levels, K/8 rows per lane)."""
    return 8


def default_bv(B: int, H: int, V: int, num_sms: int = 132) -> int:
    """Value columns per state-pass block: 32 when that keeps at least half the SMs busy, else 16.

    Wider blocks re-read W and the state less often; on the H200 smoke run (B=2, H=16, K=V=128:
    128 blocks of 32 columns on 132 SMs) BV=32 beat BV=16 at every chunk size, so a block per SM
    is not needed — the chunk sweep in notebook 07 records the comparison."""
    return 32 if B * H * (V // 32) >= num_sms // 2 else 16


def solve_cols_per_thread(C: int) -> int:
    """Columns per thread in the triangular solve: 2 (x[2][C] in registers) up to C = 64, else 1."""
    return 2 if C <= 64 else 1


def state_smem_floats(K: int, V: int, C: int, BV: int) -> int:
    """Dynamic shared memory of ``kda_chunk_state`` in floats (mirrors ``KdaStateLayout``)."""
    slab = 16 * (K // 4) * (BV // 4)
    SK = min(K, slab // (2 * C))
    SJ = min(C, slab // C)
    SI = min(C, slab // K)
    LS, LW, LA, LK = BV + 4, SK + 4, SJ + 4, K + 4
    stage = max(2 * C * LW, C * LA, SI * LK)
    return K * LS + C * LS + stage


def validate_config(K: int, V: int, chunk_size: int | None = None, bv: int | None = None,
                    rg: int | None = None) -> None:
    """Raise ``ValueError`` for head sizes, chunk sizes or tilings the kernels do not support."""
    if K not in SUPPORTED_K:
        raise ValueError(f"K (key head size) must be one of {SUPPORTED_K}, got {K}")
    if V not in SUPPORTED_V:
        raise ValueError(f"V (value head size) must be one of {SUPPORTED_V}, got {V}")
    if chunk_size is not None and chunk_size not in SUPPORTED_CHUNK:
        raise ValueError(f"chunk_size must be one of {SUPPORTED_CHUNK}, got {chunk_size}")
    if bv is not None and (bv not in SUPPORTED_BV or V % bv):
        raise ValueError(f"bv (value columns per state-pass block) must be one of {SUPPORTED_BV} "
                         f"and divide V={V}, got {bv}")
    if rg is not None:
        if rg not in SUPPORTED_RG or K % (4 * rg):
            raise ValueError(f"rg (lanes per state column) must be one of {SUPPORTED_RG} with K % (4*rg) == 0; "
                             f"got rg={rg}, K={K}")
        if V % (RECURRENT_WARPS * 32 // rg):
            raise ValueError(f"V={V} must be a multiple of the {RECURRENT_WARPS * 32 // rg} columns per block "
                             f"of rg={rg}")


# ----------------------------------------------------------------------------- inputs

def _describe(a) -> str:
    return f"{type(a).__module__}.{type(a).__name__}"


def _check_array(name: str, a) -> None:
    """dtype and layout checks that work on NumPy, CuPy and torch arrays alike."""
    mod = type(a).__module__
    if mod.startswith("torch"):
        import torch

        if a.dtype != torch.float32:
            raise ValueError(f"{name} must be float32, got {a.dtype}")
        if not a.is_contiguous():
            raise ValueError(f"{name} must be C-contiguous (the kernels ignore strides); call .contiguous()")
        return
    if not (isinstance(a, np.ndarray) or mod.startswith("cupy")):
        raise ValueError(f"{name} must be a CuPy array or torch CUDA tensor, got {_describe(a)}")
    if a.dtype != np.float32:
        raise ValueError(f"{name} must be float32, got {a.dtype}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (the kernels ignore strides); use ascontiguousarray")


def as_cupy(name: str, a, *, allow_none: bool = False):
    """A zero-copy CuPy view of a CuPy array or torch CUDA tensor, after dtype/layout/device checks."""
    if a is None:
        if allow_none:
            return None
        raise ValueError(f"{name} is required")
    _check_array(name, a)
    mod = type(a).__module__
    if mod.startswith("torch"):
        if not a.is_cuda:
            raise ValueError(f"{name} must be on a CUDA device, got a torch tensor on {a.device}")
        import cupy as cp

        return cp.from_dlpack(a.detach())
    if not mod.startswith("cupy"):
        raise ValueError(f"{name} must be a CUDA array (CuPy array or torch CUDA tensor), got a NumPy "
                         f"array on the host; move it with cupy.asarray")
    import cupy as cp

    if a.device.id != cp.cuda.Device().id:
        raise ValueError(f"{name} is on device {a.device.id}, the current device is {cp.cuda.Device().id}")
    return a


def validate_inputs(q, k, v, g, beta, initial_state=None, *, chunk_size: int | None = None,
                    check_gate: bool = True):
    """Check shapes, sizes, dtypes, layout, the gate sign and the device; return CuPy views and dims.

    Returns ``(arrays dict, (B, T, H, K, V))``. Everything but the device check also works on
    NumPy arrays, so the errors are testable on a machine without a GPU.
    """
    B, T, H, K, V = check_shapes(q, k, v, g, beta, initial_state)
    validate_config(K, V, chunk_size)
    named = dict(q=q, k=k, v=v, g=g, beta=beta)
    if initial_state is not None:
        named["initial_state"] = initial_state
    for name, a in named.items():
        _check_array(name, a)
    if check_gate:
        gmax, gmin = float(g.max()), float(g.min())
        if not (gmax <= 0.0 and np.isfinite(gmin)):   # NaN fails the first test, -inf the second
            raise ValueError(f"g must be a log-space decay: finite and <= 0 everywhere; "
                             f"got min(g) = {gmin}, max(g) = {gmax}")
    arrays = {name: as_cupy(name, a) for name, a in named.items()}
    arrays.setdefault("initial_state", None)
    return arrays, (B, T, H, K, V)


def _scale(K: int, scale) -> np.float32:
    s = K ** -0.5 if scale is None else float(scale)
    if not np.isfinite(s):
        raise ValueError(f"scale must be finite, got {scale}")
    return np.float32(s)


_NULL = np.uint64(0)   # a null pointer argument (8 bytes, like a device pointer)


def _ptr(a):
    return _NULL if a is None else a


# ----------------------------------------------------------------------------- recurrent

@dataclass
class RecurrentPlan:
    """Validated inputs, outputs and launch configuration of ``01_recurrent.cu``."""
    arrays: dict
    dims: tuple
    scale: np.float32
    rg: int
    o: Any
    final_state: Any
    kernel: Any = field(repr=False, default=None)

    @property
    def grid(self) -> tuple[int, int, int]:
        B, T, H, K, V = self.dims
        return (V // (RECURRENT_WARPS * 32 // self.rg), H, B)

    @property
    def block(self) -> tuple[int, int, int]:
        return (RECURRENT_WARPS * 32, 1, 1)

    def poison(self) -> None:
        """Fill the outputs with NaN, so anything a kernel fails to write shows up."""
        self.o.fill(np.nan)
        if self.final_state is not None:
            self.final_state.fill(np.nan)

    def run(self):
        B, T, H, K, V = self.dims
        a = self.arrays
        self.kernel(self.grid, self.block,
                    (a["q"], a["k"], a["v"], a["g"], a["beta"], _ptr(a["initial_state"]), self.o,
                     _ptr(self.final_state), np.int32(T), np.int32(H), self.scale))
        return self.o, self.final_state


def prepare_recurrent(q, k, v, g, beta, scale: float | None = None, initial_state=None,
                      output_final_state: bool = False, rg: int | None = None,
                      check_gate: bool = True) -> RecurrentPlan:
    import cupy as cp

    from ..compile import load_kernel

    arrays, dims = validate_inputs(q, k, v, g, beta, initial_state, check_gate=check_gate)
    B, T, H, K, V = dims
    rg = default_rg(K) if rg is None else int(rg)
    validate_config(K, V, rg=rg)
    kernel = load_kernel(RECURRENT_SRC, "kda_recurrent", (K, V, rg, RECURRENT_WARPS))
    o = cp.empty((B, T, H, V), dtype=cp.float32)
    fs = cp.empty((B, H, K, V), dtype=cp.float32) if output_final_state else None
    return RecurrentPlan(arrays, dims, _scale(K, scale), rg, o, fs, kernel)


def kda_recurrent(q, k, v, g, beta, scale: float | None = None, initial_state=None,
                  output_final_state: bool = False, rg: int | None = None):
    """Recurrent KDA on the GPU (fp32). Returns CuPy ``(o, final_state or None)``."""
    return prepare_recurrent(q, k, v, g, beta, scale, initial_state, output_final_state, rg).run()


# ----------------------------------------------------------------------------- chunked

def chunk_workspace_shapes(B: int, T: int, H: int, K: int, V: int, C: int) -> dict[str, tuple]:
    """Shapes of the chunked form's fp32 workspaces (the last chunk is padded to C rows)."""
    NT = -(-T // C)
    Tp = NT * C
    return dict(Akk=(B, H, NT, C, C), Aqk=(B, H, NT, C, C), Qg=(B, H, Tp, K), Kd=(B, H, Tp, K),
                W=(B, H, Tp, K), U=(B, H, Tp, V), gL=(B, H, NT, K))


@dataclass
class ChunkPlan:
    """Validated inputs, workspaces, outputs and launch configurations of the chunked kernels."""
    arrays: dict
    dims: tuple
    scale: np.float32
    chunk_size: int
    bv: int
    ws: dict
    o: Any
    final_state: Any
    kernels: dict = field(repr=False, default_factory=dict)

    @property
    def num_chunks(self) -> int:
        return -(-self.dims[1] // self.chunk_size)

    def launch_configs(self) -> dict[str, dict]:
        B, T, H, K, V = self.dims
        C, NT = self.chunk_size, self.num_chunks
        cpt = solve_cols_per_thread(C)
        return {
            "intra": dict(grid=(NT, H, B), block=(4 * C, 1, 1), smem=0),
            "solve": dict(grid=(NT, H, B), block=((K + V) // cpt, 1, 1), smem=0),
            "state": dict(grid=(V // self.bv, H, B), block=((K // 4) * (self.bv // 4), 1, 1),
                          smem=4 * state_smem_floats(K, V, C, self.bv)),
        }

    def poison(self) -> None:
        for a in (*self.ws.values(), self.o, self.final_state):
            if a is not None:
                a.fill(np.nan)

    def run(self, stages=(1, 2, 3)):
        B, T, H, K, V = self.dims
        a, w, cfg = self.arrays, self.ws, self.launch_configs()
        if 1 in stages:
            c = cfg["intra"]
            self.kernels["intra"](c["grid"], c["block"],
                                  (a["q"], a["k"], a["g"], a["beta"], w["Akk"], w["Aqk"], w["Qg"], w["Kd"],
                                   w["W"], w["gL"], np.int32(T), np.int32(H), self.scale))
        if 2 in stages:
            c = cfg["solve"]
            self.kernels["solve"](c["grid"], c["block"],
                                  (w["Akk"], w["W"], a["v"], a["beta"], w["U"], np.int32(T), np.int32(H)))
        if 3 in stages:
            c = cfg["state"]
            self.kernels["state"](c["grid"], c["block"],
                                  (w["W"], w["U"], w["Qg"], w["Kd"], w["Aqk"], w["gL"],
                                   _ptr(a["initial_state"]), self.o, _ptr(self.final_state),
                                   np.int32(T), np.int32(H), np.int32(self.num_chunks)),
                                  shared_mem=c["smem"])
        return self.o, self.final_state

    def workspace_bytes(self) -> int:
        return int(sum(x.nbytes for x in self.ws.values()))


def prepare_chunk(q, k, v, g, beta, scale: float | None = None, initial_state=None,
                  output_final_state: bool = False, chunk_size: int = DEFAULT_CHUNK, bv: int | None = None,
                  check_gate: bool = True) -> ChunkPlan:
    import cupy as cp

    from ..compile import load_kernel

    arrays, dims = validate_inputs(q, k, v, g, beta, initial_state, chunk_size=chunk_size,
                                   check_gate=check_gate)
    B, T, H, K, V = dims
    C = int(chunk_size)
    if bv is None:
        sms = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"]
        bv = default_bv(B, H, V, sms)
    validate_config(K, V, C, bv=bv)
    kernels = {
        "intra": load_kernel(INTRA_SRC, "kda_chunk_intra", (K, C)),
        "solve": load_kernel(SOLVE_SRC, "kda_chunk_solve", (K, V, C, solve_cols_per_thread(C))),
        "state": load_kernel(STATE_SRC, "kda_chunk_state", (K, V, C, bv)),
    }
    smem = 4 * state_smem_floats(K, V, C, bv)
    if smem > 48 * 1024:
        kernels["state"].max_dynamic_shared_size_bytes = smem
    ws = {name: cp.empty(shape, dtype=cp.float32)
          for name, shape in chunk_workspace_shapes(B, T, H, K, V, C).items()}
    o = cp.empty((B, T, H, V), dtype=cp.float32)
    fs = cp.empty((B, H, K, V), dtype=cp.float32) if output_final_state else None
    return ChunkPlan(arrays, dims, _scale(K, scale), C, int(bv), ws, o, fs, kernels)


def kda_chunk(q, k, v, g, beta, scale: float | None = None, initial_state=None,
              output_final_state: bool = False, chunk_size: int = DEFAULT_CHUNK, bv: int | None = None):
    """Chunked KDA on the GPU (fp32, three kernels). Returns CuPy ``(o, final_state or None)``."""
    return prepare_chunk(q, k, v, g, beta, scale, initial_state, output_final_state, chunk_size, bv).run()


# ----------------------------------------------------------------------------- static build list

def static_instantiations(K: int = 128, V: int = 128, chunk_sizes=(DEFAULT_CHUNK,), bvs=(16, 32)) -> list[tuple]:
    """(source, function, template args) of every kernel a default run at (K, V) uses."""
    out = [(RECURRENT_SRC, "kda_recurrent", (K, V, default_rg(K), RECURRENT_WARPS))]
    for C in chunk_sizes:
        out.append((INTRA_SRC, "kda_chunk_intra", (K, C)))
        out.append((SOLVE_SRC, "kda_chunk_solve", (K, V, C, solve_cols_per_thread(C))))
        for bv in bvs:
            out.append((STATE_SRC, "kda_chunk_state", (K, V, C, bv)))
    return out
