"""Block timelines of 21 -> 22 side by side (their KDA_TIMELINE builds, kernels/delta/ops_image.cuh).

Each block of 21 stamps (%globaltimer start, end, %smid, 0, then at level 2 thread 0's %clock64 after each
barrier) and each block of 22 (start, WG_C's end, SM, the producer's total wait for flags, the chunks it
found unpublished, when it asked for chunk 64 i, WG_C's total wait for its buffers, the end) into words after
the ready flags. :func:`split_stamps` cuts them out of that buffer; :func:`summarize` says what they mean.
Used by scripts/probe_delta_timeline.py (a probe, not a recorded run).
"""

from __future__ import annotations

import numpy as np

TL_W = 16   # ops_image.cuh's KDA_TL_W: words per block of 22
TL_P = 20   # KDA_TL_P: words per block of 21
#: 21's clock stamps (KDA_TIMELINE=2, thread 0 after each barrier of kda_prep_body's fast bf16 path): phase names
PHASES = ("q, k, g, beta loaded; gate sums", "chunk decay checked", "operands split; image stored",
          "Akk, Aqk products", "Akk, Aqk stored", "inverse of the diagonal blocks (warp 0)", "Y = A10 T00",
          "T10 = -T11 Y", "A2 = Aqk T products", "A2 stored", "T / A2 copied out (stores issued)",
          "fence, barrier (flag)")


def split_stamps(words: np.ndarray, n_prep: int, n_state: int):
    """The stamps after the flags: 21's (start, end, sm) per block and 22's rows of TL_W words."""
    off = (n_prep + 1) // 2   # the flags' ints, rounded up to whole 8-byte words
    w = words.view(np.uint64)[off:]
    prep = w[: TL_P * n_prep].reshape(n_prep, TL_P).astype(np.int64)
    state = w[TL_P * n_prep: TL_P * n_prep + TL_W * n_state].reshape(n_state, TL_W).astype(np.int64)
    return prep, state


def summarize(prep: np.ndarray, state: np.ndarray, n_chunks: int) -> dict:
    """What the stamps say (microseconds from the first block's start)."""
    ok22 = state[:, 0] > 0
    t0 = min(prep[:, 0].min(), state[ok22, 0].min() if ok22.any() else prep[:, 0].min())
    us = lambda x: (np.asarray(x, dtype=np.float64) - t0) / 1e3   # noqa: E731
    s, e, sm = state[ok22, 0], state[ok22, 1], state[ok22, 2]
    ps, pe, psm = prep[:, 0], prep[:, 1], prep[:, 2]
    out = {}
    ck = prep[:, 4:4 + len(PHASES) + 1]
    n_ph = next((m for m in (len(PHASES), len(PHASES) - 1) if (ck[:, m] > 0).all()), 0)   # the flag's: side by side only
    if n_ph:   # KDA_TIMELINE=2: 21's phases, median cycles (blocks beside 22 where there are any)
        on = np.isin(psm, sm) if len(sm) else np.zeros(len(psm), bool)
        sel = on if on.sum() > 100 else np.ones(len(psm), bool)
        d = np.diff(ck[sel, :n_ph + 1], axis=1)
        for i in range(n_ph):
            out[f"ph{i + 1}_cyc"] = float(np.median(d[:, i]))
        out["ph_total_cyc"] = float(np.median(ck[sel, n_ph] - ck[sel, 0]))
    out.update(
        wall_us=float(us(max(pe.max(), e.max() if len(e) else 0))),
        s22_start_min=float(us(s.min())) if len(s) else np.nan, s22_start_max=float(us(s.max())) if len(s) else np.nan,
        s22_end_min=float(us(e.min())) if len(e) else np.nan, s22_end_max=float(us(e.max())) if len(e) else np.nan,
        s22_wait_med_us=float(np.median(state[ok22, 3]) / 1e3) if len(s) else np.nan,
        s22_wait_max_us=float(np.max(state[ok22, 3]) / 1e3) if len(s) else np.nan,
        s22_nwait_med=float(np.median(state[ok22, 4])) if len(s) else np.nan,
        s22_fullwait_med_us=float(np.median(state[ok22, TL_W - 2]) / 1e3) if len(s) else np.nan,   # WG_C waiting for buffers
        p21_start_min=float(us(ps.min())), p21_end_max=float(us(pe.max())),
        p21_dur_med_us=float(np.median(pe - ps) / 1e3),
        sms_22=int(len(np.unique(sm))), sms_21=int(len(np.unique(psm))),
    )
    # 22's pace: when its producer asked for chunk 64 i (the median block), i = 0 .. 9
    for i in range(TL_W - 7):
        if 64 * i < n_chunks and len(s):
            out[f"ask_{64 * i}"] = float(np.median(us(state[ok22, 5 + i])))
    # 21 beside 22: per SM holding a 22 block, the 21 blocks that ran during that block's life
    if len(s):
        beside, durs_b, durs_o = [], [], []
        for smi, a, b in zip(sm, s, e):
            m = psm == smi
            live = m & (pe > a) & (ps < b)
            beside.append(((np.minimum(pe[live], b) - np.maximum(ps[live], a)).sum()) / max(b - a, 1))
            durs_b.append(pe[live] - ps[live])
        on22 = np.isin(psm, sm)
        durs_o = pe[~on22] - ps[~on22]
        out["p21_blocks_beside_22_mean"] = float(np.mean(beside))   # 21 blocks resident on average beside a 22 block
        out["p21_dur_on22_med_us"] = float(np.median(np.concatenate(durs_b)) / 1e3) if durs_b else np.nan
        out["p21_dur_off22_med_us"] = float(np.median(durs_o) / 1e3) if len(durs_o) else np.nan
        out["p21_blocks_on22_frac"] = float(on22.mean())
    # 21's own concurrency: the mean number of its blocks resident per SM while it runs
    span = pe.max() - ps.min()
    out["p21_resident_per_sm"] = float((pe - ps).sum() / max(span, 1) / max(len(np.unique(psm)), 1))
    return out
