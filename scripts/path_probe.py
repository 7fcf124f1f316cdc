"""Does the copy path limit our stream? Plain streaming reads of one large buffer through the
paths a kernel can take (needs a GPU; NOTES.md entry 74).

    python3 scripts/path_probe.py OUT.json [--mib 256[,8,...]] [--copies 2] [--n 57344]
                                  [--only PREFIX[,PREFIX]]

At M <= 8 our kernel streams the weights at 4.0-4.2 TB/s in its stream phase while a plain
read-only kernel reaches 4.5-4.7 (entries 15, 44, 63). Neither fewer instructions (46), bulk
copies (50), more bytes in flight (the tuner's 3 against 4 stages), the L2 fetch size hint nor
one global window per step (74) moved it. This probe takes the kernel out of the question: each
variant reads the same bytes and does nothing with them but an XOR, so what separates the
variants is the way the bytes come in.

- ``ldg_grid U``: a grid-stride loop of 16-byte streaming loads (``ld.global.cs``), U in flight
  per thread (the plain read of ``read_ceiling.py``);
- ``ldg_stripe U``: the same loads, but each CTA reads its own contiguous stripe (as our CTAs
  do), its threads striding through it;
- ``cpa_stripe S x B``: each CTA streams its stripe through a ring of S slots of B KiB in
  shared memory with ``cp.async.cg`` 16-byte copies, as our ``mma.sync`` loop does: per step
  every thread copies its share of one slot, commits, waits for the oldest slot
  (``cp.async.wait_group S - 2``), passes a CTA barrier and XORs one 16-byte word of it;
- ``cpa_grid S x B``: the same ring, slot s of CTA b taken from chunk s * grid + b of the
  buffer (the whole grid inside one window per step);
- ``cpa_mbar S x B``: the same ring as ``cpa_stripe`` without the CTA barrier: each thread's
  copies of a slot arrive on the slot's mbarrier (``cp.async.mbarrier.arrive.noinc``), every
  thread waits on it, and a second mbarrier per slot says when all threads have read it.

- ``cpa_units S x B / R``: ``cpa_stripe``'s ring, a slot being one of our units: R rows of
  B / R KiB, each row a piece of a K-block row of a layer ``--n`` wide (8 N bytes apart),
  the units taken down K, column by column, as our stripes take them.

256 threads per CTA, 1 or 2 CTAs per SM. Times are CUDA-event medians over a rotation of
at least ``--copies`` buffers, enough that three L2s' worth of bytes pass between two reads of
one (``bench.harness.Timer``).
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
from marlin_cupy.bench.harness import Timer, bench_stream  # noqa: E402
from marlin_cupy.records import environment  # noqa: E402

THREADS = 256

SRC = r'''
typedef unsigned int uint32_t;
__device__ __forceinline__ uint32_t saddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cpa16(void* s, const void* g) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr(s)), "l"(g));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void sink_if(int acc, int* sink) {
  if (acc == 0x7fffffff) sink[0] = acc;
}

// Thread's 16-byte loads from i to hi by `stride`, U in flight; their XOR into acc.
template <int U>
__device__ __forceinline__ void ldg_run(const int4* __restrict__ p, long long i, long long hi,
                                        long long stride, int& acc) {
  for (; i + (U - 1) * stride < hi; i += U * stride) {
    int4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < hi; i += stride) { const int4 v = __ldcs(p + i); acc ^= v.x ^ v.y ^ v.z ^ v.w; }
}

template <int U>
__device__ void ldg_grid(const int4* __restrict__ p, long long n, int* sink) {
  int acc = 0;
  ldg_run<U>(p, blockIdx.x * (long long)blockDim.x + threadIdx.x, n,
             (long long)gridDim.x * blockDim.x, acc);
  sink_if(acc, sink);
}

template <int U>
__device__ void ldg_stripe(const int4* __restrict__ p, long long n, int* sink) {
  const long long per = (n + gridDim.x - 1) / gridDim.x;
  const long long lo = blockIdx.x * per, hi = min(n, lo + per);
  int acc = 0;
  ldg_run<U>(p, lo + threadIdx.x, hi, blockDim.x, acc);
  sink_if(acc, sink);
}

// A CTA's ring of S slots of SLOT int4 over `count` steps: copy(j, slot) issues this thread's
// cp.async copies of step j into `slot`; each step waits for its slot, passes a CTA barrier,
// refills the slot the step before read, and XORs one 16-byte word of its own.
template <int S, int SLOT, typename Copy>
__device__ __forceinline__ int ring_stream(long long count, Copy copy) {
  extern __shared__ int4 ring[];
  auto fetch = [&](long long j, int slot) {
    if (j < count) copy(j, ring + slot * SLOT);
    commit();
  };
#pragma unroll
  for (int s = 0; s < S - 1; s++) fetch(s, s);
  int acc = 0;
  int slot = 0;
  for (long long j = 0; j < count; j++) {
    wait_group<S - 2>();
    __syncthreads();
    fetch(j + S - 1, slot == 0 ? S - 1 : slot - 1);
    const int4 v = ring[slot * SLOT + ((threadIdx.x * 5) % SLOT)];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
    slot = slot == S - 1 ? 0 : slot + 1;
  }
  wait_group<0>();
  return acc;
}

// The ring over chunks of SLOT int4. GRID: step s of CTA b takes chunk s * grid + b;
// otherwise the CTA's stripe of whole chunks.
template <int S, int SLOT, bool GRID>
__device__ void cpa_ring(const int4* __restrict__ p, long long n, int* sink) {
  const long long chunks = n / SLOT;
  long long first, step, count;
  if (GRID) {
    first = blockIdx.x; step = gridDim.x;
    count = first < chunks ? (chunks - 1 - first) / step + 1 : 0;
  } else {
    const long long per = (chunks + gridDim.x - 1) / gridDim.x;
    first = blockIdx.x * per; step = 1;
    count = max(0LL, min(chunks, first + per) - first);
  }
  sink_if(ring_stream<S, SLOT>(count, [&](long long j, int4* dst) {
    const int4* src = p + (first + j * step) * SLOT + threadIdx.x;
#pragma unroll
    for (int i = 0; i < SLOT / 256; i++) cpa16(dst + threadIdx.x + i * 256, src + i * 256);
  }), sink);
}

// As cpa_ring (stripes), but a slot is one of our units: R rows of SLOT / R int4, row r of
// unit (column c, k tile t) at (t * R + r) * row_stride + c * (SLOT / R), the units taken
// column by column (down K first) as our stripes take them.
template <int S, int SLOT, int R>
__device__ void cpa_units(const int4* __restrict__ p, long long n, long long row_stride,
                          int* sink) {
  constexpr int ROW = SLOT / R;
  const long long n_tiles = row_stride / ROW;
  const long long k_tiles = n / (row_stride * R);
  const long long units = n_tiles * k_tiles;
  const long long per = (units + gridDim.x - 1) / gridDim.x;
  const long long first = blockIdx.x * per;
  const long long count = max(0LL, min(units, first + per) - first);
  sink_if(ring_stream<S, SLOT>(count, [&](long long j, int4* dst) {
    const long long u = first + j;
    const long long col = u / k_tiles, kt = u - col * k_tiles;
    const int4* base = p + kt * R * row_stride + col * ROW;
#pragma unroll
    for (int i = 0; i < SLOT / 256; i++) {
      const int c = threadIdx.x + i * 256;
      cpa16(dst + c, base + (c / ROW) * row_stride + (c % ROW));
    }
  }), sink);
}

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile("{\n .reg .pred p;\nW:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
               " @!p bra W;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n"
               ::"r"(bar) : "memory");
}
__device__ __forceinline__ void cpa_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// The ring without a CTA barrier: full[s] counts the threads' copies of slot s in (noinc),
// empty[s] the threads done reading it.
template <int S, int SLOT>
__device__ void cpa_mbar(const int4* __restrict__ p, long long n, int* sink) {
  extern __shared__ int4 ring[];
  __shared__ __align__(8) unsigned long long bars[2 * S];
  const long long chunks = n / SLOT;
  const long long per = (chunks + gridDim.x - 1) / gridDim.x;
  const long long first = blockIdx.x * per;
  const long long count = max(0LL, min(chunks, first + per) - first);
  if (threadIdx.x == 0)
    for (int s = 0; s < 2 * S; s++) mbar_init(saddr(&bars[s]), blockDim.x);
  __syncthreads();
  constexpr int PER_T = SLOT / 256;
  auto fetch = [&](long long j) {
    const int slot = static_cast<int>(j % S);
    const int4* src = p + (first + j) * SLOT + threadIdx.x;
    int4* dst = ring + slot * SLOT + threadIdx.x;
#pragma unroll
    for (int i = 0; i < PER_T; i++) cpa16(dst + i * 256, src + i * 256);
    cpa_arrive(saddr(&bars[slot]));
  };
  for (long long j = 0; j < S - 1 && j < count; j++) fetch(j);
  int acc = 0;
  for (long long j = 0; j < count; j++) {
    const int slot = static_cast<int>(j % S);
    mbar_wait(saddr(&bars[slot]), static_cast<uint32_t>((j / S) & 1));
    const int4 v = ring[slot * SLOT + ((threadIdx.x * 5) % SLOT)];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
    mbar_arrive(saddr(&bars[S + slot]));
    // Step j + S - 1 goes into the slot step j - 1 read (one step of slack: every thread
    // has read it by now, mostly); at j = 0 that slot is still unused.
    if (j + S - 1 < count) {
      if (j >= 1)
        mbar_wait(saddr(&bars[S + (j - 1) % S]), static_cast<uint32_t>(((j - 1) / S) & 1));
      fetch(j + S - 1);
    }
  }
  sink_if(acc, sink);
}

#define LDG(U) \
  extern "C" __global__ void ldg_grid_##U(const int4* p, long long n, int* s) { ldg_grid<U>(p, n, s); } \
  extern "C" __global__ void ldg_stripe_##U(const int4* p, long long n, int* s) { ldg_stripe<U>(p, n, s); }
LDG(1) LDG(4) LDG(8)
#define RING(S, KB) \
  extern "C" __global__ void __launch_bounds__(256) cpa_stripe_##S##_##KB(const int4* p, long long n, int* s) \
  { cpa_ring<S, KB * 64, false>(p, n, s); } \
  extern "C" __global__ void __launch_bounds__(256) cpa_grid_##S##_##KB(const int4* p, long long n, int* s) \
  { cpa_ring<S, KB * 64, true>(p, n, s); } \
  extern "C" __global__ void __launch_bounds__(256) cpa_mbar_##S##_##KB(const int4* p, long long n, int* s) \
  { cpa_mbar<S, KB * 64>(p, n, s); }
RING(3, 32) RING(4, 32) RING(6, 32) RING(4, 16) RING(6, 16) RING(8, 16) RING(12, 16) RING(3, 16)
#define UNITS(S, KB, R) \
  extern "C" __global__ void __launch_bounds__(256) cpa_units_##S##_##KB##_##R( \
      const int4* p, long long n, long long row_stride, int* s) \
  { cpa_units<S, KB * 64, R>(p, n, row_stride, s); }
UNITS(4, 16, 8) UNITS(6, 16, 8) UNITS(4, 32, 16) UNITS(3, 32, 16)
'''

def source() -> str:
    """The probe's CUDA source (tests compile it offline)."""
    return SRC


