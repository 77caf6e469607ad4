"""A committed live report must be the executed form of its notebook as committed: same cells, same
sources (papermill's injected-parameters cell aside). A report older than its notebook shows
figures and sentences the notebook no longer produces."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPORTS = sorted((ROOT / "reports").glob("*/[0-9][0-9]_*.ipynb"))
#: Reports known to predate their notebook, with why; each is shown as an expected failure, never
#: silently passed. Remove an entry once the notebook's report is re-recorded.
STALE: dict[str, str] = {
    "h200/13_fast_delta": ("notebook 13 gained step 25's text, the recurrence bounds, steps 29 and 30 and the co-residency "
                           "bound after the H200 recording; every machine lent since was an H100, whose run of this "
                           "notebook is reports/h100-80gb-hbm3/: re-record it on an H200"),
}


def _sources(path: Path) -> list[tuple[str, str]]:
    cells = json.loads(path.read_text())["cells"]
    return [(c["cell_type"], "".join(c["source"]).strip()) for c in cells
            if "injected-parameters" not in c.get("metadata", {}).get("tags", [])]


def test_there_are_reports():
    assert REPORTS, "no committed reports under reports/<gpu>/"


@pytest.mark.parametrize("report", REPORTS, ids=[f"{p.parent.name}/{p.stem}" for p in REPORTS])
def test_report_cells_match_the_notebook(report):
    key = f"{report.parent.name}/{report.stem}"
    if report.stem.endswith(".FAILED"):
        pytest.skip("a failed run kept beside the last good report")
    source = ROOT / "notebooks" / f"{report.stem}.ipynb"
    assert source.is_file(), f"{key}: no notebook {source.name}"
    mismatch = _sources(report) != _sources(source)
    if key in STALE:
        if mismatch:
            pytest.xfail(STALE[key])
        pytest.fail(f"{key} matches its notebook again: remove it from STALE")
    assert not mismatch, f"{key} was executed from another version of notebooks/{source.name}: re-record it"
