"""More CTAs than fit at once, for the configs whose CTAs never wait on each other (needs a GPU).

    python3 scripts/wave_probe.py OUT.json [--m 1,8,16] [--sets llama2-7b,llama2-13b,llama2-70b]
                                  [--factors 1,1.5,2,3]

The persistent grid is at most one CTA per resident slot (``ops._plan``): the serial chain and
the shared sum (COOP) wait on other CTAs, which must then be resident. The parallel reduction
on tiles below 32 rows (``parallel_reduce``, the last arriver sums; every dispatched config at
M <= 8) never waits, so its grid may be larger than what fits: the hardware then starts each
further CTA on whichever SM frees a slot first, which hands the work out at run time without
any code of ours (NOTES.md entries 51 and 53: the slowest CTA of an M = 1 launch streams 25-29 %
longer than the median with the same work). The price: shorter stripes, so more stripe ends
(partial stores, count-ins, prologues) and more partials per column.

For every layer and M whose dispatched config qualifies, the grid is ``factor`` times the
resident one (the device's SM count scaled in ``ops.device_facts``, which sizes the locks and
the scratch with it), timed with the tuner's method (``bench.harness.Timer``, weights rotated
past the L2), factors in the order given and then reversed, each factor's time the mean of its
two medians. Outputs are compared with factor 1 by their relative difference (at most 2e-3 of
its norm: partial sums cut elsewhere round differently). Rows of other configs are skipped and
listed.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import cupy as cp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from marlin_cupy import ops  # noqa: E402
from marlin_cupy.bench.harness import Timer, bench_stream, layer_cases  # noqa: E402
from marlin_cupy.bench.shapes import set_shapes  # noqa: E402
from marlin_cupy.records import environment  # noqa: E402


def never_waits(cfg) -> bool:
    """Whether a config's CTAs never wait on another CTA (so the grid may exceed residency):
    the parallel reduction's last-arriver sum, not the shared sum of tiles from 32 rows (48
    before NOTES.md entry 64), and not the early-bottom (``_eb``) or top-sum (``_ts``) builds,
    whose CTAs wait for each other's words (cuda/marlin.cuh, early_slot and top_sum)."""
    return (bool(cfg.parallel_reduce) and cfg.tile_m < 32 and not cfg.dyn_chunk
            and not cfg.early_bottom and not cfg.top_sum)


class scaled_sms:
    """Within the block, ``ops`` plans grids for ``factor`` times the device's SMs."""

    def __init__(self, factor: float):
        self.factor = factor

    def __enter__(self):
        dev = cp.cuda.Device().id
        ops.device_facts(dev)
        self.dev, self.saved = dev, ops._device_props[dev]
        ops._device_props[dev] = dict(self.saved, sms=int(round(self.saved["sms"] * self.factor)))
        ops._plan.cache_clear()     # plans are cached per problem, not per device facts
        return self

    def __exit__(self, *exc):
        ops._device_props[self.dev] = self.saved
        ops._plan.cache_clear()
        return False


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--sets", default="llama2-7b,llama2-13b,llama2-70b")
    p.add_argument("--m", default="1,8,16")
    p.add_argument("--factors", default="1,1.5,2,3")
    p.add_argument("--group-size", type=int, default=128)
    a = p.parse_args(argv)
    ms = [int(v) for v in a.m.split(",")]
    factors = [float(v) for v in a.factors.split(",")]
    if not factors or factors[0] != 1.0:
        p.error("--factors must start with 1 (the reference)")
    shapes = set_shapes(a.sets)
    rng = np.random.default_rng(0)
    rows, skipped, failures = [], [], 0
    with bench_stream() as stream:
        timer = Timer(stream, budget_ms=15.0, min_reps=10, max_reps=60)
        for k, n, m, x, mws in layer_cases(shapes, ms, a.group_size, rng):
            cfg = ops.plan(m, n, k, a.group_size).config
            if not never_waits(cfg):
                skipped.append({"k": k, "n": n, "m": m, "config": cfg.name})
                print(f"{k}x{n} m={m} {cfg.name}: skipped (its CTAs wait on each other)",
                      flush=True)
                continue
            copies = len(mws)
            times = {f: [] for f in factors}
            grids, outs = {}, {}
            for f in factors + factors[::-1]:
                with scaled_sms(f):
                    grids[f] = ops.plan(m, n, k, a.group_size, config=cfg).grid
                    if f not in outs:
                        outs[f] = ops.matmul(x, mws[0], config=cfg)
                    times[f].append(timer.measure(
                        lambda i: ops.matmul(x, mws[i], config=cfg), copies).stats.median_us)
            ref = outs[1.0].astype(cp.float64)
            row = {"k": k, "n": n, "m": m, "config": cfg.name, "factors": {}}
            line = []
            for f in factors:
                t = sum(times[f]) / len(times[f])
                rel = float(cp.linalg.norm(outs[f].astype(cp.float64) - ref)
                            / cp.linalg.norm(ref))
                ok = rel <= 2e-3
                failures += not ok
                row["factors"][str(f)] = {"grid": grids[f], "us": t, "rel_diff": rel, "ok": ok}
                base = sum(times[1.0]) / len(times[1.0])
                line.append(f"x{f:g} grid {grids[f]}: {t:.1f} us ({t / base - 1:+.1%})"
                            f"{'' if ok else ' MISMATCH'}")
            rows.append(row)
            print(f"{k}x{n} m={m} {cfg.name}: " + ", ".join(line), flush=True)
    sums = {}
    for r in rows:
        for f, v in r["factors"].items():
            sums.setdefault(r["m"], {}).setdefault(f, 0.0)
            sums[r["m"]][f] += v["us"]
    for m, s in sorted(sums.items()):
        print(f"M={m}, the {sum(r['m'] == m for r in rows)} qualifying layers summed: " +
              ", ".join(f"x{float(f):g} {t:.1f} us ({t / s['1.0'] - 1:+.1%})"
                        for f, t in s.items()))
    with open(a.out, "w") as fh:
        json.dump({"kind": "wave_probe", "sets": a.sets, "factors": factors,
                   "environment": environment(), "failures": failures, "rows": rows,
                   "skipped": skipped,
                   "summed": {str(m): s for m, s in sorted(sums.items())}}, fh, indent=1)
    print(f"wave_probe: {len(rows)} rows, {len(skipped)} skipped, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
