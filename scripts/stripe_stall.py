"""Which CTAs stream longest, and why: the CTAs whose stripe holds the bottom of a split column
that ends inside the stripe, from a raw timeline (no GPU needed).

    python3 scripts/stripe_stall.py TIMELINE.json[.gz] [TIMELINE.json[.gz] ...]

TIMELINE is a ``scripts/timeline_probe.py --raw`` record. A launch gives CTA b the units
``[b * iters, (b + 1) * iters)`` (``iters = ceil(units / grid)``, cuda/marlin.cuh), walking
down K column after column. When a column ends inside a stripe (not at its last unit) and
other CTAs hold the rest of it, this CTA holds its bottom and finishes its share there, in
the middle of its stream: it stores its partial and publishes it (the parallel reduction's
count-in, or the serial chain's hand-over), a GPU-scope release whose fence waits for the
thread's copies in flight (NOTES.md entries 53 and 68). Every such CTA is counted here, per
row: how many CTAs of full stripes have 0 (or 1, 2, ..) of these mid-stripe ends, their mean
and longest stream (points 3 to 4, averaged over the launches), the difference of the means,
and in how many launches the CTA that streamed longest had one.
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


def mid_stripe_splits(units: int, k_tiles: int, grid: int) -> np.ndarray:
    """For each CTA with work, in launch order: how many split columns end strictly inside its
    stripe (the CTA holds their bottom and goes on streaming after them)."""
    iters = -(-units // grid)
    busy = -(-units // iters)
    out = np.zeros(busy, dtype=int)
    for b in range(busy):
        s, e = b * iters, min((b + 1) * iters, units)
        first_col = s // k_tiles
        for col in range(first_col, (e - 1) // k_tiles + 1):
            last = (col + 1) * k_tiles - 1        # the column's last unit
            if s <= last < e - 1 and (col * k_tiles) // iters != b:
                out[b] += 1
    return out


def row_stalls(row: dict) -> dict:
    """Per row: the full-stripe CTAs grouped by their mid-stripe split ends, with their mean and
    longest stream (µs, each CTA's mean over the launches), ``penalty_us`` (mean of the CTAs
    with one or more less the mean of those with none; None if either group is empty) and
    ``slowest_has_split`` (the share of launches whose longest-streaming full-stripe CTA has
    one)."""
    if not row.get("raw"):
        raise ValueError(f"row {row.get('k')}x{row.get('n')} M={row.get('m')} has no raw "
                         f"points: record it with timeline_probe.py --raw")
    cfg = KernelConfig.from_name(row["config"])
    if cfg.dyn_chunk:
        raise ValueError(f"{cfg.name} hands units out at run time: its stripes are not static")
    slabs = -(-row["m"] // cfg.tile_m)
    k_tiles = row["k"] // cfg.tile_k
    units = k_tiles * (row["n"] // cfg.tile_n) * slabs
    grid = int(row["grid"])
    iters = -(-units // grid)
    splits = mid_stripe_splits(units, k_tiles, grid)
    full = np.array([min(iters, units - b * iters) == iters for b in range(len(splits))])
    streams, slowest = [], []
    for launch in row["raw"]:
        pts = np.asarray(launch["points_ns"], dtype=float)[:len(splits)]
        st = pts[:, 4] - pts[:, 3]
        streams.append(st)
        cand = np.where(full)[0]
        slowest.append(splits[cand[np.argmax(st[cand])]] > 0)
    mean = np.mean(np.array(streams), axis=0) / 1e3
    groups = {}
    for v in sorted(set(splits[full].tolist())):
        sel = full & (splits == v)
        groups[int(v)] = {"ctas": int(sel.sum()), "mean_us": float(mean[sel].mean()),
                          "max_us": float(mean[sel].max())}
    with_split = full & (splits > 0)
    without = full & (splits == 0)
    penalty = (float(mean[with_split].mean() - mean[without].mean())
               if with_split.any() and without.any() else None)
    return {"config": cfg.name, "parallel_reduce": cfg.parallel_reduce, "groups": groups,
            "penalty_us": penalty, "slowest_has_split": float(np.mean(slowest))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("timelines", nargs="+")
    a = p.parse_args(argv)
    print("| record | layer | M | config | CTAs by mid-stripe split ends: count, mean (max) "
          "stream, µs | penalty | slowest has one |")
    print("| --- | --- | ---: | --- | --- | ---: | ---: |")
    for path in a.timelines:
        rec = read_json(path)           # plain or gzipped
        for row in rec["rows"]:
            s = row_stalls(row)
            groups = "; ".join(f"{v}: {g['ctas']}, {g['mean_us']:.2f} ({g['max_us']:.2f})"
                               for v, g in s["groups"].items())
            pen = "-" if s["penalty_us"] is None else f"{s['penalty_us']:+.2f}"
            print(f"| {Path(path).name} | {row['k']}x{row['n']} | {row['m']} | `{s['config']}` | "
                  f"{groups} | {pen} | {100 * s['slowest_has_split']:.0f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
