"""Session 51 probe (dev, not shipped): the sm_90 heuristic's dispatch (config.sm90_choice, with
the H200's 132 SMs) before (the 96- and 128-row slabs of SM90_HEURISTIC at M = 65..80 and
97..112, as shipped until aeb7d21) and after (the 80- and 112-row slabs) on every layer of the
nine shape sets, the 23 that heuristic_rule was not fitted on among them. Outputs of the new
config against the old one's (bit for bit, else the relative difference); times with the
tuner's Timer in the order A B B A (mean of the two medians)."""
import json, sys, time
import numpy as np
import cupy as cp
from marlin_cupy import config, ops
from marlin_cupy.bench.harness import Timer, bench_stream, random_weight_rotation
from marlin_cupy.bench.shapes import set_shapes
from marlin_cupy.records import environment

OLD = {80: ("t256_m6_n16_k8_s4_g8_fp32par_sw12_wg_w32_ws", "t256_m6_n16_k4_s8_g8_fp32par_sw12_wg_w32_ws",
            "t128_m6_n8_k4_s4_g8_fp32par_sw12_wg_w32_ws_b2"),
       112: ("t256_m8_n16_k8_s4_g8_fp32par_sw16_wg_ws", "t256_m8_n16_k4_s8_g8_fp32par_sw16_wg_ws",
             "t128_m8_n8_k4_s4_g8_fp32par_sw16_wg_ws_b2")}
NEW = {b: config.SM90_HEURISTIC[b] for b in OLD}
MS = (65, 72, 80, 97, 104, 112)
OTHER = "llama3-8b,qwen2.5-7b,phi3-mini,qwen2.5-0.5b,qwen2.5-1.5b,llama3.2-1b"
LLAMA2 = "llama2-7b,llama2-13b,llama2-70b"


def choice(lists, m, n, k, smem, sms):
    saved = {b: config.SM90_HEURISTIC[b] for b in lists}
    config.SM90_HEURISTIC.update(lists)
    try:
        return config.sm90_choice(m, n, k, 128, False, smem, sms)
    finally:
        config.SM90_HEURISTIC.update(saved)


def main(out):
    facts = ops.device_facts()
    smem, sms = facts["smem_optin"], facts["sms"]
    rng = np.random.default_rng(51)
    rows = []
    t0 = time.time()
    fitted = set(set_shapes(LLAMA2))
    layers = list(dict.fromkeys(list(set_shapes(OTHER)) + list(set_shapes(LLAMA2))))
    with bench_stream() as stream:
        timer = Timer(stream, budget_ms=20.0, min_reps=10, max_reps=200)
        for (k, n) in layers:
            mws = random_weight_rotation(k, n, 128, rng)
            for m in MS:
                a, b = choice(OLD, m, n, k, smem, sms), choice(NEW, m, n, k, smem, sms)
                x = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
                row = {"k": k, "n": n, "m": m, "fitted_on": (k, n) in fitted,
                       "old": a.name, "new": b.name}
                if a == b:
                    rows.append(row)
                    continue
                ya, yb = ops.matmul(x, mws[0], config=a), ops.matmul(x, mws[0], config=b)
                row["bitwise"] = bool(cp.array_equal(ya.view(cp.uint16), yb.view(cp.uint16)))
                fa, fb = ya.astype(cp.float32), yb.astype(cp.float32)
                row["rel_diff"] = float(cp.linalg.norm(fb - fa) / cp.linalg.norm(fa))
                row["finite"] = bool(cp.isfinite(yb).all())
                times = {a.name: [], b.name: []}
                for c in (a, b, b, a):
                    meas = timer.measure(lambda i, c=c: ops.matmul(x, mws[i], config=c), len(mws))
                    times[c.name].append(meas.stats.median_us)
                row["old_us"], row["new_us"] = float(np.mean(times[a.name])), float(np.mean(times[b.name]))
                row["runs_us"] = times
                rows.append(row)
                print(f"{k}x{n} m={m}: old {row['old_us']:.1f} new {row['new_us']:.1f} "
                      f"({row['new_us'] / row['old_us'] - 1:+.1%}) rel {row['rel_diff']:.1e}", flush=True)
            del mws
            cp.get_default_memory_pool().free_all_blocks()
    env = environment()
    rec = {"kind": "heuristic_probe", "date": env["date"], "git_commit": env["git_commit"],
           "git_dirty": env.get("git_dirty"), "device": env["device"], "versions": env["versions"],
           "method": "tuner Timer (CUDA events, spin ahead, weights rotated past 2x L2), budget 20 ms, "
                     "order A B B A, mean of the two medians; group size 128, symmetric weights",
           "old_lists": OLD, "new_lists": NEW, "duration_s": time.time() - t0, "rows": rows}
    json.dump(rec, open(out, "w"), indent=1)
    timed = [r for r in rows if "new_us" in r]
    bad = [r for r in timed if not r["finite"] or r["rel_diff"] > 1e-3]
    print(f"rows {len(rows)}, timed {len(timed)}, bitwise {sum(r['bitwise'] for r in timed)}, bad {len(bad)}")


if __name__ == "__main__":
    main(sys.argv[1])