RINGS = [(3, 32), (4, 32), (6, 32), (4, 16), (6, 16), (8, 16), (12, 16), (3, 16)]
UNITS = [(4, 16, 8), (6, 16, 8), (4, 32, 16), (3, 32, 16)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--mib", default="256", help="bytes read per launch, MiB (comma-separated)")
    p.add_argument("--copies", type=int, default=2, help="buffers rotated over")
    p.add_argument("--n", type=int, default=57344,
                   help="cpa_units: the layer's N (a K-block row of weights is 8 N bytes)")
    p.add_argument("--only", default="", help="comma-separated variant name prefixes")
    a = p.parse_args(argv)
    mod = jit.load_module(source())
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    sms = props["multiProcessorCount"]
    optin = int(props.get("sharedMemPerBlockOptin", 232448))
    sizes = [int(v) for v in a.mib.split(",")]
    l2 = int(props.get("l2CacheSize", 50 << 20))
    # One pool; a size's copies are consecutive slices of it, as many as rotate past the L2
    # (three L2s between two reads of a byte), at least --copies.
    copies = {mib: max(a.copies, -(-3 * l2 // (mib << 20))) for mib in sizes}
    pool = cp.random.randint(0, 2**31 - 1, size=max(c * (mib << 20) for mib, c in copies.items())
                             // 4, dtype=cp.int32)
    sink = cp.zeros(1, cp.int32)
    row_stride = a.n // 2                      # int4 per K-block row (8 N bytes)
    variants = []
    for u in (1, 4, 8):
        for kind in ("ldg_grid", "ldg_stripe"):
            for per_sm in (1, 2, 4, 8):
                variants.append((f"{kind}_{u}", per_sm, 0, 0))
    for s, kb in RINGS:
        for kind in ("cpa_stripe", "cpa_grid", "cpa_mbar"):
            for per_sm in (1, 2):
                variants.append((f"{kind}_{s}_{kb}", per_sm, s * kb * 1024, 0))
    for s, kb, r in UNITS:
        for per_sm in (1, 2):
            variants.append((f"cpa_units_{s}_{kb}_{r}", per_sm, s * kb * 1024, r))
    only = [v for v in a.only.split(",") if v]
    variants = [v for v in variants if (not only or any(v[0].startswith(o) for o in only))
                and v[2] * v[1] + 2048 * v[1] <= min(optin, 227 * 1024)]
    rows = []
    with bench_stream() as stream:
        timer = Timer(stream, budget_ms=20.0, min_reps=10, max_reps=40)
        for mib in sizes:
            n16 = (mib << 20) // 16
            bufs = [pool[i * (mib << 18):(i + 1) * (mib << 18)] for i in range(copies[mib])]
            for name, per_sm, smem, r in variants:
                f = mod.get_function(name)
                f.max_dynamic_shared_size_bytes = max(smem, 1)
                grid = sms * per_sm
                n_used = n16 if not r else n16 // (row_stride * r) * (row_stride * r)
                if n_used == 0:
                    continue
                args = ((np.int64(n_used), np.int64(row_stride)) if r else (np.int64(n_used),))

                def call(i, f=f, grid=grid, smem=smem, args=args):
                    f((grid,), (THREADS,), (bufs[i], *args, sink), shared_mem=smem)
                try:
                    us = timer.measure(call, copies[mib]).stats.median_us
                except Exception as e:  # noqa: BLE001 - recorded, the probe goes on
                    rows.append({"variant": name, "ctas_per_sm": per_sm, "mib": mib,
                                 "error": repr(e)})
                    print(f"{mib} MiB {name} x{per_sm}: ERROR {e!r}", flush=True)
                    continue
                gbps = n_used * 16 / us / 1e3
                rows.append({"variant": name, "ctas_per_sm": per_sm, "mib": mib,
                             "bytes": n_used * 16, "smem_bytes": smem, "median_us": us,
                             "GBps": gbps})
                print(f"{mib:4d} MiB {name:20s} x{per_sm}: {us:8.1f} us  {gbps:6.0f} GB/s",
                      flush=True)
    best = {}
    for r in rows:
        if "GBps" in r:
            fam = (r["mib"], "_".join(r["variant"].split("_")[:2]))
            if fam not in best or r["GBps"] > best[fam]["GBps"]:
                best[fam] = r
    for (mib, fam), r in sorted(best.items()):
        print(f"best {mib} MiB {fam}: {r['variant']} x{r['ctas_per_sm']} {r['median_us']:.1f} us "
              f"{r['GBps']:.0f} GB/s")
    with open(a.out, "w") as fh:
        json.dump({"kind": "path_probe", "sizes_mib": sizes, "copies": copies, "n": a.n,
                   "threads": THREADS, "environment": environment(), "rows": rows,
                   "best": [dict(r, family=fam) for (_, fam), r in sorted(best.items())]},
                  fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
