"""How fast one CTA reads data from the L2 (needs a GPU). The last arriver of a split column
sums every partial of the column through one SM (NOTES.md entry 64: 9 partials of 16 KB at
M = 16 took 1.92 µs, 77 GB/s): is that what one SM can read, or is the sum slow for another
reason?

    python3 scripts/l2_read_probe.py OUT.json [--reps 30]

For each size, threads per CTA (128, 256) and loads in flight per thread (1, 2, 4, 8 or 16
float4): a buffer that every SM has just written (so it sits in the L2, as the partials do) is
read once by ``ctas`` CTAs, each its own part, with ``__ldcg`` as ``sum_column`` reads. Each
CTA times its read by ``%globaltimer`` between two barriers; the row keeps the median over
``--reps`` launches of the slowest CTA's time. ``ctas`` = 1: one SM alone (the last arriver at
the end of a launch); ``ctas`` = the SM count: every SM at once.

``--bulk`` adds rows of another read (entry 77): one lane issues the CTA's whole part as bulk
copies (``cp.async.bulk``, the copy engine) into shared memory, one 16 KB piece per copy and
mbarrier, and every thread adds each piece from shared memory once its barrier completes, as
a last arriver would add the partials (``depth`` is then 0); and ``cp.async`` copies of each
thread's own float4s into shared memory, ``depth`` per thread and batch with two batches in
flight (rows with ``ldgsts``), added from there. And ``threads`` 512 and 1024 for the plain
loads: more loads in flight per SM without deeper batches.

``depth`` is what the source asks for. ptxas (CUDA 13, sm_90a) issues the loads of depths 8
and 16 in batches of 4 with adds between them, so those rows have about 4 loads in flight per
thread, not 8 or 16 (read the SASS before comparing them with the kernel's sums).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEPTHS = (1, 2, 4, 8, 16)
THREADS = (128, 256)
#: Bytes read per CTA: one 8 or 16 KB partial up to 9 of them (a column split 9 ways at M = 1
#: and 16), and 256 KB.
SIZES = (8 << 10, 16 << 10, 32 << 10, 72 << 10, 144 << 10, 256 << 10)

COMMON = r'''
// Every read below: a barrier, the start stamp, the read, a barrier once every thread's adds
// (so every load) are done, the end stamp; thread 0 keeps both, each thread its sum.
__device__ __forceinline__ unsigned long long start_stamp() {
  __syncthreads();
  unsigned long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0) :: "memory");
  return t0;
}
__device__ __forceinline__ void finish(unsigned long long t0, float4 acc, float* out,
                                       unsigned long long* t) {
  __syncthreads();
  unsigned long long t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1) :: "memory");
  if (threadIdx.x == 0) {
    t[2 * blockIdx.x] = t0;
    t[2 * blockIdx.x + 1] = t1;
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc.x + acc.y + acc.z + acc.w;
}
'''

KERNEL = r'''
template <int DEPTH>
__device__ __forceinline__ void l2_read(const float4* __restrict__ src, int n_vec,
                                        const float4* __restrict__ zero, float* out,
                                        unsigned long long* t) {
  const float4* s = src + static_cast<size_t>(blockIdx.x) * n_vec;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  const unsigned long long t0 = start_stamp();
  for (int b = threadIdx.x; b < n_vec; b += blockDim.x * DEPTH) {
    float4 v[DEPTH];
    // Unconditional loads (an index past the end reads a float4 of zeros instead), then a tree
    // of adds: nothing between the batch's loads waits for one of them.
#pragma unroll
    for (int d = 0; d < DEPTH; d++) {
      const int i = b + d * static_cast<int>(blockDim.x);
      v[d] = __ldcg(i < n_vec ? s + i : zero);
    }
#pragma unroll
    for (int w = 1; w < DEPTH; w *= 2)
#pragma unroll
      for (int d = 0; d + w < DEPTH; d += 2 * w) {
        v[d].x += v[d + w].x;
        v[d].y += v[d + w].y;
        v[d].z += v[d + w].z;
        v[d].w += v[d + w].w;
      }
    acc.x += v[0].x;
    acc.y += v[0].y;
    acc.z += v[0].z;
    acc.w += v[0].w;
  }
  finish(t0, acc, out, t);
}
'''


BULK_KERNEL = r'''
// One lane issues every 16 KB piece of the CTA's part as a bulk copy into shared memory, each on
// its own mbarrier; the threads add piece after piece as their barriers complete.
extern "C" __global__ void l2_bulk(const float4* __restrict__ src, int n_vec, float* out,
                                   unsigned long long* t) {
  extern __shared__ __align__(128) float4 buf[];
  __shared__ __align__(8) unsigned long long bars[16];
  constexpr int PIECE = 1024;   // float4 per piece: 16 KB
  const int pieces = (n_vec + PIECE - 1) / PIECE;
  const float4* s = src + static_cast<size_t>(blockIdx.x) * n_vec;
  if (threadIdx.x < pieces)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(static_cast<unsigned>(
                     __cvta_generic_to_shared(&bars[threadIdx.x]))) : "memory");
  const unsigned long long t0 = start_stamp();
  if (threadIdx.x == 0) {
    for (int p = 0; p < pieces; p++) {
      const int n = min(PIECE, n_vec - p * PIECE);
      const unsigned bar = static_cast<unsigned>(__cvta_generic_to_shared(&bars[p]));
      asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}"
                   ::"r"(bar), "r"(n * 16) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                   " [%0], [%1], %2, [%3];"
                   ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(buf + p * PIECE))),
                   "l"(s + p * PIECE), "r"(n * 16), "r"(bar) : "memory");
    }
  }
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int p = 0; p < pieces; p++) {
    const unsigned bar = static_cast<unsigned>(__cvta_generic_to_shared(&bars[p]));
    asm volatile("{\n .reg .pred q;\nW:\n mbarrier.try_wait.parity.shared::cta.b64 q, [%0], 0;\n"
                 " @!q bra W;\n}" ::"r"(bar) : "memory");
    const int n = min(PIECE, n_vec - p * PIECE);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const float4 v = buf[p * PIECE + i];
      acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    }
  }
  finish(t0, acc, out, t);
}
'''


LDGSTS_KERNEL = r'''
// Every thread copies its own float4s of the CTA's part into shared memory with cp.async (no
// registers held while in flight), PIECE float4 per thread and batch, two batches in flight:
// batch b + 1 is issued before batch b is added. A thread adds only what it copied itself, so
// no barrier between the copy and the add.
template <int PIECE>
__device__ __forceinline__ void l2_ldgsts(const float4* __restrict__ src, int n_vec, float* out,
                                          unsigned long long* t) {
  extern __shared__ __align__(128) float4 buf[];   // 2 * PIECE * blockDim.x float4
  const float4* s = src + static_cast<size_t>(blockIdx.x) * n_vec;
  const int per_batch = PIECE * blockDim.x;
  const int batches = (n_vec + per_batch - 1) / per_batch;
  const unsigned long long t0 = start_stamp();
  auto issue = [&](int b) {
#pragma unroll
    for (int d = 0; d < PIECE; d++) {
      const int i = b * per_batch + d * blockDim.x + threadIdx.x;
      const int n = i < n_vec ? 16 : 0;   // past the end: zero-fill, no read
      const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(
          buf + (b & 1) * per_batch + d * blockDim.x + threadIdx.x));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                   ::"r"(dst), "l"(s + (i < n_vec ? i : 0)), "r"(n) : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  issue(0);
  for (int b = 0; b < batches; b++) {
    if (b + 1 < batches) {
      issue(b + 1);
      asm volatile("cp.async.wait_group 1;" ::: "memory");
    } else {
      asm volatile("cp.async.wait_group 0;" ::: "memory");
    }
#pragma unroll
    for (int d = 0; d < PIECE; d++) {
      const float4 v = buf[(b & 1) * per_batch + d * blockDim.x + threadIdx.x];
      acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    }
  }
  finish(t0, acc, out, t);
}
extern "C" __global__ void l2_ldgsts8(const float4* s, int n, float* o, unsigned long long* t) {
  l2_ldgsts<8>(s, n, o, t);
}
extern "C" __global__ void l2_ldgsts16(const float4* s, int n, float* o, unsigned long long* t) {
  l2_ldgsts<16>(s, n, o, t);
}
extern "C" __global__ void l2_ldgsts32(const float4* s, int n, float* o, unsigned long long* t) {
  l2_ldgsts<32>(s, n, o, t);
}
'''
LDGSTS_PIECES = (8, 16, 32)


def entry(depth: int) -> str:
    return f"l2_read_d{depth}"


def source(bulk: bool = False) -> str:
    body = [COMMON, KERNEL] + ([BULK_KERNEL, LDGSTS_KERNEL] if bulk else [])
    for d in DEPTHS:
        body.append(f'extern "C" __global__ void {entry(d)}(const float4* src, int n_vec, '
                    f"const float4* zero, float* out, unsigned long long* t) "
                    f"{{ l2_read<{d}>(src, n_vec, zero, out, t); }}\n")
    return "".join(body)


def slowest_ns(t) -> float:
    """``t``: uint64 [ctas, 2] start and end stamps; the slowest CTA's duration in ns."""
    import numpy as np
    t = np.asarray(t, dtype=np.int64).reshape(-1, 2)
    return float((t[:, 1] - t[:, 0]).max())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--bulk", action="store_true",
                   help="also bulk copies into shared memory, and 512 and 1024 threads")
    a = p.parse_args(argv)
    import cupy as cp
    import numpy as np
    from marlin_cupy import jit
    from marlin_cupy.records import environment
    mod = jit.load_module(source(a.bulk), arch_suffix="a" if a.bulk else "")
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    rows = []

    def measure(ker, ctas, threads, args, smem=0):
        """Median over --reps launches (after one warm-up) of the slowest CTA's read, in ns."""
        if smem:
            ker.max_dynamic_shared_size_bytes = smem
        times = []
        for r in range(a.reps + 1):
            buf.fill(1.0)   # written by every SM: in the L2, as the partials are
            ker((ctas,), (threads,), args, shared_mem=smem)
            cp.cuda.Device().synchronize()
            if r:           # the first is a warm-up
                times.append(slowest_ns(cp.asnumpy(t)))
        return float(np.median(times))

    def keep(ns, what, **fields):
        rows.append({"ctas": ctas, "bytes_per_cta": size, "threads": threads, **fields,
                     "median_ns": ns, "gbps_per_cta": size / ns})
        print(f"{ctas} CTA(s), {size >> 10} KB each, {threads} threads, {what}: {ns:.0f} ns, "
              f"{size / ns:.0f} GB/s per CTA", flush=True)

    for ctas in (1, sms):
        for size in SIZES:
            n_vec = size // 16
            buf = cp.empty(ctas * n_vec * 4, dtype=cp.float32)
            t = cp.zeros(2 * ctas, dtype=cp.uint64)
            zero = cp.zeros(4, dtype=cp.float32)
            for threads in THREADS + ((512, 1024) if a.bulk else ()):
                out = cp.empty(ctas * threads, dtype=cp.float32)
                for d in DEPTHS:
                    ns = measure(mod.get_function(entry(d)), ctas, threads,
                                 (buf, np.int32(n_vec), zero, out, t))
                    keep(ns, f"{d} in flight", depth=d)
                if a.bulk and threads <= 256 and size <= (144 << 10):
                    ns = measure(mod.get_function("l2_bulk"), ctas, threads,
                                 (buf, np.int32(n_vec), out, t), smem=size)
                    keep(ns, "bulk copies", depth=0, bulk=True)
                for piece in (LDGSTS_PIECES if a.bulk and threads <= 256 else ()):
                    smem = 2 * piece * threads * 16
                    if smem > 200 << 10:
                        continue
                    ns = measure(mod.get_function(f"l2_ldgsts{piece}"), ctas, threads,
                                 (buf, np.int32(n_vec), out, t), smem=smem)
                    keep(ns, f"cp.async {piece} x 2 in flight", depth=piece, ldgsts=True)
    with open(a.out, "w") as f:
        json.dump({"kind": "l2_read_probe", "environment": environment(), "sms": sms,
                   "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
