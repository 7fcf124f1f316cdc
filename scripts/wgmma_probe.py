"""Time the wgmma candidates against the default dispatch on real layers (needs an sm_90 GPU).

    python3 scripts/wgmma_probe.py OUT.json [--sets llama2-70b] [--m 16,32,64,128]
                                   [--swaps 8,16] [--warp-n 0,16,32] [--extra CFG,...]

For every layer of the sets and every M: the default dispatch (tuned table), then every wgmma
candidate of ``tune.candidates`` (with and without the parallel reduction), optionally only
those with the ``--swaps`` and ``--warp-n`` given, plus ``--extra`` configs. Each candidate's
output is compared with the dispatch's: the sums run in another order, so they differ by
rounding only, and a relative difference above 1e-2 counts as a mismatch (exit status 1, as
does an error). Registers and spills are read from the loaded kernel; spilling configs are
timed too, marked. Timing is the tuner's (``bench.harness.Timer``, weights rotated past the
L2). The summary gives, per M, the dispatched configs summed over the layers, the fastest
candidate per layer summed, and the better of the two per layer summed: what a table holding
both would reach.
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

#: Relative difference between two configs' outputs beyond rounding.
MISMATCH = 1e-2


def summarize(rows) -> dict:
    """Per M: dispatched configs summed, fastest candidate per layer summed, better of both."""
    best = {}
    for r in rows:
        if "median_us" not in r:
            continue
        key = (r["k"], r["n"], r["m"])
        b = best.setdefault(key, {"dispatch": None, "cand": float("inf")})
        if r["config"] == "dispatch":
            b["dispatch"] = r["median_us"]
        else:
            b["cand"] = min(b["cand"], r["median_us"])
    out = {}
    for (k, n, m), b in best.items():
        if b["dispatch"] is None:
            continue
        s = out.setdefault(m, {"dispatch_us": 0.0, "best_us": 0.0, "either_us": 0.0,
                               "layers_won": 0})
        s["dispatch_us"] += b["dispatch"]
        s["best_us"] += b["cand"]
        s["either_us"] += min(b["cand"], b["dispatch"])
        s["layers_won"] += b["cand"] < b["dispatch"]
    return dict(sorted(out.items()))


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--sets", "--set", dest="sets", default="llama2-70b")
    p.add_argument("--m", default="16,32,64,128")
    p.add_argument("--extra", default="")
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--swaps", default="", help="only candidates with these swap_ab values")
    p.add_argument("--warp-n", default="", help="only candidates with these warp_n values "
                                                 "(0: the default width)")
    a = p.parse_args(argv)
    ms = [int(v) for v in a.m.split(",")]
    extra = [KernelConfig.from_name(n) for n in filter(None, a.extra.split(","))]
    facts = ops.device_facts()
    shapes = set_shapes(a.sets)
    plan = {}
    for (k, n) in shapes:
        for m in ms:
            cs = [c for c in candidates(m, n, k, a.group_size, facts["smem_optin"], True, True)
                  if c.wgmma]
            if a.swaps:
                cs = [c for c in cs if str(c.swap_ab) in a.swaps.split(",")]
            if a.warp_n:
                cs = [c for c in cs if str(c.warp_n) in a.warp_n.split(",")]
            cs += [c for c in extra if not (n % c.tile_n or k % c.tile_k)]
            plan[(k, n, m)] = list(dict.fromkeys(cs))
    kernels.warm_instantiated(os.cpu_count() or 4, {c for cs in plan.values() for c in cs})
    rng = np.random.default_rng(0)
    rows, bad = [], 0
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
                try:
                    res = ops.kernel_resources(cfg, False)
                    out = ops.matmul(x, mws[0], config=cfg)
                    err = float(relative_error(out, ref))
                    t = timer.measure(lambda i: ops.matmul(x, mws[i], config=cfg),
                                      copies).stats.median_us
                except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
                    rows.append({"k": k, "n": n, "m": m, "config": cfg.name, "error": repr(e)})
                    print(f"  {cfg.name}: ERROR {e!r}", flush=True)
                    bad += 1
                    continue
                bad += err > MISMATCH
                rows.append({"k": k, "n": n, "m": m, "config": cfg.name, "median_us": t,
                             "rel_err_vs_dispatch": err, "registers": res["registers"],
                             "spill_bytes": res["spill_bytes"]})
                print(f"  {cfg.name}: {t:.1f} us err {err:.1e} regs {res['registers']} "
                      f"spill {res['spill_bytes']}{'  MISMATCH' if err > MISMATCH else ''}",
                      flush=True)
    summary = summarize(rows)
    for m, s in summary.items():
        print(f"M={m}: dispatched {s['dispatch_us']:.1f} us, fastest candidate "
              f"{s['best_us']:.1f} us ({s['best_us'] / s['dispatch_us'] - 1:+.1%}), better of "
              f"the two {s['either_us']:.1f} us ({s['either_us'] / s['dispatch_us'] - 1:+.1%}), "
              f"{s['layers_won']} layers won")
    with open(a.out, "w") as f:
        json.dump({"kind": "wgmma_probe", "sets": a.sets, "swaps": a.swaps or None,
                   "warp_n": a.warp_n or None, "environment": environment(),
                   "mismatches_or_errors": bad,
                   "summary": {str(m): s for m, s in summary.items()}, "rows": rows}, f,
                  indent=1)
    print(f"wgmma_probe: {len(rows)} rows, {bad} mismatches or errors")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
