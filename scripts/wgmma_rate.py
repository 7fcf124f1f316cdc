"""The rate of the kernel's wgmma form alone (needs an sm_90 GPU): A (the dequantized weights)
from registers, B (the activations) from shared memory through the 128-byte swizzle
descriptor, accumulators chained as in ``run_wgmma`` (issue a group, wait for the one before),
with no global memory, no dequantization and no barriers. That is the ceiling of the tensor
work of the sw8 (m64n64k16) and sw16 (m64n128k16) main loops (NOTES.md entry 25).

    python3 scripts/wgmma_rate.py OUT.json [--iters 4000]

Variants: N = 16, 32, 64 or 128 rows of activations per instruction (sw2, sw4, sw8, sw16), with
4, 2 or 1 instructions per group (the 16-column tiles of a 64-, 32- or 16-column warp), each on
1..4 warpgroups per SM
(one CTA per SM, 132 CTAs); the wgmma code is the kernel's own (``mc::wgmma_m64k16``,
``mc::sw128_desc``, from cuda/marlin.cuh).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: (N, tiles per group, most warpgroups per CTA): 128 accumulators per thread cap a CTA at two
#: warpgroups (255 registers); 64 or fewer allow four (128 registers), except N = 32 with four
#: instructions per group: at 128 registers ptxas serializes its wgmmas (advisory C7512).
VARIANTS = ((64, 4, 2), (128, 2, 2), (64, 2, 4), (128, 1, 4),
            (32, 4, 2), (32, 2, 4), (16, 4, 4), (16, 2, 4))

KERNELS = r'''
template <int N, int J>
__device__ __forceinline__ void wgmma_loop(float* out, int iters) {
  extern __shared__ __align__(1024) int4 smem[];
  // The activations: N rows of 64 halves (one 128-byte row each) in the 128-byte swizzle, all
  // 1.0 (the values do not change the rate).
  for (int i = threadIdx.x; i < N * 8; i += blockDim.x) smem[i] = make_int4(0x3c003c00, 0x3c003c00, 0x3c003c00, 0x3c003c00);
  mc::fence_proxy_async_shared();
  __syncthreads();
  const unsigned long long desc = mc::sw128_desc(mc::smem_addr(smem));
  mc::FragA a[J];
#pragma unroll
  for (int j = 0; j < J; j++)
#pragma unroll
    for (int q = 0; q < 4; q++) a[j][q] = 0x3c003c00u ^ (threadIdx.x & 7u) ^ (j << 9);
  mc::FragC acc[J][N / 8];
#pragma unroll
  for (int j = 0; j < J; j++)
#pragma unroll
    for (int f = 0; f < N / 8; f++) acc[j][f][0] = acc[j][f][1] = acc[j][f][2] = acc[j][f][3] = 0.f;
  for (int it = 0; it < iters; it++) {
    mc::wgmma_fence();
#pragma unroll
    for (int j = 0; j < J; j++) mc::wgmma_m64k16<N>(&acc[j][0], a[j], desc);
    mc::wgmma_commit();
    mc::wgmma_wait<1>();
  }
  mc::wgmma_wait<0>();
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < J; j++)
#pragma unroll
    for (int f = 0; f < N / 8; f++) s += acc[j][f][0] + acc[j][f][1] + acc[j][f][2] + acc[j][f][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;   // keeps every accumulator live
}
'''


def entry(n: int, j: int) -> str:
    return f"wgmma_rate_n{n}_j{j}"


def source() -> str:
    from marlin_cupy import kernels
    body = [kernels._base_source(), KERNELS]
    for n, j, wgs in VARIANTS:
        body.append(f'extern "C" __global__ void __launch_bounds__({128 * wgs}, 1)\n'
                    f"{entry(n, j)}(float* out, int iters) {{ wgmma_loop<{n}, {j}>(out, iters); }}\n")
    return "".join(body)


def median_launch_us(ker, blocks: int, threads: int, args: tuple, smem: int, reps: int = 5) -> float:
    """Median CUDA-event time of ``reps`` launches of ``ker`` after one warm-up, in us."""
    import cupy as cp
    import numpy as np
    ker((blocks,), (threads,), args, shared_mem=smem)   # warm-up
    times = []
    for _ in range(reps):
        t0, t1 = cp.cuda.Event(), cp.cuda.Event()
        t0.record()
        ker((blocks,), (threads,), args, shared_mem=smem)
        t1.record()
        t1.synchronize()
        times.append(cp.cuda.get_elapsed_time(t0, t1) * 1e3)
    return float(np.median(times))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--iters", type=int, default=4000)
    a = p.parse_args(argv)
    import cupy as cp
    import numpy as np
    from marlin_cupy import jit
    from marlin_cupy.records import environment
    mod = jit.load_module(source(), arch_suffix="a")
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    rows = []
    for n, j, max_wgs in VARIANTS:
        ker = mod.get_function(entry(n, j))
        smem = n * 128
        ker.max_dynamic_shared_size_bytes = smem
        for wgs in range(1, max_wgs + 1):
            threads = 128 * wgs
            out = cp.empty(sms * threads, dtype=cp.float32)
            us = median_launch_us(ker, sms, threads, (out, np.int32(a.iters)), smem)
            flop = 2.0 * 64 * n * 16 * j * a.iters * wgs * sms
            row = {"n": n, "tiles_per_group": j, "warpgroups_per_sm": wgs, "iters": a.iters,
                   "median_us": us, "tflops": flop / us / 1e6}
            rows.append(row)
            print(f"m64n{n}k16 x {j} per group, {wgs} warpgroup(s) per SM: {us:.0f} us, "
                  f"{row['tflops']:.0f} TFLOP/s", flush=True)
    with open(a.out, "w") as f:
        json.dump({"kind": "wgmma_rate", "environment": environment(), "sms": sms,
                   "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
