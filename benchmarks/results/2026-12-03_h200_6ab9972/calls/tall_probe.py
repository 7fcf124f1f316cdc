"""Session 49 probe (dev, not shipped): the 48- and 96-row wgmma tiles (swap_ab 6 and 12) against
the dispatched configs at M = 33..48 and 65..96 on the llama2 layers. For every layer and M:
the dispatch's config, and the tall twins of the 32-, 48/64- and 128-bucket entries; outputs
compared with the dispatched one's (bit for bit, else the relative difference); times with the
tuner's Timer in the order A B B A (mean of the two medians)."""
import json, sys, time
import numpy as np
import cupy as cp
from marlin_cupy import ops, tune
from marlin_cupy.config import KernelConfig
from marlin_cupy.bench.harness import Timer, bench_stream, random_weight_rotation
from marlin_cupy.records import environment

SETS = {'llama2-7b': [(4096, 12288), (4096, 4096), (4096, 22016), (11008, 4096)],
        'llama2-13b': [(5120, 15360), (5120, 5120), (5120, 27648), (13824, 5120)],
        'llama2-70b': [(8192, 10240), (8192, 8192), (8192, 57344), (28672, 8192)]}
LOW = (33, 40, 48)
HIGH = (65, 72, 80, 88, 96)


def twin(c, swap, smem):
    if not c.wgmma:
        return None
    cols = c.warp_cols if swap == 6 else min(c.warp_cols, 32)
    t = c.with_(swap_ab=swap, thread_m_blocks=swap // 2, warp_n=0 if cols == 64 else cols)
    for st in (t.stages, 6, 4, 3):
        u = t.with_(stages=min(st, t.stages))
        if not u.problems():
            try:
                u.validate(smem)
                return u
            except ValueError:
                pass
    return None


def main(out):
    smem = ops.device_facts()["smem_optin"]
    rng = np.random.default_rng(49)
    rows, checks = [], []
    t0 = time.time()
    with bench_stream() as stream:
        timer = Timer(stream, budget_ms=30.0, min_reps=10, max_reps=200)
        for s, layers in SETS.items():
            for (k, n) in layers:
                mws = random_weight_rotation(k, n, 128, rng)
                zp = random_weight_rotation(k, n, 128, rng, zero_points=True, copies=1)[0]
                for m in LOW + HIGH:
                    x = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
                    base = tune.lookup("NVIDIA H200", m, n, k, 128)
                    src = (32, 48, 64) if m in LOW else (64, 128)
                    swap = 6 if m in LOW else 12
                    cands = [base]
                    for b in src:
                        c = tune.lookup("NVIDIA H200", b, n, k, 128)
                        tw = twin(c, swap, smem)
                        if tw is not None and tw not in cands and not tune.spills(tw):
                            cands.append(tw)
                    want = ops.matmul(x, mws[0], config=base)
                    want_zp = ops.matmul(x, zp, config=base)
                    res = {}
                    for c in cands[1:]:
                        for name, w, got in (("sym", want, ops.matmul(x, mws[0], config=c)),
                                             ("zp", want_zp, ops.matmul(x, zp, config=c))):
                            same = bool(cp.array_equal(got.view(cp.uint16), w.view(cp.uint16)))
                            g, ww = got.astype(cp.float32), w.astype(cp.float32)
                            rel = float(cp.linalg.norm(g - ww) / cp.linalg.norm(ww))
                            fin = bool(cp.isfinite(got).all())
                            checks.append({"set": s, "k": k, "n": n, "m": m, "config": c.name,
                                           "weights": name, "bitwise": same, "rel_diff": rel,
                                           "finite": fin})
                    times = {c.name: [] for c in cands}
                    order = cands + cands[::-1]
                    for c in order:
                        meas = timer.measure(lambda i, c=c: ops.matmul(x, mws[i], config=c), len(mws))
                        times[c.name].append(meas.stats.median_us)
                    for c in cands:
                        rows.append({"set": s, "k": k, "n": n, "m": m, "config": c.name,
                                     "dispatched": c == base,
                                     "median_us": float(np.mean(times[c.name])),
                                     "runs_us": times[c.name]})
                    best = min(cands, key=lambda c: np.mean(times[c.name]))
                    print(f"{s} {k}x{n} m={m}: base {np.mean(times[base.name]):.1f} "
                          + " ".join(f"{c.name}={np.mean(times[c.name]):.1f}" for c in cands[1:]),
                          flush=True)
                del mws, zp
                cp.get_default_memory_pool().free_all_blocks()
    env = environment()
    rec = {"kind": "tall_probe", "date": env["date"], "git_commit": env["git_commit"],
           "git_dirty": env.get("git_dirty"), "device": env["device"], "versions": env["versions"],
           "method": "tuner Timer (CUDA events, spin ahead, weights rotated past 2x L2), budget 30 ms, "
                     "order A B B A, mean of the two medians",
           "duration_s": time.time() - t0, "rows": rows, "checks": checks}
    json.dump(rec, open(out, "w"), indent=1)
    bad = [c for c in checks if not c["finite"] or c["rel_diff"] > 1e-3]
    print(f"checks {len(checks)}, bitwise {sum(c['bitwise'] for c in checks)}, bad {len(bad)}")


if __name__ == "__main__":
    main(sys.argv[1])
