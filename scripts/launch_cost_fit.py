"""Split each provider's per-layer times into a fixed cost per launch and a streaming rate
(no GPU needed).

    python3 scripts/launch_cost_fit.py BENCH.json [--read READ_CEILING.json] [--m 1,8,16]
                                       [--out FIT.md]

Across a record's layers (the llama2 sets; the ideal layer is left out, a single huge layer
would decide the slope alone) the time of one launch is fitted by least squares as

    time = fixed + bytes / rate

with ``bytes`` what the provider must read: the benchmark's ``min_bytes`` for ``marlin`` (4-bit
weights, scales, activations and output), the FP16 weights for the FP16 GEMM of each row (its
``baseline``). With ``--read`` the same fit is made of ``scripts/read_ceiling.py``'s plain
read-only kernels, and each set's summed gap between ``marlin`` and the plain reads at each M is
split into the part the fixed costs explain (layers x the difference of the two fits' fixed
costs) and the part the rates explain (the set's bytes x the difference of 1 / rate). The rest
is what the straight lines do not fit.

Prints (and with ``--out`` writes) markdown: per provider and M, the fixed cost, the rate, and
the largest residual over the layers.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from marlin_cupy.records import read_json  # noqa: E402


def fit(points):
    """Least-squares ``(fixed_us, rate_TBps, max_residual_us)`` of ``us = fixed + MB / rate``
    over ``points``, a list of (bytes, us). Needs two distinct sizes."""
    import numpy as np
    mb = np.array([b / 1e6 for b, _ in points], dtype=np.float64)
    us = np.array([t for _, t in points], dtype=np.float64)
    if len(points) < 2 or np.ptp(mb) == 0:
        raise ValueError("a fit needs layers of at least two sizes")
    design = np.vstack([np.ones_like(mb), mb]).T
    (fixed, slope), *_ = np.linalg.lstsq(design, us, rcond=None)
    if slope <= 0:
        raise ValueError(f"the times do not grow with the bytes (slope {slope:.4g} µs/MB)")
    resid = us - (fixed + slope * mb)
    return float(fixed), float(1.0 / slope), float(np.abs(resid).max())


def bench_points(record, m):
    """{provider: [(set, k, n, bytes, us)]} at batch ``m`` of a bench record: ``marlin`` and
    ``fp16`` (each row's FP16 baseline), llama2 sets only."""
    out = {"marlin": [], "fp16": []}
    for r in record["rows"]:
        if r["m"] != m or r["provider"] != "marlin" or not r["set"].startswith("llama2"):
            continue
        if r.get("median_us") is None or r.get("baseline_us") is None:
            continue
        out["marlin"].append((r["set"], r["k"], r["n"], r["min_bytes"], r["median_us"]))
        out["fp16"].append((r["set"], r["k"], r["n"], 2 * r["k"] * r["n"], r["baseline_us"]))
    return out


def read_points(record):
    """[(set, k, n, bytes, us)] of a ``scripts/read_ceiling.py`` record's plain reads."""
    return [(r["set"], r["k"], r["n"], r["read_bytes"], r["read_us"]) for r in record["rows"]]


def split_gap(marlin, read):
    """Per set: (marlin summed µs, read summed µs, fixed part, rate part) of the gap, from the
    two fits over the same layers. ``marlin`` and ``read``: lists of (set, k, n, bytes, us)."""
    fm, rm, _ = fit([(b, t) for *_, b, t in marlin])
    fr, rr, _ = fit([(b, t) for *_, b, t in read])
    out = {}
    for name in sorted({s for s, *_ in marlin}):
        mine = [p for p in marlin if p[0] == name]
        theirs = {(k, n): (b, t) for s, k, n, b, t in read if s == name}
        if len(theirs) != len(mine) or any((k, n) not in theirs for _, k, n, _, _ in mine):
            continue
        t_m = sum(t for *_, t in mine)
        t_r = sum(t for _, t in theirs.values())
        fixed_part = len(mine) * (fm - fr)
        rate_part = sum(b / 1e6 * (1 / rm - 1 / rr) for *_, b, _ in mine)
        out[name] = (t_m, t_r, fixed_part, rate_part)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bench")
    p.add_argument("--read", help="a scripts/read_ceiling.py record")
    p.add_argument("--m", default="1,8,16", help="batch sizes (default 1,8,16)")
    p.add_argument("--out")
    a = p.parse_args(argv)
    record = read_json(a.bench)         # a .json.gz too
    read = read_json(a.read) if a.read else None
    env = record.get("environment", record)
    lines = [f"# Fixed cost per launch and streaming rate: `{a.bench}`", "",
             f"Kernel {str(env.get('git_commit', '?'))[:12]}, {record.get('date', '?')}, "
             f"copy bandwidth {record.get('copy_bandwidth_GBps', float('nan')):.0f} GB/s; "
             "fit `time = fixed + bytes / rate` over the llama2 layers "
             "(scripts/launch_cost_fit.py).", "",
             "| provider | M | layers | fixed (µs) | rate (TB/s) | largest residual (µs) |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    ms = [int(v) for v in a.m.split(",") if v.strip()]
    for m in ms:
        pts = bench_points(record, m)
        for prov in ("marlin", "fp16"):
            if len(pts[prov]) < 2:
                continue
            fx, rate, res = fit([(b, t) for *_, b, t in pts[prov]])
            lines.append(f"| {prov} | {m} | {len(pts[prov])} | {fx:.2f} | {rate:.2f} | {res:.2f} |")
    if read:
        rp = read_points(read)
        fx, rate, res = fit([(b, t) for *_, b, t in rp])
        renv = read.get("environment", {})
        lines.append(f"| plain read | - | {len(rp)} | {fx:.2f} | {rate:.2f} | {res:.2f} |")
        lines += ["", f"Plain reads: `{a.read}` (kernel {str(renv.get('git_commit', '?'))[:12]}, "
                  f"{renv.get('date', '?')}), another run than the benchmark's.", "",
                  "The summed gap of `marlin` to the plain reads, split by the two fits:", "",
                  "| set | M | marlin (µs) | plain read (µs) | gap (µs) | fixed costs (µs) "
                  "| rates (µs) | not fitted (µs) |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for m in ms:
            for name, (t_m, t_r, f_part, r_part) in split_gap(bench_points(record, m)["marlin"],
                                                                rp).items():
                gap = t_m - t_r
                lines.append(f"| {name} | {m} | {t_m:.1f} | {t_r:.1f} | {gap:.1f} | {f_part:.1f} "
                             f"| {r_part:.1f} | {gap - f_part - r_part:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.out:
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
