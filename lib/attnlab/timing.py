"""Timing GPU work properly: CUDA events, warm-up, L2 flushed before every timed launch,
repeats until the spread is small (or the budget runs out), median and spread reported."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Timing:
    median_ms: float
    q1_ms: float
    q3_ms: float
    min_ms: float
    max_ms: float
    repeats: int
    converged: bool   # relative IQR reached the target before the budget ran out

    @property
    def rel_iqr(self) -> float:
        return (self.q3_ms - self.q1_ms) / self.median_ms if self.median_ms > 0 else float("nan")

    def row(self) -> dict:
        return {**asdict(self), "rel_iqr": self.rel_iqr}


def summarize(samples_ms, target_rel_iqr: float = 0.02, converged: bool | None = None) -> Timing:
    """Median, quartiles and extremes of a list of times (pure; unit-tested)."""
    a = np.asarray(samples_ms, dtype=float)
    if a.size == 0 or not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError("timing samples must be a non-empty list of finite, non-negative times")
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    if converged is None:
        converged = med > 0 and (q3 - q1) / med <= target_rel_iqr
    return Timing(float(med), float(q1), float(q3), float(a.min()), float(a.max()), int(a.size),
                  bool(converged))


_FLUSH = {}


def _l2_flush_buffer():
    """A buffer twice the L2 size: writing it evicts whatever the last launch left in L2."""
    import cupy as cp

    dev = cp.cuda.Device().id
    if dev not in _FLUSH:
        l2 = cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrL2CacheSize, dev)
        _FLUSH[dev] = cp.empty(max(2 * int(l2), 1 << 20), dtype=cp.uint8)
    return _FLUSH[dev]


def flush_l2_cache() -> None:
    import cupy as cp

    buf = _l2_flush_buffer()
    cp.cuda.runtime.memsetAsync(buf.data.ptr, 0, buf.nbytes, cp.cuda.get_current_stream().ptr)


def time_gpu(fn: Callable[[], object], *, budget_s: float = 0.5, warmup: int = 2, min_repeats: int = 10,
             max_repeats: int = 200, target_rel_iqr: float = 0.02, flush_l2: bool = True,
             batch: int = 5) -> Timing:
    """Time ``fn()`` (which launches GPU work on the current stream) with CUDA events.

    Each sample: flush L2 (outside the events), record start, ``fn()``, record end.
    Samples are taken in batches; after each batch we stop once ``min_repeats`` are in and the
    relative IQR is at most ``target_rel_iqr``, or the wall-clock budget is spent, or
    ``max_repeats`` is reached. A single call longer than the budget still gets 3 samples.
    """
    import cupy as cp

    if budget_s <= 0 or min_repeats < 1 or max_repeats < min_repeats:
        raise ValueError("need budget_s > 0 and 1 <= min_repeats <= max_repeats")
    for _ in range(warmup):
        fn()
    cp.cuda.get_current_stream().synchronize()

    samples: list[float] = []
    start_wall = time.perf_counter()
    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(batch)]
    floor = min_repeats
    while True:
        for start, end in events:
            if flush_l2:
                flush_l2_cache()
            start.record()
            fn()
            end.record()
        events[-1][1].synchronize()
        samples.extend(cp.cuda.get_elapsed_time(s, e) for s, e in events)
        elapsed = time.perf_counter() - start_wall
        if len(samples) == batch:
            # Long kernels: shrink the required count so one measurement stays near the budget.
            per_call = max(float(np.median(samples)) * 1e-3, 1e-9)
            floor = max(3, min(min_repeats, int(budget_s / per_call)))
        t = summarize(samples, target_rel_iqr)
        if len(samples) >= floor and (t.converged or elapsed >= budget_s):
            return t
        if len(samples) >= max_repeats:
            return t
