"""How much of each launch the whole-unit stripes leave idle (no GPU needed).

    python3 scripts/stripe_balance.py [TABLE.json] [--sms 132]

A launch cuts its work into ``units`` (one k-tile of one column tile of one slab) and gives
each CTA of the persistent grid a contiguous stripe of ``iters = ceil(units / grid)`` of them
(cuda/marlin.cuh; the grid as ``ops._plan`` sizes it: ``min(units, sms x blocks_per_sm)``).
Every stripe but the last is ``iters`` long, so the launch's stream takes as long as
``iters`` units, while the work is ``units / (sms x blocks_per_sm)`` units per CTA slot. The
ratio of the two is the stripe *efficiency*. The shapes of llama2 are powers of two times 3,
5, 7, 27 or 43, and 132 = 4 x 3 x 11, so it is rarely 1: 2048 units run as 128 CTAs of 16.

For every entry of the table (default: the shipped H200 table) the script prints units,
iters, CTAs with work, efficiency, and the entry's measured time; then, per set and M bucket,
the summed time and ``(1 - efficiency) x time`` summed: what stripes cut below whole units
(k16 steps, say) could give at most if the whole launch scaled with the busiest CTA's units.
It does not: the launch's fixed part (setup, prologue, the column's end; NOTES.md entries 15,
34) does not shrink, so the real bound is that share of the stream part only.

    python3 scripts/stripe_balance.py --measure OUT.json [--m 8,64] [--sets ...]   (GPU)

measures that share instead. For each layer and M it times the dispatched config on the layer
and on two layers of other depth: ``K_lo``, the deepest K whose stripes are one unit shorter
(``iters - 1``), and ``K_fill``, the deepest K whose stripes are as long as the layer's but
that gives every CTA slot a stripe. If a launch's time follows the busiest CTA's units,
``K_fill`` takes as long as the layer although it has more work, and the time per unit of
stripe is ``T(K) - T(K_lo)``; stripes cut below whole units would then run the layer in about
``T(K) - (T(K) - T(K_lo)) x (iters - units / slots)``. Timing is the tuner's (weights rotated
past the L2, ``bench.harness.Timer``). On the H200 it does not: time follows the total work,
and the balanced estimate is about 1 % below the layer's time (NOTES.md entry 39).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from marlin_cupy.bench.shapes import set_shapes  # noqa: E402
from marlin_cupy.config import KernelConfig  # noqa: E402


def stripes(cfg: KernelConfig, m: int, n: int, k: int, sms: int) -> tuple[int, int, int, float]:
    """(units, iters, CTAs with work, efficiency) of one launch, as ops._plan and the kernel
    cut it (one CTA slot per SM and ``blocks_per_sm``; the occupancy check is assumed met)."""
    units = (k // cfg.tile_k) * (n // cfg.tile_n) * -(-m // cfg.tile_m)
    slots = sms * cfg.blocks_per_sm
    grid = min(units, slots)
    iters = -(-units // grid)
    busy = -(-units // iters)
    return units, iters, busy, units / (slots * iters)


def depths(cfg: KernelConfig, m: int, n: int, k: int, sms: int, group_size: int = 128):
    """(K_lo, K_fill) for ``measure``: the deepest K (a multiple of the tile depth and of the
    group) whose stripes are one unit shorter than the layer's, and the deepest whose stripes
    are as long; K_lo is None when the layer's stripes are one unit long."""
    step = math.lcm(cfg.tile_k, group_size)
    _, iters, _, _ = stripes(cfg, m, n, k, sms)
    fits = lambda kk, it: stripes(cfg, m, n, kk, sms)[1] <= it  # noqa: E731
    k_fill = k
    while fits(k_fill + step, iters):
        k_fill += step
    k_lo = k - step
    while k_lo >= step and not fits(k_lo, iters - 1):
        k_lo -= step
    return (k_lo if k_lo >= step and iters > 1 else None), k_fill


