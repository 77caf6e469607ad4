"""attnlab.timing without a GPU: ``time_gpu`` driven by a simulated device.

The fake device keeps one timeline in milliseconds. Kernels (``fn``) and the L2 flush take time
on it, events stamp it, ``elapsed_ms`` is end minus start (and may only be read once the end
event was synchronised), and the budget's wall clock is the same timeline. So a flush moved
inside the timed region shows up in every sample, and the stopping rules (warm-up, minimum
repeats, convergence, budget, maximum repeats) can be checked exactly.
"""

from __future__ import annotations

import inspect
import itertools
import re
from fractions import Fraction

import numpy as np
import pytest

import pandas as pd

from attnlab import timing
from attnlab.paths import DATA_DIR
from attnlab.timing import TARGET_REL_IQR, CupyTimingBackend, summarize, time_gpu

FLUSH_MS = 7.0   # far from any kernel duration used below: a flush inside the events cannot hide


class FakeEvent:
    def __init__(self) -> None:
        self.t: Fraction | None = None


class FakeDevice:
    """A simulated stream. ``durations`` gives the time of each ``fn()`` call, warm-up included.
    The timeline is exact (fractions), so a sample reads back exactly the duration it was given."""

    def __init__(self, durations, flush_ms: float = FLUSH_MS) -> None:
        self._durations = iter(durations)
        self.flush_ms = flush_ms
        self.now = Fraction(0)    # ms
        self.synced = Fraction(-1)  # everything up to this time has completed (host-visible)
        self.log: list[str] = []
        self.clock_reads: list[float] = []
        self.calls = 0

    def kernel(self):
        def fn():
            self.calls += 1
            self.log.append("fn")
            self.now += Fraction(next(self._durations))
        return fn

    # --- the backend interface of attnlab.timing.time_gpu
    def new_event(self) -> FakeEvent:
        return FakeEvent()

    def record(self, event: FakeEvent) -> None:
        self.log.append("record")
        event.t = self.now

    def elapsed_ms(self, start: FakeEvent, end: FakeEvent) -> float:
        assert start.t is not None and end.t is not None, "elapsed time of an unrecorded event"
        assert end.t <= self.synced, "elapsed time read before the end event was synchronised"
        return float(end.t - start.t)

    def synchronize(self, event: FakeEvent | None = None) -> None:
        self.log.append("sync")
        self.synced = max(self.synced, self.now if event is None else event.t)

    def flush(self) -> None:
        self.log.append("flush")
        self.now += Fraction(self.flush_ms)

    def clock(self) -> float:
        self.clock_reads.append(float(self.now) / 1e3)
        return float(self.now) / 1e3


def run(durations, **kw):
    dev = FakeDevice(durations, **{k: kw.pop(k) for k in ("flush_ms",) if k in kw})
    t = time_gpu(dev.kernel(), backend=dev, **kw)
    return t, dev


def rel_iqr_samples(r: float, centre: float = 1.0) -> list[float]:
    """Five samples whose quartiles (NumPy's linear percentiles) give exactly q1 = c - r/2,
    median = c, q3 = c + r/2, i.e. a relative IQR of r."""
    lo, hi = centre * (1 - r / 2), centre * (1 + r / 2)
    return [lo, lo, centre, hi, hi]


def noisy(r: float = 0.5):
    """Endless samples with a relative IQR of about r (never converges at 2 %)."""
    return itertools.cycle(rel_iqr_samples(r))


def samples_of(dev: FakeDevice) -> list[list[str]]:
    """The log after the warm-up's sync, cut into one list per timed sample (syncs left out)."""
    body = [e for e in dev.log[dev.log.index("sync") + 1:] if e != "sync"]
    out, cur = [], []
    for e in body:
        cur.append(e)
        if cur.count("record") == 2:
            out.append(cur)
            cur = []
    assert not cur, f"trailing events after the last sample: {cur}"
    return out


# ----------------------------------------------------------------------------- the timed region

def test_flush_runs_before_every_sample_and_outside_the_events():
    t, dev = run(itertools.repeat(1.0))
    # Were the flush (7 ms) inside the events, every sample would read 8 ms.
    assert (t.min_ms, t.median_ms, t.max_ms) == (1.0, 1.0, 1.0)
    per_sample = samples_of(dev)
    assert len(per_sample) == t.repeats
    assert all(s == ["flush", "record", "fn", "record"] for s in per_sample), per_sample[:3]
    assert dev.log.count("flush") == t.repeats


