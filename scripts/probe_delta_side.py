#!/usr/bin/env python3
"""GPU probe: 27 (24's loop at 64 value columns a block, 07 beside it on the SMs its grid leaves free) against 07 -> 24.

    PYTHONPATH=lib python scripts/probe_delta_side.py [--T 4096 16384] [--rounds 2] [--out DIR] [--no-fla]

Notebook 13's recorded call is 07 then 24, one after the other; 24's 128 blocks (B=2, H=16, BV=32) hold every SM but
four. 27 holds half as many SMs with twice the columns a block, and 07 (in 21's grid order, with ready flags) runs
beside it. At B=2, H=16, K=V=128, fp32 inputs, for each T, in turn, --rounds times: 07 -> 24 (the call, 24 alone, 07
alone), 07 + 27 side by side (the call), one after the other (the call, with no flags), 27 alone and 07 in 21's order
alone, and 27's chain alone (KDA_PROBE=5); o and the final state of 27 against 24's (expected equal: every column's
products in 24's order, up to ptxas's contractions and the tensor cores' summation at n64); fla's chunk_kda (bf16) in
the same run. Writes probe_side.csv to --out (default $OUT or /tmp) after each T (a temporary file, then a rename).
Not a recorded run: notebook 13 records what the lab quotes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_delta_share import run_forms  # noqa: E402  (scripts/: the probes' shared driver)

#: (label, impl, the recurrence's defines, side by side, stages timed: (stages, stage label), ...)
FORMS = (("07+24", "kdreg", None, False, (((1, 2), "all"), ((2,), "recurrence"), ((1,), "07"))),
         ("07+27 side by side", "side", None, True, (((1, 2), "all"),)),
         ("07+27 one after the other", "side", None, False, (((1, 2), "all"), ((2,), "recurrence"), ((1,), "07"))),
         ("27 chain alone (KDA_PROBE=5)", "side", {"KDA_PROBE": 5}, False, (((2,), "recurrence"),)))


def main() -> None:
    run_forms(FORMS, "probe_side.csv", __doc__.split("\n\n")[0])


if __name__ == "__main__":
    main()
