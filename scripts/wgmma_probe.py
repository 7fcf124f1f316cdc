"""Time the wgmma candidates against the default dispatch on real layers (needs an sm_90 GPU).

    python3 scripts/wgmma_probe.py OUT.json [--set llama2-70b] [--m 16,32,64,128] [--extra CFG,...]

For every layer of the set and every M: the default dispatch (tuned table), then every wgmma
candidate of ``tune.candidates(..., wgmma=True)`` plus ``--extra`` configs. Each candidate's
output is compared with the dispatch's (relative error; a wrong kernel shows as >> 1e-3), its
registers and spills are read from the loaded kernel, and it is timed with the tuner's method
(``bench.harness.Timer``, weights rotated past the L2). Spilling configs are timed too, marked.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from marlin_cupy import kernels, ops
from marlin_cupy.bench.harness import Timer, bench_stream, layer_cases, relative_error
from marlin_cupy.bench.shapes import set_shapes
from marlin_cupy.config import KernelConfig
from marlin_cupy.records import environment
from marlin_cupy.tune import candidates


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--set", default="llama2-70b")
    p.add_argument("--m", default="16,32,64,128")
    p.add_argument("--extra", default="")
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--swaps", default="", help="only candidates with these swap_ab values")
    a = p.parse_args(argv)
    ms = [int(v) for v in a.m.split(",")]
    extra = [KernelConfig.from_name(n) for n in filter(None, a.extra.split(","))]
    facts = ops.device_facts()
    shapes = set_shapes(a.set)
    plan = {}
    for (k, n) in shapes:
        for m in ms:
            cs = [c for c in candidates(m, n, k, a.group_size, facts["smem_optin"], True) if c.wgmma]
            if a.swaps:
                cs = [c for c in cs if str(c.swap_ab) in a.swaps.split(",")]
            cs += [c for c in extra if not (n % c.tile_n or k % c.tile_k)]
            plan[(k, n, m)] = list(dict.fromkeys(cs))
    kernels.warm_instantiated(os.cpu_count() or 4, {c for cs in plan.values() for c in cs})
    rng = np.random.default_rng(0)
    rows = []
    with bench_stream() as stream:
        timer = Timer(stream, budget_ms=15.0, min_reps=10, max_reps=60)
        for k, n, m, x, mws in layer_cases(shapes, ms, a.group_size, rng):
            copies = len(mws)
            ref = ops.matmul(x, mws[0])
            base = ops.plan(m, n, k, a.group_size).config
            t = timer.measure(lambda i: ops.matmul(x, mws[i]), copies).stats.median_us
            rows.append({"k": k, "n": n, "m": m, "config": "dispatch",
                         "dispatch_config": base.name, "median_us": t})
            print(f"{k}x{n} m={m} dispatch {base.name}: {t:.1f} us", flush=True)
            for cfg in plan[(k, n, m)]:
                res = [ops.kernel_resources(cfg, False)]
                try:
                    out = ops.matmul(x, mws[0], config=cfg)
                    err = float(relative_error(out, ref))
                    t = timer.measure(lambda i: ops.matmul(x, mws[i], config=cfg),
                                      copies).stats.median_us
                except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
                    rows.append({"k": k, "n": n, "m": m, "config": cfg.name, "error": repr(e)})
                    continue
                rows.append({"k": k, "n": n, "m": m, "config": cfg.name, "median_us": t,
                             "rel_err_vs_dispatch": err,
                             "registers": res[0]["registers"],
                             "spill_bytes": res[0]["spill_bytes"]})
                print(f"  {cfg.name}: {t:.1f} us err {err:.1e} regs {res[0]['registers']} "
                      f"spill {res[0]['spill_bytes']}", flush=True)
    env = environment()
    with open(a.out, "w") as f:
        json.dump({"kind": "wgmma_probe", "set": a.set, "environment": env, "rows": rows}, f,
                  indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