def test_flush_time_never_reaches_a_sample_even_with_varied_kernels():
    durations = [3.0, 3.0] + [1.0, 2.0, 3.0, 4.0, 5.0] * 40
    t, dev = run(iter(durations), warmup=2, min_repeats=10, max_repeats=10)
    assert t.repeats == 10 and t.min_ms == 1.0 and t.max_ms == 5.0 and t.median_ms == 3.0


def test_no_flush_when_disabled():
    t, dev = run(itertools.repeat(1.0), flush_l2=False)
    assert "flush" not in dev.log
    assert all(s == ["record", "fn", "record"] for s in samples_of(dev))
    assert t.median_ms == 1.0


# ----------------------------------------------------------------------------- warm-up

@pytest.mark.parametrize("warmup", [0, 1, 3])
def test_warmup_calls_are_untimed_and_waited_for(warmup):
    # Warm-up calls are slow (a first launch compiles, caches are cold): none may reach a sample.
    durations = itertools.chain([100.0] * warmup, itertools.repeat(1.0))
    t, dev = run(durations, warmup=warmup)
    assert dev.log[:warmup] == ["fn"] * warmup
    assert dev.log[warmup] == "sync", "the warm-up must finish before the clock starts"
    assert dev.calls == warmup + t.repeats
    assert t.max_ms == 1.0
    assert dev.clock_reads[0] == pytest.approx(warmup * 0.1), "budget clock started before warm-up ended"


# ----------------------------------------------------------------------------- when to stop

@pytest.mark.parametrize("min_repeats, batch, expected", [(10, 5, 10), (12, 5, 15), (1, 5, 5), (7, 3, 9)])
def test_converged_timing_stops_at_the_first_batch_past_min_repeats(min_repeats, batch, expected):
    t, _ = run(itertools.repeat(2.0), min_repeats=min_repeats, batch=batch, budget_s=100.0)
    assert t.converged and t.repeats == expected


def test_stops_as_soon_as_the_spread_falls_under_the_target():
    # Noisy batches, then steady samples: the spread shrinks as the steady ones pile up.
    seq = [0.5, 1.5] * 6 + [1.0] * 500
    expected = next(n for n in range(10, 500, 5) if summarize(seq[:n]).converged)
    t, _ = run(iter([5.0, 5.0] + seq), budget_s=100.0, max_repeats=400)
    assert t.converged and t.repeats == expected
    assert expected > 10, "the case should need more than the minimum"


def test_noisy_timing_runs_until_the_budget_then_stops():
    budget = 0.2
    t, dev = run(noisy(), budget_s=budget, max_repeats=10_000)
    assert not t.converged
    start, before_last, last = dev.clock_reads[0], dev.clock_reads[-2], dev.clock_reads[-1]
    assert before_last - start < budget <= last - start, "did not stop at the first batch past the budget"
    assert t.repeats == 5 * (len(dev.clock_reads) - 1)


def test_noisy_timing_stops_at_max_repeats():
    t, _ = run(noisy(), budget_s=1e6, max_repeats=40)
    assert t.repeats == 40 and not t.converged


def test_min_repeats_holds_even_when_the_budget_is_spent():
    # The budget ends inside the first batch; still min_repeats samples (short kernels).
    # (budget 25 ms: 25 one-millisecond calls fit, so the long-kernel rule keeps 20; the first
    # batch of 5 samples, 8 ms each with the flush, already spends it)
    t, dev = run(noisy(), budget_s=0.025, min_repeats=20)
    assert dev.clock_reads[1] - dev.clock_reads[0] >= 0.025
    assert t.repeats == 20


def test_a_kernel_longer_than_the_budget_gets_one_batch():
    t, _ = run(itertools.cycle(rel_iqr_samples(0.5, centre=800.0)), budget_s=0.5, min_repeats=10)
    assert t.repeats == 5 and not t.converged


def test_invalid_arguments():
    for kw in ({"budget_s": 0}, {"min_repeats": 0}, {"min_repeats": 5, "max_repeats": 4}):
        with pytest.raises(ValueError, match="budget_s > 0"):
            run(itertools.repeat(1.0), **kw)


# ----------------------------------------------------------------------------- the convergence threshold

def test_target_is_two_percent_as_the_schema_states():
    assert TARGET_REL_IQR == 0.02
    schema = (DATA_DIR / "results" / "SCHEMA.md").read_text()
    m = re.search(r"`converged` \(relative IQR ≤ (\d+(?:\.\d+)?) %", schema)
    assert m, "SCHEMA.md no longer states the convergence threshold"
    assert float(m.group(1)) / 100 == TARGET_REL_IQR


@pytest.mark.parametrize("r, converged", [(0.0, True), (0.019, True), (0.0201, False), (0.05, False),
                                          (0.15, False)])
