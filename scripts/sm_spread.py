#!/usr/bin/env python3
"""How much of the spread of the CTAs' stream times belongs to the SM, launch after launch
(no GPU; NOTES.md entry 71). Reads a ``timeline_probe.py --raw`` record.

    python3 scripts/sm_spread.py TIMELINE.json[.gz]

Per layer, per launch: each CTA's stream time (first unit landed to the last column's
epilogue) per unit of its stripe (``dynamic_bound.row_stripe_units``: the last stripe may be
short), relative to the launch's median CTA. Per SM the mean of its CTAs, then the mean over
launches: the SM's own part, which a partition that gave each SM work by its measured speed
could remove. Printed: that part's spread over the SMs (10th and 90th percentiles, max); the
slowest CTA's stream of each launch, relative to the median stream (what sets the stream's
end); and the same with each CTA's time divided by its SM's part (what such a partition would
leave; ``bound``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from marlin_cupy.records import read_json  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
from dynamic_bound import row_stripe_units  # noqa: E402


def spread(launches, units) -> dict:
    """``launches``: per launch, (points, sm) with points[:, 3] and [:, 4] the first unit
    landed and the last column's epilogue of each busy CTA in launch order, sm its SM id;
    ``units``: each busy CTA's stripe length. Returns the SMs' own part (``sm_part``: {sm:
    mean relative time per unit}), its percentiles, and per launch the slowest CTA's stream
    relative to the median stream before (``max_rel``) and after (``bound``) dividing each
    CTA's time by its SM's part."""
    units = np.asarray(units, dtype=np.float64)
    rels = []
    for points, sm in launches:
        points, sm = np.asarray(points, dtype=np.float64), np.asarray(sm)
        n = min(len(points), len(units))
        stream, sm, u = points[:n, 4] - points[:n, 3], sm[:n], units[:n]
        per_unit = stream / u
        rels.append((stream / np.median(stream), per_unit / np.median(per_unit), sm))
    per_sm = {}
    for _, rate, sm in rels:
        for k in np.unique(sm):
            per_sm.setdefault(int(k), []).append(float(rate[sm == k].mean()))
    part = {k: float(np.mean(v)) for k, v in per_sm.items()}
    values = np.array(list(part.values()))
    max_rel = [float(rel.max()) for rel, _, _ in rels]
    bound = [float((rel / np.array([part[int(k)] for k in sm])).max()) for rel, _, sm in rels]
    return {"sm_part": part, "p10": float(np.percentile(values, 10)),
            "p90": float(np.percentile(values, 90)), "max": float(values.max()),
            "max_rel": max_rel, "bound": bound}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timeline")
    a = ap.parse_args(argv)
    rec = read_json(a.timeline)
    found = 0
    for row in rec.get("rows", []):
        raw = row.get("raw")
        if not raw:
            continue
        found += 1
        s = spread([(r["points_ns"], r["sm"]) for r in raw], row_stripe_units(row))
        print(f"{row['k']}x{row['n']} m={row['m']} {row['config']} ({len(raw)} launches): "
              f"SM part p10 {s['p10']:.3f} p90 {s['p90']:.3f} max {s['max']:.3f}; slowest "
              f"CTA {min(s['max_rel']):.3f}-{max(s['max_rel']):.3f} of the median, without "
              f"its SM's part {min(s['bound']):.3f}-{max(s['bound']):.3f}")
    if not found:
        print(f"{a.timeline}: no row holds raw launches (timeline_probe.py --raw)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
