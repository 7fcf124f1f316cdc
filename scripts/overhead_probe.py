"""Fixed cost per launch against cost per byte, for the kernel and for a plain read (needs a GPU).

    python3 scripts/overhead_probe.py OUT.json [--m 1] [--n 4096,10240,57344]
                                      [--k 1024,2048,4096,8192]

For each N: the config that the default dispatch runs for the llama2 layer of that width at
this M (``--ref-k``, default 8192 for N > 4096 and 4096 otherwise) is timed on the same N with
every K of ``--k``, next to the best plain read of the same bytes (``scripts/read_ceiling.py``'s
kernels). A least-squares line t = a + b * bytes per series separates the fixed cost (a:
launch, pipeline fill, the column reductions at the end, tail) from the streaming cost (b).
Timing is the tuner's method (``bench.harness.Timer``, weights rotated past the L2).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import cupy as cp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "scripts"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from marlin_cupy import jit, ops  # noqa: E402
from marlin_cupy.bench.harness import Timer, bench_stream, random_weight_rotation  # noqa: E402
from marlin_cupy.records import environment  # noqa: E402
from read_ceiling import READ_SRC  # noqa: E402


def fit(xs, ys):
    a = np.vstack([np.ones(len(xs)), np.asarray(xs, float)]).T
    (icpt, slope), *_ = np.linalg.lstsq(a, np.asarray(ys, float), rcond=None)
    return float(icpt), float(slope)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--m", type=int, default=1)
    p.add_argument("--n", default="4096,10240,57344")
    p.add_argument("--k", default="1024,2048,4096,8192")
    p.add_argument("--group-size", type=int, default=128)
    a = p.parse_args(argv)
    mod = jit.load_module(READ_SRC)
    reads = [mod.get_function("read1"), mod.get_function("read4")]
    sink = cp.zeros(1, cp.int32)
    sms = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"]
    rng = np.random.default_rng(0)
    rows, fits = [], []
    with bench_stream() as stream:
        timer = Timer(stream, budget_ms=15.0, min_reps=10, max_reps=60)
        for n in (int(v) for v in a.n.split(",")):
            ref_k = 8192 if n > 4096 else 4096
            cfg = ops.plan(a.m, n, ref_k, a.group_size).config
            series = []
            for k in (int(v) for v in a.k.split(",")):
                if k % cfg.tile_k:
                    continue
                mws = random_weight_rotation(k, n, a.group_size, rng)
                copies = len(mws)
                x = cp.asarray(rng.standard_normal((a.m, k)).astype(np.float16))
                t_k = timer.measure(lambda i: ops.matmul(x, mws[i], config=cfg),
                                    copies).stats.median_us
                flat = [(w.qweight.reshape(-1).view(cp.int32), w.scales.reshape(-1)) for w in mws]
                nbytes = flat[0][0].nbytes + flat[0][1].nbytes
                t_r = min(timer.measure(
                    lambda i, ker=ker, g=g: ker((g,), (256,), (
                        flat[i][0], np.int64(flat[i][0].size // 4), flat[i][1],
                        np.int64(flat[i][1].size // 8), sink)), copies).stats.median_us
                    for ker in reads for g in (2 * sms, 8 * sms, 16 * sms))
                series.append((nbytes, t_k, t_r))
                rows.append({"n": n, "k": k, "m": a.m, "config": cfg.name, "bytes": nbytes,
                             "kernel_us": t_k, "read_us": t_r})
                print(f"N={n} K={k} {cfg.name}: kernel {t_k:.1f} us, read {t_r:.1f} us "
                      f"({nbytes / 1e6:.1f} MB)", flush=True)
                del mws, flat
                cp.get_default_memory_pool().free_all_blocks()
            bs = [s[0] for s in series]
            ka, kb = fit(bs, [s[1] for s in series])
            ra, rb = fit(bs, [s[2] for s in series])
            fits.append({"n": n, "m": a.m, "config": cfg.name,
                         "kernel_fixed_us": ka, "kernel_GBps": 1e-3 / kb if kb > 0 else None,
                         "read_fixed_us": ra, "read_GBps": 1e-3 / rb if rb > 0 else None})
            print(f"N={n}: kernel {ka:.1f} us + bytes / {1e-3 / kb:.0f} GB/s; "
                  f"read {ra:.1f} us + bytes / {1e-3 / rb:.0f} GB/s", flush=True)
    with open(a.out, "w") as f:
        json.dump({"kind": "overhead_probe", "environment": environment(), "fits": fits,
                   "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
