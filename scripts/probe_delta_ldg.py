#!/usr/bin/env python3
"""GPU probe: 24 with WG_E's q, k, g loaded from global memory (KDA_E_LDG) once no proxy fence waits for those loads.

    PYTHONPATH=lib python scripts/probe_delta_ldg.py [--T 4096 16384] [--rounds 2] [--out DIR] [--no-fla]
        [--workers 14]

KDA_E_LDG takes the staging tile's landing and reads (96 KB a chunk) out of shared memory, whose pipe 24's counters put
busiest; its first measurement was far slower than 24. The staging tile's release fence (a membar) then sat right after
the chunk's 96 global loads a thread and waited for all of them; KDA_E_LDG now takes no such fence (it stages nothing).
First, in worker processes, every build below is compiled into the lab's cache; then at B=2, H=16, K=V=128, fp32 inputs,
for each T, in turn, --rounds times: 07 -> 24 (the call, 24 alone, 07 alone), 07 -> 24 with KDA_E_LDG=1 (the call, the
recurrence), KDA_E_LDG=2 (no L1 allocation), each with o stored behind the next P1 (KDA_O_LATE=1) and with P1's A from
registers too (KDA_P1_LDA=1); o and the final state of each build against 24's (expected equal); fla's chunk_kda (bf16)
in the same run (probe_ldg.csv, written after each T); last, the clock stamps of 24 and of the probe builds at T = 4096
(state_phases_*.csv). Not a recorded run: notebook 13 records what the lab quotes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_delta_share import run_forms, stamp_forms, warm_forms, workers_arg  # noqa: E402  (scripts/: the shared driver)

LDG1, LDG2, LATE, LDA = {"KDA_E_LDG": 1}, {"KDA_E_LDG": 2}, {"KDA_O_LATE": 1}, {"KDA_P1_LDA": 1}
REC = (((2,), "recurrence"),)
CALL = (((1, 2), "all"), ((2,), "recurrence"))
#: (label, impl, the recurrence's defines, side by side, stages timed, results valid)
FORMS = (("07+24", "kdreg", None, False, (((1, 2), "all"), ((2,), "recurrence"), ((1,), "07"))),
         ("07+24, WG_E's inputs from global memory (KDA_E_LDG=1)", "kdreg", LDG1, False, CALL, True),
         ("24, KDA_E_LDG=2 (no L1 allocation)", "kdreg", LDG2, False, REC, True),
         ("07+24, KDA_E_LDG=1 and KDA_O_LATE=1", "kdreg", {**LDG1, **LATE}, False, CALL, True),
         ("24, KDA_E_LDG=2 and KDA_O_LATE=1", "kdreg", {**LDG2, **LATE}, False, REC, True),
         ("24, KDA_E_LDG=1, KDA_O_LATE=1 and KDA_P1_LDA=1", "kdreg", {**LDG1, **LATE, **LDA}, False, REC, True),
         ("24, KDA_E_LDG=2, KDA_O_LATE=1 and KDA_P1_LDA=1", "kdreg", {**LDG2, **LATE, **LDA}, False, REC, True),
         ("24, KDA_O_LATE=1 and KDA_P1_LDA=1", "kdreg", {**LATE, **LDA}, False, REC, True))
STAMPED = ({}, LDG1, {**LDG1, **LATE, **LDA})


def main() -> None:
    workers = workers_arg()
    parsed = []
    run_forms(FORMS, "probe_ldg.csv", __doc__.split("\n\n")[0],
              before=lambda a: (parsed.append(a), warm_forms(FORMS, STAMPED, workers)))
    stamp_forms(Path(parsed[0].out), STAMPED)


if __name__ == "__main__":
    main()
