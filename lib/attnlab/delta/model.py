"""Cost model of the two KDA forms, per token and head, as the kernels in kernels/delta/ do them.

Counts: an FMA is 2 FLOPs, a multiply or add 1; exponentials are counted apart ("transcendentals":
MUFU.EX2 runs at 16 per clock per SM against 128 FMAs, so one exp costs about 8 FMA slots).
Bytes: fp32 traffic through device memory if every array is read or written exactly once per
kernel (L2 re-reads of the state pass's W, Qg, Kd, Aqk by the V/BV blocks of a head are not
counted: they should hit L2).

    recurrent (01):  per token  decay K·V mul, k·S and q·S dots, the k uᵀ update: 7·K·V FLOPs;
                     K exps; reads q, k, g, v, beta and writes o once.
    chunked (02-04): intra-chunk pairs (C+1)/2 per token × K channels × 2 FMA (the factored
                     fast path; the exact path for strong decay adds an exp2 per pair);
                     the triangular solve (C−1)/2 × (K+V) FMAs; the state pass W·S, Qg·S,
                     Kdᵀ·V' (3 × 2·K·V) plus Aqk·V' (2·C·V, full rows as the kernel does it).

At K = V = 128, C = 64 the chunked form does ~1.3× the FLOPs of the recurrent one and moves
~3.4× the bytes: in fp32 SIMT its advantage is not arithmetic but parallelism (T/C sequential
steps instead of T), and tensor-core-shaped work: the state pass's products are small matrix
products, which ``05_chunk_state_tc.cu`` runs on tensor cores (3xTF32: each counted FLOP is executed
three times there, at the tensor cores' rate). The counts below are the algorithm's, whichever
units run them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class Cost:
    """Per token and head."""
    form: str
    chunk_size: int | None
    flops: float
    exps: float
    bytes: float
    sequential_steps_per_token: float     # length of the dependent chain, in steps per token

    @property
    def intensity(self) -> float:
        """FLOPs per byte."""
        return self.flops / self.bytes

    def row(self) -> dict:
        return dict(form=self.form, chunk_size=self.chunk_size, flops_per_token=self.flops,
                    exps_per_token=self.exps, bytes_per_token=self.bytes,
                    flops_per_byte=self.intensity, sequential_steps_per_token=self.sequential_steps_per_token)


def recurrent_cost(K: int, V: int) -> Cost:
    flops = K * V * (1 + 2 + 2 + 2) + 2 * V + K        # decay, k·S, update, q·S; u; scale·q
    exps = K                                           # once per key channel (staged in smem)
    words = 3 * K + V + 1 + V                          # q, k, g, v, beta in; o out
    return Cost("recurrent", None, float(flops), float(exps), 4.0 * words, 1.0)


def chunk_stage_costs(K: int, V: int, C: int) -> dict[str, Cost]:
    """The three kernels' costs per token and head."""
    pairs = (C + 1) / 2                                # (i, j) with j <= i, per row i
    # Fast path (chunk decay within 2^-100 in every channel: the usual case): pair sums are two
    # FMAs on pre-scaled operands k E, q E, k R. The exact fallback for strong decay costs one
    # exp2 per (i, j, c) instead: see chunk_intra_exact_exps.
    intra_flops = pairs * K * 4 + K * (2 + 2 + 3 + 4)  # pairs: 2 FMA; Qg, Kbg, Kd; E, R, q E, k E, k R
    intra_exps = 2 * K + 2 * K + K / C                 # E, R; e^G, e^{G_L-G}; gL
    intra_words = (3 * K + 1) + (3 * K + 2 * C + K / C)
    solve_flops = (C - 1) * (K + V) + V                # (C-1)/2 FMAs per column per token; beta·v
    solve_words = (C + K + V + 1) + (K + V)
    state_flops = 3 * 2 * K * V + 2 * C * V + K * V / C
    state_words = (3 * K + V + C + K / C) + V
    return {
        "intra": Cost("chunk:intra", C, intra_flops, intra_exps, 4.0 * intra_words, 0.0),
        "solve": Cost("chunk:solve", C, solve_flops, 0.0, 4.0 * solve_words, 0.0),
        "state": Cost("chunk:state", C, state_flops, 0.0, 4.0 * state_words, 1.0 / C),
    }


def chunk_intra_exact_exps(K: int, C: int) -> float:
    """Exponentials per token of 02_chunk_intra's exact path (strong decay): one per (i, j, c)."""
    return (C + 1) / 2 * K + 2 * K + K / C


def chunk_cost(K: int, V: int, C: int) -> Cost:
    stages = chunk_stage_costs(K, V, C).values()
    return Cost("chunked", C, sum(s.flops for s in stages), sum(s.exps for s in stages),
                sum(s.bytes for s in stages), 1.0 / C)


def cost_table(K: int = 128, V: int = 128, chunk_sizes=(16, 32, 64, 128), stages: bool = False) -> pd.DataFrame:
    """One row per form (and chunk size); with ``stages=True`` also one per chunked kernel."""
    rows = [recurrent_cost(K, V).row()]
    for C in chunk_sizes:
        rows.append(chunk_cost(K, V, C).row())
        if stages:
            rows.extend(c.row() for c in chunk_stage_costs(K, V, C).values())
    df = pd.DataFrame(rows)
    df.insert(0, "K", K)
    df.insert(1, "V", V)
    return df


def workspace_bytes(B: int, T: int, H: int, K: int, V: int, C: int) -> int:
    """fp32 workspace of the chunked kernels: Akk, Aqk, Qg, Kd, W, U, gL (last chunk padded)."""
    NT = -(-T // C)
    Tp = NT * C
    return 4 * B * H * (2 * NT * C * C + 3 * Tp * K + Tp * V + NT * K)


def io_bytes(B: int, T: int, H: int, K: int, V: int, final_state: bool = False, itemsize: int = 4) -> int:
    """Inputs and outputs: q, k, g, v, beta, o (and the state)."""
    n = B * T * H * (3 * K + 2 * V + 1)
    if final_state:
        n += B * H * K * V
    return itemsize * n


def bound_time_s(cost: Cost, B: int, T: int, H: int, peak_flops: float, peak_bytes_per_s: float,
                 exps_per_s: float | None = None) -> float:
    """Roofline lower bound on the time: the slowest of FLOPs, bytes and exps at their peaks."""
    tokens = B * T * H
    t = max(cost.flops * tokens / peak_flops, cost.bytes * tokens / peak_bytes_per_s)
    if exps_per_s:
        t = max(t, cost.exps * tokens / exps_per_s)
    return t


def mufu_exps_per_s(num_sms: int = 132, clock_hz: float = 1.98e9, per_clock_per_sm: int = 16) -> float:
    """Peak exp2 rate of the special-function units (16 per clock per SM on sm_80/sm_90)."""
    return num_sms * clock_hz * per_clock_per_sm
