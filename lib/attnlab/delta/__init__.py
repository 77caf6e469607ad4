"""Kimi Delta Attention (KDA): float64 references, CUDA kernel launchers and a cost model.

Shapes follow flash-linear-attention: q, k ``[B, T, H, K]``, v ``[B, T, H, V]``, per-channel
log-space gates g ``[B, T, H, K]`` (≤ 0), beta ``[B, T, H]``, state ``[B, H, K, V]``.

* :mod:`.naive` — the definition, token by token, in float64 (the ground truth);
* :mod:`.chunk` — the chunked (UT/WY) form in float64, plus a float32 mirror of the CUDA
  kernels' stages (same blocking, same intermediate layouts) for CPU checks;
* :mod:`.kernels` — the family's registry (``DELTA_KERNELS``), validation and launchers for
  ``kernels/delta/*.cu`` (needs CuPy and a GPU);
* :mod:`.tf32` — TF32 and bf16 rounding, 3xTF32 and 3xBF16 products in NumPy (the tensor-core kernels' numerics);
* :mod:`.model` — FLOPs, transcendentals and bytes per token for each form;
* :mod:`.bench`, :mod:`.fast` — the measurements and verdicts of notebooks 07 and 13.
"""

from .naive import kda_recurrent_fp64, random_inputs
from .chunk import kda_chunk_fp64, chunk_stages_model, chunk_rounding_model

__all__ = ["kda_recurrent_fp64", "kda_chunk_fp64", "chunk_stages_model", "chunk_rounding_model", "random_inputs"]
