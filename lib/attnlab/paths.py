"""Where things live in the repository (one place, so nothing hard-codes a path)."""

from __future__ import annotations

import os
from pathlib import Path

#: The repository root. ``ATTNLAB_ROOT`` overrides it (e.g. for an installed copy).
REPO_ROOT = Path(os.environ.get("ATTNLAB_ROOT", Path(__file__).resolve().parents[2]))
KERNELS_DIR = REPO_ROOT / "kernels"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
DATA_DIR = REPO_ROOT / "data"
RESULTS_DIR = DATA_DIR / "results"
REFERENCE_DIR = DATA_DIR / "reference"
TUNED_DIR = DATA_DIR / "tuned"
REPORTS_DIR = REPO_ROOT / "reports"
