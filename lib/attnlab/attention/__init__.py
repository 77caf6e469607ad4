"""The softmax-attention family, laid out like :mod:`attnlab.delta`:

* :mod:`.kernels` — the registry of every kernel in ``kernels/attention/`` (one entry per step: source,
  function, parameters, dtypes, launch plan, predecessor), input validation and the launchers;
* :mod:`.reference` — float64 attention (the ground truth) and torch SDPA (the vendor path);
* :mod:`.models` — NumPy models of what the kernels compute, step for step (run on the CPU);
* :mod:`.bench` — the seed ladder's correctness harness and timing grid (a study: it sits above the
  family and is not imported here).

The registry and launchers are re-exported, so ``from attnlab.attention import get_spec`` reads as
it always did.
"""

from .kernels import (DEFAULT_TILES, FLASH_KERNELS, HOPPER_KERNELS, KERNELS, MAX_GRID_X, SEED_LADDER,  # noqa: F401
                      SEED_TILED, SUPPORTED_HEAD_DIMS, TILE_KV_CHOICES, TILE_ROWS_CHOICES, AttentionKernel,
                      LaunchPlan, Param, check_head_dim, default_tiles, get_kernel, get_spec, kernels_of_step,
                      max_dynamic_smem, prepare_attention, resolve_params, resolve_tiles, run_attention,
                      stream_k_grid, stream_k_iterations, stream_k_plain, stream_k_ranges, stream_k_workspace,
                      validate_qkv)
