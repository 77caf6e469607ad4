#!/usr/bin/env python3
"""GPU probe: how 21 and 22 share the SMs when they run side by side (``impl="pre"``, bf16 inputs).

    PYTHONPATH=lib python scripts/probe_delta_timeline.py [--T 16384] [--out DIR] [--variants 4:2 3:2]
        [--carveout -1 100] [--level 1]

Builds 21 and 22 with KDA_TIMELINE (ops_image.cuh: each block stamps %globaltimer and %smid after the
ready flags, and at level 2 21's thread 0 its clock after each barrier; results unchanged) and, at B=2, H=16,
K=V=128, for each build variant (21's and 22's registers) and shared-memory carveout (-1: the driver's
choice, 100: the most shared memory), times 21 and 22 alone and the pair side by side and one after the
other. For each it prints the median time and what the stamps say (attnlab.delta.timeline): when 22's
blocks start and end, how long 22's producer waited for 21's flags and WG_C for its buffers, how many of
21's blocks ran beside each 22 block, how long 21's blocks took, and the median cycles of 21's phases.
Writes timeline_*.npz and probe_timeline.csv to --out (default $OUT or /tmp). Not a recorded run: notebook
13 records what the lab quotes.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import pandas as pd

from attnlab.arrays import rel_error
from attnlab.delta import fast
from attnlab.delta import kernels as dk
from attnlab.delta.bench import _timed, device_inputs
from attnlab.delta.timeline import TL_P, TL_W, split_stamps, summarize


def set_carveout(kernel, percent: int) -> int:
    """The kernel's preferred shared-memory carveout (percent; -1: no preference); returns what it reads back."""
    dk.prefer_shared_memory(kernel, percent)
    return int(kernel.attributes.get("preferred_shared_memory_carveout", percent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, default=16384)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--carveout", type=int, nargs="+", default=[100])
    ap.add_argument("--variants", nargs="+", default=["4:2"],
                    help="21's and 22's minimum blocks per SM (__launch_bounds__: their registers), as A:B")
    ap.add_argument("--budget", type=float, default=0.3)
    ap.add_argument("--level", type=int, default=2, help="KDA_TIMELINE: 1 block stamps, 2 also 21's phase clocks")
    a = ap.parse_args()
    import cupy as cp

    from attnlab.compile import load_kernel

    B, H, K, V, T = 2, 16, 128, 128, a.T
    _, d = device_inputs(B, T, H, K, V, seed=T, init=True)
    tb = fast.bf16_inputs(d)
    p = dk.prepare_tc(**tb, initial_state=d["initial_state"], output_final_state=True, impl="pre")
    cfg = p.launch_configs()
    n_prep = int(np.prod(cfg["prep"]["grid"]))
    n_state = int(np.prod(cfg["state"]["grid"]))
    n_chunks = cfg["prep"]["grid"][1]
    flags = p.ws["READY"]
    n_words = (n_prep + 1) // 2 * 2 + 2 * (TL_P * n_prep + TL_W * n_state)
    big = cp.zeros(n_words, dtype=cp.int32)
    p.ws["READY"] = big[:n_prep].reshape(flags.shape)   # the plan passes this pointer: the stamps follow it
    rows = []
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    overlap0 = p.overlap
    o_ref, s_ref = p.run()   # the plain builds' results: every variant below must give the same
    o_ref, s_ref = o_ref.float().cpu().numpy(), s_ref.get()
    for var in a.variants:   # "21's min blocks per SM : 22's" (their __launch_bounds__, so their registers)
        mb21, mb22 = (int(x) for x in var.split(":"))
        p.kernels["prep"] = load_kernel(dk.PREP_OPS_SRC, "kda_chunk_prep_ops", (K, dk.FUSED_CHUNK, True),
                                        defines={"KDA_TIMELINE": a.level, "KDA_PREP_OPS_MINB": mb21})
        p.kernels["prep"].max_dynamic_shared_size_bytes = cfg["prep"]["smem"]
        src, fn, _, _ = dk.STATE_IMPLS["pre"]
        p.kernels["state"] = load_kernel(src, fn, (K, V, dk.FUSED_CHUNK, p.bv, True) + dk.state_extra_args("pre", V, p.bv),
                                         defines={"KDA_TIMELINE": a.level, "KDA_PRE_MINB": mb22}, arch=dk.STATE_ARCH.get("pre"))
        p.kernels["state"].max_dynamic_shared_size_bytes = cfg["state"]["smem"]
        regs = (p.kernels["prep"].attributes["num_regs"], p.kernels["state"].attributes["num_regs"])
        for cv in a.carveout:
            got = (set_carveout(p.kernels["prep"], cv), set_carveout(p.kernels["state"], cv))
            tag = f"21 >= {mb21} blocks/SM, 22 >= {mb22} (registers {regs[0]}, {regs[1]}), carveout {cv} {got}"
            base = dict(T=T, carveout=cv, minb21=mb21, minb22=mb22, regs21=regs[0], regs22=regs[1])
            for st, lab in (((1,), "21 alone"), ((2,), "22 alone")):
                r = _timed(lambda st=st: p.run(stages=st), a.budget, implementation=lab, **base)
                rows.append(r)
                print(f"{tag}: {lab} median {r['median_ms']:.4f} ms", flush=True)
            big.fill(0)   # 21 alone, stamped
            p.run(stages=(1,))
            cp.cuda.Device().synchronize()
            sm = summarize(*split_stamps(big.get(), n_prep, n_state), n_chunks)
            print(f"{tag}, 21 alone stamped: " + ", ".join(f"{k}={v:.4g}" for k, v in sm.items() if k.startswith("ph") or k.startswith("p21")),
                  flush=True)
            rows.append(dict(implementation="21 alone, stamped", **base, **sm))
            for side in ((True, False) if overlap0 else (False,)):
                p.overlap = side
                for _ in range(3):
                    p.run()
                r = _timed(p.run, a.budget, implementation="21+22", side_by_side=side, **base)
                big.fill(0)
                p.epoch = 0   # flags zeroed: the next call's epoch starts again at 1
                cp.cuda.get_current_stream().synchronize()
                o, s = p.run()
                cp.cuda.Device().synchronize()
                words = big.get()
                prep, state = split_stamps(words, n_prep, n_state)
                name = f"timeline_{mb21}_{mb22}_cv{cv}_{'side' if side else 'seq'}.npz"
                if side:
                    np.savez_compressed(out / name, prep=prep, state=state)
                sm = summarize(prep, state, n_chunks)
                r.update(sm, rel_o=rel_error(o.float().cpu().numpy(), o_ref), rel_state=rel_error(s.get(), s_ref))
                rows.append(r)
                print(f"{tag}, {'side by side' if side else 'one after the other'}: median {r['median_ms']:.4f} ms",
                      flush=True)
                print(f"   rel_o {r['rel_o']:.2e} rel_state {r['rel_state']:.2e}; " + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in sm.items()),
                      flush=True)
            p.overlap = overlap0
    pd.DataFrame(rows).to_csv(out / "probe_timeline.csv", index=False)


if __name__ == "__main__":
    main()
