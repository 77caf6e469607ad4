#!/usr/bin/env python3
"""GPU probe: 28 (24 with a head's value blocks in clusters of two sharing the element-wise work) against 07 -> 24.

    PYTHONPATH=lib python scripts/probe_delta_pair.py [--T 4096 16384] [--rounds 2] [--out DIR] [--no-fla]

Notebook 13's recorded call is 07 then 24; 24's four value blocks of a head each make the whole chunk's operands. 28's
blocks make half of them each, for both blocks of a pair. At B=2, H=16, K=V=128, fp32 inputs, for each T, in turn,
--rounds times: 07 -> 24 (the call, 24 alone, 07 alone), 07 -> 28 (the call, 28 alone), 28 with no copies to the
other block (KDA_PAIR_DIAG=4: what the copies cost; results meaningless), the bound that sharing over two blocks can reach (24 with each WG_E thread at half of its tokens, KDA_E_SHARE=2, results meaningless), and both
chains alone (KDA_PROBE=5); o and the final state of 28 against 24's (expected close, not equal: a channel's gate
products are made in two halves); fla's chunk_kda (bf16) in the same run. Writes probe_pair.csv to --out (default $OUT
or /tmp) after each T (a temporary file, then a rename). Not a recorded run: notebook 13 records what the lab quotes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_delta_share import run_forms  # noqa: E402  (scripts/: the probes' shared driver)

#: (label, impl, the recurrence's defines, side by side, stages timed: (stages, stage label), ...)
FORMS = (("07+24", "kdreg", None, False, (((1, 2), "all"), ((2,), "recurrence"), ((1,), "07"))),
         ("07+28", "pair", None, False, (((1, 2), "all"), ((2,), "recurrence"))),
         ("28 with no copies to the other block (KDA_PAIR_DIAG=4)", "pair", {"KDA_PAIR_DIAG": 4}, False,
          (((2,), "recurrence"),)),
         ("24, WG_E at half of its tokens (KDA_E_SHARE=2)", "kdreg", {"KDA_E_SHARE": 2}, False, (((2,), "recurrence"),)),
         ("24 chain alone (KDA_PROBE=5)", "kdreg", {"KDA_PROBE": 5}, False, (((2,), "recurrence"),)),
         ("28 chain alone (KDA_PROBE=5)", "pair", {"KDA_PROBE": 5}, False, (((2,), "recurrence"),)))


def main() -> None:
    run_forms(FORMS, "probe_pair.csv", __doc__.split("\n\n")[0])


if __name__ == "__main__":
    main()
