#!/usr/bin/env python3
"""GPU probe: how many multiply-adds per SM cycle narrow wgmmas issue (kernels/bench/04_wgmma_rate.cu).

    PYTHONPATH=lib python scripts/probe_wgmma_rate.py [--iters 4096] [--out DIR]

For N in {16, 32, 64, 128}, A from registers or shared memory, one or two warpgroups per SM and one
two or four accumulator chains: the median loop cycles over the SMs and the MACs per SM cycle
(attnlab.delta.fast.wgmma_rate_table). The delta recurrences' chains issue m64n32k16 (15) and
m64n64k16 / m64n128k16 (16) wgmmas from one warpgroup; this says whether a second warpgroup on the
SM would issue more. Writes wgmma_rate.csv to --out (default $OUT or /tmp). Not a recorded run.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pandas as pd

from attnlab.delta import fast


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=4096)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    a = ap.parse_args()
    t = fast.wgmma_rate_table(iters=a.iters)
    t.to_csv(Path(a.out) / "wgmma_rate.csv", index=False)
    pd.set_option("display.width", 200)
    print(t.round(3).to_string(), flush=True)


if __name__ == "__main__":
    main()
