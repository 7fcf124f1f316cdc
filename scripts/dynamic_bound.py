"""What handing units out at run time could save, from a raw timeline (no GPU needed).

    python3 scripts/dynamic_bound.py TIMELINE.json[.gz]

TIMELINE is a ``scripts/timeline_probe.py --raw`` record: for each launch, each CTA's points
(ns) and SM. A launch gives each CTA a contiguous stripe of ``iters = ceil(units / grid)``
units (cuda/marlin.cuh), so its stream ends when the slowest CTA's stripe ends, however much
faster the others ran. If CTAs instead took units from a shared counter until none were left
(NOTES.md entry 51, next lever 1), the fast ones would take more.

The bound here is the fluid limit of that: every CTA keeps the rate it had in the launch
(``units / stream``, its stripe's units over its stream time, points 3 to 4) and starts
streaming when it did (point 3), and the work is shared so that every CTA stops at the same
moment ``F``: ``sum(rate * (F - start)) = units``. The saving is the last stream end of the
launch minus ``F``; its median over the launches is printed per row, next to the span (first
entry to last exit). It is an upper bound: it ignores the chunks' granularity, the counter's
atomics, and that a rate measured while others still streamed may not hold when they all
stream to the end (the DRAM's total bandwidth is shared). The median CTA's stream and the fluid
stream ``units / sum(rate)`` are printed as well.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from marlin_cupy.config import KernelConfig  # noqa: E402
from marlin_cupy.records import read_json  # noqa: E402


def stripe_units(units: int, grid: int) -> np.ndarray:
    """Units of each CTA with work, in launch order: stripes of ceil(units / grid)."""
    iters = -(-units // grid)
    busy = -(-units // iters)
    return np.array([min(iters, units - i * iters) for i in range(busy)], dtype=float)


def row_stripe_units(row: dict) -> np.ndarray:
    """``stripe_units`` of a timeline row (its config, layer, M and grid)."""
    cfg = KernelConfig.from_name(row["config"])
    units = (row["k"] // cfg.tile_k) * (row["n"] // cfg.tile_n) * -(-row["m"] // cfg.tile_m)
    return stripe_units(units, int(row["grid"]))


def fluid_end(points: np.ndarray, units: np.ndarray) -> tuple:
    """(last stream end, fluid end F, median stream, fluid stream) of one launch, in the
    points' unit; ``points`` has a row per CTA with work (points 3 and 4: stream start and
    end), ``units`` its stripe's units."""
    start, end = points[:, 3].astype(float), points[:, 4].astype(float)
    stream = end - start
    ok = stream > 0
    if not ok.any():
        raise ValueError("no CTA streamed in this launch")
    rate = units[ok] / stream[ok]
    total = units[ok].sum()
    f = (total + (rate * start[ok]).sum()) / rate.sum()
    return float(end[ok].max()), float(f), float(np.median(stream[ok])), float(total / rate.sum())


def row_bound(row: dict) -> dict:
    """The median over the row's launches of what ``fluid_end`` gives, in µs."""
    if not row.get("raw"):
        raise ValueError(f"row {row.get('k')}x{row.get('n')} M={row.get('m')} has no raw "
                         f"points: record it with timeline_probe.py --raw")
    per_cta = row_stripe_units(row)
    out = []
    for launch in row["raw"]:
        pts = np.asarray(launch["points_ns"], dtype=float)[:len(per_cta)]
        last, f, med, fluid = fluid_end(pts, per_cta[:len(pts)])
        span = float(np.asarray(launch["points_ns"], dtype=float)[:, 6].max())
        out.append((last - f, span, med, fluid))
    saving, span, med, fluid = np.median(np.array(out), axis=0) / 1e3
    return {"saving_us": saving, "span_us": span, "median_stream_us": med,
            "fluid_stream_us": fluid}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("timeline")
    a = p.parse_args(argv)
    rec = read_json(a.timeline)         # plain or gzipped
    total = {}
    print("| layer | M | config | span | median stream | fluid stream | saving |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for row in rec["rows"]:
        b = row_bound(row)
        t = total.setdefault(row["m"], [0.0, 0.0])
        t[0] += b["saving_us"]
        t[1] += b["span_us"]
        print(f"| {row['k']}x{row['n']} | {row['m']} | `{row['config']}` | {b['span_us']:.2f} | "
              f"{b['median_stream_us']:.2f} | {b['fluid_stream_us']:.2f} | "
              f"{b['saving_us']:.2f} |")
    for m, (s, span) in sorted(total.items()):
        print(f"\nM = {m}: up to {s:.2f} µs of {span:.2f} µs of spans summed ({100 * s / span:.1f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
