"""The deliberate bugs of scripts/mutation_check.py stay applicable: each names text that occurs exactly
once in its file, so the list cannot rot silently as the code moves (running the whole check takes
about a minute: `python scripts/mutation_check.py`)."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("mutation_check", ROOT / "scripts" / "mutation_check.py")
mutation_check = importlib.util.module_from_spec(_spec)
sys.modules["mutation_check"] = mutation_check     # dataclasses look their module up there
_spec.loader.exec_module(mutation_check)


@pytest.mark.parametrize("m", mutation_check.MUTATIONS, ids=lambda m: m.name)
def test_mutation_applies_to_the_current_code(m):
    mutation_check.check_mutation(ROOT, m)   # raises MutationError unless the old text occurs exactly once
    for sel in m.selection:
        assert (ROOT / sel.split("::")[0]).is_file(), f"{m.name}: no test file {sel}"
