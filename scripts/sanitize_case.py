#!/usr/bin/env python3
"""A few small kernel launches for compute-sanitizer (memcheck, racecheck) to watch.

    python3 scripts/sanitize_case.py [--configs 4 | --all-configs | --names CFG,...]
                                     [--shapes "M,K,N;..."] [--max-ctas N] [--fp16-errors F]
    compute-sanitizer --tool memcheck python3 scripts/sanitize_case.py [... --fp16-errors F]

Runs the smoke kernel (cuda/smoke.cu), then ``mc.matmul`` on small problems (odd M, M > 64,
symmetric and asymmetric groups) with the default dispatch, a handful of instantiated
configurations spread over ``marlin_cupy.config.INSTANTIATED`` (every one with
``--all-configs``), the wgmma configurations of the shipped tuned tables (skipped where the
device cannot run them) and parallel-reduction configurations, or with the ``--names`` given, each on weights of the group size it
was built for. Each result is compared
with a float64 reference under the rule of DESIGN.md s.6 and must repeat bit for bit. On
compute capability 9.0+ the default dispatch's repeat runs with ``pdl=True`` (programmatic
dependent launch, its own build), so the sanitizer also watches that build and the repeat
checks it against the plain one.
Exit status 1 on any mismatch or error, 0 otherwise. The last line is a summary that
``scripts/device_check.py`` reads: ``SANITIZE_CASE smoke=ok matmul_cases=N failures=F skipped=S``.

``--fp16-errors FILE`` keeps the cuBLAS FP16 errors that the tolerance is judged against in a
file: the plain run measures and writes them, the runs under the sanitizer read them and
launch no cuBLAS kernel (racecheck reports hazards inside cuBLAS's own split-K GEMM on some
shapes, NOTES.md entry 70; filtering the sanitizer to our kernels with ``--kernel-name`` made it
fail on a hardware exception it could not handle, on this code and on the code before it).
Each shape's data is drawn from a seed of its own (M, K, N), so both runs see the same data.

CuPy's memory pool is switched off so that every array is its own allocation: otherwise an
out-of-bounds access that lands inside the pool's slab is invisible to memcheck.
"""
from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# (M, K, N): one row, an odd M, and M > 64 (several batch-64 problems in one launch).
SHAPES = ((1, 512, 512), (17, 1024, 768), (80, 512, 1024))


