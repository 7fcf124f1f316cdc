"""Can the producer's copies be tensor copies? A standalone check of the tensor memory
accelerator's 2-D copies on our packed weights (needs an sm_90 GPU; NOTES.md entry 80, lever A).

    python3 scripts/tma_probe.py OUT.json [--layers 8192x57344,4096x12288]

At M = 64 the producer warpgroup issues 16 % of the wgmma loop's instructions (entry 80): 128
threads' 16-byte ``cp.async`` copies and their addresses. One ``cp.async.bulk.tensor.2d`` per
tile would leave it a few (entry 50's 1-D bulk copies of the weights already did most of that
and were not faster, so the gain is bounded; lever A). This probe answers three questions
before any kernel change:

- can a tensor map be built from Python at all? CuPy does not wrap ``cuTensorMapEncodeTiled``;
  the probe calls the driver through ctypes (``libcuda.so.1``) and keeps the 128-byte map in
  global memory;
- do the copies land the right bytes? A layer's packed weights (the Marlin layout: K / 16 rows
  of N x 8 bytes) are streamed tile by tile, a unit being the kernel's ``n16_k8`` stage (8
  rows of 2 KB, one tensor copy of a 256 x 8 box of 8-byte elements), each CTA taking a stripe
  of units column by column as the kernel does; every consumer thread adds each 8-byte word it
  reads times (2 x its element index + 1), and the sum over the grid must equal the host's
  over the whole array (each word read once, each in its place);
- how fast do they stream? One lane of a producer warp issues every copy of a CTA into a
  ring of 4, 8 or 12 16-KB slots (``full`` barriers with the copies' transaction
  bytes, ``empty`` barriers with the 256 consumers' arrivals), against a grid-stride read of
  the same bytes (16-byte loads, 4 in flight per thread) in the same run.

Times are ``bench.harness.Timer``'s (the tuner's: CUDA-event medians behind a spin that hides
the launch's host cost), over enough copies of the layer in turn that three L2s' worth of bytes
pass between two reads of one.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CONSUMERS = 256          # 8 consumer warps, plus one producer warp
BOX_X, BOX_Y = 256, 8    # 8-byte elements x rows: one n16_k8 unit (2 KB rows, 16 KB)
UNIT_BYTES = BOX_X * BOX_Y * 8

KERNELS = r'''
namespace tp {
using namespace mc;

// One 2-D tensor copy of the box at (x, y) (elements, rows) of the map at `tmap` (a generic
// address of global memory) into shared memory at `dst`, completing on `bar` (PTX ISA,
// cp.async.bulk.tensor).
__device__ __forceinline__ void tensor_copy_2d(uint32_t dst, const void* tmap, int x, int y,
                                               uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];\n"
               ::"r"(dst), "l"(tmap), "r"(x), "r"(y), "r"(bar) : "memory");
}

// Units u = n_tile * k_tiles + kt, CTA b taking [b * iters, (b + 1) * iters); the last warp
// produces (one lane issues the copies), the others consume.
template <int STAGES>
__device__ __forceinline__ void tma_stream(const void* tmap, int n_tiles, int k_tiles,
                                           int iters, int n, unsigned long long* out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t ring = smem_addr(smem);
  const uint32_t full = ring + STAGES * @UNIT@;
  const uint32_t empty = full + 8 * STAGES;
  const int total = n_tiles * k_tiles;
  const int begin = blockIdx.x * iters;
  const int end = min(begin + iters, total);
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; s++) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, @CONS@);
    }
    fence_proxy_async_shared();
  }
  __syncthreads();
  unsigned long long acc = 0;
  if (threadIdx.x >= @CONS@) {   // the producer warp
    for (int u = begin, i = 0; u < end; u++, i++) {
      const int s = i % STAGES;
      if (i >= STAGES) mbar_wait(empty + 8 * s, ((i / STAGES) - 1) & 1);
      mbar_arrive_expect_tx_warp(full + 8 * s, @UNIT@);
      if (threadIdx.x == @CONS@)
        tensor_copy_2d(ring + s * @UNIT@, tmap, (u / k_tiles) * @BX@, (u % k_tiles) * @BY@,
                       full + 8 * s);
    }
  } else {
    const int t = threadIdx.x;
    for (int u = begin, i = 0; u < end; u++, i++) {
      const int s = i % STAGES;
      mbar_wait(full + 8 * s, (i / STAGES) & 1);
      const unsigned long long* slot =
          reinterpret_cast<const unsigned long long*>(smem + s * @UNIT@);
      const unsigned long long x0 = (u / k_tiles) * @BX@;
      const unsigned long long y0 = (u % k_tiles) * @BY@;
#pragma unroll
      for (int j = 0; j < @BY@ * @BX@ / @CONS@; j++) {
        const int o = j * @CONS@ + t;   // word o of the box: row o / BX, column o % BX
        const unsigned long long idx = (y0 + o / @BX@) * n + x0 + o % @BX@;
        acc += slot[o] * (2 * idx + 1);
      }
      mbar_arrive(empty + 8 * s);
    }
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
}  // namespace tp

#define TP_ENTRY(S)                                                                          \
  extern "C" __global__ void __launch_bounds__(@CONS@ + 32, 1)                               \
  tma_stream_s##S(const void* tmap, int n_tiles, int k_tiles, int iters, int n,              \
                  unsigned long long* out) {                                                 \
    tp::tma_stream<S>(tmap, n_tiles, k_tiles, iters, n, out);                                \
  }
TP_ENTRY(4)
TP_ENTRY(8)
TP_ENTRY(12)

// The plain read of the same bytes: a grid-stride loop of 16-byte loads, 4 in flight.
extern "C" __global__ void __launch_bounds__(256)
plain_read(const uint4* __restrict__ p, long long n16, unsigned long long* out) {
  unsigned int x = 0;
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride),
          d = __ldcs(p + i + 3 * stride);
    x ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n16; i += stride) { uint4 a = __ldcs(p + i); x ^= a.x ^ a.y ^ a.z ^ a.w; }
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}
'''

def source() -> str:
    from marlin_cupy import kernels
    body = (KERNELS.replace("@UNIT@", str(UNIT_BYTES)).replace("@CONS@", str(CONSUMERS))
            .replace("@BX@", str(BOX_X)).replace("@BY@", str(BOX_Y)))
    return kernels._base_source() + "\n" + body


def encode_tiled(buf_ptr: int, n: int, rows: int) -> bytes:
    """The 128-byte CUtensorMap of a rows x n array of 8-byte elements at ``buf_ptr`` (a device
    address), boxes of BOX_X x BOX_Y, no swizzle, L2 promotion of 128 bytes; RuntimeError with
    the driver's status otherwise."""
    from marlin_cupy import tma
    return tma.encode_tiled(buf_ptr, tma.UINT64, (n, rows), (n * 8,), (BOX_X, BOX_Y))


