"""Small helpers that notebooks call to show things: the mode banner, kernel sources, diffs,
parameter checks and headline figures (which the report runner collects into its index)."""

from __future__ import annotations

import difflib
import math
import html
import json
from typing import Any, Iterable, Sequence

import pandas as pd

from . import results
from .compile import kernel_source
from .env import Mode, resolve_mode

HEADLINE_MIME = "application/vnd.attnlab.headline+json"


def _display(obj: dict[str, Any]) -> None:
    from IPython.display import display

    display(obj, raw=True)


def banner_html(mode: Mode, provenance_line: str | None = None) -> str:
    if mode.live:
        colour, title = "#1b5e20", f"LIVE — measuring on {html.escape(mode.gpu_name)} now"
        body = "Every figure below is measured in this run and recorded to data/results/" + html.escape(mode.gpu)
    else:
        colour, title = "#b71c1c", "REPLAY — no GPU measurement in this run"
        body = (f"Figures below are <b>recorded</b> results of GPU '{html.escape(mode.gpu)}', not live. "
                f"{html.escape(provenance_line or '')} CPU-side parts (static build, NumPy models, maths, "
                f"plots) run for real now.")
    return (f'<div style="border:3px solid {colour};padding:8px;margin:4px 0">'
            f'<b style="color:{colour}">{title}</b><br>{body}<br><small>{html.escape(mode.reason)}</small></div>')


def banner(mode: Mode, provenance_line: str | None = None) -> None:
    """Show, at the top of a notebook and beside tables, whether figures are live or replayed."""
    if not mode.live and provenance_line is None:
        provenance_line = results.describe_recorded_gpu(mode.gpu)
    text = (f"LIVE on {mode.gpu_name}" if mode.live
            else f"REPLAY of recorded figures from '{mode.gpu}' ({provenance_line or 'provenance unknown'})")
    _display({"text/html": banner_html(mode, provenance_line), "text/plain": text})


def source_label(mode: Mode, table: pd.DataFrame | None = None) -> str:
    """A short caption for a table or plot: where its numbers come from."""
    if mode.live:
        return f"measured live on {mode.gpu_name}"
    if table is not None and "timestamp_utc" in table.columns and not table.empty:
        return (f"REPLAY: recorded on {table['gpu_name'].iloc[0]} at {table['timestamp_utc'].min()} "
                f"(commit {str(table['git_commit'].iloc[0])[:10]})")
    return f"REPLAY of '{mode.gpu}'"


def show_source(source: str, lines: tuple[int, int] | None = None) -> None:
    text = kernel_source(source)
    if lines:
        text = "\n".join(text.splitlines()[lines[0] - 1:lines[1]])
    _display({"text/markdown": f"`kernels/{source}`\n```cuda\n{text}\n```", "text/plain": text})


def show_diff(old_source: str, new_source: str, context: int = 3) -> str:
    """Render the unified diff between two kernel files (what one ladder step changed)."""
    a = kernel_source(old_source).splitlines()
    b = kernel_source(new_source).splitlines()
    diff = "\n".join(difflib.unified_diff(a, b, f"kernels/{old_source}", f"kernels/{new_source}",
                                          n=context, lineterm=""))
    _display({"text/markdown": f"```diff\n{diff}\n```", "text/plain": diff})
    return diff


