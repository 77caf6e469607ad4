#!/usr/bin/env python3
"""GPU probe: do P1, P2 and P4 of 24's chain wait on their wgmmas' shared accumulators? (KDA_P1/P2/P4_CHAINS)

    PYTHONPATH=lib python scripts/probe_delta_chains.py [--T 4096 16384] [--rounds 2] [--out DIR] [--no-fla]
        [--workers 14]

24's P1 issues its 24 m64n32k16 wgmmas (three terms over eight k steps) into one accumulator, P2 its 6 and P4 each state
tile's 6 likewise: each wgmma sums onto the one before. The probe builds put the lo terms into accumulators of their own
(KDA_P1_CHAINS=3, KDA_P2_CHAINS=3, KDA_P4_CHAINS=2; results valid, summed in another order), so that consecutive wgmmas
are independent. First, in worker processes, every build below is compiled into the lab's cache; then
kernels/bench/04_wgmma_rate.cu measures what narrow wgmmas issue per SM cycle with one, two and four chains
(wgmma_rate.csv); then, at B=2, H=16, K=V=128, fp32 inputs, for each T, in turn, --rounds times: 07 -> 24 (the call,
24 alone, 07 alone), 24 with each probe and all three (the recurrence; and the call with all three), the same with P1's
A from registers (KDA_P1_LDA=1), 24's chain alone and the chains' chain alone (KDA_PROBE=5); o and the final state of
each valid build against 24's (expected within rounding: 1e-6); fla's chunk_kda (bf16) in the same run
(probe_chains.csv, written after each T); last, the clock stamps of 24 and of the three-probe build at T=4096
(state_phases_*.csv). Not a recorded run: notebook 13 records what the lab quotes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_delta_share import run_forms, stamp_forms, warm_forms, workers_arg  # noqa: E402  (scripts/: the shared driver)

ALL = {"KDA_P1_CHAINS": 3, "KDA_P2_CHAINS": 3, "KDA_P4_CHAINS": 2}
LDA = {"KDA_P1_LDA": 1}
REC = (((2,), "recurrence"),)
#: (label, impl, the recurrence's defines, side by side, stages timed, results valid)
FORMS = (("07+24", "kdreg", None, False, (((1, 2), "all"), ((2,), "recurrence"), ((1,), "07"))),
         ("24, P1 in three chains (KDA_P1_CHAINS=3)", "kdreg", {"KDA_P1_CHAINS": 3}, False, REC, True),
         ("24, P2 in three chains (KDA_P2_CHAINS=3)", "kdreg", {"KDA_P2_CHAINS": 3}, False, REC, True),
         ("24, P4 in two chains a tile (KDA_P4_CHAINS=2)", "kdreg", {"KDA_P4_CHAINS": 2}, False, REC, True),
         ("07+24, all three", "kdreg", ALL, False, (((1, 2), "all"), ((2,), "recurrence")), True),
         ("24, P1's A from registers (KDA_P1_LDA=1)", "kdreg", LDA, False, REC, True),
         ("24, P1's A from registers, P1 in three chains", "kdreg", {**LDA, "KDA_P1_CHAINS": 3}, False, REC, True),
         ("24, P1's A from registers, all three", "kdreg", {**LDA, **ALL}, False, REC, True),
         ("24 chain alone (KDA_PROBE=5)", "kdreg", {"KDA_PROBE": 5}, False, REC),
         ("24 chain alone, all three", "kdreg", {**ALL, "KDA_PROBE": 5}, False, REC))
STAMPED = ({}, {"KDA_P1_CHAINS": 3}, ALL, {**LDA, **ALL})


def rate_table(out: Path) -> None:
    """kernels/bench/04_wgmma_rate.cu's table (attnlab.delta.fast.wgmma_rate_table) into ``out``/wgmma_rate.csv."""
    from attnlab.delta import fast

    t = fast.wgmma_rate_table()
    t.to_csv(out / "wgmma_rate.csv", index=False)
    print(t.round(3).to_string(), flush=True)


def main() -> None:
    workers = workers_arg()
    parsed = []
    run_forms(FORMS, "probe_chains.csv", __doc__.split("\n\n")[0],
              before=lambda a: (parsed.append(a), warm_forms(FORMS, STAMPED, workers), rate_table(Path(a.out))))
    stamp_forms(Path(parsed[0].out), STAMPED)


if __name__ == "__main__":
    main()