def test_summarize_converges_at_the_stated_threshold(r, converged):
    t = summarize(rel_iqr_samples(r))
    assert t.rel_iqr == pytest.approx(r, abs=1e-12)
    assert t.converged is converged


def test_summarize_default_and_explicit_threshold():
    assert inspect.signature(summarize).parameters["target_rel_iqr"].default == TARGET_REL_IQR
    assert summarize(rel_iqr_samples(0.05), target_rel_iqr=0.1).converged
    assert not summarize(rel_iqr_samples(0.05), target_rel_iqr=0.04).converged
    assert summarize(rel_iqr_samples(0.5), converged=True).converged     # the caller's verdict wins


def test_time_gpu_uses_the_stated_threshold():
    # A 5 % spread is not converged at 2 % (it would be at a 10x looser 20 %) ...
    t, _ = run(itertools.cycle(rel_iqr_samples(0.05)), budget_s=1e6, max_repeats=50)
    assert not t.converged and t.repeats == 50
    # ... a 1.5 % spread is, at the minimum count; a caller's target is honoured.
    t, _ = run(itertools.cycle(rel_iqr_samples(0.015)), budget_s=1e6, max_repeats=50)
    assert t.converged and t.repeats == 10
    t, _ = run(itertools.cycle(rel_iqr_samples(0.05)), budget_s=1e6, max_repeats=50, target_rel_iqr=0.06)
    assert t.converged and t.repeats == 10


def test_timing_row_reports_the_summary():
    t, _ = run(itertools.cycle(rel_iqr_samples(0.05)), budget_s=1e6, max_repeats=50)
    ref = summarize(list(itertools.islice(itertools.cycle(rel_iqr_samples(0.05)), 50)))
    assert t == ref
    assert t.row()["rel_iqr"] == pytest.approx(0.05)


# ----------------------------------------------------------------------------- interface

def test_time_gpu_signature_is_backward_compatible():
    params = inspect.signature(time_gpu).parameters
    old = {"budget_s": 0.5, "warmup": 2, "min_repeats": 10, "max_repeats": 200, "target_rel_iqr": 0.02,
           "flush_l2": True, "batch": 5}
    assert list(params)[0] == "fn"
    for name, default in old.items():
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY and params[name].default == default, name
    assert params["backend"].default is None


def test_fake_device_has_the_real_backend_interface():
    used = {"new_event", "record", "elapsed_ms", "synchronize", "flush", "clock"}
    for name in used:
        real, fake = getattr(CupyTimingBackend, name), getattr(FakeDevice, name)
        assert list(inspect.signature(real).parameters) == list(inspect.signature(fake).parameters), name
    assert timing.flush_l2_cache is not None


def test_summarize_rejects_bad_samples():
    for bad in ([], [1.0, float("nan")], [-1.0, 1.0]):
        with pytest.raises(ValueError):
            summarize(bad)
    assert np.isnan(timing.Timing(0.0, 0.0, 0.0, 0.0, 0.0, 1, False).rel_iqr)


# ----------------------------------------------------------------------------- interleaved timing

class DriftingDevice(FakeDevice):
    """A device that slows down as it runs (clocks settling under load): a call started at time
    t (ms) takes base * (1 + t / 1000)."""

    def __init__(self) -> None:
        super().__init__(itertools.repeat(0.0), flush_ms=0.5)

    def kernel_of(self, name: str, base: float):
        def fn():
            self.calls += 1
            self.log.append(name)
            self.now += Fraction(base) * (1 + self.now / 1000)
        return fn


def test_interleaved_samples_rotate_and_flush_outside_the_events():
    dev = DriftingDevice()
    fns = {"a": dev.kernel_of("a", 1.0), "b": dev.kernel_of("b", 1.0), "c": dev.kernel_of("c", 1.0)}
    t = timing.time_gpu_interleaved(fns, backend=dev, warmup=1, min_repeats=6, max_repeats=6, rounds=3)
    assert set(t) == {"a", "b", "c"} and all(x.repeats == 6 for x in t.values())
    body = [e for e in dev.log[dev.log.index("sync") + 1:] if e != "sync"]
    calls = [e for e in body if e in fns]
    # one sample of each per round, the order rotating by one from round to round
    rounds = [calls[i:i + 3] for i in range(0, len(calls), 3)]
    assert rounds[:4] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert all(body[i:i + 4][:2] == ["flush", "record"] for i in range(0, len(body), 4))


