#!/usr/bin/env python3
"""How much of the early bottom's effect is the end, and how much the loop's schedule (needs a
GPU; NOTES.md entries 69-70).

    python3 scripts/early_split_probe.py OUT.json [--sets llama2-7b,llama2-13b,llama2-70b]
                                         [--m 1,8] [--group-size 128]

For every layer and M whose dispatched config can take the early bottom (``early_bottom``,
suffix ``_eb``), four launches of the same problem, timed with the tuner's method
(``bench.harness.Timer``, weights rotated past the L2) in the order P E R1 R0 R0 R1 E P, each
the mean of its two medians:
- P: the config without the early bottom (``early_bottom=False``), the shipped build;
- E: the config with it, the shipped build;
- R1, R0: the config with it built with ``MARLIN_EARLY_RUNTIME 1`` (cuda/marlin.cuh), which
  takes the early path only while the device word ``marlin_early_off`` is 0: R1 with the word
  0 (early path taken), R0 with it 1 (never taken). One build, the same SASS, on both sides.
R1 - R0 is the early path's own effect at the end of the columns; R0 - P what the schedule of
a build with that code costs a launch that never takes it (R's build next to E's, as its own
check that the switch does not move the loop). The four outputs must be the same bits (the
early bottom adds the same partials in the same order); a mismatch is counted (exit status 1).
Prints a line per layer and the sums per M, and writes every row to OUT.json.

``--variant top_sum``: the same split for the column's top summing (``top_sum``, suffix
``_ts``, NOTES.md entry 73) instead: P is the config with neither it nor the early bottom, E
the config with it, and R0 its build taking the last arriver's sum of P.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RUNTIME_PREFIX = "#define MARLIN_EARLY_RUNTIME 1\n"
ORDER = ("P", "E", "R1", "R0", "R0", "R1", "E", "P")


def pairs_for(cfg, variant: str = "early_bottom"):
    """``(P, E)``: the config without and with the early bottom (or the column's top summing,
    ``variant="top_sum"``), or None where it cannot take it."""
    if variant == "top_sum":
        e = cfg.with_(top_sum=True, early_bottom=False)
        return None if e.problems() else (cfg.with_(early_bottom=False), e)
    e = cfg.with_(early_bottom=True)
    if e.problems():
        return None
    return cfg.with_(early_bottom=False), e


def split(times: dict) -> dict:
    """The shares of one row from the four builds' times (µs): ``end`` = R1 - R0 (the early
    path itself), ``schedule`` = R0 - P (the build's cost where it is not taken), ``total`` =
    E - P (what the tuner sees)."""
    return {"end_us": times["R1"] - times["R0"], "schedule_us": times["R0"] - times["P"],
            "total_us": times["E"] - times["P"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--sets", default="llama2-7b,llama2-13b,llama2-70b")
    p.add_argument("--m", default="1,8")
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--variant", default="early_bottom", choices=("early_bottom", "top_sum"))
    a = p.parse_args(argv)
    ms = [int(v) for v in a.m.split(",")]
    if os.environ.get("MARLIN_CUPY_DEFINES", "").strip():
        p.error("unset MARLIN_CUPY_DEFINES: it would go into every build")

    import cupy as cp
    from marlin_cupy import jit, kernels, ops
    from marlin_cupy.bench.harness import Timer, bench_stream, layer_cases
    from marlin_cupy.bench.shapes import set_shapes
    from marlin_cupy.records import environment

    shapes = set_shapes(a.sets)
    todo = {}
    for k, n in shapes:
        for m in ms:
            both = pairs_for(ops.plan(m, n, k, a.group_size).config, a.variant)
            if both is not None:
                todo[(k, n, m)] = both
    runtime, flags = {}, {}
    for _, e in todo.values():
        if e not in runtime:
            runtime[e] = ops.build_kernel(e, False, prefix=RUNTIME_PREFIX)
            module = jit.load_module(RUNTIME_PREFIX + kernels.marlin_source(e, False),
                                     arch_suffix=e.arch_suffix)
            flags[e] = cp.ndarray((1,), cp.int32, memptr=module.get_global("marlin_early_off"))

    rows, mismatches, sums = [], 0, {}
    rng = np.random.default_rng(0)
    with bench_stream() as stream:
        timer = Timer(stream, budget_ms=15.0, min_reps=10, max_reps=60)
        for k, n, m, x, mws in layer_cases(shapes, ms, a.group_size, rng):
            if (k, n, m) not in todo:
                continue
            pcfg, ecfg = todo[(k, n, m)]
            copies, t, outs = len(mws), {b: [] for b in set(ORDER)}, {}
            for build in ORDER:
                cfg = pcfg if build == "P" else ecfg
                if build in ("R1", "R0"):
                    flags[ecfg].fill(1 if build == "R0" else 0)
                    cp.cuda.Device().synchronize()
                    ctx = ops.use_kernel(ecfg, runtime[ecfg])
                else:
                    ctx = contextlib.nullcontext()
                with ctx:
                    held = ops.plan(m, n, k, a.group_size, config=cfg).kernel
                    assert (held is runtime[ecfg]) == (build in ("R1", "R0"))
                    outs[build] = ops.matmul(x, mws[0], config=cfg)
                    t[build].append(timer.measure(
                        lambda i: ops.matmul(x, mws[i], config=cfg), copies).stats.median_us)
            flags[ecfg].fill(0)
            cp.cuda.Device().synchronize()
            times = {b: sum(v) / len(v) for b, v in t.items()}
            same = all(bool(cp.all(outs[b].view(cp.uint16) == outs["P"].view(cp.uint16)))
                       for b in outs)
            mismatches += not same
            row = {"k": k, "n": n, "m": m, "config": ecfg.name, "twin": pcfg.name,
                   **{f"{b}_us": v for b, v in times.items()}, **split(times), "same_bits": same}
            rows.append(row)
            s = sums.setdefault(m, dict.fromkeys(("P", "E", "R1", "R0"), 0.0))
            for b in s:
                s[b] += times[b]
            print(f"{k}x{n} m={m} {ecfg.name}: P {times['P']:.2f}  E {times['E']:.2f}  "
                  f"R1 {times['R1']:.2f}  R0 {times['R0']:.2f} us; end {row['end_us']:+.2f}, "
                  f"schedule {row['schedule_us']:+.2f}, total {row['total_us']:+.2f}"
                  f"{'' if same else '  MISMATCH'}", flush=True)
    for m, s in sorted(sums.items()):
        print(f"M={m}: summed P {s['P']:.1f}  E {s['E']:.1f}  R1 {s['R1']:.1f}  R0 {s['R0']:.1f} "
              f"us; end {s['R1'] - s['R0']:+.1f}, schedule {s['R0'] - s['P']:+.1f}, total "
              f"{s['E'] - s['P']:+.1f}")
    with open(a.out, "w") as f:
        json.dump({"kind": "early_split_probe", "variant": a.variant, "sets": a.sets,
                   "environment": environment(),
                   "mismatches": mismatches, "rows": rows,
                   "summed": {str(m): s for m, s in sorted(sums.items())}}, f, indent=1)
    print(f"early_split_probe: {len(rows)} rows, {mismatches} mismatches")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
