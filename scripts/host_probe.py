"""What a call costs the host, and what an eager caller sees (needs a GPU and torch).

    python3 scripts/host_probe.py OUT.json [--sets llama2-7b,llama2-13b,llama2-70b]
                                  [--m 1,16,64] [--calls 240] [--rounds 60] [--profile]

The harness times the GPU alone (CUDA events behind a spin that keeps the host ahead), which is
what a CUDA graph replays. A caller that launches eagerly, one ``matmul`` after another, waits
for the host as well: a call whose enqueueing takes longer than its kernel leaves the GPU idle.
This probe measures both sides on a set's layers, called in order as a model block calls them:

- ``host_us``: the host time to enqueue one call, averaged over ``--calls`` calls (the set's
  layers in turn) queued behind a spin kernel that outlasts them, so the host never waits for
  the GPU. Variants: ``marlin`` (``matmul(x, w, out=y)`` on CuPy arrays, as the harness calls
  it), ``marlin_alloc`` (no ``out``: the output allocated per call), ``marlin_torch`` (torch
  tensors in and out, no ``out``), ``marlin_checked`` and ``marlin_torch_checked`` (the same
  calls with ``ops.FAST_PATH`` off: every check, CuPy's launch), ``raw`` (the same kernels launched straight from their
  plans with prepared arguments: the floor of a CuPy launch), ``cupy_fp16`` (``cupy.matmul``
  into ``out``) and ``torch_fp16`` (``torch.matmul``, the harness's faster FP16 baseline);
- ``eager_block_us``: the wall time of one block (the set's layers once each), over
  ``--rounds`` blocks launched back to back with nothing ahead of them, then synchronized:
  what an eager caller waits, host and GPU together;
- ``gpu_block_us``: the same blocks' GPU time behind a spin (``bench.harness.Timer``), as the
  harness sees them.

Weights are not rotated past the L2 here (an eager loop reads each layer's weights once per
block; a 7b block's 4-bit weights fit in the H200's L2, its FP16 weights do not), so
``gpu_block_us`` is not the harness's time; the comparison that matters is eager against GPU
for the same launches. ``--profile`` adds cProfile's 25 costliest functions (own time) of the
``marlin`` and ``marlin_torch`` variants' calls at the first M. Writes OUT.json and a table in OUT.md; exit status 1 if a
``marlin`` variant's output differs from the plain call's.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

VARIANTS = ("marlin", "marlin_checked", "marlin_alloc", "marlin_torch", "marlin_torch_checked",
            "raw", "cupy_fp16", "torch_fp16")
SPIN_US_PER_CALL = 150.0     # the spin must outlast the queued calls' enqueueing


def build_set(name: str, group_size: int):
    """The set's layers as (k, n, MarlinWeight, fp16 weight [K, N]) on the device."""
    from marlin_cupy.bench.shapes import set_shapes
    from marlin_cupy.bench.workload import QuantizedLayer
    layers = []
    for i, (k, n) in enumerate(set_shapes(name)):
        q = QuantizedLayer(k, n, group_size, seed=i)
        layers.append((k, n, q.marlin(), q.dequantized()))
        q.release()
    return layers


