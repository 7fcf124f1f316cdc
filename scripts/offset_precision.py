"""The precision of a build switch that changes the kernel's sums, on real layers, against a
float64 reference (needs a GPU).

    python3 scripts/offset_precision.py OUT.json --define NAME=VALUE[,NAME=VALUE]
                                        [--sets llama2-7b,llama2-13b,llama2-70b] [--m 16,32]

Written for ``MARLIN_WG_OFFSET`` (benchmarks/NOTES.md entry 109: the offset left in the
weights of the group fold, taken off by wgmmas of a constant tile; measured at f0569fd, slower,
removed), whose sums carry about 1024 times the activations' group sums before the offset comes
off; any switch can be given (e.g. ``MARLIN_WG_DEFER=0``, which scales the weights in FP16
instead of the FP32 sums).

For every layer of the sets and every M: random symmetric 4-bit weights as the harness draws
them (scales uniform in [1e-3, 1e-2)), and activations of three kinds: ``normal`` (standard
normal), ``shifted`` (normal of mean 2: every group's sum of A is large, which is what
``MARLIN_WG_OFFSET``'s sums carried about 1024 times before the offset was taken off) and
``outliers`` (standard normal with 1 % of the K channels times 30, as LLM activations have).
The reference is x @ W in float64 on the GPU, W the dequantized weights (x - 8) s. Reported
per case: the
relative Frobenius error of the A build (the default dispatch's config built with the
``--define`` switches), of the B build (the shipped one), and of cuBLAS FP16 on the
dequantized weights rounded to FP16 (the bound the GPU tests judge by: kernel <= 2 x cuBLAS +
1e-4). The default dispatch's config for each layer and M is the one both builds run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

KINDS = ("normal", "shifted", "outliers")


def activations(kind: str, m: int, k: int, rng) -> np.ndarray:
    """FP16 activations [M, K] of one kind (see the module's docstring)."""
    x = rng.standard_normal((m, k))
    if kind == "shifted":
        x = x + 2.0
    elif kind == "outliers":
        cols = rng.choice(k, max(1, k // 100), replace=False)
        x[:, cols] *= 30.0
    elif kind != "normal":
        raise ValueError(f"unknown activation kind {kind!r}")
    return x.astype(np.float16)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--define", required=True, help="NAME=VALUE[,NAME=VALUE...] for the A build")
    p.add_argument("--sets", default="llama2-7b,llama2-13b,llama2-70b")
    p.add_argument("--m", default="16,32")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if os.environ.get("MARLIN_CUPY_DEFINES", "").strip():
        p.error("unset MARLIN_CUPY_DEFINES: it would go into both builds")

    import cupy as cp
    from marlin_cupy import kernels, ops
    from marlin_cupy.bench.shapes import set_shapes
    from marlin_cupy.layout import pack
    from marlin_cupy.records import environment
    from marlin_cupy.weights import QuantizedWeight

    prefix = kernels.define_lines(kernels.parse_defines(a.define, "--define"))
    ms = [int(v) for v in a.m.split(",")]
    rng = np.random.default_rng(a.seed)
    rows = []
    for k, n in set_shapes(a.sets):
        q = rng.integers(0, 16, (k, n), dtype=np.uint8)
        scales = rng.uniform(1e-3, 1e-2, (k // 128, n)).astype(np.float16)
        mw = pack(QuantizedWeight(q, scales, None, None, 4, 128)).to_device()
        w64 = (cp.asarray(q).astype(cp.float64) - 8.0) * cp.repeat(
            cp.asarray(scales).astype(cp.float64), 128, axis=0)
        w16 = w64.astype(cp.float16)
        del q
        for m in ms:
            pl = ops.plan(m, n, k, 128, fma_scales=mw.fma_scales)
            cfg, fma = pl.config, pl.scale_fma
            ker = ops.build_kernel(cfg, False, prefix=prefix, fma=fma)
            for kind in KINDS:
                x = cp.asarray(activations(kind, m, k, rng))
                ref = x.astype(cp.float64) @ w64
                norm = float(cp.linalg.norm(ref))
                out_b = cp.full((m, n), cp.nan, dtype=cp.float16)
                ops.matmul(x, mw, out=out_b, config=cfg)
                out_a = cp.full((m, n), cp.nan, dtype=cp.float16)
                with ops.use_kernel(cfg, ker, has_zp=False, fma=fma):
                    if ops.plan(m, n, k, 128, config=cfg,
                                fma_scales=mw.fma_scales).kernel is not ker:
                        raise RuntimeError(f"{cfg.name}: the launch plan does not hold the A build")
                    ops.matmul(x, mw, out=out_a, config=cfg)
                cub = cp.matmul(x, w16)
                err = {name: float(cp.linalg.norm(o.astype(cp.float64) - ref)) / norm
                       for name, o in (("a", out_a), ("b", out_b), ("cublas", cub))}
                finite = bool(cp.isfinite(out_a).all())
                rows.append({"k": k, "n": n, "m": m, "kind": kind, "config": cfg.name,
                             "scale_fma": fma,
                             "err_a": err["a"], "err_b": err["b"], "err_cublas": err["cublas"],
                             "a_finite": finite,
                             "a_within_test_bound":
                                 finite and err["a"] <= 2 * err["cublas"] + 1e-4})
                print(f"{k}x{n} M={m} {kind:8s} {cfg.name}: A {err['a']:.3e} B {err['b']:.3e} "
                      f"cuBLAS {err['cublas']:.3e}", flush=True)
        del mw, w64, w16
        cp.get_default_memory_pool().free_all_blocks()
    record = {"kind": "offset_precision", "define": a.define, "sets": a.sets, "m": ms,
              "seed": a.seed, "environment": environment(), "rows": rows,
              "all_within_test_bound": all(r["a_within_test_bound"] for r in rows),
              "max_ratio_a_over_b": max(r["err_a"] / r["err_b"] for r in rows)}
    Path(a.out).write_text(json.dumps(record, indent=1) + "\n")
    print(f"all within the tests' bound: {record['all_within_test_bound']}; "
          f"max err A / err B: {record['max_ratio_a_over_b']:.3f}")
    return 0 if record["all_within_test_bound"] else 1


if __name__ == "__main__":
    sys.exit(main())
