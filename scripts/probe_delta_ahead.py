#!/usr/bin/env python3
"""GPU probe: 24 with WG_E's q, k, g loaded a chunk ahead into registers (KDA_E_LDG=3), and 07 with its inverse on every
warp (KDA_PREP_INV=1), alone and together with o stored late (KDA_O_LATE=1).

    PYTHONPATH=lib python scripts/probe_delta_ahead.py [--T 4096 16384] [--rounds 2] [--out DIR] [--no-fla]
        [--workers 14]

KDA_E_LDG=1 took the staging tile out of shared memory but ran far slower than 24: its stamps put WG_E's time in the
phase that waits for the chunk's loads (scripts/probe_delta_ldg.py). KDA_E_LDG=3 issues chunk n + 1's loads while chunk
n's operands are made, each into the registers that chunk n has finished with, so that the loads' latency hides behind
a chunk's arithmetic. Nsight Compute's per-instruction view of 07 (scripts/ncu_source.py delta:kdreg:16384:prep) put a
fifth of its stall samples on the barrier behind warp 0's inverse; KDA_PREP_INV spreads the inverse over every warp.
First, in worker processes, the builds are compiled into the lab's cache; then at B=2, H=16, K=V=128, fp32 inputs, for
each T, in turn, --rounds times: 07 -> 24 (the call, 24 alone, 07 alone) and the probe builds (the call, the
recurrence, 07 alone where 07 changes); o and the final state of each build against 24's (expected equal: the same
arithmetic); fla's chunk_kda (bf16) in the same run (probe_ahead.csv, written after each T); last, the clock stamps of
24 and of KDA_E_LDG=3 at T = 4096 (state_phases_*.csv). Not a recorded run: notebook 13 records what the lab quotes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_delta_share import run_forms, stamp_forms, warm_forms, workers_arg  # noqa: E402  (scripts/: the shared driver)

AHEAD, LDG1, LATE, INV = {"KDA_E_LDG": 3}, {"KDA_E_LDG": 1}, {"KDA_O_LATE": 1}, {"KDA_PREP_INV": 1}
CALL = (((1, 2), "all"), ((2,), "recurrence"))
CALL07 = (((1, 2), "all"), ((2,), "recurrence"), ((1,), "07"))
#: (label, impl, the recurrence's defines, side by side, stages timed, results valid, 07's defines)
FORMS = (("07+24", "kdreg", None, False, CALL07),
         ("07+24, KDA_E_LDG=3", "kdreg", AHEAD, False, CALL, True),
         ("07+24, KDA_E_LDG=1", "kdreg", LDG1, False, CALL, True),
         ("07+24, KDA_O_LATE=1", "kdreg", LATE, False, CALL, True),
         ("07+24, KDA_E_LDG=3 and KDA_O_LATE=1", "kdreg", {**AHEAD, **LATE}, False, CALL, True),
         ("07 (KDA_PREP_INV=1) + 24", "kdreg", None, False, CALL07, True, INV),
         ("07 (KDA_PREP_INV=1) + 24, KDA_E_LDG=3 and KDA_O_LATE=1", "kdreg", {**AHEAD, **LATE}, False, CALL, True, INV))
STAMPED = ({}, AHEAD)


def main() -> None:
    workers = workers_arg()
    parsed = []
    run_forms(FORMS, "probe_ahead.csv", __doc__.split("\n\n")[0],
              before=lambda a: (parsed.append(a), warm_forms(FORMS, STAMPED, workers)))
    stamp_forms(Path(parsed[0].out), STAMPED)


if __name__ == "__main__":
    main()
