"""Analytic occupancy calculator (CPU only) and its check against the CUDA driver.

How many blocks of a kernel can be resident on one SM at once is the minimum of four limits:

* **warps**: ``max_threads_per_sm / 32`` warp slots, a block takes ``ceil(threads / 32)`` of them;
* **blocks**: a hard cap on resident blocks per SM;
* **registers**: registers are handed out per *warp*, ``regs_per_thread * 32`` rounded up to 256;
  the 64K-register file is split in 4 sub-partitions (one per warp scheduler) and a warp's
  registers must come from one sub-partition, so the SM holds
  ``4 * ((65536 / 4) // regs_per_warp)`` warps, i.e. ``that // warps_per_block`` blocks;
* **shared memory**: the driver reserves 1 KB per block on sm_80+ (for its own use), the total is
  rounded up to the allocation granularity and the SM's capacity is its largest carveout.

This is the formula of NVIDIA's ``cuda_occupancy.h`` for the default cache / carveout preference
(no partitioned global caching, which none of these architectures supports), re-derived here so
that notebooks can show *why* an occupancy comes out as it does without a GPU. On sm_90 the block
barrier limit (2 x 32 barriers per SM) cannot bind for kernels using only ``__syncthreads()`` and is
not modelled.

Errors versus zero blocks (the contract):

* inputs that no compiled kernel can have (unknown arch, ``threads_per_block`` outside
  ``1..1024``, more than 255 registers per thread, negative sizes) raise ``ValueError``;
* a valid kernel whose resources cannot fit on one SM (shared memory per block over the opt-in
  limit, dynamic shared memory above the kernel's ``max_dynamic_smem`` attribute, a block whose
  registers exceed the 64K per-block limit) gets ``blocks_per_sm == 0`` with the limiter named,
  which is what ``cuOccupancyMaxActiveBlocksPerMultiprocessor`` answers for it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, asdict
from typing import Iterable, Mapping, Sequence

WARP_SIZE = 32
REGS_PER_SM = 64 * 1024
REGS_PER_BLOCK = 64 * 1024
MAX_REGS_PER_THREAD = 255
MAX_THREADS_PER_BLOCK = 1024
REG_ALLOC_UNIT = 256          # registers per warp are allocated in units of 256
SUB_PARTITIONS = 4            # one register-file slice per warp scheduler
DEFAULT_SMEM_PER_BLOCK = 48 * 1024   # without the opt-in attribute

LIMITERS = ("warps", "blocks", "registers", "shared memory")


@dataclass(frozen=True)
class ArchSpec:
    """Per-architecture constants (NVIDIA CUDA C Programming Guide, 'Compute capabilities')."""
    arch: str
    max_threads_per_sm: int
    max_blocks_per_sm: int
    smem_per_sm: int            # largest shared-memory carveout, bytes
    smem_per_block_optin: int   # largest dynamic+static shared memory a block may opt in to
    smem_granularity: int
    smem_reserved_per_block: int

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // WARP_SIZE


KB = 1024
ARCHS: dict[str, ArchSpec] = {
    "sm_75": ArchSpec("sm_75", 1024, 16, 64 * KB, 64 * KB, 256, 0),
    "sm_80": ArchSpec("sm_80", 2048, 32, 164 * KB, 163 * KB, 128, 1 * KB),
    "sm_86": ArchSpec("sm_86", 1536, 16, 100 * KB, 99 * KB, 128, 1 * KB),
    "sm_89": ArchSpec("sm_89", 1536, 24, 100 * KB, 99 * KB, 128, 1 * KB),
    "sm_90": ArchSpec("sm_90", 2048, 32, 228 * KB, 227 * KB, 128, 1 * KB),
}


def normalize_arch(arch: str | int) -> str:
    """'sm_90', 'sm90', '90', 90, '9.0', 'compute_90' -> 'sm_90'. ValueError if not modelled."""
    s = str(arch).strip().lower()
    for prefix in ("sm_", "sm", "compute_"):
        if s.startswith(prefix):
            s = s[len(prefix):]
            break
    s = s.replace(".", "")
    key = f"sm_{s}"
    if key not in ARCHS:
        raise ValueError(
            f"unknown architecture {arch!r}: the occupancy model knows {', '.join(ARCHS)} "
            "(constants from DESIGN.md 'Occupancy'); add a row to attnlab.occupancy.ARCHS for others")
    return key


def arch_spec(arch: str | int) -> ArchSpec:
    return ARCHS[normalize_arch(arch)]


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def max_dynamic_smem(arch: str | int, static_smem: int = 0) -> int:
    """Largest dynamic shared memory (bytes) a block may request after opting in with
    ``cudaFuncAttributeMaxDynamicSharedMemorySize`` (CuPy: ``ker.max_dynamic_shared_size_bytes``)."""
    spec = arch_spec(arch)
    if static_smem < 0:
        raise ValueError(f"static_smem must be >= 0, got {static_smem}")
    return max(0, spec.smem_per_block_optin - static_smem)


def needs_optin(dynamic_smem: int, static_smem: int = 0) -> bool:
    """True when the launch must raise the kernel's dynamic-smem attribute first (> 48 KB total)."""
    return static_smem + dynamic_smem > DEFAULT_SMEM_PER_BLOCK


