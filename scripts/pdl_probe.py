"""Programmatic dependent launch (MARLIN_PDL, benchmarks/NOTES.md entry 30) on real layers
(needs a compute-capability-9.0 GPU).

    python3 scripts/pdl_probe.py OUT.json [--sets llama2-7b,llama2-13b,llama2-70b]
                                 [--m 1,2,4,8,16,32,64,128] [--length 32] [--reps 7]

Each layer and M runs the default dispatch's config in *chains*: the harness's chain timing
(``bench.harness.Timer(chain_len=--length)``, as ``python -m marlin_cupy.bench --chain-len``),
``--length`` launches back to back on one stream per event pair, weights rotated past the L2,
at least ``--reps`` chains. Each variant is timed twice, the rounds interleaved, and its time
per launch is the mean of the two medians. Per-call timing cannot show PDL: an event recorded
between two kernels ends the overlap.

Variants:
- ``plain``: the shipped build, launched by CuPy (``cuLaunchKernel``);
- ``pdl``: the ``MARLIN_PDL`` build (``--variant``: 1, 2, 3 or 4) through ``cuLaunchKernelEx``
  with the programmatic-serialization attribute (``marlin_cupy.pdl``);
- ``pdl_noattr``: the same build and launch path without the attribute (the cost of the build
  and of the launch path alone);
- ``plain_ex``: the shipped build through ``cuLaunchKernelEx`` without the attribute (the
  launch path alone);
- ``fp16``: ``cupy.matmul`` on fp16 weights, the same chain (rotated past the L2).

The PDL launches (``pdl``, ``pdl_noattr`` and the pairs') ask for more dynamic shared memory
than they use, as ``matmul(..., pdl=True)`` does (``ops.pdl_padded_smem``), so that no SM can
hold more than the config's ``blocks_per_sm`` CTAs. With ``--no-pad-smem`` they ask for the
config's own: a CTA of the next launch can then sit on an SM beside the running grid's where
memory allows, which made 28672x8192 at M = 16 25 % slower (NOTES.md entries 30 and 32).

With ``--pairs``, three more: ``pair_plain``, ``pair_pdl`` and ``pair_fp16``, the same chains
with an elementwise CuPy kernel that rewrites ``x`` (``x *= 1``) before every launch, as a norm
does before a projection in a model: the kernel before each launch is then not ours and does
not let it start early. The time per launch includes the elementwise kernel's.

Correctness, recorded and counted (exit status 1 on any failure):
- every layer and M: the last output of the ``pdl`` chain equals the ``plain`` one bitwise;
- a dependent chain on each square layer: y_{i+1} = y_i @ W_i for 8 launches, each reading the
  previous output, with PDL and without; every y_i equal bitwise. A kernel that read A before
  its wait would read the previous output before it is written.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import cupy as cp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from marlin_cupy import jit, kernels, ops, pdl  # noqa: E402
from marlin_cupy.bench.harness import (L2_FACTOR, Timer, bench_stream,  # noqa: E402
                                       layer_cases, random_weight_rotation, rotation_copies)
from marlin_cupy.bench.shapes import SHAPE_SETS, set_shapes  # noqa: E402
from marlin_cupy.records import environment  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--sets", default="llama2-7b,llama2-13b,llama2-70b")
    p.add_argument("--m", default="1,2,4,8,16,32,64,128")
    p.add_argument("--length", type=int, default=32, help="launches per chain")
    p.add_argument("--reps", type=int, default=7, help="fewest chains per measurement")
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--pairs", action="store_true",
                   help="also time each chain with an elementwise kernel writing x before "
                        "every launch")
    p.add_argument("--no-pad-smem", dest="pad_smem", action="store_false",
                   help="launch with the configs' own dynamic shared memory instead of the "
                        "padding matmul(..., pdl=True) uses (at most blocks_per_sm CTAs per SM)")
    p.add_argument("--variant", type=int, default=4, choices=(1, 2, 3, 4),
                   help="MARLIN_PDL value: 4 (matmul's, the default) copies the first unit's "
                        "weights to shared memory before the wait, 1 those of the first "
                        "STAGES - 1 units, 2 prefetches those into L2, 3 waits first (a control: "
                        "no weight before the wait)")
    a = p.parse_args(argv)
    PREFIX = f"#define MARLIN_PDL {a.variant}\n"
    if os.environ.get("MARLIN_CUPY_DEFINES", "").strip():
        p.error("unset MARLIN_CUPY_DEFINES: it would go into both builds")
    ms = [int(v) for v in a.m.split(",")]
    shapes = set_shapes(a.sets)
    g = a.group_size
    cfgs = {ops.plan(m, n, k, g).config for (k, n) in shapes for m in ms}
    jit.warm_cache([(pre + kernels.marlin_source(c, False), c.arch_suffix)
                    for c in cfgs for pre in ("", PREFIX)], os.cpu_count() or 4)
    pdl_kernels = {c: ops.build_kernel(c, prefix=PREFIX) for c in cfgs}
    facts = ops.device_facts()
    per_sm, reserved, optin = facts["smem_per_sm"], facts["smem_reserved"], facts["smem_optin"]

    def pdl_smem(cfg, smem):
        """The PDL launches' dynamic shared memory: padded as matmul(..., pdl=True) pads it
        (blocks_per_sm + 1 CTAs cannot fit an SM), or with --no-pad-smem the config's own."""
        if not a.pad_smem:
            return smem
        padded = ops.pdl_padded_smem(smem, cfg.blocks_per_sm, per_sm, reserved, optin)
        kernel = pdl_kernels.get(cfg)
        if kernel is not None and kernel.max_dynamic_shared_size_bytes < padded:
            kernel.max_dynamic_shared_size_bytes = padded
        return padded
    l2 = int(cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id).get("l2CacheSize", 50 << 20))

    rng = np.random.default_rng(0)
    rows, failures = [], 0
    with bench_stream() as stream:
        timer = Timer(stream, budget_ms=15.0, min_reps=a.reps, max_reps=a.reps * a.length,
                      chain_len=a.length)
        ws = ops.workspace(stream)

        def launchers(plan, x, mws, out, kernel_pdl):
            locks, scratch = ws.get(plan.locks, plan.scratch_floats)
            m, k = x.shape
            n = out.shape[1]

            def args(i):
                return (x, mws[i].qweight, mws[i].scales, mws[i].scales, out, scratch, locks,
                        np.int32(m), np.int32(n), np.int32(k), np.int32(plan.parallel))

            def plain(i):
                plan.kernel((plan.grid,), (plan.threads,), args(i), shared_mem=plan.smem)

            smem_pdl = pdl_smem(plan.config, plan.smem)

            def with_pdl(i, attr=True, kernel=kernel_pdl):
                pdl.launch(kernel, plan.grid, plan.threads, args(i),
                           smem_pdl if kernel is kernel_pdl else plan.smem, stream, pdl=attr)
            return plain, with_pdl

        for k, n, m, x, mws in layer_cases(shapes, ms, g, rng):
            plan = ops.plan(m, n, k, g)
            cfg = plan.config
            copies = len(mws)
            out = cp.empty((m, n), dtype=cp.float16)
            plain, with_pdl = launchers(plan, x, mws, out, pdl_kernels[cfg])
            w16 = [cp.random.standard_normal((k, n), dtype=cp.float32).astype(cp.float16)
                   for _ in range(rotation_copies(k * n * 2, l2, 8 << 30, L2_FACTOR))]
            out16 = cp.empty((m, n), dtype=cp.float16)

            def fp16(i):
                cp.matmul(x, w16[i % len(w16)], out=out16)

            row = {"k": k, "n": n, "m": m, "config": cfg.name, "copies": copies,
                   "smem": plan.smem, "pdl_smem": pdl_smem(cfg, plan.smem)}
            try:
                def plain_ex(i):
                    with_pdl(i, False, plan.kernel)

                one = cp.float16(1.0)

                def paired(f):
                    def call(i):
                        cp.multiply(x, one, out=x)
                        f(i)
                    return call

                # name -> (launch of weight copy i, copies to rotate over)
                variants = {"plain": (plain, copies), "pdl": (with_pdl, copies),
                            "pdl_noattr": (lambda i: with_pdl(i, False), copies),
                            "plain_ex": (plain_ex, copies), "fp16": (fp16, len(w16))}
                if a.pairs:
                    variants.update(pair_plain=(paired(plain), copies),
                                    pair_pdl=(paired(with_pdl), copies),
                                    pair_fp16=(paired(fp16), len(w16)))
                times = {v: [] for v in variants}
                for _ in range(2):
                    for v, (launch, n_copies) in variants.items():
                        times[v].append(timer.measure(launch, n_copies).stats.median_us)
                plain(0)
                y_plain = out.copy()
                with_pdl(0)
                stream.synchronize()
                same = bool(cp.all(out.view(cp.uint16) == y_plain.view(cp.uint16)))
            except Exception as e:  # noqa: BLE001 - recorded, the probe goes on
                rows.append(dict(row, error=repr(e)))
                failures += 1
                print(f"{k}x{n} m={m}: ERROR {e!r}", flush=True)
                continue
            med = {v: statistics.median(t) for v, t in times.items()}
            failures += not same
            rows.append(dict(row, equal=same, **{f"{v}_us": t for v, t in med.items()}))
            print(f"{k}x{n} m={m} {cfg.name}: plain {med['plain']:.2f} us, pdl {med['pdl']:.2f} "
                  f"({med['pdl'] / med['plain'] - 1:+.1%}), pdl_noattr {med['pdl_noattr']:.2f}, "
                  f"plain_ex {med['plain_ex']:.2f}, "
                  + (f"pairs: plain {med['pair_plain']:.2f} pdl {med['pair_pdl']:.2f} "
                     f"({med['pair_pdl'] / med['pair_plain'] - 1:+.1%}) fp16 "
                     f"{med['pair_fp16']:.2f}, " if a.pairs else "") +
                  f"fp16 {med['fp16']:.2f}{'' if same else '  MISMATCH'}", flush=True)
            del w16
            cp.get_default_memory_pool().free_all_blocks()

        # Dependent chains on the square layers.
        deps = []
        for k, n in shapes:
            if k != n:
                continue
            for m in (1, 16, 64, 128):
                plan = ops.plan(m, n, k, g)
                ws_locks, ws_scratch = ws.get(plan.locks, plan.scratch_floats)
                mws = random_weight_rotation(k, n, g, rng, cap_bytes=k * n // 2 * 8)[:8]
                ys = {}
                for mode in ("plain", "pdl"):
                    y = [cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
                         if mode == "plain" else ys["plain"][0]]
                    timer.spin(2000.0)
                    for i in range(8):
                        nxt = cp.empty((m, n), dtype=cp.float16)
                        args = (y[-1], mws[i % len(mws)].qweight, mws[i % len(mws)].scales,
                                mws[i % len(mws)].scales, nxt, ws_scratch, ws_locks,
                                np.int32(m), np.int32(n), np.int32(k), np.int32(plan.parallel))
                        if mode == "plain":
                            plan.kernel((plan.grid,), (plan.threads,), args, shared_mem=plan.smem)
                        else:
                            kernel = pdl_kernels.get(plan.config)
                            if kernel is None:
                                kernel = pdl_kernels[plan.config] = ops.build_kernel(
                                    plan.config, prefix=PREFIX)
                            pdl.launch(kernel, plan.grid, plan.threads, args,
                                       pdl_smem(plan.config, plan.smem), stream)
                        y.append(nxt)
                    stream.synchronize()
                    ys[mode] = y
                same = all(bool(cp.all(p.view(cp.uint16) == q.view(cp.uint16)))
                           for p, q in zip(ys["plain"], ys["pdl"]))
                failures += not same
                deps.append({"k": k, "n": n, "m": m, "config": plan.config.name, "equal": same})
                print(f"dependent chain {k}x{n} m={m} {plan.config.name}: "
                      f"{'equal' if same else 'MISMATCH'}", flush=True)

    summary = {}
    for s, layers in SHAPE_SETS.items():
        if s not in a.sets.split(","):
            continue
        for m in ms:
            rs = [r for r in rows if r["m"] == m and (r["k"], r["n"]) in
                  {tuple(x) for x in layers} and "error" not in r]
            if len(rs) != len({tuple(x) for x in layers}):
                continue
            tot = {v: sum(r[f"{v}_us"] for r in rs)
                   for v in ("plain", "pdl", "pdl_noattr", "plain_ex", "fp16")
                   + (("pair_plain", "pair_pdl", "pair_fp16") if a.pairs else ())}
            summary.setdefault(s, {})[str(m)] = tot
            print(f"{s} M={m}: plain {tot['plain']:.1f} us ({tot['fp16'] / tot['plain']:.2f}x), "
                  f"pdl {tot['pdl']:.1f} us ({tot['fp16'] / tot['pdl']:.2f}x, "
                  f"{tot['pdl'] / tot['plain'] - 1:+.1%}), pdl_noattr {tot['pdl_noattr']:.1f}, "
                  f"plain_ex {tot['plain_ex']:.1f}, "
                  + (f"pairs: plain {tot['pair_plain']:.1f} ({tot['pair_fp16'] / tot['pair_plain']:.2f}x) "
                     f"pdl {tot['pair_pdl']:.1f} ({tot['pair_fp16'] / tot['pair_pdl']:.2f}x, "
                     f"{tot['pair_pdl'] / tot['pair_plain'] - 1:+.1%}), " if a.pairs else "") +
                  f"fp16 {tot['fp16']:.1f}", flush=True)
    with open(a.out, "w") as f:
        json.dump({"kind": "pdl_probe", "variant": a.variant, "pairs": a.pairs,
                   "pad_smem": a.pad_smem, "sets": a.sets, "length": a.length, "reps": a.reps,
                   "environment": environment(), "failures": failures, "summary": summary,
                   "rows": rows, "dependent_chains": deps}, f, indent=1)
    print(f"pdl_probe: {len(rows)} rows, {len(deps)} dependent chains, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
