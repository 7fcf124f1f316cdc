"""Session 50 probe (dev, not shipped): 80- and 112-row wgmma slabs (swap_ab 10 and 14) against
the dispatched configs at M = 65..80 and 97..112 on every layer of the nine shape sets. For every
layer and M: the dispatch's config (the H200 table's entry) and its twin with the shorter slab
(tune.slab_twin: same tile, depth, reduction, producer and grid cap); outputs compared with the
dispatched one's (bit for bit, else the relative difference), symmetric and zero-point weights
(a twin that spills in a build is not run in it); times with the tuner's Timer in the order
A B B A (mean of the two medians), symmetric weights."""
import json, os, sys, time
import numpy as np
import cupy as cp
from marlin_cupy import kernels, ops, tune
from marlin_cupy.bench.harness import Timer, bench_stream, random_weight_rotation
from marlin_cupy.bench.shapes import set_shapes
from marlin_cupy.records import environment

SETS = "llama2-7b,llama2-13b,llama2-70b,llama3-8b,qwen2.5-7b,phi3-mini,qwen2.5-0.5b,qwen2.5-1.5b,llama3.2-1b"
MS = {10: (65, 72, 80), 14: (97, 104, 112)}


def main(out):
    rng = np.random.default_rng(50)
    layers = list(dict.fromkeys(set_shapes(SETS)))
    plan = []
    for (k, n) in layers:
        for swap, ms in MS.items():
            for m in ms:
                base = tune.lookup("NVIDIA H200", m, n, k, 128)
                twin = tune.slab_twin(base, swap) if base is not None else None
                plan.append((k, n, m, base, twin))
    cfgs = {c for (_, _, _, b, t) in plan for c in (b, t) if c is not None}
    t0 = time.time()
    kernels.warm_instantiated(os.cpu_count() or 8, sorted({c.compiled for c in cfgs}, key=lambda c: c.name))
    print(f"warmed {len(cfgs)} configs in {time.time() - t0:.0f} s", flush=True)
    rows, checks = [], []
    with bench_stream() as stream:
        timer = Timer(stream, budget_ms=20.0, min_reps=10, max_reps=200)
        for (k, n) in layers:
            mws = random_weight_rotation(k, n, 128, rng)
            zp = random_weight_rotation(k, n, 128, rng, zero_points=True, copies=1)[0]
            for (kk, nn, m, base, twin) in plan:
                if (kk, nn) != (k, n):
                    continue
                row = {"k": k, "n": n, "m": m, "dispatched": base.name,
                       "twin": twin.name if twin is not None else None}
                if twin is None:
                    rows.append(row)
                    continue
                x = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
                for name, w in (("sym", mws[0]), ("zp", zp)):
                    try:
                        want = ops.matmul(x, w, config=base)
                        got = ops.matmul(x, w, config=twin)
                    except Exception as e:            # a build that spills is refused
                        checks.append({"k": k, "n": n, "m": m, "config": twin.name, "weights": name,
                                       "error": str(e)[:300]})
                        continue
                    same = bool(cp.array_equal(got.view(cp.uint16), want.view(cp.uint16)))
                    g, ww = got.astype(cp.float32), want.astype(cp.float32)
                    checks.append({"k": k, "n": n, "m": m, "config": twin.name, "weights": name,
                                   "bitwise": same,
                                   "rel_diff": float(cp.linalg.norm(g - ww) / cp.linalg.norm(ww)),
                                   "finite": bool(cp.isfinite(got).all())})
                times = {base.name: [], twin.name: []}
                for c in (base, twin, twin, base):
                    meas = timer.measure(lambda i, c=c: ops.matmul(x, mws[i], config=c), len(mws))
                    times[c.name].append(meas.stats.median_us)
                row["dispatched_us"] = float(np.mean(times[base.name]))
                row["twin_us"] = float(np.mean(times[twin.name]))
                row["runs_us"] = times
                rows.append(row)
                print(f"{k}x{n} m={m}: {base.name} {row['dispatched_us']:.1f} -> {twin.name} "
                      f"{row['twin_us']:.1f} ({row['twin_us'] / row['dispatched_us'] - 1:+.1%})", flush=True)
            del mws, zp
            cp.get_default_memory_pool().free_all_blocks()
    env = environment()
    rec = {"kind": "slab_probe", "date": env["date"], "git_commit": env["git_commit"],
           "git_dirty": env.get("git_dirty"), "device": env["device"], "versions": env["versions"],
           "method": "tuner Timer (CUDA events, spin ahead, weights rotated past 2x L2), budget 20 ms, "
                     "order A B B A, mean of the two medians; group size 128, symmetric weights",
           "duration_s": time.time() - t0, "rows": rows, "checks": checks}
    json.dump(rec, open(out, "w"), indent=1)
    ok = [c for c in checks if "error" not in c]
    bad = [c for c in ok if not c["finite"] or c["rel_diff"] > 1e-3]
    print(f"rows {len(rows)}, timed {sum('twin_us' in r for r in rows)}, checks {len(checks)}, "
          f"errors {len(checks) - len(ok)}, bitwise {sum(c['bitwise'] for c in ok)}, bad {len(bad)}")


if __name__ == "__main__":
    main(sys.argv[1])
