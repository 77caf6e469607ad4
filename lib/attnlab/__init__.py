"""attnlab: a reproducible lab for GPU attention kernels.

The logic of every notebook lives here, unit-tested on the CPU; the notebooks in
``notebooks/`` only call it, show what it returns, and explain the numbers.
"""

__version__ = "0.1.0"