@dataclass(frozen=True)
class Occupancy:
    arch: str
    threads_per_block: int
    registers_per_thread: int
    static_smem: int
    dynamic_smem: int
    warps_per_block: int
    regs_per_warp: int            # after rounding to the 256-register allocation unit
    smem_allocated: int           # per block, after the reserved 1 KB and granularity rounding
    limits: Mapping[str, int]     # blocks/SM allowed by each factor
    blocks_per_sm: int
    active_warps: int
    max_warps: int
    occupancy: float              # active_warps / max_warps
    limiter: str                  # the binding factor (first of LIMITERS among ties)
    limiters: tuple[str, ...] = field(default=())   # every factor that binds (ties)

    @property
    def smem_per_block(self) -> int:
        return self.static_smem + self.dynamic_smem

    def as_row(self) -> dict:
        d = asdict(self)
        limits = d.pop("limits")
        d["limiters"] = "+".join(self.limiters)
        for k, v in limits.items():
            d[f"limit_{k.replace(' ', '_')}"] = v
        return d


def occupancy(arch: str | int, threads_per_block: int, registers_per_thread: int,
              static_smem: int = 0, dynamic_smem: int = 0, *,
              max_dynamic_smem_attr: int | None = None) -> Occupancy:
    """Theoretical occupancy of one kernel configuration on one SM.

    ``max_dynamic_smem_attr`` is the kernel's ``cudaFuncAttributeMaxDynamicSharedMemorySize``.
    ``None`` (the default) means "the launcher opts in as far as needed", as attnlab's launchers do;
    pass the attribute to reproduce the driver's answer for a kernel that was not opted in
    (dynamic smem above it gives 0 blocks).
    """
    spec = arch_spec(arch)
    for name, val in (("threads_per_block", threads_per_block),
                      ("registers_per_thread", registers_per_thread),
                      ("static_smem", static_smem), ("dynamic_smem", dynamic_smem)):
        if int(val) != val:
            raise ValueError(f"{name} must be an integer, got {val!r}")
    threads_per_block, registers_per_thread = int(threads_per_block), int(registers_per_thread)
    static_smem, dynamic_smem = int(static_smem), int(dynamic_smem)
    if not 1 <= threads_per_block <= MAX_THREADS_PER_BLOCK:
        raise ValueError(f"threads_per_block must be in 1..{MAX_THREADS_PER_BLOCK}, got {threads_per_block}")
    if not 0 <= registers_per_thread <= MAX_REGS_PER_THREAD:
        raise ValueError(f"registers_per_thread must be in 0..{MAX_REGS_PER_THREAD}, got {registers_per_thread}")
    if static_smem < 0 or dynamic_smem < 0:
        raise ValueError(f"shared memory sizes must be >= 0, got static={static_smem} dynamic={dynamic_smem}")

    warps_per_block = -(-threads_per_block // WARP_SIZE)

    # warps: a partial warp still occupies a whole warp slot
    lim_warps = spec.max_warps_per_sm // warps_per_block
    lim_blocks = spec.max_blocks_per_sm

    # registers: per-warp allocation, rounded to 256, taken from one of 4 sub-partitions
    regs_per_warp = _round_up(registers_per_thread * WARP_SIZE, REG_ALLOC_UNIT)
    regs_block = regs_per_warp * warps_per_block
    # the hardware's per-block check assumes the block's warps are spread evenly over the
    # 4 sub-partitions, so it rounds the warp count up to a multiple of 4
    regs_block_hw = regs_per_warp * _round_up(warps_per_block, SUB_PARTITIONS)
    if regs_block > REGS_PER_BLOCK or regs_block_hw > REGS_PER_BLOCK:
        lim_regs = 0
    elif regs_per_warp == 0:
        lim_regs = 1 << 30
    else:
        warps_per_sub = (REGS_PER_SM // SUB_PARTITIONS) // regs_per_warp
        lim_regs = (warps_per_sub * SUB_PARTITIONS) // warps_per_block

    # shared memory: reserved KB + rounding; capacity = max carveout (default preference)
    total = static_smem + spec.smem_reserved_per_block + dynamic_smem
    smem_alloc = _round_up(total, spec.smem_granularity)
    block_limit = spec.smem_per_block_optin + spec.smem_reserved_per_block
    if max_dynamic_smem_attr is not None:
        if max_dynamic_smem_attr < 0:
            raise ValueError(f"max_dynamic_smem_attr must be >= 0, got {max_dynamic_smem_attr}")
        if static_smem + max_dynamic_smem_attr <= DEFAULT_SMEM_PER_BLOCK:
            # not opted in: the 48 KB default per-block limit applies
            block_limit = DEFAULT_SMEM_PER_BLOCK + spec.smem_reserved_per_block
    if smem_alloc > block_limit or (max_dynamic_smem_attr is not None and dynamic_smem > max_dynamic_smem_attr):
        lim_smem = 0
    elif smem_alloc == 0:
        lim_smem = 1 << 30
    else:
        lim_smem = spec.smem_per_sm // smem_alloc

    limits = {"warps": lim_warps, "blocks": lim_blocks, "registers": lim_regs, "shared memory": lim_smem}
    blocks = min(limits.values())
    tied = tuple(k for k in LIMITERS if limits[k] == blocks)
    active_warps = blocks * warps_per_block
    return Occupancy(
        arch=spec.arch, threads_per_block=threads_per_block, registers_per_thread=registers_per_thread,
        static_smem=static_smem, dynamic_smem=dynamic_smem, warps_per_block=warps_per_block,
        regs_per_warp=regs_per_warp, smem_allocated=smem_alloc, limits=limits,
        blocks_per_sm=blocks, active_warps=active_warps, max_warps=spec.max_warps_per_sm,
        occupancy=active_warps / spec.max_warps_per_sm, limiter=tied[0], limiters=tied)


def occupancy_table(rows: Iterable[Mapping], arch: str | int | None = None):
    """DataFrame of the model for many configurations.

    Each row needs ``threads_per_block`` (or ``block_threads``), ``registers`` (or ``regs``),
    ``static_smem`` and ``dynamic_smem`` (or ``smem_bytes`` as a total); ``arch`` per row or given.
    Other keys are kept as columns.
    """
    import pandas as pd
    out = []
    for r in rows:
        r = dict(r)
        a = r.get("arch", arch)
        if a is None:
            raise ValueError("occupancy_table: give arch= or an 'arch' column")
        threads = r.get("threads_per_block", r.get("block_threads"))
        regs = r.get("registers", r.get("regs"))
        if threads is None or regs is None:
            raise ValueError(f"occupancy_table: row lacks threads/registers: {r}")
        static = r.get("static_smem", 0)
        dynamic = r.get("dynamic_smem", r.get("smem_bytes", 0) if "static_smem" not in r else 0)
        occ = occupancy(a, int(threads), int(regs), int(static), int(dynamic))
        r.update({"arch": occ.arch, "model_blocks": occ.blocks_per_sm, "active_warps": occ.active_warps,
                  "occupancy": occ.occupancy, "limiter": occ.limiter, "limiters": "+".join(occ.limiters),
                  "smem_allocated": occ.smem_allocated})
        out.append(r)
    return pd.DataFrame(out)


# ----------------------------------------------------------------------------------------------
# Live: the driver's answer, and the comparison table recorded for the CPU test
# ----------------------------------------------------------------------------------------------

def device_arch() -> str:
    """'sm_XY' of the current CuPy device (needs a GPU)."""
    import cupy as cp
    return f"sm_{cp.cuda.Device().compute_capability}"


def kernel_resources(kernel) -> dict:
    """Registers / static smem / local memory of a compiled cupy RawKernel (forces the load)."""
    return {"regs": int(kernel.num_regs), "static_smem": int(kernel.shared_size_bytes),
            "local_bytes": int(kernel.local_size_bytes),
            "max_dynamic_smem_attr": int(kernel.max_dynamic_shared_size_bytes)}


def driver_blocks(kernel, block_threads: int, dynamic_smem: int = 0, *, opt_in: bool = True) -> int:
    """``cuOccupancyMaxActiveBlocksPerMultiprocessor`` for a cupy RawKernel.

    With ``opt_in`` (as attnlab's launchers do) the kernel's max-dynamic-smem attribute is raised to
    ``dynamic_smem`` first when the launch needs more than the 48 KB default, so the driver is asked
    the same question the model answers with ``max_dynamic_smem_attr=None``.
    """
    import cupy as cp
    if opt_in and dynamic_smem > int(kernel.max_dynamic_shared_size_bytes):
        kernel.max_dynamic_shared_size_bytes = int(dynamic_smem)
    return int(cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
        kernel.kernel.ptr, int(block_threads), int(dynamic_smem)))


DRIVER_CHECK_COLUMNS = ["arch", "kernel", "D", "tile_rows", "tile_kv", "block_threads", "regs",
                        "static_smem", "dynamic_smem", "smem", "driver_blocks", "model_blocks",
                        "agree", "limiter", "occupancy"]


def compare_with_driver(entries: Sequence[Mapping], arch: str | None = None):
    """Build the model-vs-driver table on a live GPU.

    ``entries``: mappings with ``kernel`` (a cupy RawKernel), ``block_threads``, ``dynamic_smem`` and
    any label columns (``name``/``kernel_name``, D, tile_rows, tile_kv ...). Returns a DataFrame with
    :data:`DRIVER_CHECK_COLUMNS` (labels missing from an entry are left empty).
    """
    import pandas as pd
    arch = normalize_arch(arch) if arch else device_arch()
    rows = []
    for e in entries:
        ker = e["kernel"]
        threads, dyn = int(e["block_threads"]), int(e.get("dynamic_smem", 0))
        drv = driver_blocks(ker, threads, dyn)
        res = kernel_resources(ker)
        occ = occupancy(arch, threads, res["regs"], res["static_smem"], dyn)
        row = {k: v for k, v in e.items() if k not in ("kernel", "kernel_name", "name")}
        row.update(arch=arch, kernel=e.get("kernel_name", e.get("name", "")), block_threads=threads,
                   regs=res["regs"], static_smem=res["static_smem"], dynamic_smem=dyn,
                   smem=res["static_smem"] + dyn, driver_blocks=drv, model_blocks=occ.blocks_per_sm,
                   agree=drv == occ.blocks_per_sm, limiter=occ.limiter, occupancy=occ.occupancy)
        rows.append(row)
    df = pd.DataFrame(rows)
    for c in DRIVER_CHECK_COLUMNS:
        if c not in df.columns:
            df[c] = None
    return df[DRIVER_CHECK_COLUMNS + [c for c in df.columns if c not in DRIVER_CHECK_COLUMNS]]


def recheck_recorded(df):
    """Recompute ``model_blocks`` from a recorded comparison's own columns (arch, block_threads, regs,
    static_smem, dynamic_smem) with *this* code, so a CPU test checks the current model, not the
    figure stored at recording time. Returns the frame with ``model_now`` and ``agree_now``."""
    df = df.copy()
    if "static_smem" in df.columns and "dynamic_smem" in df.columns:
        static, dyn = df["static_smem"], df["dynamic_smem"]
    else:
        static, dyn = df["smem"] * 0, df["smem"]
    df["model_now"] = [occupancy(a, int(t), int(r), int(s), int(d)).blocks_per_sm
                       for a, t, r, s, d in zip(df["arch"], df["block_threads"], df["regs"], static, dyn)]
    df["agree_now"] = df["model_now"] == df["driver_blocks"]
    return df


def with_theoretical(df, arch: str | int | None = None, regs_col: str = "regs",
                     static_col: str = "static_smem", dynamic_col: str = "dynamic_smem",
                     threads_col: str = "block_threads"):
    """Add the model's columns (model_blocks, active_warps, theo_occupancy, limiter, smem_allocated)
    to a table of configurations; ``arch`` per row (column 'arch') or given."""
    out = df.copy()
    res = []
    for r in out.to_dict("records"):
        a = r.get("arch", arch) if arch is None else arch
        o = occupancy(a, int(r[threads_col]), int(r[regs_col]), int(r.get(static_col, 0) or 0),
                      int(r.get(dynamic_col, 0) or 0))
        res.append((o.blocks_per_sm, o.active_warps, o.occupancy, o.limiter, o.smem_allocated))
    cols = ["model_blocks", "active_warps", "theo_occupancy", "limiter", "smem_allocated"]
    for i, c in enumerate(cols):
        out[c] = [r[i] for r in res]
    return out


def arch_table():
    """The per-SM limits the calculator knows, one row per architecture."""
    import pandas as pd

    return pd.DataFrame([dict(arch=a.arch, threads_per_SM=a.max_threads_per_sm, warps_per_SM=a.max_warps_per_sm,
                              blocks_per_SM=a.max_blocks_per_sm, smem_per_SM_KB=a.smem_per_sm / 1024,
                              smem_per_block_optin_KB=a.smem_per_block_optin / 1024,
                              smem_granularity_B=a.smem_granularity, reserved_per_block_B=a.smem_reserved_per_block)
                         for a in ARCHS.values()])


#: hand-checkable launches, one per limiter: (arch, threads, registers, dynamic shared memory, the limiter)
LIMITER_EXAMPLES = (("sm_90", 256, 32, 0, "warps"), ("sm_90", 32, 32, 0, "blocks"), ("sm_90", 256, 128, 0, "registers"),
                    ("sm_90", 256, 32, 48 * 1024, "shared memory"), ("sm_75", 256, 32, 48 * 1024, "shared memory"),
                    ("sm_90", 128, 32, 227 * 1024 + 1, "shared memory"))


def limiter_examples():
    """:data:`LIMITER_EXAMPLES` through the calculator, with the limiter each should show."""
    import pandas as pd

    keep = ("blocks_per_sm", "active_warps", "occupancy", "limiter", "limiters")
    return pd.DataFrame([{**dict(arch=a, threads=t, regs=r, smem=s, expected=e),
                          **{k: v for k, v in occupancy(a, t, r, 0, s).as_row().items() if k in keep}}
                         for a, t, r, s, e in LIMITER_EXAMPLES])


def plot_blocks_vs_smem(ax, threads: int = 256, registers: int = 32, archs=("sm_75", "sm_86", "sm_90"), step: int = 256):
    """Blocks per SM against dynamic shared memory per block, one step curve per arch (calculator)."""
    for arch, style in zip(archs, ("-", ":", "--", "-.")):
        xs = range(0, max_dynamic_smem(arch) + 1, step)
        ax.step([x / 1024 for x in xs], [occupancy(arch, threads, registers, 0, x).blocks_per_sm for x in xs],
                style, where="post", label=arch)
    ax.set(xlabel="shared memory per block (KB)", ylabel="blocks / SM",
           title=f"{threads} threads, {registers} registers: blocks per SM vs shared memory (calculator)")