def stream_layer(mod, timer, spec: str, sms: int, l2: int) -> list:
    """The tensor-copy rings (4, 8, 12 stages) and the plain read over one layer's packed
    weights (``spec`` = "KxN"), each timed; the rings' checksums against the host's."""
    import cupy as cp
    import numpy as np
    found = []
    k, n = (int(v) for v in spec.split("x"))
    rows, nbytes = k // 16, k * n // 2
    copies = max(1, -(-3 * l2 // nbytes) + 1)
    rng = np.random.default_rng(0)
    host = rng.integers(0, 2**63, size=(rows, n), dtype=np.uint64)
    bufs = [cp.asarray(host) for _ in range(copies)]
    idx = np.arange(rows * n, dtype=np.uint64).reshape(rows, n)
    want = int(np.sum(host * (2 * idx + np.uint64(1)), dtype=np.uint64))
    maps = [cp.asarray(np.frombuffer(encode_tiled(b.data.ptr, n, rows), dtype=np.uint8))
            for b in bufs]
    n_tiles, k_tiles = n // BOX_X, rows // BOX_Y
    total = n_tiles * k_tiles
    iters = -(-total // sms)
    grid = -(-total // iters)
    for stages in (4, 8, 12):
        ker = mod.get_function(f"tma_stream_s{stages}")
        smem = stages * UNIT_BYTES + 16 * stages
        ker.max_dynamic_shared_size_bytes = smem
        out = cp.zeros(grid * (CONSUMERS + 32), dtype=cp.uint64)
        args = lambda i: (maps[i], np.int32(n_tiles), np.int32(k_tiles),  # noqa: E731
                          np.int32(iters), np.int32(n), out)
        ker((grid,), (CONSUMERS + 32,), args(0), shared_mem=smem)
        got = int(cp.sum(out, dtype=cp.uint64).get())
        us = timer.measure(lambda i: ker((grid,), (CONSUMERS + 32,), args(i), shared_mem=smem),
                           copies).stats.median_us
        row = {"layer": spec, "kind": "tma", "stages": stages, "grid": grid,
               "units_per_cta": iters, "bytes": nbytes, "median_us": us,
               "GBps": nbytes / us / 1e3, "checksum_ok": got == want}
        found.append(row)
        print(f"{spec} tensor copies, {stages} stages, {grid} CTAs x {iters} units: "
              f"{us:.1f} us, {row['GBps']:.0f} GB/s, bytes {'right' if got == want else 'WRONG'}",
              flush=True)
    pr = mod.get_function("plain_read")
    pgrid = sms * 8
    out = cp.zeros(pgrid * 256, dtype=cp.uint64)
    us = timer.measure(lambda i: pr((pgrid,), (256,), (bufs[i], np.int64(nbytes // 16), out)),
                       copies).stats.median_us
    found.append({"layer": spec, "kind": "plain_read", "bytes": nbytes, "median_us": us,
                  "GBps": nbytes / us / 1e3})
    print(f"{spec} plain read: {us:.1f} us, {nbytes / us / 1e3:.0f} GB/s", flush=True)
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--layers", default="8192x57344,4096x12288",
                   help="KxN of the packed 4-bit weights to stream")
    a = p.parse_args(argv)
    import cupy as cp
    from marlin_cupy import jit
    from marlin_cupy.bench.harness import Timer, bench_stream
    from marlin_cupy.records import environment
    mod = jit.load_module(source(), arch_suffix="a")
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    l2 = cp.cuda.Device().attributes["L2CacheSize"]
    rows_out = []
    with bench_stream() as stream:
        timer = Timer(stream, budget_ms=20.0, min_reps=10, max_reps=40)
        for spec in a.layers.split(","):
            rows_out += stream_layer(mod, timer, spec, sms, l2)
    ok = all(r.get("checksum_ok", True) for r in rows_out)
    with open(a.out, "w") as f:
        json.dump({"kind": "tma_probe", "environment": environment(), "sms": sms,
                   "rows": rows_out, "all_bytes_right": ok}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