def calls_for(layers, m: int, torch, cp):
    """One callable per variant, each taking a layer index; and the arrays they write."""
    from marlin_cupy import ops
    rng = cp.random.default_rng(m)
    xs = [rng.standard_normal((m, k), dtype=cp.float32).astype(cp.float16) for k, _, _, _ in layers]
    outs = {v: [cp.empty((m, n), dtype=cp.float16) for _, n, _, _ in layers] for v in VARIANTS}
    xts = [torch.from_dlpack(x) for x in xs]
    wts = [torch.from_dlpack(w) for _, _, _, w in layers]
    torch_last = {}
    raws = []
    for (k, n, mw, _), x, y in zip(layers, xs, outs["raw"]):
        p = ops.plan(m, n, k, mw.group_size, False, fma_scales=bool(mw.fma_scales))
        ws = ops.workspace()
        locks, scratch = ws.get(p.locks, p.scratch_floats)
        args = (x, mw.qweight, mw.scales, mw.scales, y, scratch, locks, np.int32(m), np.int32(n),
                np.int32(k), np.int32(p.parallel))
        raws.append((p.kernel, (p.grid,), (p.threads,), args, p.smem))

    def marlin(i):
        ops.matmul(xs[i], layers[i][2], out=outs["marlin"][i])

    def marlin_checked(i):
        ops.FAST_PATH = False
        try:
            ops.matmul(xs[i], layers[i][2], out=outs["marlin_checked"][i])
        finally:
            ops.FAST_PATH = True

    def marlin_torch_checked(i):
        ops.FAST_PATH = False
        try:
            torch_last[("checked", i)] = ops.matmul(xts[i], layers[i][2])
        finally:
            ops.FAST_PATH = True

    def marlin_alloc(i):
        outs["marlin_alloc"][i] = ops.matmul(xs[i], layers[i][2])

    def marlin_torch(i):
        torch_last[i] = ops.matmul(xts[i], layers[i][2])

    def raw(i):
        ker, grid, block, args, smem = raws[i]
        ker(grid, block, args, shared_mem=smem)

    def cupy_fp16(i):
        cp.matmul(xs[i], layers[i][3], out=outs["cupy_fp16"][i])

    def torch_fp16(i):
        torch_last[("fp16", i)] = torch.matmul(xts[i], wts[i])

    fns = dict(marlin=marlin, marlin_checked=marlin_checked, marlin_alloc=marlin_alloc,
               marlin_torch=marlin_torch, marlin_torch_checked=marlin_torch_checked, raw=raw,
               cupy_fp16=cupy_fp16, torch_fp16=torch_fp16)

    def results():
        got = {"marlin": outs["marlin"], "marlin_checked": outs["marlin_checked"],
               "marlin_alloc": outs["marlin_alloc"], "raw": outs["raw"],
               "marlin_torch": [cp.from_dlpack(torch_last[i]) for i in range(len(layers))],
               "marlin_torch_checked": [cp.from_dlpack(torch_last[("checked", i)])
                                        for i in range(len(layers))]}
        return got
    return fns, results


def host_time(fn, n_layers: int, calls: int, spin, stream) -> float:
    """Mean host µs per call over ``calls`` calls queued behind a spin that outlasts them."""
    spin(calls * SPIN_US_PER_CALL)
    t0 = time.perf_counter()
    for c in range(calls):
        fn(c % n_layers)
    t1 = time.perf_counter()
    stream.synchronize()
    return (t1 - t0) * 1e6 / calls


def eager_block(fn, n_layers: int, rounds: int, stream) -> float:
    """Wall µs per block: ``rounds`` blocks back to back from an idle GPU, then a sync."""
    stream.synchronize()
    t0 = time.perf_counter()
    for _ in range(rounds):
        for i in range(n_layers):
            fn(i)
    stream.synchronize()
    return (time.perf_counter() - t0) * 1e6 / rounds


