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

    python3 scripts/stripe_stall.py --what-if [--store-us 0.4] [--sets llama2-7b,llama2-13b]
                                    TIMELINE.json[.gz] ...

``--what-if`` plays the mid-stripe ends away on the recorded launches (``what_if``; lever D,
NOTES.md entries 112-113): each CTA with one streams less by its excess over the median of
the CTAs without one, at most the row's penalty less ``--store-us`` (what writing its partial
as words still costs), and the CTAs that end their stripes in the same split column (who wait
for each other's partials: the shared sum's waiters, the serial chain's turns) exit earlier by
as much as their latest arrival moved; every other CTA keeps its times. Per row the median
span over the launches, recorded and played, and the difference; per record, set (the first of
``--sets`` that holds the layer) and M their sums against the rows' summed event times. An estimate: it ignores that a column's waits
may be set by a CTA outside that group, and that the words may arrive after the others.
Measured against it (entry 114): lever D's builds took only 0.4-0.6 µs off the penalty (not
down to the store), and their longer sums cost more than that; the play is an upper bound.
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


def partition(row: dict) -> tuple:
    """A raw row's static partition: its config, ``k_tiles`` (per column), ``units``,
    ``iters`` (per stripe), ``splits`` (``mid_stripe_splits``, per CTA with work) and ``full``
    (which of those CTAs have a whole stripe)."""
    if not row.get("raw"):
        raise ValueError(f"row {row.get('k')}x{row.get('n')} M={row.get('m')} has no raw "
                         f"points: record it with timeline_probe.py --raw")
    cfg = KernelConfig.from_name(row["config"])
    if cfg.dyn_chunk:
        raise ValueError(f"{cfg.name} hands units out at run time: its stripes are not static")
    slabs = -(-row["m"] // cfg.tile_m)
    k_tiles = row["k"] // cfg.tile_k
    units = k_tiles * (row["n"] // cfg.tile_n) * slabs
    iters = -(-units // int(row["grid"]))
    splits = mid_stripe_splits(units, k_tiles, int(row["grid"]))
    full = np.array([min(iters, units - b * iters) == iters for b in range(len(splits))])
    return cfg, k_tiles, units, iters, splits, full


def row_stalls(row: dict) -> dict:
    """Per row: the full-stripe CTAs grouped by their mid-stripe split ends, with their mean and
    longest stream (µs, each CTA's mean over the launches), ``penalty_us`` (mean of the CTAs
    with one or more less the mean of those with none; None if either group is empty) and
    ``slowest_has_split`` (the share of launches whose longest-streaming full-stripe CTA has
    one)."""
    cfg, _, _, _, splits, full = partition(row)
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


def what_if(row: dict, store_us: float = 0.4) -> dict:
    """The row's launches with the mid-stripe ends played away (see the module's ``--what-if``):
    ``span_us`` and ``played_us``, the medians over the launches of the recorded span (first
    CTA entry to last exit) and the played one, and ``gain_us`` their difference."""
    stalls = row_stalls(row)
    cfg, k_tiles, units, iters, splits, full = partition(row)
    busy = len(splits)
    cap = max(0.0, (stalls["penalty_us"] or 0.0) - store_us) * 1e3
    # The CTAs that end their stripe in the same split column, by that column.
    groups = {}
    for b in range(busy):
        last = (min((b + 1) * iters, units) - 1) // k_tiles
        if last * k_tiles // iters != (last * k_tiles + k_tiles - 1) // iters:
            groups.setdefault(last, []).append(b)
    spans, played = [], []
    for launch in row["raw"]:
        pts = np.asarray(launch["points_ns"], dtype=float)[:busy]
        stream = pts[:, 4] - pts[:, 3]
        base = np.median(stream[full & (splits == 0)]) if (full & (splits == 0)).any() else None
        cut = np.zeros(busy)
        if base is not None:
            cut[splits > 0] = np.clip(stream[splits > 0] - base, 0.0, cap)
        shift = cut.copy()
        for members in groups.values():
            arrive = pts[members, 5]
            moved = float(arrive.max() - (arrive - cut[members]).max())
            shift[members] = moved
        spans.append(pts[:, 6].max() - pts[:, 0].min())
        played.append((pts[:, 6] - shift).max() - pts[:, 0].min())
    span, play = float(np.median(spans)) / 1e3, float(np.median(played)) / 1e3
    return {"config": cfg.name, "span_us": span, "played_us": play, "gain_us": span - play}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("timelines", nargs="+")
    p.add_argument("--what-if", action="store_true",
                   help="play the mid-stripe ends away on the recorded launches (what_if)")
    p.add_argument("--store-us", type=float, default=0.4,
                   help="(--what-if) what a mid-stripe end still costs, µs")
    p.add_argument("--sets", default="llama2-7b,llama2-13b,llama2-70b",
                   help="(--what-if) the sets to sum the rows by")
    a = p.parse_args(argv)
    if a.what_if:
        return print_what_if(a.timelines, a.store_us, a.sets)
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


def print_what_if(paths, store_us: float, sets: str) -> int:
    """The --what-if table: a row per layer and M, then per record, set and M the sums."""
    from marlin_cupy.bench.shapes import set_shapes
    names = [t.strip() for t in sets.split(",") if t.strip()]
    owner = {}
    for name in reversed(names):        # the first set that holds a layer names it
        owner.update({tuple(s): name for s in set_shapes(name)})
    print(f"Mid-stripe ends played away (stripe_stall.py --what-if, store {store_us:.2f} µs)\n")
    print("| record | layer | M | config | span µs | played µs | gain µs |")
    print("| --- | --- | ---: | --- | ---: | ---: | ---: |")
    sums = {}
    for path in paths:
        rec = read_json(path)
        for row in rec["rows"]:
            w = what_if(row, store_us)
            print(f"| {Path(path).name} | {row['k']}x{row['n']} | {row['m']} | `{w['config']}` "
                  f"| {w['span_us']:.2f} | {w['played_us']:.2f} | {w['gain_us']:.2f} |")
            key = (Path(path).name, owner.get((row["k"], row["n"]), "other"), row["m"])
            event, gain = sums.get(key, (0.0, 0.0))
            sums[key] = (event + row["event_us"], gain + w["gain_us"])
    print("\n| record | set | M | rows' event times, µs | gain, µs | share |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for (name, group, m), (event, gain) in sorted(sums.items()):
        print(f"| {name} | {group} | {m} | {event:.1f} | {gain:.2f} | "
              f"{100 * gain / event:.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