def headline(**figures: Any) -> None:
    """Publish a notebook's headline figures; the report index shows them next to its status."""
    # four significant figures: a relative error of 1.5e-06 must not print as 0
    # non-finite figures (a target not measured) become null: JSON has no NaN or inf
    clean = {k: ((float(f"{v:.4g}") if math.isfinite(v) else None) if isinstance(v, float) else v)
             for k, v in figures.items()}
    md = "\n".join(["| headline | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in clean.items()])
    _display({HEADLINE_MIME: clean, "text/markdown": md, "text/plain": json.dumps(clean)})


# ---------------------------------------------------------------- record or replay

def format_number(v: float) -> str:
    """How a table cell shows a float: whole numbers without '.0' (counts, bytes: thousands
    separated), ratios and times to four significant figures without an exponent, only tiny
    values (errors) in scientific notation."""
    if v != v or v in (float("inf"), float("-inf")):
        return str(v)
    if float(v).is_integer() and abs(v) < 1e15:
        return f"{int(v):,}" if abs(v) >= 1e5 else str(int(v))
    if abs(v) >= 1e5:
        return f"{v:,.0f}"
    if abs(v) >= 1e-3:
        return f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"
    return f"{v:.3g}"


def display_options() -> None:
    """pandas' display set for reading: numbers by :func:`format_number`, text cells never cut, up to
    200 rows (longer tables are summarised by the notebooks, the full CSV is in data/results)."""
    pd.set_option("display.float_format", format_number)
    pd.set_option("display.max_colwidth", None)
    pd.set_option("display.max_rows", 200)
    pd.set_option("display.max_columns", 60)


def start(mode: str, gpu: str) -> Mode:
    """A notebook's first call: check the mode parameter, resolve live/replay, show the banner."""
    require_choice("mode", mode, ("auto", "live", "replay"))
    display_options()
    resolved = resolve_mode(mode, gpu)
    print(resolved)
    banner(resolved)
    return resolved
def record_or_replay(compute, notebook: str, table: str, mode: Mode,
                     profile: str = results.CANONICAL_PROFILE) -> pd.DataFrame:
    """The one way a notebook gets a GPU table: live, ``compute()`` measures it now and it is recorded
    with provenance (atomically) and read back, so a live run sees exactly the frame a replay will
    (provenance columns, CSV dtypes); in replay the recorded table of ``mode.gpu`` is loaded. Either
    way the banner beside it says where the figures come from."""
    if mode.live:
        results.save_table(compute(), notebook, table, mode, profile)
        df = results.load_table(notebook, table, mode.gpu, profile)
        banner(mode)
    else:
        df = results.load_table(notebook, table, mode.gpu)
        banner(mode, results.describe_provenance(df))
    return df


def record_or_replay_many(compute, notebook: str, tables: Sequence[str], mode: Mode,
                          profile: str = results.CANONICAL_PROFILE) -> dict[str, pd.DataFrame]:
    """:func:`record_or_replay` for a measurement that yields several tables at once: ``compute()``
    returns a dict with a frame per name in ``tables``; each is recorded (live) or loaded (replay)."""
    if mode.live:
        frames = compute()
        missing = [t for t in tables if t not in frames]
        if missing:
            raise ValueError(f"the measurement returned no table(s) {missing}")
        for t in tables:
            results.save_table(frames[t], notebook, t, mode, profile)
        banner(mode)
        return {t: results.load_table(notebook, t, mode.gpu, profile) for t in tables}   # as a replay sees them
    frames = {t: results.load_table(notebook, t, mode.gpu) for t in tables}
    banner(mode, results.describe_provenance(frames[tables[0]]))
    return frames


def requested(df: pd.DataFrame, mode: Mode, **wanted) -> pd.DataFrame:
    """The rows of a table at the grid the parameters ask for. In replay, requested points that were
    never recorded are named (with how to record them) instead of silently showing another grid."""
    sel, missing = results.select_requested(df, **wanted)
    if missing and not mode.live:
        from .env import how_to_record
        pts = "; ".join(", ".join(f"{k}={v}" for k, v in m.items()) for m in missing[:8])
        print(f"not recorded for '{mode.gpu}': {pts}{' …' if len(missing) > 8 else ''}. {how_to_record(mode.gpu)}")
    return sel


# ---------------------------------------------------------------- parameter checks

def require_int_list(name: str, value: Any, minimum: int = 1, allowed: Iterable[int] | None = None) -> list[int]:
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"parameter {name} must be a non-empty list of integers, got {value!r}")
    allowed = set(allowed) if allowed is not None else None
    for x in value:
        if isinstance(x, bool) or not isinstance(x, int) or x < minimum:
            raise ValueError(f"parameter {name}: every entry must be an integer ≥ {minimum}, got {x!r}")
        if allowed is not None and x not in allowed:
            raise ValueError(f"parameter {name}: {x} is not supported; choose from {sorted(allowed)}")
    return list(value)


def require_int(name: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"parameter {name} must be an integer ≥ {minimum}, got {value!r}")
    return value


def require_positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"parameter {name} must be a positive number, got {value!r}")
    return float(value)


def require_choice(name: str, value: Any, choices: Sequence[Any]) -> Any:
    if value not in choices:
        raise ValueError(f"parameter {name} must be one of {list(choices)}, got {value!r}")
    return value


def require_fraction(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"parameter {name} must be a fraction in [0, 1), got {value!r}")
    return float(value)


def require_ints(minimum: int = 1, **values: Any) -> list[int]:
    """:func:`require_int` on each keyword (name = value), in order: ``B, H = require_ints(B=B, H=H)``."""
    return [require_int(name, v, minimum) for name, v in values.items()]


def require_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"parameter {name} must be true or false, got {value!r}")
    return value
