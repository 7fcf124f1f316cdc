"""How fast can any kernel be that must read a layer's 4-bit weights? (needs a GPU)

    python3 scripts/read_ceiling.py OUT.json [--sets llama2-7b,llama2-13b,llama2-70b]
                                    [--m 1,16]

For every layer: the fastest of several plain read-only kernels over exactly the bytes the
Marlin kernel must read from memory (packed 4-bit weights plus group scales, group size 128;
the activations and output at small M are a few KB more), next to the best FP16 GEMM of the
same run (cuBLAS through ``cupy.matmul``, and ``torch.matmul`` when torch is present) at each
M. Weights rotate past the L2 and times are CUDA-event medians (``bench.harness.Timer``), as in
the benchmark. The summed FP16 time over a set divided by the summed read time is the largest
summed speedup that set can show at that M, whatever the kernel does with the bytes it reads:
issue 5's targets are judged against it in benchmarks/NOTES.md.

The read kernels: a grid-stride loop of 16-byte streaming loads (``ld.global.cs``), with 1 or 4
loads in flight per thread, 256 or 512 threads, 1..8 CTAs per SM; the best is kept per layer.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import cupy as cp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from marlin_cupy import jit  # noqa: E402
from marlin_cupy.bench.harness import (Timer, bench_stream, random_weight_rotation,  # noqa: E402
                                       rotation_copies)
from marlin_cupy.bench.shapes import SHAPE_SETS  # noqa: E402
from marlin_cupy.records import environment  # noqa: E402

READ_SRC = r'''
// Reads n0 int4 from p0 and n1 int4 from p1 (one launch for weights and scales); the XOR of
// everything is compared with a value it never takes, so the loads cannot be dropped.
template <int UNROLL>
__device__ void read_range(const int4* __restrict__ p, long long n, int& acc) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  for (; i + (UNROLL - 1) * stride < n; i += UNROLL * stride) {
    int4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < UNROLL; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const int4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
}
template <int UNROLL>
__device__ void read_two(const int4* p0, long long n0, const int4* p1, long long n1, int* sink) {
  int acc = 0;
  read_range<UNROLL>(p0, n0, acc);
  read_range<UNROLL>(p1, n1, acc);
  if (acc == 0x7fffffff) sink[0] = acc;
}
extern "C" __global__ void read1(const int4* p0, long long n0, const int4* p1, long long n1,
                                 int* sink) { read_two<1>(p0, n0, p1, n1, sink); }
extern "C" __global__ void read4(const int4* p0, long long n0, const int4* p1, long long n1,
                                 int* sink) { read_two<4>(p0, n0, p1, n1, sink); }
'''


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--sets", default="llama2-7b,llama2-13b,llama2-70b")
    p.add_argument("--m", default="1,16")
    p.add_argument("--group-size", type=int, default=128)
    a = p.parse_args(argv)
    ms = [int(v) for v in a.m.split(",")]
    try:
        import torch
    except Exception:  # noqa: BLE001 - torch is optional
        torch = None
    mod = jit.load_module(READ_SRC)
    kernels = {"read1": mod.get_function("read1"), "read4": mod.get_function("read4")}
    sink = cp.zeros(1, cp.int32)
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    sms, l2 = props["multiProcessorCount"], int(props["l2CacheSize"])
    rng = np.random.default_rng(0)
    rows, sums = [], {}
    with bench_stream(torch) as stream:
        timer = Timer(stream, budget_ms=15.0, min_reps=10, max_reps=60)
        for set_name in a.sets.split(","):
            for (k, n) in SHAPE_SETS[set_name]:
                mws = random_weight_rotation(k, n, a.group_size, rng)
                copies = len(mws)
                flat = [(w.qweight.reshape(-1).view(cp.int32), w.scales.reshape(-1)) for w in mws]
                nbytes = flat[0][0].nbytes + flat[0][1].nbytes
                best = None
                for name, ker in kernels.items():
                    for threads in (256, 512):
                        for per_sm in (1, 2, 4, 8):
                            grid = per_sm * sms * (512 // threads)

                            def call(i, ker=ker, grid=grid, threads=threads):
                                q, s = flat[i]
                                ker((grid,), (threads,), (q, np.int64(q.size // 4), s,
                                                          np.int64(s.size // 8), sink))
                            us = timer.measure(call, copies).stats.median_us
                            if best is None or us < best[0]:
                                best = (us, f"{name} {threads}x{grid}")
                del mws, flat
                row = {"set": set_name, "k": k, "n": n, "read_bytes": nbytes,
                       "read_us": best[0], "read_kernel": best[1],
                       "read_GBps": nbytes / best[0] / 1e3}
                w16 = cp.asarray(rng.standard_normal((k, n), dtype=np.float32).astype(np.float16))
                c16 = rotation_copies(w16.nbytes, l2, 8 << 30)
                ws = [w16] + [w16.copy() for _ in range(c16 - 1)]
                for m in ms:
                    x = cp.asarray(rng.standard_normal((m, k), dtype=np.float32).astype(np.float16))
                    out = cp.empty((m, n), cp.float16)
                    t = {"cublas-fp16": timer.measure(
                        lambda i: cp.matmul(x, ws[i], out=out), c16).stats.median_us}
                    if torch is not None:
                        xt, wt = torch.from_dlpack(x), [torch.from_dlpack(w) for w in ws]
                        t["torch-fp16"] = timer.measure(lambda i: torch.matmul(xt, wt[i]),
                                                        c16).stats.median_us
                    row[f"fp16_us_m{m}"] = min(t.values())
                    row[f"fp16_provider_m{m}"] = min(t, key=t.get)
                    s = sums.setdefault((set_name, m), [0.0, 0.0])
                    s[0] += row[f"fp16_us_m{m}"]
                    s[1] += row["read_us"]
                del ws, w16
                cp.get_default_memory_pool().free_all_blocks()
                rows.append(row)
                print(f"{set_name} {k}x{n}: read {best[0]:.1f} us ({row['read_GBps']:.0f} GB/s, "
                      f"{best[1]}), FP16 " + ", ".join(f"M={m} {row[f'fp16_us_m{m}']:.1f} us"
                                                       for m in ms), flush=True)
    summary = [{"set": s, "m": m, "fp16_us": f, "read_us": r, "ceiling_speedup": f / r}
               for (s, m), (f, r) in sorted(sums.items())]
    for r in summary:
        print(f"{r['set']} M={r['m']}: FP16 {r['fp16_us']:.1f} us, read {r['read_us']:.1f} us, "
              f"ceiling {r['ceiling_speedup']:.2f}x")
    with open(a.out, "w") as f:
        json.dump({"kind": "read_ceiling", "environment": environment(),
                   "group_size": a.group_size, "summary": summary, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
