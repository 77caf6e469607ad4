"""Timing GPU work properly: CUDA events, warm-up, L2 flushed before every timed launch,
repeats until the spread is small (or the budget runs out), median and spread reported.

The device side (events, L2 flush, synchronisation, the wall clock of the budget) goes through a
small backend object, CuPy's by default, so the sampling logic of :func:`time_gpu` can be tested
without a GPU (tests/test_timing.py drives it with a simulated device).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Mapping

import numpy as np

#: A timing has converged when its relative IQR ((q3 - q1) / median) is at most this (2 %, as
#: data/results/SCHEMA.md states for the ``converged`` column).
TARGET_REL_IQR = 0.02


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


def summarize(samples_ms, target_rel_iqr: float = TARGET_REL_IQR, converged: bool | None = None) -> Timing:
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


class CupyTimingBackend:
    """The real device side of :func:`time_gpu`: CUDA events on the current CuPy stream, the L2
    flush, and ``time.perf_counter`` for the wall-clock budget."""

    def __init__(self) -> None:
        import cupy as cp

        self._cp = cp

    def new_event(self) -> Any:
        return self._cp.cuda.Event()

    def record(self, event: Any) -> None:
        event.record()

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(self._cp.cuda.get_elapsed_time(start, end))

    def synchronize(self, event: Any = None) -> None:
        """Wait for ``event`` (or, without one, for everything queued on the current stream)."""
        if event is None:
            self._cp.cuda.get_current_stream().synchronize()
        else:
            event.synchronize()

    def flush(self) -> None:
        flush_l2_cache()

    def clock(self) -> float:
        return time.perf_counter()


def time_gpu(fn: Callable[[], object], *, budget_s: float = 0.5, warmup: int = 2, min_repeats: int = 10,
             max_repeats: int = 200, target_rel_iqr: float = TARGET_REL_IQR, flush_l2: bool = True,
             batch: int = 5, backend: Any = None) -> Timing:
    """Time ``fn()`` (which launches GPU work on the current stream) with CUDA events.

    Each sample: flush L2 (outside the events), record start, ``fn()``, record end.
    Samples are taken in batches; after each batch we stop once ``min_repeats`` are in and the
    relative IQR is at most ``target_rel_iqr``, or the wall-clock budget is spent, or
    ``max_repeats`` is reached. A single call longer than the budget still gets 3 samples.

    ``backend`` supplies the events, flush, synchronisation and clock (see
    :class:`CupyTimingBackend`, the default); tests pass a simulated one.
    """
    return time_gpu_interleaved({"": fn}, budget_s=budget_s, warmup=warmup, min_repeats=min_repeats,
                                max_repeats=max_repeats, target_rel_iqr=target_rel_iqr, flush_l2=flush_l2,
                                rounds=batch, backend=backend)[""]


def time_gpu_interleaved(fns: Mapping[str, Callable[[], object]], *, budget_s: float = 0.5, warmup: int = 2,
                         min_repeats: int = 10, max_repeats: int = 200, target_rel_iqr: float = TARGET_REL_IQR,
                         flush_l2: bool = True, rounds: int = 5, backend: Any = None) -> dict[str, Timing]:
    """Time several callables against each other: their samples interleaved, so that every one
    sees the same device conditions.

    Seconds apart, the same kernel's median can move by several per cent (clocks and power
    settle under sustained load); timed one after the other, a kernel and its reference would
    compare two moments, not two kernels. Here each round takes one sample of every callable
    (L2 flushed before each, CUDA events around the call alone), the order rotating from round
    to round so that none always follows the same neighbour. Rounds continue until every
    callable has ``min_repeats`` samples (fewer for calls so long that the budget holds fewer,
    at least 3) and has converged (relative IQR <= ``target_rel_iqr``), or the budget of
    ``budget_s`` per callable is spent, or ``max_repeats`` rounds are done. With one callable
    this is :func:`time_gpu` (its batches are the rounds).
    """
    if budget_s <= 0 or min_repeats < 1 or max_repeats < min_repeats or not fns:
        raise ValueError("need budget_s > 0 and 1 <= min_repeats <= max_repeats, and at least one callable")
    dev = CupyTimingBackend() if backend is None else backend
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    dev.synchronize()

    samples: dict[str, list[float]] = {name: [] for name in names}
    total_budget = budget_s * len(names)
    start_wall = dev.clock()
    events = [[(dev.new_event(), dev.new_event()) for _ in names] for _ in range(rounds)]
    floor = min_repeats
    done_rounds = 0
    while True:
        order = []
        for r in range(rounds):
            shift = (done_rounds + r) % len(names)
            order.append(names[shift:] + names[:shift])
            for i, name in enumerate(order[-1]):
                start, end = events[r][i]
                if flush_l2:
                    dev.flush()
                dev.record(start)
                fns[name]()
                dev.record(end)
        dev.synchronize(events[-1][-1][1])
        for r in range(rounds):
            for i, name in enumerate(order[r]):
                samples[name].append(dev.elapsed_ms(*events[r][i]))
        done_rounds += rounds
        elapsed = dev.clock() - start_wall
        if done_rounds == rounds:
            # Long calls: shrink the required count so one measurement stays near the budget.
            per_round = max(sum(float(np.median(s)) for s in samples.values()) * 1e-3, 1e-9)
            floor = max(3, min(min_repeats, int(total_budget / per_round)))
        timings = {name: summarize(s, target_rel_iqr) for name, s in samples.items()}
        if done_rounds >= floor and (all(t.converged for t in timings.values()) or elapsed >= total_budget):
            return timings
        if done_rounds >= max_repeats:
            return timings


def time_rows(entries: Iterable[tuple[Mapping[str, Any], Callable[[], object] | None]], *, budget_s: float,
              interleaved: bool = False, flops: float | Mapping[int, float] | None = None, **options) -> list[dict]:
    """The lab's one timing loop, from a grid point's entries to tidy rows.

    ``entries`` are ``(columns, fn)`` pairs that share one set of inputs (one point of a study's
    grid: its kernels, tiles or references). Each ``fn`` is timed with CUDA events, warm-up and an
    L2 flush (:func:`time_gpu_interleaved`; ``interleaved``: one sample of every entry per round, so
    they share the device's conditions, else one entry after the other) and gives the row
    ``{**columns, **Timing.row()}``: median, quartiles, extremes, repeats, relative IQR and whether it
    converged. ``flops`` (FLOPs of one call: one number for every entry, or entry index -> FLOPs)
    adds ``tflops``. An entry whose ``fn``
    is None is passed through untimed (its columns say why: a tile over the shared-memory limit).
    ``options`` go to the sampler (warm-up, repeats, target spread)."""
    entries = list(entries)
    if flops is not None and not isinstance(flops, Mapping):
        flops = dict.fromkeys(range(len(entries)), float(flops))
    timed = [i for i, (_, fn) in enumerate(entries) if fn is not None]
    found: dict[int, Timing] = {}
    if interleaved and timed:
        found = {int(k): t for k, t in time_gpu_interleaved({str(i): entries[i][1] for i in timed},
                                                            budget_s=budget_s, **options).items()}
    else:
        for i in timed:
            found[i] = time_gpu(entries[i][1], budget_s=budget_s, **options)
    rows = []
    for i, (columns, _) in enumerate(entries):
        row = dict(columns)
        if i in found:
            row.update(found[i].row())
            if flops and i in flops:
                row["tflops"] = flops[i] / (found[i].median_ms * 1e-3) / 1e12
        rows.append(row)
    return rows


def timing_problems(t: pd.DataFrame, target_rel_iqr: float | None = None) -> pd.DataFrame:
    """The rows of a timing table that break what a sound measurement satisfies: positive times,
    min ≤ q1 ≤ median ≤ q3 ≤ max, ``converged`` exactly when the relative IQR is within the target,
    and TFLOP/s = FLOPs / median. Empty when every row is sound."""
    import numpy as np

    target = TARGET_REL_IQR if target_rel_iqr is None else target_rel_iqr
    eps = 1e-9
    ordered = ((t["min_ms"] > 0) & (t["min_ms"] <= t["q1_ms"] + eps) & (t["q1_ms"] <= t["median_ms"] + eps)
               & (t["median_ms"] <= t["q3_ms"] + eps) & (t["q3_ms"] <= t["max_ms"] + eps))
    rel_iqr = (t["q3_ms"] - t["q1_ms"]) / t["median_ms"]
    converged_ok = t["converged"].astype(bool) == (rel_iqr <= target + 1e-12)
    ok = ordered & converged_ok
    if {"flops", "tflops"} <= set(t.columns):
        ok &= np.isclose(t["tflops"], t["flops"] / (t["median_ms"] * 1e-3) / 1e12, rtol=1e-9)
    return t[~ok]
