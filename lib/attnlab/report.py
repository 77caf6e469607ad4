"""The report runner: execute every notebook in order with a parameter profile, keep the executed
notebooks and their HTML in reports/<gpu>/, and write an index with status, duration, mode and
each notebook's key result (generated from its headline figures, which runs.json keeps whole).

    python -m attnlab.report --profile full            # all notebooks: the recorded run
    python -m attnlab.report --only 01 03 -p seed=7    # some notebooks, one parameter overridden

Only a live run with the full profile and no -p override writes the recorded folder reports/<gpu>/
(e.g. reports/h200/) and reports/README.md. Other live runs go to reports/<gpu>-<profile>/, or
reports/<gpu>-custom/ with -p overrides (their tables to data/results/<gpu>/custom/); replays go to
reports/<gpu>-replay/. Those folders are local and not committed. Each folder's README.md and
runs.json record the command line, profile and overrides of every notebook listed.

A failing notebook is recorded as failed and its executed output written beside the last good one
as NN_name.FAILED.ipynb/.html (a later success removes it); the others still run and the exit
status is 1. A mistake on the command line is one line on stderr and exit status 2.

Many GPUs (:mod:`attnlab.cluster`):

    python -m attnlab.report --gpus all                # this host's GPUs, one notebook per GPU at a time
    python -m attnlab.report --gpus 0 1 --profile quick
    python -m attnlab.report --mode replay --jobs 0    # replay, notebooks side by side on the CPUs
    python -m attnlab.report --cluster auto            # a Ray cluster (also: RAY_ADDRESS set)

Each notebook then runs in its own process pinned to one whole GPU (CUDA_VISIBLE_DEVICES), longest
first by the durations of the last recorded run, after the notebooks whose tables it reads
(:func:`notebook_dependencies`). Each notebook writes its own tables; the index (README.md,
runs.json) has one writer, this process, which rewrites it after every notebook and records which
GPU (index, UUID) and host ran it. On a Ray cluster each notebook is a task with one GPU that
returns its executed notebook and the tables it wrote; they are written here, atomically, once the
task has returned; a task whose worker dies is retried (--retries) and then recorded as failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import cluster
from . import env as _env
from .env import Mode, MissingRecordedData, gpu_slug, resolve_mode
from .nb import HEADLINE_MIME
from .paths import (DATA_DIR, NOTEBOOKS_DIR, REPO_ROOT, REPORTS_DIR, STAGE_ENV, compile_cache_entries, promote,
                    write_atomic)

PROFILES_DIR = NOTEBOOKS_DIR / "profiles"
CANONICAL_PROFILE = "full"       # as attnlab.results: the profile whose tables replay shows
CUSTOM_PROFILE = "custom"        # the table profile (and folder suffix) of runs with -p overrides
FAILED_TAG = "FAILED"            # NN_name.FAILED.ipynb/.html: a failed run beside the last good one
LOCAL_MARKER = ".gitignore"      # written into every folder of a run that is not the recorded one
_LOCAL_MARKER_HEAD = "# written by attnlab.report"
_PROFILE_NAME = re.compile(r"[a-z0-9_]+")
# Set by the runner itself from its command line: -p cannot override them.
_RESERVED = {"mode": "--mode", "gpu": "--gpu", "profile": "--profile"}
#: What travels to a Ray worker: the code a notebook runs (data/ travels with each task, current).
CLUSTER_CODE = ("lib/attnlab", "kernels", "notebooks", "scripts")
#: Where a cluster task's returned files may be written (relative to the repository).
CLUSTER_WRITABLE = ("data/results", "data/tuned")
#: Notebooks that read every recorded table of their GPU, so they run after every earlier one.
READS_EVERY_EARLIER = {
    "06_roofline": "places every recorded measurement of the seed ladder, 01-05 (attnlab.roofline.collect_seed_measurements)",
    "12_cross_gpu": "lays every recorded table and tuned tile side by side",
}


class UsageError(ValueError):
    """A mistake in the command line or a profile: reported as one line, exit status 2."""


def list_notebooks(only: list[str] | None = None) -> list[Path]:
    books = sorted(p for p in NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
    if only:
        picked = [p for p in books if any(p.stem.startswith(o) for o in only)]
        unknown = [o for o in only if not any(p.stem.startswith(o) for p in books)]
        if unknown:
            raise UsageError(f"no notebook matches {unknown}; pass --only with a prefix of one of "
                             f"{[p.stem for p in books]}")
        books = picked
    return books


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def profile_parameters(profile: str, notebook: str) -> dict[str, Any]:
    path = PROFILES_DIR / f"{profile}.yaml"
    if not path.is_file():
        raise UsageError(f"unknown profile {profile!r}; pass --profile with one of {available_profiles()} "
                         f"(or add notebooks/profiles/{profile}.yaml)")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"notebooks/profiles/{path.name} is not valid YAML: fix it "
                         f"({' '.join(str(exc).split())})") from None
    sections = [data, data.get("*") or {}, data.get(notebook) or {}] if isinstance(data, dict) else [data]
    if not all(isinstance(s, dict) for s in sections):
        raise UsageError(f"notebooks/profiles/{path.name}: expected a mapping of notebook stems ('*' for all) "
                         "to mappings of parameter: value")
    return {**sections[1], **sections[2]}


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``key=value`` pairs, values parsed as YAML (so 1.0e-5, [64, 128] and true work)."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise UsageError(f"parameter override {pair!r} must look like key=value, e.g. -p 'N_list=[64, 128]'")
        key, value = pair.split("=", 1)
        key = key.strip()
        if not key.isidentifier():
            raise UsageError(f"parameter override {pair!r}: {key!r} is not a parameter name; write -p KEY=VALUE")
        if key in _RESERVED:
            raise UsageError(f"-p {key}=... is set by the runner: use {_RESERVED[key]} {value.strip() or 'VALUE'} instead")
        try:
            out[key] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise UsageError(f"parameter override {pair!r}: the value is not valid YAML ({problem}); "
                             "quote it for the shell, e.g. -p 'N_list=[64, 128]'") from None
    return out


def declared_parameters(path: Path) -> dict[str, Any]:
    import papermill

    return papermill.inspect_notebook(str(path))


def check_parameters(path: Path, params: dict[str, Any]) -> None:
    """Papermill only warns about unknown names; a typo here should stop the run."""
    declared = declared_parameters(path)
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise UsageError(f"{path.stem}: unknown parameter(s) {unknown}; it declares {sorted(declared)}")


# ---------------------------------------------------------------- where a run goes

def is_canonical(mode: Mode, profile: str, overrides: dict[str, Any]) -> bool:
    """The recorded run: live, the full profile, nothing overridden."""
    return mode.live and profile == CANONICAL_PROFILE and not overrides


def table_profile(profile: str, overrides: dict[str, Any]) -> str:
    """The ``profile`` parameter the notebooks get, which names their tables' folder
    (data/results/<gpu>/ for full, data/results/<gpu>/<profile>/ otherwise): any -p override
    makes the run custom, so it never writes the recorded full-profile tables."""
    return CUSTOM_PROFILE if overrides else profile


def report_folder(mode: Mode, profile: str, overrides: dict[str, Any]) -> Path:
    if not mode.live:
        return REPORTS_DIR / f"{mode.gpu}-replay"
    if is_canonical(mode, profile, overrides):
        return REPORTS_DIR / mode.gpu
    return REPORTS_DIR / f"{mode.gpu}-{table_profile(profile, overrides)}"


def is_local_folder(folder: Path) -> bool:
    """A folder of replays or non-canonical runs: never committed, never in reports/README.md."""
    marker = folder / LOCAL_MARKER
    return folder.name.endswith("-replay") or (
        marker.is_file() and marker.read_text().startswith(_LOCAL_MARKER_HEAD))


def mark_local(folder: Path, why: str) -> None:
    marker = folder / LOCAL_MARKER
    if not marker.exists():
        write_text_atomic(marker, f"{_LOCAL_MARKER_HEAD}: {why}; not committed\n*\n")


def check_out_dir(out_dir: Path, mode: Mode, canonical: bool) -> None:
    reports = REPORTS_DIR.resolve()
    if out_dir == reports:
        raise UsageError(f"--out {out_dir} is the reports folder itself: name a folder inside it")
    if canonical or out_dir.parent != reports or is_local_folder(out_dir):
        return
    if out_dir.name == mode.gpu or (out_dir / "runs.json").is_file():
        raise UsageError(f"--out {out_dir} holds a recorded run, which only a live full-profile run without "
                         "-p overrides may write: leave out --out or name another folder")


# ---------------------------------------------------------------- running

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
    profile: str = ""                                        # --profile of the run
    overrides: dict[str, Any] = field(default_factory=dict)  # its -p overrides
    command: str = ""                                        # its command line, as typed
    last_passed_utc: str = ""                                # a failed run: when the kept good copy finished
    gpu_index: str = ""                                      # which GPU ran it: CUDA_VISIBLE_DEVICES of its process
    gpu_uuid: str = ""                                       # ... and that GPU's UUID (nvidia-smi)
    host: str = ""                                           # the machine it ran on
    new_builds: int = -1                                     # compile-cache entries it added (0: all cached; -1: not counted)


def collect_headlines(nb_node) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for cell in nb_node.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if HEADLINE_MIME in data:
                value = data[HEADLINE_MIME]
                found.update(json.loads(value) if isinstance(value, str) else value)
    return found


def write_text_atomic(path: Path, text: str) -> Path:
    """Write beside ``path`` and rename into place (:func:`attnlab.paths.write_atomic`)."""
    return write_atomic(path, text)


#: Where a report folder keeps the MathJax its pages load, relative to the folder. Pages name it by a
#: relative path, so a folder opened from disk renders its math with no network.
MATHJAX_DIR = "_static/mathjax"
#: The files of that copy and where each lies in the django-static-mathjax package (the test extra):
#: MathJax 3's TeX-to-SVG bundle, one file that needs no web fonts, and MathJax's licence.
MATHJAX_FILES = {"tex-svg.js": "es5/tex-svg.js", "LICENSE": "LICENSE"}
#: The page template: nbconvert's lab template with its CDN scripts replaced. require.js (no output
#: here needs it) and mermaid.js (no notebook draws a diagram) are left out; MathJax is the local copy,
#: set up as nbconvert sets up its CDN MathJax 2 ($...$ and \(...\) inline, AMS equation numbers).
_PAGE_TEMPLATE = r"""{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{% block extra_css %}
<style>
/* attnlab: source diffs in colour (Pygments' deleted / inserted / hunk classes) */
.highlight .gd { color: #b31d28; background-color: #ffeef0; }
.highlight .gi { color: #22863a; background-color: #e6ffed; }
.highlight .gu, .highlight .gh { color: #6f42c1; font-weight: bold; }
/* wide tables scroll inside their output instead of running off the page's edge */
.jp-RenderedHTMLCommon table { display: block; max-width: 100%; overflow-x: auto; }
</style>
{% endblock extra_css %}
{%- block html_head_js_mathjax -%}
<script>
window.MathJax = {
  tex: {
    inlineMath: [["$", "$"], ["\\(", "\\)"]],
    displayMath: [["$$", "$$"], ["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
    tags: "ams"
  },
  svg: {fontCache: "global"}
};
</script>
<script defer src="MATHJAX_SRC"></script>
{%- endblock html_head_js_mathjax -%}
""".replace("MATHJAX_SRC", f"{MATHJAX_DIR}/tex-svg.js")


def mathjax_source() -> dict[str, Path]:
    """The MathJax files to copy beside the pages (name -> path): from the django-static-mathjax
    package, or without it from a committed report folder's copy."""
    import importlib.util

    spec = importlib.util.find_spec("mathjax")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        found = {name: Path(loc) / "static" / "mathjax" / rel for name, rel in MATHJAX_FILES.items()}
        if all(p.is_file() for p in found.values()):
            return found
    for folder in sorted((REPO_ROOT / "reports").glob(f"*/{MATHJAX_DIR}")):
        found = {name: folder / name for name in MATHJAX_FILES}
        if all(p.is_file() for p in found.values()):
            return found
    raise FileNotFoundError(f"no MathJax to put beside the reports: install the test extra "
                            f"(pip install -e '.[test]': django-static-mathjax) or restore reports/*/{MATHJAX_DIR}")


def install_mathjax(folder: Path) -> Path:
    """Put the MathJax the pages load into ``folder``/_static/mathjax (each file replaced atomically,
    and only when it differs); returns that folder."""
    dest = folder / MATHJAX_DIR
    dest.mkdir(parents=True, exist_ok=True)
    for name, src in mathjax_source().items():
        target, data = dest / name, src.read_bytes()
        if target.is_file() and target.read_bytes() == data:
            continue
        write_atomic(target, data)
    return dest


def page_needs_mathjax(html: Path) -> bool:
    return f'src="{MATHJAX_DIR}/' in html.read_text(encoding="utf-8", errors="replace")


def export_html(ipynb: Path, html: Path | None = None) -> Path:
    """Export an executed notebook to its HTML page (default: beside it, .html) and put the MathJax the
    page loads into the page's folder: the runner's export, and the one that rebuilds committed pages
    (:func:`rebuild_html`). The page loads no script from the network."""
    import jinja2
    import nbformat
    from nbconvert import HTMLExporter

    html = html or ipynb.with_suffix(".html")
    node = nbformat.read(ipynb, as_version=4)
    exporter = HTMLExporter(template_name="lab", template_file="attnlab_page.html.j2",
                            extra_loaders=[jinja2.DictLoader({"attnlab_page.html.j2": _PAGE_TEMPLATE})])
    body, _ = exporter.from_notebook_node(node)
    write_text_atomic(html, body)
    export_summary_html(ipynb, html)
    install_mathjax(html.parent)
    return html


#: A results-first page leaves out stdout runs longer than this many lines (the full page has them).
SUMMARY_STREAM_LINES = 12


def summary_path(html: Path) -> Path:
    return html.with_name(html.stem + ".summary.html")


def _is_listing(output) -> bool:
    """A source listing or diff shown by attnlab.nb.show_source / show_diff."""
    text = "".join(output.get("data", {}).get("text/markdown", ""))
    return "```cuda" in text or "```diff" in text


def results_first(node, full_page: str):
    """The results-first view of an executed notebook: its prose and its results (tables, plots,
    verdicts), no code. Source listings and diffs become a line pointing to the full page; stdout
    longer than SUMMARY_STREAM_LINES lines is cut to its first lines, with the count left out."""
    import copy

    import nbformat

    out = copy.deepcopy(node)
    note = nbformat.v4.new_markdown_cell(
        f"_Results-first view: the notebook's text, tables, plots and verdicts, without its code. The full "
        f"executed notebook, with every listing and log, is [{full_page}]({full_page})._")
    cells = [out.cells[0], note] if out.cells and out.cells[0].cell_type == "markdown" else [note]
    for cell in out.cells[len(cells) - 1:]:
        if cell.cell_type == "code":
            if "parameters" in cell.metadata.get("tags", []) or "injected-parameters" in cell.metadata.get("tags", []):
                continue
            kept = []
            listings = 0
            for o in cell.get("outputs", []):
                if o.get("output_type") in ("display_data", "execute_result") and _is_listing(o):
                    listings += 1
                    continue
                if o.get("output_type") == "stream":
                    lines = "".join(o.get("text", "")).splitlines()
                    if len(lines) > SUMMARY_STREAM_LINES:
                        o = copy.deepcopy(o)
                        o["text"] = "\n".join(lines[:SUMMARY_STREAM_LINES // 2]) + \
                            f"\n… {len(lines) - SUMMARY_STREAM_LINES // 2} more lines in the full page\n"
                kept.append(o)
            if listings:
                kept.append(nbformat.v4.new_output("display_data", data={
                    "text/markdown": f"_{listings} source listing(s) and diff(s): see [{full_page}]({full_page})._"}))
            cell.outputs = kept
            if not kept:
                continue
        cells.append(cell)
    out.cells = cells
    return out


def export_summary_html(ipynb: Path, html: Path) -> Path:
    """Write the results-first page (:func:`results_first`) beside the full ``html`` page."""
    import jinja2
    import nbformat
    from nbconvert import HTMLExporter

    node = results_first(nbformat.read(ipynb, as_version=4), html.name)
    exporter = HTMLExporter(template_name="lab", template_file="attnlab_page.html.j2", exclude_input=True,
                            exclude_input_prompt=True, exclude_output_prompt=True,
                            extra_loaders=[jinja2.DictLoader({"attnlab_page.html.j2": _PAGE_TEMPLATE})])
    body, _ = exporter.from_notebook_node(node)
    return write_text_atomic(summary_path(html), body)


def rebuild_html(folder: Path | str) -> list[Path]:
    """Export every executed notebook in a report folder again (after a change to the export), without
    running any: ``python -c "from attnlab.report import rebuild_html; rebuild_html('reports/h200')"``."""
    return [export_html(p) for p in sorted(Path(folder).glob("[0-9][0-9]_*.ipynb"))]


def kernel_can_import_attnlab() -> None:
    """Notebook kernels start in notebooks/; make sure they import this same attnlab."""
    lib = str(Path(__file__).resolve().parents[1])
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    parts = [str(Path(p).resolve()) for p in parts]
    os.environ["PYTHONPATH"] = os.pathsep.join([lib, *(p for p in parts if p != lib)])


def report_files(out_dir: Path, notebook: str, failed: bool = False) -> tuple[Path, Path]:
    """The executed notebook and its HTML: the last good ones, or the FAILED copies beside them."""
    stem = f"{notebook}.{FAILED_TAG}" if failed else notebook
    return out_dir / f"{stem}.ipynb", out_dir / f"{stem}.html"


#: How a Jupyter kernel fails before it has run anything (jupyter_client's messages): a kernel that
#: dies or stays silent at start-up (ports taken by a concurrent start, a loaded machine) ran no
#: cell, so starting it again is safe; an error in a cell is never retried here.
KERNEL_START_FAILURES = ("Kernel died before replying to kernel_info", "Kernel didn't respond in")


def execute_notebook(path: Path, output: Path, params: dict[str, Any], timeout: int, *,
                     start_attempts: int = 3) -> None:
    """The one call that runs a notebook (tests replace it). A kernel that fails to start (see
    KERNEL_START_FAILURES) is started again, up to ``start_attempts`` times in all."""
    import papermill

    for attempt in range(1, start_attempts + 1):
        try:
            papermill.execute_notebook(str(path), str(output), parameters=params, kernel_name="python3",
                                       cwd=str(path.parent), progress_bar=False, execution_timeout=timeout,
                                       start_timeout=120)
            return
        except RuntimeError as exc:
            if attempt == start_attempts or not any(s in str(exc) for s in KERNEL_START_FAILURES):
                raise


def run_one(path: Path, out_dir: Path, params: dict[str, Any], timeout: int, mode: str = "") -> NotebookRun:
    """Execute into a scratch folder inside ``out_dir``, then rename into place: a pass replaces
    NN_name.ipynb/.html and removes a stale FAILED copy; a failure leaves the last good copy as it
    was and writes NN_name.FAILED.ipynb/.html beside it."""
    import nbformat
    from papermill.exceptions import PapermillExecutionError

    out_dir = out_dir.resolve()   # papermill saves from inside the notebook's folder
    run = NotebookRun(path.stem, parameters=params, mode=mode or params.get("mode", ""))
    work = Path(tempfile.mkdtemp(prefix=f".{path.stem}.", suffix=".tmp", dir=out_dir))
    # a live notebook records into a staging folder; data/ gets its tables only if it passes
    stage = Path(tempfile.mkdtemp(prefix=f".stage-{path.stem}.", dir=DATA_DIR)) if run.mode == "live" else None
    try:
        output, html = work / path.name, work / f"{path.stem}.html"
        builds_before = compile_cache_entries()
        start = time.perf_counter()
        try:
            if stage is not None:
                os.environ[STAGE_ENV] = str(stage)
            execute_notebook(path, output, params, timeout)
            run.status = "passed"
        except PapermillExecutionError as exc:
            run.status = "failed"
            run.error = f"{exc.ename}: {exc.evalue}"[:300]
        except Exception as exc:  # noqa: BLE001 - timeouts, kernel deaths: record and go on
            run.status = "failed"
            run.error = f"{type(exc).__name__}: {exc}"[:300]
        run.duration_s = time.perf_counter() - start
        run.new_builds = max(compile_cache_entries() - builds_before, 0)
        run.finished_utc = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        if output.is_file():
            try:
                run.headlines = collect_headlines(nbformat.read(output, as_version=4))
                export_html(output, html)
            except Exception as exc:  # noqa: BLE001 - keep the notebook even if its page fails
                run.error = (run.error + f" (HTML export failed: {exc})").strip()
        install_outputs(out_dir, run, output, html)
        if stage is not None:
            settle_records(stage, out_dir, run)
    finally:
        if stage is not None:
            os.environ.pop(STAGE_ENV, None)
            shutil.rmtree(stage, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    return run


def failed_tables_dir(out_dir: Path, notebook: str) -> Path:
    return Path(out_dir) / f"{notebook}.FAILED.tables"


def settle_records(stage: Path, out_dir: Path, run: NotebookRun) -> None:
    """What a live notebook recorded (in ``stage``): moved into data/ when it passed (and an older
    failure's tables removed); when it failed, the recorded set is left as it was and the partial
    tables go beside the FAILED report, for a look at what the failed run measured."""
    failed = failed_tables_dir(out_dir, run.notebook)
    if run.status == "passed":
        promote(stage)
        shutil.rmtree(failed, ignore_errors=True)
        return
    if any(p.is_file() for p in stage.rglob("*")):
        shutil.rmtree(failed, ignore_errors=True)
        shutil.move(str(stage), str(failed))
        run.error = (run.error + f" (its partial tables: {failed.name}/; data/ kept the last good set)").strip()


def install_outputs(out_dir: Path, run: NotebookRun, ipynb: Path, html: Path) -> None:
    """Rename an executed notebook and its page (in a scratch folder inside ``out_dir``) into place:
    a pass replaces NN_name.ipynb/.html and removes a stale FAILED copy; a failure writes
    NN_name.FAILED.ipynb/.html and leaves the last good copy as it was."""
    good, failed = report_files(out_dir, run.notebook), report_files(out_dir, run.notebook, failed=True)
    ipynb_dest, html_dest = good if run.status == "passed" else failed
    produced = ipynb.is_file()
    if produced:
        os.replace(ipynb, ipynb_dest)
        if html.is_file():
            if page_needs_mathjax(html):   # a page exported elsewhere (a Ray worker) arrives without it
                try:
                    install_mathjax(out_dir)
                except OSError as exc:   # keep the page: only its math is left as TeX
                    run.error = (run.error + f" (MathJax not copied beside the page: {exc})").strip()
            os.replace(html, html_dest)
            # the results-first page: moved with the full one, or made here (a Ray worker sends only
            # the notebook and its full page)
            if summary_path(html).is_file():
                os.replace(summary_path(html), summary_path(html_dest))
            else:
                try:
                    export_summary_html(ipynb_dest, html_dest)
                except Exception as exc:   # noqa: BLE001 — the full page stands; say why the short one is missing
                    summary_path(html_dest).unlink(missing_ok=True)
                    run.error = (run.error + f" (results-first page not written: {exc})").strip()
        else:
            html_dest.unlink(missing_ok=True)   # an older run's page would not match the notebook
            summary_path(html_dest).unlink(missing_ok=True)
    if run.status == "passed" or not produced:
        for stale in failed:   # an older failure's copy would not match this run's index entry
            stale.unlink(missing_ok=True)
        summary_path(failed[1]).unlink(missing_ok=True)


# ---------------------------------------------------------------- the index

def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


#: The index's one line per notebook: its key result, a template over the notebook's own headline
#: figures (so the sentence is generated from the recorded numbers). Every headline stays in
#: runs.json and on the notebook's results page; a notebook without a template (or whose headlines
#: lack a field) shows its first headline figures instead.
KEY_RESULTS: dict[str, str] = {
    "01_naive": "naive kernel {best_naive_tflops:.2f} TFLOP/s; SDPA {sdpa_speedup_at_max_N:.1f}× faster at the "
                "largest N; worst error {worst_rel_err:.1e}",
    "02_tiling": "tiling: up to {best_tiled_speedup:.2f}× over naive ({at}); worst error {worst_rel_err:.1e}",
    "03_float4": "float4 copies: median {median_speedup_over_tiled:.3f}× over tiled",
    "04_padding": "best {best_kernel}: {best_tflops:.2f} TFLOP/s, {pct_of_fp32_peak:.0f} % of the fp32 peak, "
                  "{pct_of_sdpa:.0f} % of SDPA fp32",
    "05_occupancy_scan": "tuned tiles {geomean_tuned_gain:.3f}× the seed's (geomean over {configurations} "
                         "configurations); calculator agrees on {calculator_agrees_pct:.0f} %",
    "06_roofline": "roofs: FMA {fma_tflops:.1f} TFLOP/s, copy {copy_tbps:.2f} TB/s; the seed's naive/tiled "
                   "kernels at a median {median_pct_of_peak:.1f} % of the FP32 peak",
    "07_delta_attention_chunking": "chunked KDA {chunked_vs_recurrent:.2f}× the recurrent kernel and "
                                   "{chunked_vs_fla_chunk_bf16:.2f}× fla bf16 at T={T}",
    "08_register_tiling": "{x_sdpa_fp32_d128_n4096:.2f}× SDPA fp32 at D=128, N=4096 ({tflops_d128_n4096:.1f} "
                          "TFLOP/s, {pct_fma_peak_d128_n4096:.0f} % of the FMA peak)",
    "09_tf32_tensor_cores": "3xTF32 at least {x_sdpa_fp32_min_3xtf32:.2f}× SDPA fp32, worst error "
                            "{worst_rel_err_3xtf32:.1e}",
    "10_flash_bf16": "at least {x_sdpa_flash_min:.3f}× SDPA flash; {x_cudnn_d128_n16384:.3f}× cuDNN at D=128, "
                     "N=16384",
    "11_hopper_wgmma": "at least {x_cudnn_d128_min:.2f}× cuDNN at D=128; {tflops_d128_n16384:.0f} TFLOP/s at "
                       "N=16384",
    "13_fast_delta": "3xBF16 KDA {x_fla_bf16_t16384:.2f}× fla bf16 at T=16384, worst error {worst_rel_rms:.1e}, "
                     "extra memory {mem_vs_fla_t16384:.2f}× fla's",
}
_PLAIN = {"gpu", "mode"}


def key_result(notebook: str, headlines: dict[str, Any], fallback: int = 3) -> str:
    """The notebook's key result as one line (:data:`KEY_RESULTS`), '—' when it has no headlines."""
    template = KEY_RESULTS.get(notebook)
    if template:
        def num(v):   # some notebooks publish a figure as its printed string ('1.5e-06')
            if isinstance(v, str):
                try:
                    return float(v)
                except ValueError:
                    return v
            return v
        try:
            return template.format(**{k: num(v) for k, v in headlines.items()})
        except (KeyError, ValueError, TypeError, IndexError):
            pass   # a headline missing or not a number (e.g. None): fall back to the figures
    items = [(k, v) for k, v in headlines.items() if k not in _PLAIN]
    return "; ".join(f"{k}: {_fmt(v)}" for k, v in items[:fallback]) or "—"


def merge_runs(out_dir: Path, runs: list[NotebookRun]) -> list[NotebookRun]:
    """This invocation's runs over the folder's earlier ones: running only 07 keeps 01-06 listed.
    A failed run notes when the good copy it leaves in place was made."""
    earlier: dict[str, NotebookRun] = {}
    runs_file = out_dir / "runs.json"
    if runs_file.is_file():
        for r in json.loads(runs_file.read_text()):
            earlier[r["notebook"]] = NotebookRun(**{k: v for k, v in r.items() if k in NotebookRun.__dataclass_fields__})
    for r in runs:
        prev = earlier.get(r.notebook)
        if r.status != "passed" and not r.last_passed_utc and prev is not None:
            r = dataclasses.replace(r, last_passed_utc=prev.finished_utc if prev.status == "passed"
                                    else prev.last_passed_utc)
        earlier[r.notebook] = r
    return [earlier[k] for k in sorted(earlier)]


def _links(out_dir: Path, r: NotebookRun) -> str:
    def present(files: tuple[Path, Path]) -> str:
        return " · ".join(f"[{p.suffix[1:]}]({p.name})" for p in files if p.is_file())

    good, failed = present(report_files(out_dir, r.notebook)), present(report_files(out_dir, r.notebook, True))
    summary = summary_path(report_files(out_dir, r.notebook)[1])
    if good and summary.is_file():
        good = f"[results]({summary.name}) · {good}"
    parts = []
    if good:
        when = f" ({r.last_passed_utc})" if r.last_passed_utc else ""
        parts.append(good if r.status == "passed" else f"last good{when}: {good}")
    if failed:
        parts.append(f"{FAILED_TAG}: {failed}")
    return "<br>".join(parts) or "—"


def ran_on(r: NotebookRun) -> str:
    """'GPU 1 · GPU-8f2c3a1e… · host-a': which GPU and machine ran a notebook ('—' when not recorded)."""
    parts = [f"GPU {r.gpu_index}" if r.gpu_index else "", f"{r.gpu_uuid[:12]}…" if r.gpu_uuid else "", r.host]
    return " · ".join(p for p in parts if p) or "—"


def _describe(command: str, profile: str, overrides: dict[str, Any]) -> str:
    over = ", ".join(f"`{k}={json.dumps(v)}`" for k, v in overrides.items()) or "none"
    return f"`{command}` (profile `{profile or '?'}`, overrides: {over})"


def write_index(out_dir: Path, runs: list[NotebookRun], profile: str, mode_line: str, *,
                command: str = "", overrides: dict[str, Any] | None = None,
                top_index: bool | None = None) -> Path:
    """Rewrite the folder's README.md index and runs.json; ``runs`` replace earlier entries of the
    same notebooks. ``top_index`` (default: unless the folder is local) also rewrites reports/README.md."""
    with _index_lock(out_dir):
        return _write_index(out_dir, runs, profile, mode_line, command=command, overrides=overrides,
                            top_index=top_index)


class _index_lock:
    """An exclusive lock on a folder (flock on the folder itself: no lock file is left behind) for
    the read-merge-write of :func:`write_index`. The runner writes each index from one thread; this
    also keeps two runners writing one folder from losing each other's entries."""

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        self.fd: int | None = None

    def __enter__(self):
        try:
            import fcntl

            self.fd = os.open(self.out_dir, os.O_RDONLY)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except (ImportError, OSError):   # not POSIX, or a file system without flock: one writer still holds
            if self.fd is not None:
                os.close(self.fd)
            self.fd = None
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)   # closing releases the lock
        return False


def _write_index(out_dir: Path, runs: list[NotebookRun], profile: str, mode_line: str, *,
                 command: str = "", overrides: dict[str, Any] | None = None,
                 top_index: bool | None = None) -> Path:
    overrides = overrides or {}
    command = command or f"python -m attnlab.report --profile {profile}"
    runs = merge_runs(out_dir, runs)
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    lines = [f"# attnlab report — {out_dir.name}", "",
             f"Updated {now} by {_describe(command, profile, overrides)}. {mode_line}", ""]
    others: dict[tuple, list[str]] = {}
    for r in runs:
        if r.command != command or r.profile != profile or r.overrides != overrides:
            others.setdefault((r.command, r.profile, json.dumps(r.overrides, sort_keys=True)), []).append(r.notebook)
    for (cmd, prof, over), books in others.items():
        made = _describe(cmd, prof, json.loads(over)) if cmd else "a command not recorded"
        lines += [f"Listed from an earlier run: {', '.join(books)}, by {made}.", ""]
    lines += _index_table(out_dir, runs)
    index = write_text_atomic(out_dir / "README.md", "\n".join(lines))
    write_text_atomic(out_dir / "runs.json", json.dumps([dataclasses.asdict(r) for r in runs], indent=1, default=str))
    if top_index if top_index is not None else not is_local_folder(out_dir):
        write_top_index()
    return index


def _duration(r: NotebookRun) -> str:
    """'37.2 s', with what the run added to the compile caches (builds, Triton's autotuning results):
    'all from cache' when it added nothing, else 'N new cache entries'."""
    if r.new_builds < 0:
        return f"{r.duration_s:.1f} s"
    if r.new_builds == 0:
        return f"{r.duration_s:.1f} s (all from cache)"
    return f"{r.duration_s:.1f} s ({r.new_builds} new cache entr{'y' if r.new_builds == 1 else 'ies'})"


def _index_table(out_dir: Path, runs: list[NotebookRun]) -> list[str]:
    lines = ["| notebook | status | duration | mode | finished (UTC) | key result | files | ran on |",
             "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        heads = key_result(r.notebook, r.headlines)
        err = f"<br>**{r.error}**" if r.error else ""
        lines.append(f"| {r.notebook} | {r.status}{err} | {_duration(r)} | {r.mode} | {r.finished_utc or '—'} | {heads} | "
                     f"{_links(out_dir, r)} | {ran_on(r)} |")
    lines += ["", f"Total: {sum(r.duration_s for r in runs):.1f} s; "
              f"{sum(r.status == 'passed' for r in runs)}/{len(runs)} passed.", ""]
    return lines


def rewrite_index(out_dir: Path) -> Path:
    """Rewrite a folder's README.md index from its runs.json alone (no notebook runs; runs.json is
    left as it is), e.g. after the index's format changed. The header says so."""
    with _index_lock(out_dir):
        runs = merge_runs(out_dir, [])
        if not runs:
            raise UsageError(f"{out_dir} has no runs.json to rewrite an index from")
        now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        made: dict[str, list[str]] = {}
        for r in runs:
            made.setdefault(_describe(r.command, r.profile, r.overrides) if r.command else "a command not recorded",
                            []).append(r.notebook)
        lines = [f"# attnlab report — {out_dir.name}", "",
                 f"Index rewritten {now} from runs.json; no notebook was run to write it.", ""]
        lines += [f"Made by {how}: {', '.join(books)}.\n" for how, books in made.items()]
        lines += _index_table(out_dir, runs)
        index = write_text_atomic(out_dir / "README.md", "\n".join(lines))
    if not is_local_folder(out_dir):
        write_top_index()
    return index


def write_top_index() -> Path:
    lines = ["# Reports", "", "One folder per GPU measured live with the full profile; each folder's README is its "
             "index (status, duration, mode and the key result per notebook). Replays go to `<gpu>-replay/`, "
             "live runs of other profiles to `<gpu>-<profile>/` and runs with `-p` overrides to `<gpu>-custom/`; "
             "those are not committed.", ""]
    for d in sorted(p for p in REPORTS_DIR.iterdir() if p.is_dir() and not is_local_folder(p)):
        runs_file = d / "runs.json"
        if runs_file.is_file():
            runs = json.loads(runs_file.read_text())
            ok = sum(r["status"] == "passed" for r in runs)
            lines.append(f"- [{d.name}]({d.name}/README.md): {ok}/{len(runs)} notebooks passed")
    return write_text_atomic(REPORTS_DIR / "README.md", "\n".join(lines) + "\n")


# ---------------------------------------------------------------- many GPUs: order, workers, the index's one writer

# a notebook's name in code ('04_padding', '04_padding__timing'), not a file ('attention/01_naive.cu')
_STEM = re.compile(r"(?<![\w/.])([0-9]{2}_[a-z0-9_]+)\b(?!\.[A-Za-z])")


def named_notebooks(path: Path, stems: set[str]) -> set[str]:
    """The other notebooks whose names a notebook's code cells spell out (whose tables it reads;
    a table's file name '04_padding__timing' counts as its notebook's name)."""
    cells = json.loads(path.read_text()).get("cells", [])
    code = "\n".join("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code")
    found = {m.split("__")[0] for m in _STEM.findall(code)}
    return {m for m in found if m in stems and m != path.stem}


def notebook_dependencies(paths: list[Path]) -> dict[str, frozenset[str]]:
    """Which notebooks each must follow so that a parallel run reads what a serial run would:
    of two notebooks of the run, the later one (in file order) follows the earlier when either
    names the other in its code (04 reads 01–03's tables of this run and 06's ceilings of the last
    one), or when the later one reads every recorded table (:data:`READS_EVERY_EARLIER`)."""
    every = {p.stem for p in NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")} | {p.stem for p in paths}
    stems = [p.stem for p in paths]
    names = {p.stem: named_notebooks(p, every) for p in paths}
    deps: dict[str, set[str]] = {s: set() for s in stems}
    for i, a in enumerate(stems):
        for b in stems[i + 1:]:
            if b in READS_EVERY_EARLIER or a in names[b] or b in names[a]:
                deps[b].add(a)
    return {s: frozenset(d) for s, d in deps.items()}


def recorded_durations(folders: list[Path]) -> dict[str, float]:
    """Each notebook's duration in the first of ``folders`` whose runs.json lists it."""
    found: dict[str, float] = {}
    for folder in folders:
        try:
            runs = json.loads((folder / "runs.json").read_text())
        except (OSError, ValueError):
            continue
        for r in runs if isinstance(runs, list) else []:
            if isinstance(r, dict) and isinstance(r.get("duration_s"), (int, float)) and r.get("notebook"):
                found.setdefault(r["notebook"], float(r["duration_s"]))
    return found


def plan_jobs(plans: list[tuple[Path, dict[str, Any]]], folders: list[Path], *,
              replay: bool = False) -> list[cluster.Job]:
    """One job per notebook: its dependencies and the duration it took last time. A replay writes
    no table (every notebook reads the recorded ones), so its notebooks depend on none another."""
    deps = ({p.stem: frozenset() for p, _ in plans} if replay else
            notebook_dependencies([p for p, _ in plans]))
    durations = recorded_durations(folders)
    return [cluster.Job(path.stem, durations.get(path.stem), deps[path.stem], (path, params))
            for path, params in plans]


def where_this_runs() -> dict[str, str]:
    """gpu_index / gpu_uuid / host of this process: CUDA_VISIBLE_DEVICES, the visible GPU's UUID
    (nvidia-smi, when it can be asked), the host name."""
    gpu = _env.visible_gpu() if shutil.which("nvidia-smi") else {}
    index = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or gpu.get("index", "")
    return {"gpu_index": index, "gpu_uuid": gpu.get("uuid", ""), "host": _env.host_name()}


def _stamp(run: NotebookRun, where: dict[str, str]) -> NotebookRun:
    for key in ("gpu_index", "gpu_uuid", "host"):
        if not getattr(run, key) and where.get(key):
            setattr(run, key, where[key])
    return run


def worker_main(spec_path: str) -> int:
    """``python -m attnlab.report --worker SPEC.json``: run one notebook in this process (pinned by
    its parent to one GPU) into ``out_dir`` and write ``{"run": ..., "mode": ...}`` to ``result``.
    Used by --gpus (one process per notebook) and on Ray workers (inside the task's copy of the tree)."""
    spec = json.loads(Path(spec_path).read_text())
    path, out_dir, result = Path(spec["notebook"]), Path(spec["out_dir"]), Path(spec["result"])
    out_dir.mkdir(parents=True, exist_ok=True)
    kernel_can_import_attnlab()
    mode = None
    try:
        mode = resolve_mode(spec["mode"], spec["gpu"])
        run = run_one(path, out_dir, spec["params"], spec["timeout"], mode.name)
    except Exception as exc:  # noqa: BLE001 - a mode that cannot be resolved here: a failed notebook
        run = NotebookRun(path.stem, status="failed", error=f"{type(exc).__name__}: {exc}"[:300],
                          parameters=spec["params"], mode=spec["mode"],
                          finished_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    _stamp(run, where_this_runs())
    write_text_atomic(result, json.dumps({"run": dataclasses.asdict(run),
                                          "mode": dataclasses.asdict(mode) if mode else None}, default=str))
    return 0


class ReportIndex:
    """The one writer of this invocation's indexes: the runs of each report folder, whose
    README.md and runs.json are rewritten after every notebook (by the driver, never a worker)."""

    def __init__(self, profile: str, overrides: dict[str, Any], command: str, out: str | None, note: str = ""):
        self.profile, self.overrides, self.command, self.out, self.note = profile, overrides, command, out, note
        self.folders: dict[Path, dict[str, Any]] = {}

    def folder(self, mode: Mode) -> Path:
        """The folder a run in ``mode`` reports to (checked; created on :meth:`add`)."""
        canonical = is_canonical(mode, self.profile, self.overrides)
        out_dir = (Path(self.out) if self.out else report_folder(mode, self.profile, self.overrides)).resolve()
        if out_dir not in self.folders:
            check_out_dir(out_dir, mode, canonical)
            if out_dir.exists() and not out_dir.is_dir():
                raise UsageError(f"--out {out_dir} is a file: name a folder")
            self.folders[out_dir] = {"runs": [], "mode": mode, "canonical": canonical, "ready": False,
                                     "top": canonical and out_dir == (REPORTS_DIR / mode.gpu).resolve()}
        return out_dir

    def open(self, out_dir: Path) -> Path:
        f = self.folders[out_dir]
        if not f["ready"]:
            out_dir.mkdir(parents=True, exist_ok=True)
            if not f["canonical"]:
                mark_local(out_dir, f"{f['mode'].name} run, profile {self.profile}"
                           + (", with -p overrides" if self.overrides else ""))
            f["ready"] = True
        return out_dir

    def add(self, out_dir: Path, run: NotebookRun) -> Path:
        f = self.folders[out_dir]
        self.open(out_dir)
        run.profile, run.overrides, run.command = self.profile, self.overrides, self.command
        f["runs"].append(run)
        return self.write(out_dir)

    def write(self, out_dir: Path) -> Path:
        f = self.folders[out_dir]
        return write_index(out_dir, f["runs"], self.profile, f"{f['mode']}{self.note}", command=self.command,
                           overrides=self.overrides, top_index=f["top"])

    def runs(self) -> list[NotebookRun]:
        return [r for f in self.folders.values() for r in f["runs"]]

    def summary(self) -> int:
        runs = self.runs()
        failed = [r.notebook for r in runs if r.status != "passed"]
        indexes = [self.write(d) for d, f in self.folders.items() if f["ready"]]
        print(f"index: {', '.join(map(str, indexes)) or 'none written'}; {len(runs) - len(failed)}/{len(runs)} passed"
              + (f"; FAILED: {', '.join(failed)}" if failed else ""))
        return 1 if failed else 0


def _line(run: NotebookRun) -> str:
    return f"{run.status} ({run.duration_s:.1f} s){' — ' + run.error if run.error else ''}"


def _worker_failure(notebook: str, params: dict[str, Any], mode: str, why: str) -> NotebookRun:
    return NotebookRun(notebook, status="failed", error=" ".join(why.split())[:300], parameters=params, mode=mode,
                       finished_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))


@dataclasses.dataclass(frozen=True)
class CpuSlot:
    """One of --jobs N replay slots: a notebook process that sees no GPU (a replay needs none)."""

    index: str

    def __str__(self) -> str:
        return f"CPU slot {self.index}"


def cpu_slots(jobs: int) -> list[CpuSlot]:
    """--jobs N: N slots; 0 picks the CPU count, at most 4 (each notebook process holds its kernel,
    pandas and matplotlib: a few hundred MB)."""
    n = jobs or max(1, min(4, os.cpu_count() or 1))
    return [CpuSlot(str(i)) for i in range(n)]


def run_on_gpus(plans: list[tuple[Path, dict[str, Any]]], gpus: list[cluster.Gpu] | list[CpuSlot], mode: Mode,
                index: ReportIndex, out_dir: Path, timeout: int) -> None:
    """Local parallel run: one worker per GPU, each notebook in its own process pinned to that GPU
    (:func:`worker_main`), this process the index's only writer. With CPU slots (--jobs, replay
    only) each process sees no GPU and its run records the host alone, as a serial replay does."""
    jobs = plan_jobs(plans, [out_dir, REPORTS_DIR / mode.gpu], replay=not mode.live)
    scratch = Path(tempfile.mkdtemp(prefix="attnlab-gpus-"))
    total, count = len(jobs), [0]

    def execute(job: cluster.Job, gpu: cluster.Gpu):
        path, params = job.payload
        spec_file, result = scratch / f"{job.name}.job.json", scratch / f"{job.name}.result.json"
        spec = {"notebook": str(path), "out_dir": str(out_dir), "result": str(result), "params": params,
                "timeout": timeout, "mode": mode.requested, "gpu": params["gpu"]}
        write_text_atomic(spec_file, json.dumps(spec, default=str))
        start = time.perf_counter()
        env = (cluster.pinned_environment(gpu) if isinstance(gpu, cluster.Gpu)
               else {**os.environ, "CUDA_VISIBLE_DEVICES": ""})
        rc, out, err = cluster.run_pinned([sys.executable, "-m", "attnlab.report", "--worker", str(spec_file)],
                                          env, cwd=REPO_ROOT)
        answer = json.loads(result.read_text()) if result.is_file() else None
        return {"rc": rc, "stderr": err, "answer": answer, "seconds": time.perf_counter() - start}

    def on_start(job: cluster.Job, gpu: cluster.Gpu) -> None:
        print(f"  start {job.name} on {gpu}", flush=True)

    def on_done(job: cluster.Job, gpu: cluster.Gpu, result, error) -> None:
        path, params = job.payload
        answer = (result or {}).get("answer")
        if answer and answer.get("run"):
            run = NotebookRun(**{k: v for k, v in answer["run"].items() if k in NotebookRun.__dataclass_fields__})
            theirs = (answer.get("mode") or {}).get("gpu")
            if theirs and theirs != mode.gpu:
                run.status, run.error = "failed", (f"ran on a {theirs}, not a {mode.gpu}: its tables are in "
                                                   f"data/results/{theirs}/; " + run.error)[:300]
        else:
            why = (f"{type(error).__name__}: {error}" if error else
                   f"worker process exited with status {result['rc']}: {result['stderr'][-240:]}")
            run = _worker_failure(job.name, params, mode.name, why)
            run.duration_s = (result or {}).get("seconds", 0.0)
        _stamp(run, {"gpu_index": gpu.index, "gpu_uuid": gpu.uuid} if isinstance(gpu, cluster.Gpu)
               else {"host": _env.host_name()})
        count[0] += 1
        print(f"[{count[0]}/{total}] {job.name} on {gpu}: {_line(run)}", flush=True)
        index.add(out_dir, run)

    try:
        cluster.run_on_slots(jobs, gpus, execute, on_done, on_start)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_on_cluster(plans: list[tuple[Path, dict[str, Any]]], address: str | None, args, index: ReportIndex,
                   *, task=None, root: Path | None = None) -> None:
    """Each notebook a Ray task with one GPU (see :func:`attnlab.cluster.run_on_ray`); what a task
    returns is written here as a local run would write it: tables atomically, then the executed
    notebook into its report folder, then the index. ``task`` replaces
    :func:`attnlab.cluster.tree_task` (tests kill workers through it)."""
    root = Path(root or REPO_ROOT)
    try:
        ray, started = cluster.connect(address)
    except ConnectionError as exc:
        raise UsageError(f"cannot reach a Ray cluster at {address} ({' '.join(str(exc).split())[:200]}): start one "
                         "with `ray start --head` (README: Many GPUs), or pass --cluster ADDRESS") from None
    try:
        gpus = cluster.cluster_gpus(ray)
        if gpus < 1 and args.mode != "replay":
            raise UsageError(f"the Ray cluster offers no GPU ({ray.cluster_resources()}); start nodes with GPUs, "
                             "or replay on it with --mode replay")
        num_gpus = 1 if gpus >= 1 else 0
        code = ray.put(cluster.pack(root, CLUSTER_CODE))
        commit, dirty = _env.git_commit(root)
        jobs = plan_jobs(plans, [Path(args.out).resolve()] if args.out else [REPORTS_DIR / args.gpu],
                         replay=args.mode == "replay")
        total, count = len(jobs), [0]
        last_folder: list[Path] = []

        def submit(job: cluster.Job):
            path, params = job.payload
            spec = {"notebook": "{root}/notebooks/" + path.name, "out_dir": "{root}/out",
                    "result": "{root}/out/result.json", "params": params, "timeout": args.timeout,
                    "mode": args.mode, "gpu": args.gpu}
            env = {"PYTHONPATH": "{root}/lib", "ATTNLAB_ROOT": "{root}", "ATTNLAB_GIT_COMMIT": commit,
                   "ATTNLAB_GIT_DIRTY": "1" if dirty else "0"}
            data = cluster.pack(root, ["data"])      # now: it holds what earlier notebooks wrote
            return (code, data, ["-m", "attnlab.report", "--worker", "{root}/job.json"],
                    {"job.json": json.dumps(spec, default=str)}, env), {}

        def on_done(job: cluster.Job, result: dict | None, error: BaseException | None) -> None:
            path, params = job.payload
            outputs = dict((result or {}).get("outputs") or {})
            answer = json.loads(outputs.pop("result.json")) if "result.json" in outputs else None
            mode = Mode(**answer["mode"]) if answer and answer.get("mode") else None
            if answer and answer.get("run"):
                run = NotebookRun(**{k: v for k, v in answer["run"].items() if k in NotebookRun.__dataclass_fields__})
            elif error is not None:
                run = _worker_failure(job.name, params, args.mode, str(error))
            else:
                run = _worker_failure(job.name, params, args.mode, f"worker process exited with status "
                                      f"{result.get('returncode')}: {result.get('stderr', '')[-240:]}")
            _stamp(run, {"host": (result or {}).get("host", ""),
                         "gpu_index": (result or {}).get("cuda_visible_devices", "")})
            try:
                cluster.install_written(root, (result or {}).get("written") or {}, CLUSTER_WRITABLE)
            except ValueError as exc:
                run.status, run.error = "failed", f"{exc}; nothing of it was written"[:300]
            if mode is not None:
                out_dir = index.folder(mode)
            elif last_folder:
                out_dir = last_folder[-1]
            else:
                guess = Mode(False, args.gpu, args.gpu, args.mode, "no worker reported its mode")
                out_dir = index.folder(guess)
            last_folder.append(out_dir)
            index.open(out_dir)
            work = Path(tempfile.mkdtemp(prefix=f".{job.name}.", suffix=".tmp", dir=out_dir))
            try:
                ipynb, html = work / path.name, work / f"{path.stem}.html"
                for name, blob in outputs.items():
                    if name in (path.name, f"{path.stem}.{FAILED_TAG}.ipynb"):
                        ipynb.write_bytes(blob)
                    elif name in (f"{path.stem}.html", f"{path.stem}.{FAILED_TAG}.html"):
                        html.write_bytes(blob)
                install_outputs(out_dir, run, ipynb, html)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            count[0] += 1
            where = ran_on(run)
            print(f"[{count[0]}/{total}] {job.name} on {where}: {_line(run)}", flush=True)
            index.add(out_dir, run)

        def on_submit(job: cluster.Job) -> None:
            print(f"  submitted {job.name}", flush=True)

        cluster.run_on_ray(jobs, submit, on_done, num_gpus=num_gpus, max_retries=args.retries,
                           task=task or cluster.tree_task, on_submit=on_submit)
    finally:
        if started:
            ray.shutdown()


# ---------------------------------------------------------------- the command line

class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not the usage block
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds above 0")
    return value


def _whole_at_least_0(hint: str):
    """An argparse type: a whole number >= 0, else a one-line error ending in ``hint``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"{text!r}: {hint}")
        return value
    return parse


_retries = _whole_at_least_0("give 0 or more retries")
_jobs = _whole_at_least_0("give 1 or more notebooks at once (0: the CPU count)")


def run_mode(mode: str, gpu: str) -> Mode:
    """:func:`attnlab.env.resolve_mode`, its user errors turned into :class:`UsageError`."""
    try:
        return resolve_mode(mode, gpu)
    except MissingRecordedData as exc:
        raise UsageError(f"{' '.join(str(exc).split())} Or replay a recorded GPU with --gpu NAME.") from None
    except ValueError as exc:   # a --gpu that cannot name a results folder
        raise UsageError(f"{exc} (--mode {mode} --gpu {gpu})") from None
    except RuntimeError:
        if mode == "live" and not _env.cuda_usable():
            raise UsageError("--mode live needs a usable CUDA device and CuPy, and none was found on this "
                             "machine: run with --mode auto or --mode replay") from None
        raise


def pick_gpus(selection: list[str], mode: Mode) -> tuple[list[cluster.Gpu], Mode]:
    """The GPUs of --gpus, and the mode their runs report under: live runs need one GPU model (its
    tables and report folder are that model's)."""
    try:
        gpus = cluster.list_gpus(cluster.parse_gpu_selection(selection))
    except cluster.GpuSelectionError as exc:
        raise UsageError(str(exc)) from None
    if not mode.live:
        return gpus, mode
    models = {}
    for g in gpus:
        models.setdefault(gpu_slug(g.name) if g.name else mode.gpu, []).append(g.index)
    if len(models) > 1:
        raise UsageError("--gpus: the GPUs are of different models (" + "; ".join(
            f"{m}: {', '.join(ix)}" for m, ix in models.items()) + "): pick the GPUs of one model, "
            "e.g. --gpus " + " ".join(next(iter(models.values()))))
    slug = next(iter(models))
    if slug != mode.gpu:
        name = next(g.name for g in gpus)
        mode = Mode(True, slug, name, mode.requested, f"measuring now on {name}")
    return gpus, mode


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--worker"] and len(argv) == 2:   # one notebook in a pinned process (see worker_main)
        return worker_main(argv[1])
    prog = os.environ.get("ATTNLAB_PROG", "python -m attnlab.report")
    command = " ".join([prog, shlex.join(argv)]).strip()
    ap = _Parser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=CANONICAL_PROFILE,
                    help=f"parameter profile ({', '.join(available_profiles())}; notebooks/profiles/*.yaml)")
    ap.add_argument("--mode", default="auto", choices=("auto", "live", "replay"))
    ap.add_argument("--gpu", default="h200", help="recorded GPU to replay when no GPU is usable")
    ap.add_argument("--only", nargs="*", help="notebook name prefixes, e.g. 01 05")
    ap.add_argument("-p", "--parameter", action="append", default=[], metavar="KEY=VALUE",
                    help="override a parameter in every selected notebook (YAML value); the run is then "
                         "custom: reports/<gpu>-custom/, data/results/<gpu>/custom/")
    ap.add_argument("--timeout", type=_positive_int, default=1200, help="seconds per cell")
    ap.add_argument("--out", help="output folder (default reports/<gpu>, reports/<gpu>-<profile>, "
                                  "reports/<gpu>-custom or reports/<gpu>-replay)")
    ap.add_argument("--gpus", nargs="+", metavar="all|INDEX",
                    help="run notebooks in parallel on this host's GPUs ('all', or indices as nvidia-smi "
                         "numbers them: --gpus 0 1), each in its own process pinned to one GPU")
    ap.add_argument("--jobs", type=_jobs, default=1, metavar="N",
                    help="replay only: run N notebooks at once on this machine's CPUs (0: the CPU count, "
                         "at most 4; default 1). A live run times a GPU: use --gpus to spread one")
    ap.add_argument("--cluster", metavar="ADDRESS",
                    help="run each notebook as a Ray task with one GPU on the cluster at ADDRESS ('auto', "
                         "host:6379, ray://host:10001); default: $RAY_ADDRESS when set (needs the 'ray' extra)")
    ap.add_argument("--retries", type=_retries, default=2,
                    help="on a Ray cluster: times a notebook whose worker died is run again (default 2)")
    ap.add_argument("--reindex", action="store_true",
                    help="only rewrite reports/<gpu>/README.md (or --out's) from its runs.json; run nothing")
    args = ap.parse_args(argv)
    if args.reindex:
        try:
            print(f"index: {rewrite_index(Path(args.out) if args.out else REPORTS_DIR / args.gpu)}")
            return 0
        except UsageError as exc:
            print(f"{ap.prog}: {exc}", file=sys.stderr)
            return 2
    address = None if args.gpus else (args.cluster or os.environ.get("RAY_ADDRESS") or None)

    try:
        if args.gpus and args.cluster:
            raise UsageError("--gpus runs on this host's GPUs, --cluster on a Ray cluster's: pick one")
        if args.jobs != 1 and (args.gpus or address):
            raise UsageError("--jobs runs notebooks side by side on this machine's CPUs: leave it out with "
                             "--gpus or --cluster, which spread the notebooks themselves")
        books = list_notebooks(args.only)
        overrides = parse_overrides(args.parameter)
        if address:
            cluster.import_ray()
            mode = run_mode("replay", args.gpu) if args.mode == "replay" else None
            if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", args.gpu):
                raise UsageError(f"gpu must be a results folder name such as 'h200', got {args.gpu!r}")
        else:
            mode = run_mode(args.mode, args.gpu)
        gpus = None
        if args.gpus:
            gpus, mode = pick_gpus(args.gpus, mode)
        elif args.jobs != 1 and mode is not None:
            if mode.live:
                raise UsageError("--jobs is for replay (notebooks side by side would share the GPU and "
                                 "skew each other's timings): add --mode replay, or use --gpus to spread a "
                                 "live run over several GPUs")
            gpus = cpu_slots(args.jobs)
        plans = []
        for path in books:
            params = {**profile_parameters(args.profile, path.stem), **overrides,
                      "profile": table_profile(args.profile, overrides), "mode": args.mode, "gpu": args.gpu}
            check_parameters(path, params)
            plans.append((path, params))
        if not _PROFILE_NAME.fullmatch(args.profile):
            raise UsageError(f"profile {args.profile!r}: profile names are lower_snake_case (they name "
                             f"data/results/<gpu>/<profile>/): rename notebooks/profiles/{args.profile}.yaml")
        note = (f"; on the Ray cluster at {address}" if address else
                f"; {len(gpus)} CPU slot(s) in parallel" if gpus and isinstance(gpus[0], CpuSlot) else
                f"; {len(gpus)} GPU(s) in parallel ({', '.join(g.index for g in gpus)})" if gpus else "")
        index = ReportIndex(args.profile, overrides, command, args.out, note)
        out_dir = index.folder(mode) if mode is not None and not address else None
        if address and args.out:
            out = Path(args.out).resolve()
            if out == REPORTS_DIR.resolve() or (out.exists() and not out.is_dir()):
                raise UsageError(f"--out {out}: name a folder inside reports/")
    except (UsageError, cluster.RayUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    kernel_can_import_attnlab()
    try:
        if address:
            print(f"attnlab report: {len(plans)} notebook(s), profile {args.profile}"
                  f"{', overrides ' + ', '.join(args.parameter) if overrides else ''}, --mode {args.mode}, "
                  f"on the Ray cluster at {address}", flush=True)
            run_on_cluster(plans, address, args, index)
            return index.summary()
        index.open(out_dir)
        print(f"attnlab report: {len(plans)} notebook(s), profile {args.profile}"
              f"{', overrides ' + ', '.join(args.parameter) if overrides else ''}, {mode}{note} -> {out_dir}",
              flush=True)
        if gpus:
            run_on_gpus(plans, gpus, mode, index, out_dir, args.timeout)
            return index.summary()
        where = where_this_runs() if mode.live else {"host": _env.host_name()}   # a replay uses no GPU
        for i, (path, params) in enumerate(plans, 1):
            print(f"[{i}/{len(plans)}] {path.stem} ...", end=" ", flush=True)
            run = _stamp(run_one(path, out_dir, params, args.timeout, mode.name), where)
            print(_line(run), flush=True)
            index.add(out_dir, run)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        cluster.terminate_children()
        print(f"\ninterrupted: the index in {out_dir or 'each report folder'} lists the notebooks that finished; "
              "the last good copy of an interrupted one is untouched", file=sys.stderr)
        return 130
    return index.summary()


if __name__ == "__main__":
    sys.exit(main())
