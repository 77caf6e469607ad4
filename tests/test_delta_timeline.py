"""attnlab.delta.timeline: the block stamps of 21 -> 22's KDA_TIMELINE builds, cut out of the flags' buffer
and summarised (scripts/probe_delta_timeline.py), on a hand-made timeline whose answers are known."""

import numpy as np

from attnlab.delta.timeline import PHASES, TL_P, TL_W, split_stamps, summarize


def _buffer(prep_rows, state_rows, n_prep):
    """The words as the kernels leave them: n_prep int flags (rounded up to 8 bytes), then the stamps."""
    n_state = len(state_rows)
    words = np.zeros((n_prep + 1) // 2 * 2 + 2 * (TL_P * n_prep + TL_W * n_state), np.int32)
    w = words.view(np.uint64)[(n_prep + 1) // 2:]
    w[: TL_P * n_prep].reshape(n_prep, TL_P)[:] = prep_rows
    w[TL_P * n_prep:].reshape(n_state, TL_W)[:] = state_rows
    return words


def test_stamps_are_cut_out_and_summarised():
    n_prep = 5   # odd: the flags' ints round up to a whole 8-byte word
    prep = np.zeros((n_prep, TL_P), np.uint64)
    # 21: blocks on SM 0 (beside 22's block there) and SM 1 (alone); times in ns from 1000
    for i, (start, end, sm) in enumerate([(1000, 3000, 0), (1000, 3000, 0), (3000, 5000, 0), (1000, 2000, 1),
                                          (2000, 3000, 1)]):
        prep[i, :3] = (start, end, sm)
        prep[i, 4:4 + len(PHASES) + 1] = 100 + 10 * np.arange(len(PHASES) + 1)   # every phase 10 cycles
    state = np.zeros((1, TL_W), np.uint64)
    state[0, :5] = (1000, 5000, 0, 700, 3)    # start, end, SM, flag wait 700 ns, 3 chunks unpublished
    state[0, 5] = 1000                         # asked for chunk 0 at the start
    state[0, TL_W - 2] = 2000                  # WG_C waited 2 us for its buffers
    p, s = split_stamps(_buffer(prep, state, n_prep), n_prep, 1)
    assert (p == prep.astype(np.int64)).all() and (s == state.astype(np.int64)).all()
    out = summarize(p, s, n_chunks=64)
    assert out["wall_us"] == 4.0 and out["s22_start_min"] == 0.0 and out["s22_end_max"] == 4.0
    assert out["s22_wait_med_us"] == 0.7 and out["s22_nwait_med"] == 3 and out["s22_fullwait_med_us"] == 2.0
    assert out["ask_0"] == 0.0 and "ask_64" not in out
    # beside the 22 block (4 us on SM 0): two blocks for 2 us, one for 2 us -> 1.5 on average
    assert out["p21_blocks_beside_22_mean"] == 1.5
    assert out["p21_dur_on22_med_us"] == 2.0 and out["p21_dur_off22_med_us"] == 1.0
    assert out["p21_blocks_on22_frac"] == 0.6 and out["sms_22"] == 1 and out["sms_21"] == 2
    # every phase present (the flag's too): 10 cycles each
    assert all(out[f"ph{i + 1}_cyc"] == 10.0 for i in range(len(PHASES))) and out["ph_total_cyc"] == 10.0 * len(PHASES)


def test_one_kernel_after_the_other_has_no_flag_phase_and_no_22_rows():
    prep = np.zeros((4, TL_P), np.uint64)
    prep[:, :3] = [(10, 20, 0), (10, 30, 1), (30, 40, 0), (30, 50, 1)]
    prep[:, 4:4 + len(PHASES)] = np.arange(len(PHASES)) * 5 + 1   # no stamp after the flag's barrier (epoch 0)
    p, s = split_stamps(_buffer(prep, np.zeros((2, TL_W), np.uint64), 4), 4, 2)
    out = summarize(p, s, n_chunks=8)
    assert f"ph{len(PHASES)}_cyc" not in out and out[f"ph{len(PHASES) - 1}_cyc"] == 5.0
    assert np.isnan(out["s22_start_min"]) and out["sms_22"] == 0 and "p21_blocks_beside_22_mean" not in out
    assert out["p21_resident_per_sm"] == (10 + 20 + 10 + 20) / 40 / 2
