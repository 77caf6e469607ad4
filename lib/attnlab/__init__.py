"""attnlab: a reproducible lab for GPU attention kernels.

The logic of every notebook lives here, unit-tested on the CPU; the notebooks in
``notebooks/`` only call it, show what it returns, and explain the numbers.

Importing the package points CuPy's and Triton's compile caches (and Triton's autotuning cache)
under the lab's cache root (:func:`attnlab.paths.use_persistent_caches`; a variable already set is
kept), so every notebook, report and script after the first compiles and autotunes only what is new.
"""

from .paths import use_persistent_caches as _use_persistent_caches

__version__ = "0.1.0"

_use_persistent_caches()
