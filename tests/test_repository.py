"""Repository invariants: clean source notebooks, packaging that agrees, recorded data with provenance."""

import json
import re
import tomllib

import nbformat
import pandas as pd
import pytest
import yaml

from attnlab.env import IDENTITY_COLUMNS
from attnlab.paths import NOTEBOOKS_DIR, REFERENCE_DIR, REPO_ROOT, RESULTS_DIR
from attnlab.results import PROVENANCE_COLUMNS

NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS and NOTEBOOKS[0].name == "01_naive.ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_source_notebooks_carry_no_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert not cell.outputs, f"{path.name} cell {i} has outputs: clear them before committing"
            assert cell.execution_count is None, f"{path.name} cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_source_notebook_cells_have_unique_ids(path):
    """nbformat 4.5 cells carry ids (nbformat warns, and will refuse, where one is missing)."""
    cells = json.loads(path.read_text())["cells"]
    ids = [c.get("id") for c in cells]
    assert all(ids), f"{path.name}: cells {[i for i, x in enumerate(ids) if not x]} have no id"
    assert len(set(ids)) == len(ids), f"{path.name}: repeated cell ids"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_have_a_parameters_cell_with_auto_mode(path):
    nb = nbformat.read(path, as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name} needs exactly one cell tagged 'parameters'"
    src = tagged[0].source
    assert re.search(r'^mode\s*=\s*"auto"', src, re.M) and re.search(r'^gpu\s*=\s*"h200"', src, re.M)
    assert re.search(r"^profile\s*=", src, re.M)


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[ ;]", req, maxsplit=1)[0].lower()


def test_environment_yml_agrees_with_pyproject():
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    pip_reqs = set(project["dependencies"]) | set(project["optional-dependencies"]["test"]) \
        | set(project["optional-dependencies"]["lab"])
    env = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    conda_pins = {r for r in pip_section if not r.startswith("-e")}
    assert conda_pins == pip_reqs, f"only in environment.yml: {conda_pins - pip_reqs}; only in pyproject: {pip_reqs - conda_pins}"
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python"))
    assert python.replace("python", "") == project["requires-python"]


def test_reference_figures_are_the_seeds():
    lat = pd.read_csv(REFERENCE_DIR / "gtx1660ti_latency.csv")
    assert len(lat) == 4 * 3 * 7 and set(lat["kernel"]) == {"naive", "tiled", "vec_load", "vec_padded"}
    shared = REPO_ROOT.parent / "shared" / "seed-data"
    if shared.is_dir():
        for f in shared.glob("*.csv"):
            assert (REFERENCE_DIR / f.name).read_text() == f.read_text(), f"{f.name} differs from shared/seed-data"


RECORDED = sorted(RESULTS_DIR.glob("*/*.csv"))


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_recorded_results_carry_provenance(path):
    df = pd.read_csv(path)
    assert not df.empty
    # gpu_uuid and host joined the provenance on 2026-12-01: tables recorded before lack them
    required = [c for c in PROVENANCE_COLUMNS if c not in IDENTITY_COLUMNS]
    missing = [c for c in required if c not in df.columns]
    assert not missing, f"{path} lacks provenance columns {missing}"
    if "gpu_uuid" in df.columns:
        assert df["gpu_uuid"].notna().all() and df["host"].notna().all(), f"{path}: empty GPU identity"
    assert (df["mode"] == "live").all() and df["gpu_name"].notna().all()
    assert (df["profile"] == "full").all(), "the canonical results folder holds full-profile runs only"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_papermill_sees_every_parameter(path):
    # papermill parses the parameters cell line by line and silently drops lines it cannot read
    # (e.g. a comment holding "name = value"); a dropped name cannot be overridden or checked.
    import ast

    import papermill

    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    assigned = {t.id for node in ast.parse(cell.source).body if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    assert set(papermill.inspect_notebook(str(path))) == assigned