def measure(out: str, sets: str, ms: list[int], group_size: int = 128) -> int:
    import cupy as cp
    import numpy as np

    from marlin_cupy import ops
    from marlin_cupy.bench.harness import Timer, bench_stream, random_weight_rotation
    from marlin_cupy.records import environment

    facts = ops.device_facts()
    sms = facts["sms"]
    rng = np.random.default_rng(0)
    rows = []
    with bench_stream() as stream:
        timer = Timer(stream, budget_ms=15.0, min_reps=10, max_reps=60)
        for set_name in sets.split(","):
            for k, n in set_shapes(set_name):
                # Every (M, variant) of this layer, then each depth's weights packed once.
                plans = {}
                for m in ms:
                    cfg = ops.plan(m, n, k, group_size).config
                    k_lo, k_fill = depths(cfg, m, n, k, sms, group_size)
                    plans[m] = (cfg, {"layer": k, "k_lo": k_lo, "k_fill": k_fill})
                kmax = max(kk for _, v in plans.values() for kk in v.values() if kk)
                xs = {m: cp.asarray(rng.standard_normal((m, kmax)).astype(np.float16))
                      for m in ms}
                times = {}
                for kk in sorted({kk for _, v in plans.values() for kk in v.values() if kk}):
                    mws = random_weight_rotation(kk, n, group_size, rng)
                    for m, (cfg, v) in plans.items():
                        if kk not in v.values():
                            continue
                        x = cp.ascontiguousarray(xs[m][:, :kk])
                        times[(m, kk)] = timer.measure(
                            lambda i: ops.matmul(x, mws[i], config=cfg), len(mws)).stats.median_us
                    del mws
                    cp.get_default_memory_pool().free_all_blocks()
                for m, (cfg, v) in plans.items():
                    row = {"set": set_name, "k": k, "n": n, "m": m, "config": cfg.name,
                           "slots": sms * cfg.blocks_per_sm, "variants": {}}
                    for label, kk in v.items():
                        if kk is None:
                            continue
                        units, iters, busy, _ = stripes(cfg, m, n, kk, sms)
                        row["variants"][label] = {"k": kk, "units": units, "iters": iters,
                                                  "ctas": busy, "us": times[(m, kk)]}
                    d = row["variants"]
                    t, it, units = d["layer"]["us"], d["layer"]["iters"], d["layer"]["units"]
                    if "k_lo" in d:
                        per_iter = t - d["k_lo"]["us"]
                        row["us_per_iter"] = per_iter
                        row["balanced_us"] = t - per_iter * (it - units / row["slots"])
                    rows.append(row)
                    print(f"{set_name} {k}x{n} M={m} {cfg.name}: "
                          + ", ".join(f"{lab} K={e['k']} {e['ctas']}x{e['iters']} {e['us']:.1f} us"
                                      for lab, e in d.items())
                          + (f"; balanced about {row['balanced_us']:.1f} us"
                             if "balanced_us" in row else ""), flush=True)
    summary = {}
    for r in rows:
        s = summary.setdefault(f"{r['set']} M={r['m']}", {"layer_us": 0.0, "balanced_us": 0.0})
        s["layer_us"] += r["variants"]["layer"]["us"]
        s["balanced_us"] += r.get("balanced_us", r["variants"]["layer"]["us"])
    for key, s in summary.items():
        print(f"{key}: summed {s['layer_us']:.1f} us, with balanced stripes about "
              f"{s['balanced_us']:.1f} us ({s['balanced_us'] / s['layer_us'] - 1:+.1%})")
    with open(out, "w") as f:
        json.dump({"kind": "stripe_balance", "environment": environment(), "sets": sets,
                   "ms": ms, "group_size": group_size, "summary": summary, "rows": rows},
                  f, indent=1)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("table", nargs="?", default=str(ROOT / "marlin_cupy/tuned/NVIDIA_H200.json"))
    p.add_argument("--sms", type=int, default=132)
    p.add_argument("--sets", default="llama2-7b,llama2-13b,llama2-70b")
    p.add_argument("--measure", metavar="OUT.json",
                   help="time the layers at other depths on this GPU (see above)")
    p.add_argument("--m", default="8,64", help="with --measure: the batch sizes")
    a = p.parse_args(argv)
    if a.measure:
        return measure(a.measure, a.sets, [int(v) for v in a.m.split(",")])
    table = json.loads(Path(a.table).read_text())
    entries = {(e["k"], e["n"], e["m_bucket"]): e for e in table["entries"]}
    buckets = sorted({e["m_bucket"] for e in table["entries"]})
    print(f"# stripe_balance.py {Path(a.table).name} (table commit "
          f"{table.get('git_commit', '?')[:7]}), {a.sms} SMs")
    for set_name in a.sets.split(","):
        shapes = set_shapes(set_name)
        for b in buckets:
            total = idle = 0.0
            lines = []
            for k, n in shapes:
                e = entries.get((k, n, b))
                if e is None:
                    continue
                cfg = KernelConfig.from_name(e["config"])
                units, iters, busy, eff = stripes(cfg, e["m"], n, k, a.sms)
                total += e["median_us"]
                idle += (1 - eff) * e["median_us"]
                lines.append(f"  {k}x{n} M={e['m']} {cfg.name}: {units} units, {busy} CTAs x "
                             f"{iters}, efficiency {eff:.3f}, {e['median_us']:.1f} us")
            if not lines:
                continue
            label = "M>192" if b > 1024 else f"M<={b}"
            print(f"{set_name} {label}: summed {total:.1f} us, (1 - efficiency) x time "
                  f"{idle:.1f} us ({idle / total:.1%})")
            print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
