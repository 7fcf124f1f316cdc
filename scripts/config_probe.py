"""A kind of candidate config against the dispatched one on real layers (needs a GPU).

    python3 scripts/config_probe.py OUT.json [--swap 16] [--sets llama2-7b,llama2-13b,llama2-70b]
                                    [--m 128,256,512,1024] [--group-size 128]

For every layer and M: the default dispatch's config, then every tuner candidate
(``tune.candidates``, wgmma and parallel reduction included) whose ``swap_ab`` is ``--swap``,
that fits the layer and does not spill. Timing is the tuner's (``bench.harness.Timer``,
weights rotated past the L2). The fastest candidate's output is compared with the
dispatched config's: the sums run in another order, so they differ by rounding only; a
relative Frobenius difference above 1e-2 is counted as a mismatch (exit status 1), as is an
error. The summary gives, per M, the dispatched configs summed over the layers, the fastest
candidate per layer summed, and the sum of the better of the two per layer: what a table
holding both would reach.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import cupy as cp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from marlin_cupy import kernels, ops  # noqa: E402
from marlin_cupy.bench.harness import Timer, bench_stream, layer_cases  # noqa: E402
from marlin_cupy.bench.shapes import set_shapes  # noqa: E402
from marlin_cupy.records import environment  # noqa: E402
from marlin_cupy.tune import candidates, spills  # noqa: E402

#: Relative Frobenius difference between two configs' outputs beyond rounding.
MISMATCH = 1e-2


def rel_diff(y, ref) -> float:
    y, ref = y.astype(cp.float64), ref.astype(cp.float64)
    return float(cp.linalg.norm(y - ref) / cp.linalg.norm(ref))


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--swap", type=int, default=16, help="swap_ab of the candidates")
    p.add_argument("--sets", default="llama2-7b,llama2-13b,llama2-70b")
    p.add_argument("--m", default="128,256,512,1024")
    p.add_argument("--group-size", type=int, default=128)
    a = p.parse_args(argv)
    ms = [int(v) for v in a.m.split(",")]
    facts = ops.device_facts()
    wg = facts["cc"] == "90"
    shapes = set_shapes(a.sets)
    plan = {}
    for (k, n) in shapes:
        for m in ms:
            plan[(k, n, m)] = [c for c in candidates(m, n, k, a.group_size, facts["smem_optin"],
                                                     wg, True) if c.swap_ab == a.swap]
    cfgs = {c for cs in plan.values() for c in cs}
    kernels.warm_instantiated(os.cpu_count() or 4, cfgs)
    usable = {c: not spills(c) and ops.resident_ctas(c) >= c.blocks_per_sm for c in cfgs}
    rng = np.random.default_rng(0)
    rows, bad = [], 0
    with bench_stream() as stream:
        timer = Timer(stream, budget_ms=15.0, min_reps=10, max_reps=60)
        for k, n, m, x, mws in layer_cases(shapes, ms, a.group_size, rng):
            copies = len(mws)
            disp = ops.plan(m, n, k, a.group_size).config
            t_disp = timer.measure(lambda i: ops.matmul(x, mws[i]), copies).stats.median_us
            y_disp = ops.matmul(x, mws[0])
            times = {}
            for cfg in plan[(k, n, m)]:
                if not usable[cfg]:
                    continue
                try:
                    times[cfg] = timer.measure(lambda i: ops.matmul(x, mws[i], config=cfg),
                                               copies).stats.median_us
                except Exception as e:  # noqa: BLE001 - recorded, the probe goes on
                    print(f"{k}x{n} m={m} {cfg.name}: ERROR {e!r}", flush=True)
                    rows.append({"k": k, "n": n, "m": m, "config": cfg.name, "error": repr(e)})
                    bad += 1
            row = {"k": k, "n": n, "m": m, "dispatch": disp.name, "dispatch_us": t_disp,
                   "candidates_us": {c.name: t for c, t in sorted(times.items(),
                                                                  key=lambda kv: kv[1])}}
            if times:
                best = min(times, key=times.get)
                diff = rel_diff(ops.matmul(x, mws[0], config=best), y_disp)
                bad += diff > MISMATCH
                row.update(best=best.name, best_us=times[best], rel_diff=diff)
                print(f"{k}x{n} m={m}: dispatched {disp.name} {t_disp:.1f} us, best "
                      f"{best.name} {times[best]:.1f} us ({times[best] / t_disp - 1:+.1%}), "
                      f"rel diff {diff:.1e}{'  MISMATCH' if diff > MISMATCH else ''}",
                      flush=True)
            else:
                print(f"{k}x{n} m={m}: dispatched {disp.name} {t_disp:.1f} us, no candidate",
                      flush=True)
            rows.append(row)
    summary = {}
    for r in rows:
        if "dispatch_us" not in r:
            continue
        s = summary.setdefault(r["m"], {"dispatch_us": 0.0, "best_us": 0.0, "either_us": 0.0,
                                        "layers_won": 0})
        s["dispatch_us"] += r["dispatch_us"]
        cand = r.get("best_us", float("inf"))
        s["best_us"] += cand
        s["either_us"] += min(cand, r["dispatch_us"])
        s["layers_won"] += cand < r["dispatch_us"]
    for m, s in sorted(summary.items()):
        print(f"M={m}: dispatched {s['dispatch_us']:.1f} us, fastest swap_ab={a.swap} "
              f"{s['best_us']:.1f} us ({s['best_us'] / s['dispatch_us'] - 1:+.1%}), better of "
              f"the two {s['either_us']:.1f} us ({s['either_us'] / s['dispatch_us'] - 1:+.1%}), "
              f"{s['layers_won']} layers won")
    with open(a.out, "w") as f:
        json.dump({"kind": "config_probe", "swap_ab": a.swap, "sets": a.sets,
                   "group_size": a.group_size, "environment": environment(),
                   "mismatches_or_errors": bad,
                   "summary": {str(m): s for m, s in sorted(summary.items())}, "rows": rows},
                  f, indent=1)
    print(f"config_probe: {len(rows)} rows, {bad} mismatches or errors")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
