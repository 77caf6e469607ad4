#!/usr/bin/env python3
"""GPU probe: does 24's chain wait for its own o stores? (KDA_O_LATE=1: each chunk's o stored behind the next P1)

    PYTHONPATH=lib python scripts/probe_delta_olate.py [--T 4096 16384] [--rounds 2] [--out DIR] [--no-fla]
        [--workers 14]

scripts/ncu_source.py's per-instruction samples of 24 put long-scoreboard stalls on the proxy fence that hands V'^T to
P4 (MEMBAR.ALL.CTA, then FENCE.VIEW.ASYNC.S) and on the barrier after it: the membar waits for the chunk's o stores
issued just before. Probe builds of 24 (results 24's bit for bit, the same words, but where said):
  KDA_O_LATE=1  o kept in registers and stored behind the next chunk's P1 issue;
  KDA_O_LATE=2  o never stored (results meaningless: the bound on taking the stores off the chain);
  KDA_O_WARP=1  o written to a shared-memory tile beside V'^T and stored from it by a ninth warp;
  KDA_O_BULK=1  the same tile stored by bulk copies.
First, in worker processes, every build below is compiled into the lab's cache; then at B=2, H=16, K=V=128, fp32
inputs, for each T, in turn, --rounds times: 07 -> 24 (the call, 24 alone, 07 alone), the probe builds (the call where
said, the recurrence), with P1's A from registers (KDA_P1_LDA=1) and with WG_E at half its tokens (KDA_E_SHARE=2;
results meaningless: the bound with WG_E out of the way), the chains alone (KDA_PROBE=5); o and the final state of each
valid build against 24's (expected equal); fla's chunk_kda (bf16) in the same run (probe_olate.csv, written after each
T); last, the clock stamps of 24 and of STAMPED at T = 4096 (state_phases_*.csv). Not a recorded run: notebook 13
records what the lab quotes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_delta_share import run_forms, stamp_forms, warm_forms, workers_arg  # noqa: E402  (scripts/: the shared driver)

LATE = {"KDA_O_LATE": 1}
BULK = {"KDA_O_BULK": 1}
WARP = {"KDA_O_WARP": 1}
REC = (((2,), "recurrence"),)
#: (label, impl, the recurrence's defines, side by side, stages timed, results valid)
FORMS = (("07+24", "kdreg", None, False, (((1, 2), "all"), ((2,), "recurrence"), ((1,), "07"))),
         ("07+24, o stored behind the next P1 (KDA_O_LATE=1)", "kdreg", LATE, False,
          (((1, 2), "all"), ((2,), "recurrence")), True),
         ("24, KDA_O_LATE=1 and P1's A from registers (KDA_P1_LDA=1)", "kdreg", {**LATE, "KDA_P1_LDA": 1}, False, REC, True),
         ("24, KDA_O_LATE=1, P1_LDA=1 and E_SHARE=2", "kdreg", {**LATE, "KDA_P1_LDA": 1, "KDA_E_SHARE": 2}, False, REC),
         ("24, o never stored (KDA_O_LATE=2)", "kdreg", {"KDA_O_LATE": 2}, False, REC),
         ("24, KDA_O_LATE=2, P1_LDA=1 and E_SHARE=2", "kdreg", {"KDA_O_LATE": 2, "KDA_P1_LDA": 1, "KDA_E_SHARE": 2}, False,
          REC),
         ("07+24, o stored by a ninth warp (KDA_O_WARP=1)", "kdreg", WARP, False, (((1, 2), "all"), ((2,), "recurrence")),
          True),
         ("24, KDA_O_WARP=1 and KDA_P1_LDA=1", "kdreg", {**WARP, "KDA_P1_LDA": 1}, False, REC, True),
         ("24, KDA_O_WARP=1 and KDA_E_SHARE=2", "kdreg", {**WARP, "KDA_E_SHARE": 2}, False, REC),
         ("24, KDA_O_WARP=1, P1_LDA=1 and E_SHARE=2", "kdreg", {**WARP, "KDA_P1_LDA": 1, "KDA_E_SHARE": 2}, False, REC),
         ("24 chain alone (KDA_PROBE=5)", "kdreg", {"KDA_PROBE": 5}, False, REC),
         ("24, KDA_O_LATE=2, chain alone", "kdreg", {"KDA_O_LATE": 2, "KDA_PROBE": 5}, False, REC),
         ("24, KDA_O_WARP=1, chain alone", "kdreg", {**WARP, "KDA_PROBE": 5}, False, REC),
         ("07+24, o stored by bulk copies (KDA_O_BULK=1)", "kdreg", BULK, False, (((1, 2), "all"), ((2,), "recurrence")),
          True))
#: clock stamps (not of KDA_O_WARP: fast.phase_cycles reads eight warps' stamps)
STAMPED = ({}, LATE, {"KDA_O_LATE": 2}, BULK)


def main() -> None:
    workers = workers_arg()
    parsed = []
    run_forms(FORMS, "probe_olate.csv", __doc__.split("\n\n")[0],
              before=lambda a: (parsed.append(a), warm_forms(FORMS, STAMPED, workers)))
    stamp_forms(Path(parsed[0].out), STAMPED)


if __name__ == "__main__":
    main()
