"""Grid caps and tile widths on small layers: does giving each CTA whole columns (no split
column, no partial sums) beat the full persistent grid where K is short? (Needs a GPU.)

    python3 scripts/grid_probe.py OUT.json [--sets qwen2.5-0.5b] [--m 1,16,64,128,256]

For every layer and M, candidates are the default dispatch's config (without its own grid
cap, ``column_ctas``: that is one of the grids timed) and the compute
capability 9.0 heuristic's three configs for the M bucket, the generic heuristic's and a
64-wide unswapped tile (each fitted to the layer as the dispatch fits them), each at the full grid (one CTA per resident
slot, what ``matmul`` launches) and capped (``max_ctas``) at the tile columns times the row
slabs (``whole``: every CTA's stripe is whole columns, so none is shared) and at twice that
(``half``: at most two sharers per column). Timing is the tuner's (``bench.harness.Timer``,
weights rotated past the L2, median), each candidate timed twice with the candidates
interleaved; outputs are compared with the default's by their relative difference (at most
2e-3 of its norm; exit status 1 otherwise). Writes OUT.json and prints the best per case.

``--configs A,B`` adds configs by name to every case they fit (``config.fit_tuned``, group
size adjusted; a swapped one only where M is within its rows), ``--only-default`` leaves out
the heuristics' candidates (the dispatch's config and ``--configs`` only), and ``--grids
full`` times the full grid alone, ``--grids full,c3,c4`` also grids capped at 3 and 4 CTAs per
column (NOTES.md entry 90: tiles and grid caps the tuner never measures).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import cupy as cp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import marlin_cupy as mc  # noqa: E402
from marlin_cupy import config, ops  # noqa: E402
from marlin_cupy.bench.harness import Timer, bench_stream, layer_cases  # noqa: E402
from marlin_cupy.bench.shapes import set_shapes  # noqa: E402
from marlin_cupy.records import environment  # noqa: E402


def candidates(m: int, n: int, k: int, g: int, extra=(), only_default: bool = False):
    """Distinct configs that fit the layer: the dispatch's, the sm_90 heuristic's bucket, the
    generic heuristic's, and the ``extra`` config names that fit (first the dispatch's and
    the extras alone with ``only_default``)."""
    gb = config.group_blocks_for(g, k)
    # uncapped (the dispatch's own cap, column_ctas, is one of the grids timed below)
    out = [ops.plan(m, n, k, g).config.compiled]
    for name in extra:
        cfg = config.fit_tuned(config.KernelConfig.from_name(name).with_(group_blocks=gb),
                               m, n, k)
        if cfg is not None:
            out.append(cfg)
    if only_default:
        return list(dict.fromkeys(out))
    out += config.sm90_candidates(m, n, k, g)
    out.append(config.choose_config(m, n, k, g))        # no table, no cc: the generic one
    # and a narrow unswapped tile (64 wide), many columns for whole-column grids
    narrow = config.fit_tuned(config.KernelConfig.from_name("t128_m4_n4_k8_s4_g8_fp32par")
                              .with_(group_blocks=gb), m, n, k)
    if narrow is not None:
        out.append(narrow)
    return list(dict.fromkeys(out))


def grid_caps(grids, whole: int, full: int) -> dict:
    """{label: max_ctas} of the grids asked for (``--grids``) that a candidate gets: "full"
    (None, the persistent grid), "whole" (``whole``, its tile columns times row slabs), "half"
    (twice that) and "cN" (N times that), each only where it is below the ``full`` grid."""
    caps = {"full": None} if "full" in grids else {}
    capped = [("whole", whole), ("half", 2 * whole)]
    capped += [(g, int(g[1:]) * whole) for g in sorted(grids, key=lambda g: (len(g), g))
               if g[:1] == "c" and g[1:].isdigit() and int(g[1:]) > 0]
    for label, cap in capped:
        if label in grids and cap < full:
            caps[label] = cap
    return caps


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--sets", default="qwen2.5-0.5b")
    p.add_argument("--m", default="1,16,64,128,256")
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--configs", default="", help="comma-separated config names to add")
    p.add_argument("--only-default", action="store_true",
                   help="no heuristic candidates: the dispatch's config and --configs only")
    p.add_argument("--grids", default="full,whole,half",
                   help="which grids to time: full, whole, half, or cN for N CTAs per "
                        "column (comma-separated)")
    a = p.parse_args(argv)
    extra = [c for c in a.configs.split(",") if c]
    grids = set(a.grids.split(","))
    ms = [int(v) for v in a.m.split(",")]
    g = a.group_size
    rng = np.random.default_rng(0)
    rows, failures = [], 0
    with bench_stream() as stream:
        timer = Timer(stream, budget_ms=10.0, min_reps=7, max_reps=100)
        for k, n, m, x, mws in layer_cases(set_shapes(a.sets), ms, g, rng):
            ref = mc.matmul(x, mws[0])
            cands = []
            for cfg in candidates(m, n, k, g, extra, a.only_default):
                full = ops.plan(m, n, k, g, config=cfg)
                whole = (n // cfg.tile_n) * full.parallel
                caps = grid_caps(grids, whole, full.grid)
                for label, cap in caps.items():
                    cands.append((cfg, label, cap))
            times = {i: [] for i in range(len(cands))}
            outs = {}
            for _ in range(2):
                for i, (cfg, label, cap) in enumerate(cands):
                    out = cp.empty((m, n), dtype=cp.float16)

                    def call(j, cfg=cfg, cap=cap, out=out):
                        mc.matmul(x, mws[j], out=out, config=cfg, max_ctas=cap)
                    times[i].append(timer.measure(call, len(mws)).stats.median_us)
                    outs[i] = out
            stream.synchronize()
            base = None
            for i, (cfg, label, cap) in enumerate(cands):
                y = mc.matmul(x, mws[0], config=cfg, max_ctas=cap)
                rel = float(cp.linalg.norm((y - ref).astype(cp.float32))
                            / cp.linalg.norm(ref.astype(cp.float32)))
                ok = rel <= 2e-3
                failures += not ok
                t = statistics.fmean(times[i])
                plan = ops.plan(m, n, k, g, config=cfg, max_ctas=cap)
                if base is None:
                    base = t
                rows.append({"k": k, "n": n, "m": m, "config": cfg.name, "grid": label,
                             "ctas": plan.grid, "median_us": t, "runs_us": times[i],
                             "against_default": t / base - 1, "rel_diff": rel, "ok": ok})
            case = [r for r in rows if (r["k"], r["n"], r["m"]) == (k, n, m)]
            best = min(case, key=lambda r: r["median_us"])
            print(f"{k}x{n} m={m}: default {case[0]['config']} {case[0]['median_us']:.2f} us "
                  f"({case[0]['ctas']} CTAs); best {best['config']} {best['grid']} "
                  f"({best['ctas']} CTAs) {best['median_us']:.2f} us "
                  f"({best['against_default']:+.1%})", flush=True)
    Path(a.out).write_text(json.dumps({"kind": "grid_probe", **environment(), "sets": a.sets,
                                       "group_size": g, "failures": failures, "rows": rows},
                                      indent=1))
    print(f"grid_probe: {len(rows)} rows, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