def smoke() -> bool:
    import cupy as cp
    from marlin_cupy import jit
    kernel = jit.load_module(jit.expand_source("smoke.cu")).get_function("smoke_scale")
    n = 1000                                     # not a multiple of the block: tests the guard
    x = cp.arange(n, dtype=cp.float16) / 16
    y = cp.full(n, cp.nan, dtype=cp.float16)
    kernel(((n + 255) // 256,), (256,), (x, y, np.float32(2.0), np.int32(n)))
    ok = bool(cp.array_equal(y, x * 2))
    print(f"smoke_scale n={n}: {'ok' if ok else 'MISMATCH'}")
    return ok


def pick_configs(count: int | None, names=()):
    """``[(name, cfg)]``: the configurations named, if any; else the default dispatch
    (``config=None``), ``count`` configurations spread over INSTANTIATED (all of them for
    ``None``), every wgmma configuration of the shipped tuned tables (the shapes here are
    not in those tables, so the default dispatch never reaches them), the parallel-reduction
    configurations the tables use, or two of the examples when none does, and the compute
    capability 9.0 heuristic's group-128 configs that the tables do not hold (NOTES.md entry
    81)."""
    from marlin_cupy.config import (INSTANTIATED, PARALLEL_REDUCE_EXAMPLES, SM90_INSTANTIATED,
                                    KernelConfig, tuned_instances)
    if names:
        return [(n, KernelConfig.from_name(n)) for n in names]
    configs = list(INSTANTIATED)
    if count is not None and len(configs) > count:
        idx = np.unique(np.linspace(0, len(configs) - 1, count).round().astype(int))
        configs = [configs[i] for i in idx]
    tuned = {c for cs in tuned_instances().values() for c in cs}
    wgmma = sorted((c for c in tuned if c.wgmma), key=lambda c: c.name)
    par = sorted((c for c in tuned if c.parallel_reduce and not c.wgmma), key=lambda c: c.name)
    if not any(c.parallel_reduce for c in tuned):
        # A split column under the sanitizer: these shapes give every column 2-8 CTAs.
        par = [c for c in PARALLEL_REDUCE_EXAMPLES if c.name in (
            "t256_m2_n8_k16_s4_g8_fp32par", "t256_m4_n16_k8_s4_g8_fp32par_sw8_wg")]
    sm90 = [c for c in SM90_INSTANTIATED if c.group_blocks == 8 and c not in tuned]
    return [("default", None)] + [(cfg.name, cfg) for cfg in configs + wgmma + par + sm90]


def group_size_of(cfg) -> int:
    """The weight group size a configuration is built for (128 for the default dispatch)."""
    blocks = getattr(cfg, "group_blocks", 8) if cfg is not None else 8
    return -1 if blocks == -1 else 16 * blocks


def baseline_key(m: int, k: int, n: int, sym: bool, gs: int) -> str:
    return f"M={m} K={k} N={n} g{gs} {'sym' if sym else 'asym'}"


def load_baseline(path) -> dict:
    """The cuBLAS FP16 errors another run of this script recorded (``--fp16-errors``): {key:
    error}; empty when the file does not exist yet."""
    if path is None or not Path(path).is_file():
        return {}
    return {k: float(v) for k, v in json.loads(Path(path).read_text()).items()}


def matmul_cases(count: int | None, names=(), shapes=SHAPES, max_ctas: int | None = None,
                 baseline: dict | None = None):
    """Run every (config, shape, sym) case; returns (ran, skipped, failures). ``baseline``:
    cuBLAS FP16 errors by ``baseline_key``, used instead of running cuBLAS (under the
    sanitizer, whose racecheck reports hazards inside cuBLAS's split-K kernels; NOTES.md
    entry 70); the errors computed here are added to it."""
    baseline = {} if baseline is None else baseline
    import cupy as cp
    import marlin_cupy as mc
    try:
        matmul, quantize, pack = mc.matmul, mc.quantize, mc.pack
    except (AttributeError, ImportError) as e:
        print(f"mc.matmul/quantize/pack not available ({type(e).__name__}: {e}): "
              f"only the smoke kernel ran")
        return 0, 0, 0
    params = inspect.signature(matmul).parameters
    takes_config, takes_out = "config" in params, "out" in params
    pdl_ok = False
    if "pdl" in params:
        from marlin_cupy.ops import device_facts
        pdl_ok = int(device_facts()["cc"]) >= 90
    configs = pick_configs(count, names) if takes_config else [("default", None)]

    ran = skipped = failures = 0
    for m, k, n in shapes:
        rng = np.random.default_rng([m, k, n])   # a shape's data whatever the other shapes
        w = rng.standard_normal((k, n), dtype=np.float32) * 0.02
        x_host = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
        x = cp.asarray(x_host)
        prepared = {}                  # (sym, group_size) -> (device weight, reference, fp16 err)
        for sym in (True, False):
            for name, cfg in configs:
                gs = group_size_of(cfg)
                label = f"{name} M={m} K={k} N={n} g{gs} {'sym' if sym else 'asym'}"
                if (sym, gs) not in prepared:
                    qw = quantize(w, bits=4, group_size=gs, sym=sym)
                    w_hat = qw.dequantize()                                       # [K, N]
                    ref = x_host.astype(np.float64) @ w_hat.astype(np.float64)    # [M, N]
                    key = baseline_key(m, k, n, sym, gs)
                    if key not in baseline:
                        y16 = cp.asnumpy(cp.matmul(x, cp.asarray(w_hat.astype(np.float16))))
                        baseline[key] = float(np.linalg.norm(y16 - ref) / np.linalg.norm(ref))
                    err16 = baseline[key]
                    prepared[sym, gs] = (pack(qw).to_device(), ref, err16)
                mw, ref, err_fp16 = prepared[sym, gs]
                kwargs = {"config": cfg} if cfg is not None else {}
                if max_ctas is not None:
                    kwargs["max_ctas"] = max_ctas
                # The default dispatch's repeat through the pdl=True build (cc 9.0+).
                again = dict(kwargs, pdl=True) if pdl_ok and cfg is None else kwargs
                if again is not kwargs:
                    label += " (repeat pdl=True)"

                def run(kw):
                    if takes_out:
                        out = cp.full((m, n), cp.nan, dtype=cp.float16)       # poisoned
                        return matmul(x, mw, out=out, **kw)
                    return matmul(x, mw, **kw)

                try:
                    y1 = cp.asnumpy(run(kwargs))
                    y2 = cp.asnumpy(run(again))
                except ValueError as e:      # the config does not fit this case: not a bug
                    print(f"skip {label}: {e}")
                    skipped += 1
                    continue
                ran += 1
                y = y1.astype(np.float64)
                err = (np.linalg.norm(y - ref) / np.linalg.norm(ref)
                       if np.isfinite(y).all() else float("nan"))
                repeat = np.array_equal(y1.view(np.uint16), y2.view(np.uint16))
                ok = bool(err <= 2 * err_fp16 + 1e-4) and repeat
                failures += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {label}: rel err {err:.2e} (cuBLAS fp16 "
                      f"{err_fp16:.2e}), repeat bitwise {'yes' if repeat else 'NO'}")
    return ran, skipped, failures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", type=int, default=4, help="configurations to run (default 4)")
    ap.add_argument("--all-configs", action="store_true", help="run every configuration")
    ap.add_argument("--names", default="",
                    help="comma-separated config names to run instead (wgmma ones included)")
    ap.add_argument("--shapes", default="",
                    help='"M,K,N;M,K,N" problems instead of the default three (e.g. a deep K, so '
                         "that the bottom CTA of a split column goes on past it)")
    ap.add_argument("--max-ctas", type=int, default=None,
                    help="cap the grid (e.g. fewer CTAs than chunks, so that a dyn_chunk config "
                         "draws its chunks at run time on small problems)")
    ap.add_argument("--fp16-errors", default=None, metavar="FILE",
                    help="JSON of the cuBLAS FP16 errors the tolerance is judged against: read "
                         "the cases it holds from it instead of running cuBLAS, write the "
                         "others to it (a plain run first, then the sanitized runs read it, "
                         "so the sanitizer watches no cuBLAS kernel)")
    args = ap.parse_args(argv)
    shapes = (tuple(tuple(int(v) for v in s.split(",")) for s in args.shapes.split(";") if s)
              or SHAPES)

    from marlin_cupy.kernels import describe_defines
    print("kernel defines: " + describe_defines(), flush=True)
    import cupy as cp
    cp.cuda.set_allocator(None)         # one cudaMalloc per array, so memcheck sees the bounds
    smoke_ok = smoke()
    baseline = load_baseline(args.fp16_errors)
    known = len(baseline)
    if args.fp16_errors:
        print(f"cuBLAS FP16 errors: {known} case(s) read from {args.fp16_errors}")
    try:
        ran, skipped, failures = matmul_cases(None if args.all_configs else args.configs,
                                              [n for n in args.names.split(",") if n], shapes,
                                              args.max_ctas, baseline)
        if args.fp16_errors and len(baseline) > known:
            Path(args.fp16_errors).write_text(json.dumps(baseline, indent=1, sort_keys=True))
            print(f"cuBLAS FP16 errors: {len(baseline) - known} case(s) measured here, "
                  f"written to {args.fp16_errors}")
    except Exception as e:               # e.g. an illegal instruction poisons the context
        print(f"ERROR while running matmul cases: {type(e).__name__}: {e}")
        ran, skipped, failures = 0, 0, 1
    cp.cuda.runtime.deviceSynchronize()
    print(f"SANITIZE_CASE smoke={'ok' if smoke_ok else 'FAIL'} matmul_cases={ran} "
          f"failures={failures} skipped={skipped}")
    return 0 if smoke_ok and not failures else 1


if __name__ == "__main__":
    sys.exit(main())
