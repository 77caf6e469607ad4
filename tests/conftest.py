import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "lib", ROOT / "tests"):  # the library, and tests/ helpers such as emu_build
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from attnlab.env import cuda_usable  # noqa: E402

requires_gpu = pytest.mark.skipif(not cuda_usable(), reason="no usable CUDA device (CuPy + driver)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("gpu") and not cuda_usable():
            item.add_marker(pytest.mark.skip(reason="no usable CUDA device (CuPy + driver)"))
