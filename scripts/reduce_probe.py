"""Time the parallel cross-CTA reduction against the serial one on real layers (needs a GPU).

    python3 scripts/reduce_probe.py OUT.json [--sets llama2-7b,llama2-13b,llama2-70b]
                                    [--m 8,16,32,64,128] [--top 4]

For every layer and M (use the buckets' own M: 8, 16, 32, 64, 128): the default dispatch, then
the ``--top`` fastest configs that the shipped tuned table measured for that layer and M bucket
(its ``measurements``), each run with the
serial reduction and with ``parallel_reduce=True`` (a table entry may be either). The two must agree in value: they
add the same partials in the same order (a mismatch is recorded and counted). Timing is the
tuner's method (``bench.harness.Timer``, weights rotated past the L2).

With ``--fp16``, each config also runs with FP16 partial sums (``fp32_reduce=False``: the
serial reduction in the output itself, as the original design does). Its rows add
``fp16_us`` and how far its output is from the FP32 reduction's: ``fp16_rel_l2`` (relative
L2 norm of the difference) and ``fp16_max_ulp`` (largest difference in units of the FP32
result's fp16 spacing), so the time it saves can be weighed against the accuracy it costs.
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
from marlin_cupy.bench.harness import (Timer, bench_stream, layer_cases,  # noqa: E402
                                       relative_error)
from marlin_cupy.bench.shapes import set_shapes  # noqa: E402
from marlin_cupy.records import environment  # noqa: E402
from marlin_cupy.tune import probe_configs, shipped_path  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--sets", default="llama2-7b,llama2-13b,llama2-70b")
    p.add_argument("--m", default="8,16,32,64,128")
    p.add_argument("--top", type=int, default=4)
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--fp16", action="store_true",
                   help="also time each config with FP16 partial sums and record its deviation")
    a = p.parse_args(argv)
    ms = [int(v) for v in a.m.split(",")]
    facts = ops.device_facts()
    table_commit = json.loads(shipped_path(facts["name"]).read_text()).get("git_commit")
    shapes = set_shapes(a.sets)
    # Each FP32-reduce config as its serial and parallel twins (the table's own entries are
    # often the parallel one already).
    plan = {(k, n, m): list(dict.fromkeys(
                (c.with_(parallel_reduce=False), c.with_(parallel_reduce=True))
                for c in probe_configs(facts["name"], m, n, k, a.group_size, a.top)
                if c.fp32_reduce))
            for (k, n) in shapes for m in ms}
    warm = {c for ps in plan.values() for pair in ps for c in pair}
    if a.fp16:
        warm |= {s.with_(fp32_reduce=False) for ps in plan.values() for s, _ in ps}
    kernels.warm_instantiated(os.cpu_count() or 4, warm)
    rng = np.random.default_rng(0)
    rows, mismatches = [], 0
    with bench_stream() as stream:
        timer = Timer(stream, budget_ms=15.0, min_reps=10, max_reps=60)
        for k, n, m, x, mws in layer_cases(shapes, ms, a.group_size, rng):
            copies = len(mws)
            for serial, par in plan[(k, n, m)]:
                row = {"k": k, "n": n, "m": m, "config": serial.name}
                try:
                    y_serial = ops.matmul(x, mws[0], config=serial)
                    same = bool(cp.all(y_serial == ops.matmul(x, mws[0], config=par)))
                    ts = timer.measure(lambda i: ops.matmul(x, mws[i], config=serial),
                                       copies).stats.median_us
                    tp = timer.measure(lambda i: ops.matmul(x, mws[i], config=par),
                                       copies).stats.median_us
                except Exception as e:  # noqa: BLE001 - recorded, the probe goes on
                    rows.append(dict(row, error=repr(e)))
                    print(f"{k}x{n} m={m} {serial.name}: ERROR {e!r}", flush=True)
                    continue
                mismatches += not same
                row.update(serial_us=ts, parallel_us=tp, equal=same,
                           dispatch=serial == ops.plan(m, n, k, a.group_size).config)
                extra = ""
                if a.fp16:
                    half = serial.with_(fp32_reduce=False)
                    try:
                        ref = y_serial.astype(cp.float32)
                        got = ops.matmul(x, mws[0], config=half).astype(cp.float32)
                        th = timer.measure(lambda i: ops.matmul(x, mws[i], config=half),
                                           copies).stats.median_us
                    except Exception as e:  # noqa: BLE001 - recorded, the probe goes on
                        row["fp16_error"] = repr(e)
                    else:
                        diff = cp.abs(got - ref)
                        # fp16 spacing at each FP32-reduced value (subnormals: 2^-24)
                        ulp = cp.maximum(cp.abs(ref), 2.0 ** -14) * 2.0 ** -10
                        row.update(fp16_us=th,
                                   fp16_rel_l2=relative_error(got, ref),
                                   fp16_max_ulp=float(cp.max(diff / ulp)))
                        extra = (f", fp16 {th:.1f} us (rel L2 {row['fp16_rel_l2']:.1e}, max "
                                 f"{row['fp16_max_ulp']:.1f} ulp)")
                rows.append(row)
                print(f"{k}x{n} m={m} {serial.name}: serial {ts:.1f} us, parallel {tp:.1f} us"
                      f"{extra}{'' if same else '  MISMATCH'}", flush=True)
    with open(a.out, "w") as f:
        json.dump({"kind": "reduce_probe", "sets": a.sets, "environment": environment(),
                   "table_commit": table_commit, "mismatches": mismatches,
                   "rows": rows}, f, indent=1)
    print(f"reduce_probe: {len(rows)} rows, {mismatches} mismatches")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
