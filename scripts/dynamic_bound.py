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

With ``--handout`` it also plays real hand-outs through, one per scheme, at each chunk cost
(NOTES.md entry 111): chunks of whole units, each costing ``cost`` µs at its end when another
follows on the same CTA (the CTA's own stripe end is in the span already). A CTA that finishes
a chunk takes the next one while any is left (the earliest to finish takes first). Schemes
(``--schemes``, comma-separated):

- ``qN``: every unit in chunks of N (the design of entry 53, ``dyn_chunk``); CTA b starts with
  chunk b;
- ``hFqN``: a static share F of each CTA's stripe first (its first ``floor(F * units)``
  units, no draw), then the rest of the launch's units in chunks of N;
- ``gDqN``: guided: each draw takes ``max(N, ceil(left / (D * CTAs)))`` units of the ``left``
  ones, so chunks start long and shorten to N near the end.

Each CTA keeps its measured rate and start, as in the fluid bound, which no scheme beats when
the CTAs start together. What ``cost`` stands for is the chunk's end beyond the loop: the
reduction inside the CTA, the partial's store and publication, and the read of the extra
partial in its column's sum. Entry 53's build paid a count-in round trip there as well,
several µs; the point of the table is how small the cost must be before a build can gain.
"""
from __future__ import annotations

import argparse
import heapq
import math
import re
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


def handout_end(start, rate, total: float, chunk: int, cost: float, static=None,
                guided: float = 0.0) -> float:
    """The last stream end (the start's unit) of a run-time hand-out played through: CTA i
    streams from ``start[i]`` at ``rate[i]`` units per time unit; first ``static[i]`` units of
    its own (none by default), then chunks from a shared pool of the ``total`` units left over,
    each ``chunk`` units (or guided: ``max(chunk, ceil(left / (guided * CTAs)))``; the last
    chunk takes what is left). A chunk that follows earlier work on the same CTA (static
    units or a chunk) first pays ``cost`` for that work's end. Whichever CTA is free first
    draws next (ties: the lower index), so CTA b's first chunk is chunk b when all start
    together."""
    start = np.asarray(start, dtype=float)
    rate = np.asarray(rate, dtype=float)
    n = len(start)
    if n == 0 or chunk < 1 or (rate <= 0).any():
        raise ValueError("need CTAs with positive rates and chunks of at least one unit")
    static = np.zeros(n) if static is None else np.asarray(static, dtype=float)
    left = float(total) - float(static.sum())
    if left < 0:
        raise ValueError("the static units exceed the total")
    heap = [(start[i] + static[i] / rate[i], i, static[i] > 0) for i in range(n)]
    heapq.heapify(heap)
    last = -math.inf
    while heap:
        t, i, busy = heapq.heappop(heap)
        if left <= 0:
            last = max(last, t)
            continue
        take = max(chunk, math.ceil(left / (guided * n))) if guided > 0 else chunk
        take = min(float(take), left)
        left -= take
        heapq.heappush(heap, (t + (cost if busy else 0.0) + take / rate[i], i, True))
    return float(last)


SCHEME = re.compile(r"^(?:q(?P<q>\d+)|h(?P<share>0?\.\d+|1(?:\.0*)?)q(?P<hq>\d+)|"
                    r"g(?P<g>\d+(?:\.\d+)?)q(?P<gq>\d+))$")


def parse_scheme(text: str) -> dict:
    """``qN``, ``hFqN`` or ``gDqN`` (module docstring) as keyword arguments of
    ``scheme_end``."""
    m = SCHEME.match(text.strip())
    if not m or int(m["q"] or m["hq"] or m["gq"]) < 1:
        raise ValueError(f"scheme {text!r}: expected qN, hFqN (0 < F <= 1) or gDqN with N >= 1")
    if m["q"]:
        return {"chunk": int(m["q"])}
    if m["hq"]:
        share = float(m["share"])
        if not 0 < share <= 1:
            raise ValueError(f"scheme {text!r}: the static share must be in (0, 1]")
        return {"chunk": int(m["hq"]), "share": share}
    return {"chunk": int(m["gq"]), "guided": float(m["g"])}


def scheme_end(start, rate, units, chunk: int, cost: float, share: float = 0.0,
               guided: float = 0.0) -> float:
    """``handout_end`` for a launch whose CTAs had stripes of ``units`` (their static share
    taken first)."""
    units = np.asarray(units, dtype=float)
    static = np.floor(share * units) if share > 0 else None
    return handout_end(start, rate, units.sum(), chunk, cost, static=static, guided=guided)


def launch_points(launch: dict, per_cta: np.ndarray):
    """(start, end, units) of a raw launch's CTAs that streamed (points 3 and 4, in ns)."""
    pts = np.asarray(launch["points_ns"], dtype=float)[:len(per_cta)]
    units = per_cta[:len(pts)]
    start, end = pts[:, 3], pts[:, 4]
    ok = end - start > 0
    if not ok.any():
        raise ValueError("no CTA streamed in this launch")
    return start[ok], end[ok], units[ok]


def raw_stripes(row: dict) -> np.ndarray:
    """``row_stripe_units`` of a row that holds raw launches (else a ValueError saying how to
    record them)."""
    if not row.get("raw"):
        raise ValueError(f"row {row.get('k')}x{row.get('n')} M={row.get('m')} has no raw "
                         f"points: record it with timeline_probe.py --raw")
    return row_stripe_units(row)


def row_handout(row: dict, schemes, costs_us) -> dict:
    """Per scheme name and cost (µs): the median over the row's launches of the last stream
    end of the static stripes minus the scheme's, in µs (positive: the scheme ends sooner)."""
    per_cta = raw_stripes(row)
    parsed = {name: parse_scheme(name) for name in schemes}
    out = {(name, c): [] for name in schemes for c in costs_us}
    for launch in row["raw"]:
        start, end, units = launch_points(launch, per_cta)
        rate = units / (end - start)
        last = float(end.max())
        for name, kw in parsed.items():
            for c in costs_us:
                out[(name, c)].append(last - scheme_end(start, rate, units, cost=1e3 * c, **kw))
    return {key: float(np.median(v)) / 1e3 for key, v in out.items()}


def row_bound(row: dict) -> dict:
    """The median over the row's launches of what ``fluid_end`` gives, in µs."""
    per_cta = raw_stripes(row)
    out = []
    for launch in row["raw"]:
        pts = np.asarray(launch["points_ns"], dtype=float)[:len(per_cta)]
        last, f, med, fluid = fluid_end(pts, per_cta[:len(pts)])
        span = float(np.asarray(launch["points_ns"], dtype=float)[:, 6].max())
        out.append((last - f, span, med, fluid))
    saving, span, med, fluid = np.median(np.array(out), axis=0) / 1e3
    return {"saving_us": saving, "span_us": span, "median_stream_us": med,
            "fluid_stream_us": fluid}


DEFAULT_SCHEMES = "q2,q4,q8,h0.7q2,h0.85q1,h0.85q2,g2q1,g2q2"
DEFAULT_COSTS = "0,0.2,0.5,1"


def handout_table(rows, schemes, costs_us) -> list:
    """Markdown lines: per row and scheme the saving at each cost, then the sums per M."""
    lines = ["| layer | M | scheme | " + " | ".join(f"cost {c:g} µs" for c in costs_us) + " |",
             "| --- | ---: | --- | " + " | ".join("---:" for _ in costs_us) + " |"]
    sums = {}
    best = {}
    for row in rows:
        got = row_handout(row, schemes, costs_us)
        for name in schemes:
            vals = [got[(name, c)] for c in costs_us]
            lines.append(f"| {row['k']}x{row['n']} | {row['m']} | {name} | " +
                         " | ".join(f"{v:+.2f}" for v in vals) + " |")
            acc = sums.setdefault((row["m"], name), [0.0] * len(costs_us))
            for j, v in enumerate(vals):
                acc[j] += v
        # A dispatch could take, per layer, the scheme that gains most, or static stripes.
        acc = best.setdefault(row["m"], [0.0] * len(costs_us))
        for j, c in enumerate(costs_us):
            acc[j] += max(0.0, max(got[(name, c)] for name in schemes))
    lines.append("")
    lines.append("| M | scheme | " + " | ".join(f"summed, cost {c:g} µs" for c in costs_us) + " |")
    lines.append("| ---: | --- | " + " | ".join("---:" for _ in costs_us) + " |")
    for (m, name), vals in sorted(sums.items(), key=lambda kv: (kv[0][0], schemes.index(kv[0][1]))):
        lines.append(f"| {m} | {name} | " + " | ".join(f"{v:+.2f}" for v in vals) + " |")
    for m, vals in sorted(best.items()):
        lines.append(f"| {m} | best per layer, or static | " +
                     " | ".join(f"{v:+.2f}" for v in vals) + " |")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("timeline")
    p.add_argument("--handout", action="store_true",
                   help="also play hand-out schemes through at each chunk cost (docstring)")
    p.add_argument("--schemes", default=DEFAULT_SCHEMES,
                   help=f"with --handout: qN, hFqN, gDqN, comma-separated "
                        f"(default {DEFAULT_SCHEMES})")
    p.add_argument("--costs", default=DEFAULT_COSTS,
                   help=f"with --handout: each chunk end's cost in µs, comma-separated "
                        f"(default {DEFAULT_COSTS})")
    a = p.parse_args(argv)
    schemes = [x.strip() for x in a.schemes.split(",") if x.strip()]
    for name in schemes:
        try:
            parse_scheme(name)
        except ValueError as e:
            p.error(str(e))
    try:
        costs = [float(x) for x in a.costs.split(",") if x.strip()]
    except ValueError:
        p.error(f"--costs {a.costs!r}: expected numbers in µs")
    if not costs or min(costs) < 0:
        p.error("--costs: at least one cost, none negative")
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
    if a.handout:
        print("\nHand-outs played through (µs the last stream end moves earlier; median over "
              "launches):\n")
        print("\n".join(handout_table(rec["rows"], schemes, costs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
