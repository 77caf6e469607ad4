"""The report runner: execute every notebook in order with a parameter profile, keep the executed
notebooks and their HTML in reports/<gpu>/, and write an index with status, duration, mode and
headline figures.

    python -m attnlab.report --profile full            # all notebooks
    python -m attnlab.report --only 01 03 -p seed=7    # some notebooks, one parameter overridden

Live runs write to reports/<gpu>/ (e.g. reports/h200/); replay runs to reports/<gpu>-replay/ so a
CPU machine never overwrites the recorded live reports. A failing notebook is recorded as failed,
its executed output kept, and the others still run; the exit code is 1 if any failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .env import resolve_mode
from .nb import HEADLINE_MIME
from .paths import NOTEBOOKS_DIR, REPORTS_DIR

PROFILES_DIR = NOTEBOOKS_DIR / "profiles"


def list_notebooks(only: list[str] | None = None) -> list[Path]:
    books = sorted(p for p in NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
    if only:
        picked = [p for p in books if any(p.stem.startswith(o) for o in only)]
        unknown = [o for o in only if not any(p.stem.startswith(o) for p in books)]
        if unknown:
            raise ValueError(f"no notebook matches {unknown}; notebooks: {[p.stem for p in books]}")
        books = picked
    return books


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def profile_parameters(profile: str, notebook: str) -> dict[str, Any]:
    path = PROFILES_DIR / f"{profile}.yaml"
    if not path.is_file():
        raise ValueError(f"unknown profile {profile!r}; profiles: {available_profiles()}")
    data = yaml.safe_load(path.read_text()) or {}
    return {**(data.get("*") or {}), **(data.get(notebook) or {})}


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``key=value`` pairs, values parsed as YAML (so 1.0e-5, [64, 128] and true work)."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"parameter override {pair!r} must look like key=value")
        key, value = pair.split("=", 1)
        out[key.strip()] = yaml.safe_load(value)
    return out


def declared_parameters(path: Path) -> dict[str, Any]:
    import papermill

    return papermill.inspect_notebook(str(path))


def check_parameters(path: Path, params: dict[str, Any]) -> None:
    """Papermill only warns about unknown names; a typo here should stop the run."""
    declared = declared_parameters(path)
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise ValueError(f"{path.stem}: unknown parameter(s) {unknown}; it declares {sorted(declared)}")


@dataclass
class NotebookRun:
    notebook: str
    status: str = "not run"
    duration_s: float = 0.0
    mode: str = ""
    error: str = ""
    headlines: dict[str, Any] = field(default_factory=dict)
    parameters: dict[str, Any] = field(default_factory=dict)
    finished_utc: str = ""


def collect_headlines(nb_node) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for cell in nb_node.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if HEADLINE_MIME in data:
                value = data[HEADLINE_MIME]
                found.update(json.loads(value) if isinstance(value, str) else value)
    return found


def export_html(ipynb: Path) -> Path:
    import nbformat
    from nbconvert import HTMLExporter

    node = nbformat.read(ipynb, as_version=4)
    try:
        body, _ = HTMLExporter(template_name="lab").from_notebook_node(node)
    except Exception:  # noqa: BLE001 - a missing template should not lose the report
        body, _ = HTMLExporter(template_name="classic").from_notebook_node(node)
    html = ipynb.with_suffix(".html")
    tmp = html.with_suffix(".html.tmp")
    tmp.write_text(body)
    tmp.replace(html)
    return html


def kernel_can_import_attnlab() -> None:
    """Notebook kernels start in notebooks/; make sure they import this same attnlab."""
    lib = str(Path(__file__).resolve().parents[1])
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    parts = [str(Path(p).resolve()) for p in parts]
    os.environ["PYTHONPATH"] = os.pathsep.join([lib, *(p for p in parts if p != lib)])


def run_one(path: Path, out_dir: Path, params: dict[str, Any], timeout: int, mode: str = "") -> NotebookRun:
    import nbformat
    import papermill
    from papermill.exceptions import PapermillExecutionError

    run = NotebookRun(path.stem, parameters=params, mode=mode or params.get("mode", ""))
    output = out_dir / path.name
    start = time.perf_counter()
    try:
        papermill.execute_notebook(str(path), str(output), parameters=params, kernel_name="python3",
                                   cwd=str(path.parent), progress_bar=False, execution_timeout=timeout)
        run.status = "passed"
    except PapermillExecutionError as exc:
        run.status = "failed"
        run.error = f"{exc.ename}: {exc.evalue}"[:300]
    except Exception as exc:  # noqa: BLE001 - timeouts, kernel deaths: record and go on
        run.status = "failed"
        run.error = f"{type(exc).__name__}: {exc}"[:300]
    run.duration_s = time.perf_counter() - start
    run.finished_utc = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    if output.is_file():
        run.headlines = collect_headlines(nbformat.read(output, as_version=4))
        try:
            export_html(output)
        except Exception as exc:  # noqa: BLE001
            run.error = (run.error + f" (HTML export failed: {exc})").strip()
    return run


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def merge_runs(out_dir: Path, runs: list[NotebookRun]) -> list[NotebookRun]:
    """This invocation's runs over the folder's earlier ones: running only 07 keeps 01-06 listed."""
    earlier: dict[str, NotebookRun] = {}
    runs_file = out_dir / "runs.json"
    if runs_file.is_file():
        for r in json.loads(runs_file.read_text()):
            earlier[r["notebook"]] = NotebookRun(**{k: v for k, v in r.items() if k in NotebookRun.__dataclass_fields__})
    earlier.update({r.notebook: r for r in runs})
    return [earlier[k] for k in sorted(earlier)]


def write_index(out_dir: Path, runs: list[NotebookRun], profile: str, mode_line: str) -> Path:
    """Rewrite the folder's README.md index; ``runs`` replace earlier entries of the same notebooks."""
    runs = merge_runs(out_dir, runs)
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    lines = [f"# attnlab report — {out_dir.name}", "",
             f"Updated {now} by `python -m attnlab.report --profile {profile}`. {mode_line}", "",
             "| notebook | status | duration | mode | finished (UTC) | headline figures | files |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        heads = "<br>".join(f"{k}: {_fmt(v)}" for k, v in r.headlines.items()) or "—"
        err = f"<br>**{r.error}**" if r.error else ""
        lines.append(f"| {r.notebook} | {r.status}{err} | {r.duration_s:.1f} s | {r.mode} | {r.finished_utc or '—'} | {heads} | "
                     f"[ipynb]({r.notebook}.ipynb) · [html]({r.notebook}.html) |")
    lines += ["", f"Total: {sum(r.duration_s for r in runs):.1f} s; "
              f"{sum(r.status == 'passed' for r in runs)}/{len(runs)} passed.", ""]
    index = out_dir / "README.md"
    tmp = index.with_suffix(".md.tmp")
    tmp.write_text("\n".join(lines))
    tmp.replace(index)
    (out_dir / "runs.json").write_text(json.dumps([r.__dict__ for r in runs], indent=1, default=str))
    if not out_dir.name.endswith("-replay"):   # replays are local, not committed: keep them out
        write_top_index()
    return index


def write_top_index() -> Path:
    lines = ["# Reports", "", "One folder per GPU measured live; each folder's README is its index (status, "
             "duration, mode and headline figures per notebook). Replays on machines without that GPU go to "
             "`<gpu>-replay/`, which is not committed.", ""]
    for d in sorted(p for p in REPORTS_DIR.iterdir() if p.is_dir() and not p.name.endswith("-replay")):
        runs_file = d / "runs.json"
        if runs_file.is_file():
            runs = json.loads(runs_file.read_text())
            ok = sum(r["status"] == "passed" for r in runs)
            lines.append(f"- [{d.name}]({d.name}/README.md): {ok}/{len(runs)} notebooks passed")
    path = REPORTS_DIR / "README.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attnlab.report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="full", help=f"parameter profile ({', '.join(available_profiles())})")
    ap.add_argument("--mode", default="auto", choices=("auto", "live", "replay"))
    ap.add_argument("--gpu", default="h200", help="recorded GPU to replay when no GPU is usable")
    ap.add_argument("--only", nargs="*", help="notebook name prefixes, e.g. 01 05")
    ap.add_argument("-p", "--parameter", action="append", default=[], metavar="KEY=VALUE",
                    help="override a parameter in every selected notebook (YAML value)")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
    ap.add_argument("--out", help="output folder (default reports/<gpu> or reports/<gpu>-replay)")
    args = ap.parse_args(argv)

    try:
        books = list_notebooks(args.only)
        overrides = parse_overrides(args.parameter)
        mode = resolve_mode(args.mode, args.gpu)
        plans = []
        for path in books:
            params = {**profile_parameters(args.profile, path.stem), **overrides,
                      "mode": args.mode, "gpu": args.gpu}
            check_parameters(path, params)
            plans.append((path, params))
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out_dir = Path(args.out) if args.out else REPORTS_DIR / (mode.gpu if mode.live else f"{mode.gpu}-replay")
    out_dir.mkdir(parents=True, exist_ok=True)
    kernel_can_import_attnlab()
    print(f"attnlab report: {len(plans)} notebook(s), profile {args.profile}, {mode} -> {out_dir}", flush=True)
    runs = []
    for i, (path, params) in enumerate(plans, 1):
        print(f"[{i}/{len(plans)}] {path.stem} ...", end=" ", flush=True)
        run = run_one(path, out_dir, params, args.timeout, mode.name)
        runs.append(run)
        print(f"{run.status} ({run.duration_s:.1f} s){' — ' + run.error if run.error else ''}", flush=True)
        write_index(out_dir, runs, args.profile, str(mode))
    index = write_index(out_dir, runs, args.profile, str(mode))
    failed = [r.notebook for r in runs if r.status != "passed"]
    print(f"index: {index}; {len(runs) - len(failed)}/{len(runs)} passed"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