def profile_calls(fn, n_layers: int, calls: int, spin, stream) -> str:
    prof = cProfile.Profile()
    spin(calls * SPIN_US_PER_CALL * 3)
    prof.enable()
    for c in range(calls):
        fn(c % n_layers)
    prof.disable()
    stream.synchronize()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
    return buf.getvalue()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--sets", default="llama2-7b,llama2-13b,llama2-70b")
    p.add_argument("--m", default="1,16,64")
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--calls", type=int, default=240)
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--repeats", type=int, default=5, help="host and eager runs per variant "
                   "(median reported)")
    p.add_argument("--profile", action="store_true")
    a = p.parse_args(argv)
    import statistics

    import cupy as cp
    import torch

    from marlin_cupy.bench.harness import Timer, bench_stream
    from marlin_cupy.records import environment
    ms = [int(v) for v in a.m.split(",")]
    rows, profiles, ok = [], {}, True
    with bench_stream(torch) as stream:
        timer = Timer(stream, budget_ms=20.0, min_reps=10, max_reps=40)
        for set_name in a.sets.split(","):
            layers = build_set(set_name, a.group_size)
            n = len(layers)
            for m in ms:
                fns, results = calls_for(layers, m, torch, cp)
                for fn in fns.values():            # warm: compile, load, plan, handles
                    for i in range(n):
                        fn(i)
                stream.synchronize()
                ref = results()["marlin"]
                for v, got in results().items():
                    same = all(bool(cp.array_equal(g, r)) for g, r in zip(got, ref))
                    if not same:
                        ok = False
                        print(f"{set_name} M={m} {v}: output differs from matmul's", flush=True)
                row = {"set": set_name, "m": m, "layers": n, "host_us": {}, "eager_block_us": {},
                       "gpu_block_us": {}}
                for v, fn in fns.items():
                    host = [host_time(fn, n, a.calls, timer.spin, stream) for _ in range(a.repeats)]
                    eager = [eager_block(fn, n, a.rounds, stream) for _ in range(a.repeats)]

                    def block(_i, fn=fn):
                        for i in range(n):
                            fn(i)
                    gpu = timer.measure(block, 1).stats.median_us
                    row["host_us"][v] = statistics.median(host)
                    row["eager_block_us"][v] = statistics.median(eager)
                    row["gpu_block_us"][v] = gpu
                rows.append(row)
                h, e, g = row["host_us"], row["eager_block_us"], row["gpu_block_us"]
                print(f"{set_name} M={m}: host/call " +
                      ", ".join(f"{v} {h[v]:.1f}" for v in VARIANTS) +
                      " us; block eager/gpu " +
                      ", ".join(f"{v} {e[v]:.1f}/{g[v]:.1f}" for v in VARIANTS) + " us",
                      flush=True)
                if a.profile and m == ms[0]:
                    for v in ("marlin", "marlin_torch"):
                        profiles[f"{v}, {set_name} M={m}"] = profile_calls(
                            fns[v], n, a.calls, timer.spin, stream)
            del layers
            cp.get_default_memory_pool().free_all_blocks()
    rec = {"kind": "host_probe", "environment": environment(), "args": vars(a),
           "variants": list(VARIANTS), "rows": rows, "outputs_equal": ok, "profiles": profiles}
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)
    Path(a.out).with_suffix(".md").write_text(markdown(rec))
    for name, text in profiles.items():
        print(f"--- cProfile, {name}\n{text}", flush=True)
    return 0 if ok else 1


def markdown(rec) -> str:
    env = rec["environment"]
    dev = env.get("device", {})
    dev = dev.get("name", dev) if isinstance(dev, dict) else dev
    lines = [f"# Host cost per call and eager blocks ({dev}, commit "
             f"{str(env.get('git_commit', '?'))[:12]}, {env.get('date', '?')})", "",
             "Host µs to enqueue one call (the set's layers in turn, behind a spin), and µs per "
             "block (the set's layers once each) launched eagerly back to back against the same "
             "blocks' GPU time behind a spin (`scripts/host_probe.py`; weights not rotated).", "",
             "| set | M | " + " | ".join(f"host {v}" for v in rec["variants"]) +
             " | eager marlin | eager marlin_checked | eager marlin_torch | gpu marlin | "
             "eager torch_fp16 | gpu torch_fp16 | eager x (marlin) | eager x (marlin_torch) |",
             "| --- | ---: | " + " | ".join("---:" for _ in rec["variants"]) +
             " | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rec["rows"]:
        h, e, g = r["host_us"], r["eager_block_us"], r["gpu_block_us"]
        lines.append(f"| {r['set']} | {r['m']} | " +
                     " | ".join(f"{h[v]:.1f}" for v in rec["variants"]) +
                     f" | {e['marlin']:.1f} | {e['marlin_checked']:.1f} | {e['marlin_torch']:.1f}"
                     f" | {g['marlin']:.1f} | {e['torch_fp16']:.1f} | {g['torch_fp16']:.1f} | "
                     f"{e['torch_fp16'] / e['marlin']:.2f} | "
                     f"{e['torch_fp16'] / e['marlin_torch']:.2f} |")
    lines.append("")
    lines.append(f"Outputs of every marlin variant equal `matmul`'s: {rec['outputs_equal']}. "
                 "`eager x`: torch_fp16's eager block time over ours.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