def test_interleaving_cancels_drift_that_sequential_timing_reads_as_a_difference():
    # Two identical kernels on a device that slows down 0.1 % per millisecond of work.
    dev = DriftingDevice()
    seq = [time_gpu(dev.kernel_of(name, 1.0), backend=dev, budget_s=0.05, min_repeats=20, max_repeats=20)
           for name in ("a", "b")]
    assert seq[1].median_ms / seq[0].median_ms > 1.02          # the second looks > 2 % slower
    dev = DriftingDevice()
    t = timing.time_gpu_interleaved({"a": dev.kernel_of("a", 1.0), "b": dev.kernel_of("b", 1.0)}, backend=dev,
                                    budget_s=0.05, min_repeats=20, max_repeats=20)
    assert abs(t["b"].median_ms / t["a"].median_ms - 1) < 0.002   # the same, as they are


def test_interleaved_stopping_rules():
    dev = DriftingDevice()
    fast = {"a": dev.kernel_of("a", 0.001), "b": dev.kernel_of("b", 0.002)}
    t = timing.time_gpu_interleaved(fast, backend=dev, min_repeats=10, rounds=5)
    assert all(x.repeats == 10 and x.converged for x in t.values())   # converged at the first check past 10
    assert t["b"].median_ms == pytest.approx(2 * t["a"].median_ms, rel=1e-3)
    dev = DriftingDevice()
    slow = {"a": dev.kernel_of("a", 400.0)}                          # longer than the budget: 5 rounds at least
    t = timing.time_gpu_interleaved(slow, backend=dev, budget_s=0.5, min_repeats=10, rounds=5)
    assert t["a"].repeats == 5
    with pytest.raises(ValueError):
        timing.time_gpu_interleaved({}, backend=dev)
    with pytest.raises(ValueError):
        timing.time_gpu_interleaved(fast, backend=dev, budget_s=0)


# ----------------------------------------------------------------------------- the one timing loop

class SteadyDevice(DriftingDevice):
    """Every call of a kernel takes exactly its base time."""

    def kernel_of(self, name: str, base: float):
        def fn():
            self.calls += 1
            self.log.append(name)
            self.now += Fraction(base)
        return fn


def test_time_rows_gives_one_tidy_row_per_entry_in_order():
    """Every grid walker's rows come from timing.time_rows: the entry's columns, then the timing
    summary, TFLOP/s where FLOPs are given, an untimed entry passed through as it is."""
    dev = SteadyDevice()
    entries = [({"kernel": "a", "N": 4}, dev.kernel_of("a", 2.0)),
               ({"kernel": "skip", "N": 4, "skipped": "over the limit"}, None),
               ({"kernel": "b", "N": 4}, dev.kernel_of("b", 0.5))]
    for interleaved in (False, True):
        rows = timing.time_rows(entries, budget_s=1.0, interleaved=interleaved, flops={0: 4e9, 2: 4e9},
                                backend=dev, warmup=1, min_repeats=5)
        assert [r["kernel"] for r in rows] == ["a", "skip", "b"]
        assert rows[0]["median_ms"] == pytest.approx(2.0) and rows[2]["median_ms"] == pytest.approx(0.5)
        assert rows[0]["tflops"] == pytest.approx(4e9 / 2e-3 / 1e12) and rows[2]["tflops"] == pytest.approx(8.0)
        assert rows[1] == entries[1][0]                       # untimed: nothing added
        assert all(rows[i]["converged"] and rows[i]["repeats"] >= 5 for i in (0, 2))
        assert timing.timing_problems(pd.DataFrame([rows[0], rows[2]])).empty
    # one number: the same FLOPs for every timed entry, none for the untimed one
    rows = timing.time_rows(entries, budget_s=1.0, flops=4e9, backend=dev, warmup=1, min_repeats=5)
    assert [r.get("tflops") for r in rows] == [pytest.approx(2.0), None, pytest.approx(8.0)]


def test_time_rows_interleaves_only_when_asked():
    dev = SteadyDevice()
    entries = [({"k": "a"}, dev.kernel_of("a", 1.0)), ({"k": "b"}, dev.kernel_of("b", 1.0))]
    timing.time_rows(entries, budget_s=1.0, backend=dev, warmup=0, min_repeats=5, max_repeats=5, batch=5)
    calls = [e for e in dev.log if e in ("a", "b")]
    assert calls == ["a"] * 5 + ["b"] * 5                    # one entry after the other
    dev = SteadyDevice()
    entries = [({"k": "a"}, dev.kernel_of("a", 1.0)), ({"k": "b"}, dev.kernel_of("b", 1.0))]
    timing.time_rows(entries, budget_s=1.0, interleaved=True, backend=dev, warmup=0, min_repeats=5, max_repeats=5)
    calls = [e for e in dev.log if e in ("a", "b")]
    assert calls[:4] == ["a", "b", "b", "a"]                 # one sample of each per round, rotating
