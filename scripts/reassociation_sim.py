"""How far apart can two orders of adding the same FP32 partial sums land after rounding to FP16?

    python3 scripts/reassociation_sim.py [--m 256 --k 8192 --n 4096] > OUT.txt

CPU only (NumPy). Random fp16 activations and weights like the GPU tests'; K is cut into
``count`` equal slices (the CTAs sharing a column), each slice's product is one FP32 partial,
and the partials are added in FP32 bottom first (the serial reduction's order) and top first
(the order of a top-CTA reducer, NOTES.md entry 12). Prints, per count, the fraction of
outputs whose FP16 values differ, the fraction more than one FP16 ulp apart, and the largest
gap in ulps.
"""
import argparse

import numpy as np


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--m", type=int, default=256)
    p.add_argument("--k", type=int, default=8192)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    rng = np.random.default_rng(a.seed)
    x = rng.standard_normal((a.m, a.k)).astype(np.float16).astype(np.float32)
    w = (rng.standard_normal((a.k, a.n)) * 0.02).astype(np.float16).astype(np.float32)
    print(f"M={a.m} K={a.k} N={a.n} seed={a.seed}: {a.m * a.n} outputs per count")
    print("count | differ | > 1 ulp | max ulps")
    for count in (2, 3, 4, 8):
        cuts = np.linspace(0, a.k, count + 1).astype(int)
        parts = [(x[:, lo:hi] @ w[lo:hi]).astype(np.float32) for lo, hi in zip(cuts, cuts[1:])]
        orders = []
        for seq in (parts[::-1], parts):        # bottom first, top first
            s = np.zeros((a.m, a.n), np.float32)
            for part in seq:
                s = (s + part).astype(np.float32)
            orders.append(s.astype(np.float16))
        h1, h2 = orders
        ulp = np.spacing(np.maximum(np.abs(h1), np.abs(h2))).astype(np.float32)
        gap = np.abs(h1.astype(np.float32) - h2.astype(np.float32))
        print(f"{count} | {np.mean(gap > 0):.2e} | {np.mean(gap > ulp):.2e} | "
              f"{float(np.max(gap / ulp)):.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
