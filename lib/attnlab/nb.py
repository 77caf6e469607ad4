"""Small helpers that notebooks call to show things: the mode banner, kernel sources, diffs,
parameter checks and headline figures (which the report runner collects into its index)."""

from __future__ import annotations

import difflib
import html
import json
from typing import Any, Iterable, Sequence

import pandas as pd

from .compile import kernel_source
from .env import Mode

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
        from .results import describe_recorded_gpu
        provenance_line = describe_recorded_gpu(mode.gpu)
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
    clean = {k: (float(f"{v:.4g}") if isinstance(v, float) else v) for k, v in figures.items()}
    md = "\n".join(["| headline | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in clean.items()])
    _display({HEADLINE_MIME: clean, "text/markdown": md, "text/plain": json.dumps(clean)})


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
