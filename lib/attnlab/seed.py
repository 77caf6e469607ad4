"""The published figures this lab grew from (data/reference/, copied from shared/seed-data):
seed 000's GTX 1660 Ti latencies, occupancy scan and best tiles, and datasheet GPU figures."""

from __future__ import annotations

import pandas as pd

from .paths import REFERENCE_DIR

SEED_GPU = "GTX 1660 Ti"
#: Seed 000's D-adaptive tiles (TILE_ROWS, TILE_KV) from its GTX 1660 Ti scan
#: (data/reference/gtx1660ti_best_tiles.csv): TILE_ROWS = 8 throughout, TILE_KV shrinking as D
#: grows. The one copy of this table: the launchers' default and every study's "seed" column.
SEED_TILES = {32: (8, 32), 64: (8, 16), 128: (8, 8)}


def _read(name: str) -> pd.DataFrame:
    path = REFERENCE_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"reference table {path} is missing (it is committed with the repo)")
    return pd.read_csv(path)


def seed_latency() -> pd.DataFrame:
    """Seed 000 section 7: kernel × D × N latency in ms (B=2, H=8, fp32, Python-side timer)."""
    return _read("gtx1660ti_latency.csv")


def seed_occupancy_scan() -> pd.DataFrame:
    return _read("gtx1660ti_occupancy_scan.csv")


def seed_best_tiles() -> pd.DataFrame:
    return _read("gtx1660ti_best_tiles.csv")


def seed_side_experiments() -> pd.DataFrame:
    """Seed 000's side experiments as published: kernel vs baseline, % slower (low, high) on its GPU."""
    return _read("gtx1660ti_side_experiments.csv")


def seed_slowdown(kernel: str) -> tuple[float, float]:
    """(low, high) % by which the seed found ``kernel`` slower than its baseline on the GTX 1660 Ti."""
    t = seed_side_experiments()
    row = t[t["kernel"] == kernel]
    if row.empty:
        raise KeyError(f"no seed side experiment for {kernel!r} in data/reference/gtx1660ti_side_experiments.csv")
    return float(row["slower_pct_low"].iloc[0]), float(row["slower_pct_high"].iloc[0])


def gpu_specs() -> pd.DataFrame:
    return _read("gpu_specs.csv")


def datasheet(gpu: str) -> pd.Series:
    """Datasheet row for a GPU, matched on its name ('H200', 'NVIDIA H200', 'h200' all work)."""
    specs = gpu_specs()
    key = gpu.lower().replace("nvidia", "").replace("-", " ").strip()
    hits = specs[specs["gpu"].str.lower() == key]
    if hits.empty:
        raise KeyError(f"no datasheet figures for GPU {gpu!r} in data/reference/gpu_specs.csv "
                       f"(known: {', '.join(specs['gpu'])})")
    return hits.iloc[0]


def with_seed_latency(df: pd.DataFrame) -> pd.DataFrame:
    """Add the seed's GTX 1660 Ti latency (``seed_ms``) beside rows with the same kernel, D, N."""
    seed = seed_latency()[["kernel", "D", "N", "latency_ms"]].rename(columns={"latency_ms": "seed_ms"})
    return df.merge(seed, on=["kernel", "D", "N"], how="left")
