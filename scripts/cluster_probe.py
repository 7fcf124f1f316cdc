"""What a thread block cluster would buy the end of a split column (needs a GPU).

    python3 scripts/cluster_probe.py OUT.json [--reps 30]
    python3 scripts/cluster_probe.py --md-from OUT.json        (the record as markdown; no GPU)

Today the CTAs that share a column's K range sum their FP32 partials through global memory:
each stores its partial, counts in on the column's counter, waits until every sharer did,
and sums its slice of the tile from the L2 (NOTES entries 17, 64; the timelines put this
``cross`` part at 1.2-1.7 µs per launch at M = 1 and 3.3-5.4 µs at M = 64 on the 4096-wide
layers). On Hopper the sharers could be one cluster instead, and sum through distributed
shared memory: each CTA writes its partial to its own shared memory, one cluster barrier,
each sums its slice from every CTA's shared memory (``mapa`` + ``ld.shared::cluster``), a
second barrier before any CTA may exit. Two questions, both measured here:

1. **Residency**: with about 200 KB of dynamic shared memory per CTA (one per SM, as the
   kernel's rings are), how many CTAs of cluster size 1, 2, 3, 4 run at once? Clusters live
   in one GPC, so SMs left over in a GPC stay idle. Each CTA of a 264-CTA grid spins 30 µs
   and records its SM and start time; ``concurrent`` counts the CTAs that started within
   5 µs of the first. The same grid's event time with 0.1 µs spins is the launch's own cost.
2. **The end's cost**: 128 CTAs in groups of C (2 or 4) each hold an R x N FP32 partial in
   registers (the shapes of the kernel's tiles at M = 1, 16 and 64). From one timestamp to
   the next, every group produces the summed tile as FP16 in global memory, (a) through
   global memory as today (store, fence, count-in, wait for all, sum the slice from the L2),
   (b) through the cluster's shared memory, each CTA reading its slice from every CTA
   (``dsmem``: two barriers), (c) each CTA storing every part of its partial straight into
   the shared memory of the CTA that sums it (``push``: one barrier, local reads; ``push2``: with
   a barrier before the stores too, as the kernel would need while its ring holds the
   shared memory). ``gpush`` is (a) with only the parts that others sum stored, and the CTA's
   own part of its slice added from registers at its place in the rank order: how much of
   the global form is its data rather than its synchronization. ``words`` is ``gpush`` with
   no fence and no counter: the stored parts are words that are never 0 (as the kernel's early
   bottom stores them, NOTES.md entry 69), which the summing CTA reads until none is 0 and
   then clears; the workspace starts zeroed and is zero again after every launch. Per launch the slowest CTA's time and the median
   CTA's are kept (``%globaltimer``), and the median over launches is reported, next to the
   kernels' event times. Both forms sum the C partials in rank order, so their outputs must
   be bitwise equal; the script checks that against a NumPy sum in the same order.

Exploration tool for benchmarks/NOTES.md (entry 72). Its records (session23/) were taken at
2e68da8, c95629b, 3c59970 and ace7291; the forms were then folded into one template
(``FORM``) with shared helpers and ``__launch_bounds__(THREADS, 1)`` on every kernel, which
the records predate.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

THREADS = 256
CLUSTERS = (1, 2, 3, 4)
SHAPES = ((1, 128), (16, 256), (64, 128), (64, 256))   # rows x columns of a partial
SPLITS = (2, 4)   # 4 only fits 120 SMs (30 clusters): its 128-CTA grids run in two waves
CTAS = 128
#: The ends measured, in this order (the kernel's FORM is the index); the last three in clusters.
FORMS = ("global", "gpush", "words", "dsmem", "push", "push2")
CLUSTER_FORMS = FORMS[3:]
RESIDENT_SMEM = 200 << 10

SRC = r'''
#include <cuda_fp16.h>
__device__ __forceinline__ unsigned long long gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) :: "memory");
  return t;
}
__device__ __forceinline__ unsigned smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ unsigned map_rank(unsigned addr, unsigned rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
__device__ __forceinline__ float4 ld_cluster(unsigned addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ int ld_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// A word that is 0 while its slot is empty: the FP32 bits inverted, a NaN made the canonical
// 0x7fffffff first (as cuda/marlin.cuh's early_word).
__device__ __forceinline__ unsigned word_of(float x) {
  return ~(x != x ? 0x7fffffffu : __float_as_uint(x));
}
__device__ __forceinline__ void st_relaxed_v4(float4* p, uint4 v) {
  asm volatile("st.relaxed.gpu.global.v4.u32 [%0], {%1, %2, %3, %4};"
               :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ uint4 ld_relaxed_v4(const float4* p) {
  uint4 v;
  asm volatile("ld.relaxed.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void spin_body(unsigned long long* t, int* sm, long long ns) {
  extern __shared__ int4 smem[];
  const unsigned long long t0 = gtimer();
  unsigned long long t1 = t0;
  while (t1 - t0 < (unsigned long long)ns) t1 = gtimer();
  if (threadIdx.x == 0) {
    t[2 * blockIdx.x] = t0;
    t[2 * blockIdx.x + 1] = t1;
    sm[blockIdx.x] = (int)smid();
    smem[0] = make_int4(0, 0, 0, 0);
  }
}
#define SPIN(C) extern "C" __global__ void __cluster_dims__(C, 1, 1) \
    spin_c##C(unsigned long long* t, int* sm, long long ns) { spin_body(t, sm, ns); }
SPIN(1)
SPIN(2)
SPIN(3)
SPIN(4)

// The partial a CTA holds: P floats per thread, float4 j of thread t at float4 index
// t + j * THREADS of the tile (any fixed map will do: every form uses the same).
__device__ __forceinline__ float value(int cta, int i) {
  return (float)((cta * 977 + i * 131) % 1999 - 999) * 0.0078125f;   // exact in FP32
}

__device__ __forceinline__ void add4(float4& s, const float4& w) {
  s.x += w.x; s.y += w.y; s.z += w.z; s.w += w.w;
}
__device__ __forceinline__ void store_h4(__half* o, int i, const float4& s) {
  reinterpret_cast<__half2*>(o)[2 * i] = __floats2half2_rn(s.x, s.y);
  reinterpret_cast<__half2*>(o)[2 * i + 1] = __floats2half2_rn(s.z, s.w);
}
// Today's publication: every thread's stores, one fence and count-in by thread 0, which
// waits until all `c` CTAs of the group counted in this launch (the counter only grows).
__device__ __forceinline__ void count_in_and_wait(int* cnt, int c, int epoch) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(cnt, 1);
    while (ld_acquire(cnt) < c * (epoch + 1)) {
    }
  }
  __syncthreads();
}

// FORM: the Python FORMS tuple's index (GLOBAL, GPUSH, WORDS, DSMEM, PUSH, PUSH2).
template <int R, int N, int C, int FORM>
__device__ __forceinline__ void reduce_body(float4* ws, int* cnt, int epoch, __half* out,
                                            unsigned long long* t) {
  constexpr bool CLUSTER = FORM >= DSMEM;
  constexpr int T4 = R * N / 4;                     // float4 in the tile
  constexpr int P4 = (T4 + THREADS - 1) / THREADS;  // float4 per thread
  extern __shared__ float4 part[];
  const int tid = threadIdx.x;
  const int group = blockIdx.x / C;
  const int rank = CLUSTER ? (int)cluster_rank() : blockIdx.x % C;
  float4 v[P4];
#pragma unroll
  for (int j = 0; j < P4; j++) {
    const int i = 4 * (tid + j * THREADS);
    v[j] = make_float4(value(blockIdx.x, i), value(blockIdx.x, i + 1), value(blockIdx.x, i + 2),
                       value(blockIdx.x, i + 3));
  }
  __syncthreads();
  const unsigned long long t0 = gtimer();
  const int lo = rank * T4 / C, hi = (rank + 1) * T4 / C;
  __half* o = out + (size_t)group * R * N;
  float4* mine = ws + ((size_t)group * C + rank) * T4;
  float4* all = ws + (size_t)group * C * T4;
  if (FORM == PUSH || FORM == PUSH2) {
    // Each CTA stores every float4 straight into the shared memory of the CTA that sums it,
    // at that CTA's slot for this rank; one barrier; each sums its own slots in rank order.
    constexpr int SLICE = T4 / C;
    const unsigned base = (unsigned)__cvta_generic_to_shared(part);
    if (FORM == PUSH2) cluster_sync();   // in the kernel: no peer may store into a ring in use
#pragma unroll
    for (int j = 0; j < P4; j++) {
      const int i = tid + j * THREADS;
      if (i < T4) {
        const int owner = i / SLICE;
        const unsigned dst = map_rank(base + 16u * (rank * SLICE + i - owner * SLICE), owner);
        asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};"
                     :: "r"(dst), "f"(v[j].x), "f"(v[j].y), "f"(v[j].z), "f"(v[j].w) : "memory");
      }
    }
    cluster_sync();
    for (int i = lo + tid; i < hi; i += THREADS) {
      float4 s = part[i - lo];
#pragma unroll
      for (int q = 1; q < C; q++) add4(s, part[q * SLICE + i - lo]);
      store_h4(o, i, s);
    }
  } else if (FORM == DSMEM) {
    // Each CTA's partial in its own shared memory; each sums its slice from all of them.
#pragma unroll
    for (int j = 0; j < P4; j++)
      if (tid + j * THREADS < T4) part[tid + j * THREADS] = v[j];
    cluster_sync();
    const unsigned base = (unsigned)__cvta_generic_to_shared(part);
    for (int i = lo + tid; i < hi; i += THREADS) {
      float4 s = ld_cluster(map_rank(base + 16u * i, 0));
#pragma unroll
      for (int q = 1; q < C; q++) add4(s, ld_cluster(map_rank(base + 16u * i, q)));
      store_h4(o, i, s);
    }
    cluster_sync();   // no CTA exits while another may read its shared memory
  } else if (FORM == GLOBAL) {
#pragma unroll
    for (int j = 0; j < P4; j++)
      if (tid + j * THREADS < T4) __stcg(mine + tid + j * THREADS, v[j]);
    count_in_and_wait(cnt + group, C, epoch);
    for (int i = lo + tid; i < hi; i += THREADS) {
      float4 s = __ldcg(all + i);
#pragma unroll
      for (int q = 1; q < C; q++) add4(s, __ldcg(all + (size_t)q * T4 + i));
      store_h4(o, i, s);
    }
    __syncthreads();
  } else {
    // GPUSH, WORDS: only the parts others sum are stored; the CTA's own part of its slice is
    // added from registers, at its place in the rank order. WORDS has no fence and no
    // counter: the parts are words that are never 0 (word_of), which the summing CTA reads
    // until none is 0 and then stores 0 back, so the workspace is empty after the launch.
#pragma unroll
    for (int j = 0; j < P4; j++) {
      const int i = tid + j * THREADS;
      if (i < T4 && (i < lo || i >= hi)) {
        if (FORM == WORDS)
          st_relaxed_v4(mine + i, make_uint4(word_of(v[j].x), word_of(v[j].y),
                                             word_of(v[j].z), word_of(v[j].w)));
        else
          __stcg(mine + i, v[j]);
      }
    }
    if (FORM == GPUSH) count_in_and_wait(cnt + group, C, epoch);
#pragma unroll
    for (int j = 0; j < P4; j++) {
      const int i = tid + j * THREADS;
      if (i < lo || i >= hi) continue;
      float4 w[C];
#pragma unroll
      for (int q = 0; q < C; q++) {
        if (q == rank) {
          w[q] = v[j];
        } else if (FORM == WORDS) {
          uint4 u;
          do { u = ld_relaxed_v4(all + (size_t)q * T4 + i); } while (!(u.x && u.y && u.z && u.w));
          w[q] = make_float4(__uint_as_float(~u.x), __uint_as_float(~u.y), __uint_as_float(~u.z),
                             __uint_as_float(~u.w));
        } else {
          w[q] = __ldcg(all + (size_t)q * T4 + i);
        }
      }
      float4 s = w[0];
#pragma unroll
      for (int q = 1; q < C; q++) add4(s, w[q]);
      if (FORM == WORDS)
#pragma unroll
        for (int q = 0; q < C; q++)
          if (q != rank) st_relaxed_v4(all + (size_t)q * T4 + i, make_uint4(0, 0, 0, 0));
      store_h4(o, i, s);
    }
    __syncthreads();
  }
  const unsigned long long t1 = gtimer();
  if (tid == 0) {
    t[2 * blockIdx.x] = t0;
    t[2 * blockIdx.x + 1] = t1;
  }
}
'''


def source() -> str:
    lines = [f"#define THREADS {THREADS}"]
    lines += [f"constexpr int {f.upper()} = {i};" for i, f in enumerate(FORMS)]
    lines.append(SRC)
    for r, n in SHAPES:
        for c in SPLITS:
            for i, f in enumerate(FORMS):
                dims = f"__cluster_dims__({c}, 1, 1) " if f in CLUSTER_FORMS else ""
                lines.append(
                    f'extern "C" __global__ void {dims}__launch_bounds__(THREADS, 1) '
                    f"red_{f}_{r}_{n}_{c}(float4* ws, int* cnt, int epoch, __half* out, "
                    f"unsigned long long* t) {{ reduce_body<{r}, {n}, {c}, {i}>(ws, cnt, epoch, "
                    "out, t); }")
    return "\n".join(lines)


def expected(r: int, n: int, c: int) -> np.ndarray:
    """The FP16 tiles of every group, summed in rank order in FP32 as the kernels do."""
    t = r * n
    i = np.arange(t, dtype=np.int64)
    out = []
    for g in range(CTAS // c):
        s = None
        for q in range(c):
            cta = g * c + q
            v = ((cta * 977 + i * 131) % 1999 - 999).astype(np.float32) * np.float32(0.0078125)
            s = v if s is None else (s + v).astype(np.float32)
        out.append(s.astype(np.float16))
    return np.concatenate(out)


def summary(record: dict) -> str:
    """The probe's record as markdown: residency, then per partial shape and split the forms'
    median and slowest CTA times and event times, and each form's saving against ``global``."""
    out = [f"cluster_probe on {record['device']['name']} ({record['date']}), "
           f"{record['ctas']} CTAs of {record['threads']} threads, median of "
           f"{record['reps']} launches.", "",
           "| cluster size | CTAs at once (of 264) | waves | event µs, 0.1 µs spins |",
           "| ---: | ---: | ---: | ---: |"]
    for r in record["residency"]:
        out.append(f"| {r['cluster']} | {r['concurrent']} | {r['waves']} | "
                   f"{r['event_us_short_spin']:.2f} |")
    out += ["", "| partial (rows x cols, FP32) | split | form | median CTA µs | slowest CTA µs "
            "| event µs | slowest CTA vs global | event vs global | bits as NumPy |",
            "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    base = {}
    for r in record["reduce"]:
        key = (r["rows"], r["cols"], r["split"])
        if r["form"] == "global":
            base[key] = r
        g = base.get(key)
        d_cta = r["slowest_cta_us"] - g["slowest_cta_us"] if g else float("nan")
        d_ev = r["event_us"] - g["event_us"] if g else float("nan")
        out.append(f"| {r['rows']} x {r['cols']} | {r['split']} | {r['form']} | "
                   f"{r['median_cta_us']:.2f} | {r['slowest_cta_us']:.2f} | {r['event_us']:.2f} | "
                   f"{d_cta:+.2f} | {d_ev:+.2f} | {'equal' if r['bitwise_equal_numpy'] else 'DIFFER'} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 2 and sys.argv[1] == "--md-from":
        rec = json.loads(Path(sys.argv[2]).read_text())
        print(summary(rec), end="")
        return 0
    import cupy as cp

    from marlin_cupy.records import environment

    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--reps", type=int, default=30)
    a = p.parse_args(argv)
    mod = cp.RawModule(code=source(), options=("-std=c++17", "--use_fast_math"))
    spin_ker = cp.RawModule(code=r'''extern "C" __global__ void hold(long long ns) {
      unsigned long long t0, t;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
      do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns); }''')
    hold = spin_ker.get_function("hold")
    record = {"kind": "cluster_probe", **environment(), "threads": THREADS, "ctas": CTAS,
              "reps": a.reps, "residency": [], "reduce": []}

    def timed(launch, reps):
        """Event times (µs) of ``reps`` launches queued behind a spin, and launch i's index."""
        cp.cuda.Device().synchronize()
        ev = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(reps)]
        hold((1,), (1,), (np.int64(3_000_000),))
        for i in range(reps):
            ev[i][0].record()
            launch(i)
            ev[i][1].record()
        ev[-1][1].synchronize()
        return [cp.cuda.get_elapsed_time(x, y) * 1e3 for x, y in ev]

    # 1. residency and the launch's own cost
    grid = 264
    t = cp.zeros(2 * grid, cp.uint64)
    sm = cp.zeros(grid, cp.int32)
    for c in CLUSTERS:
        f = mod.get_function(f"spin_c{c}")
        f.max_dynamic_shared_size_bytes = RESIDENT_SMEM
        f((grid,), (THREADS,), (t, sm, np.int64(30_000)), shared_mem=RESIDENT_SMEM)
        cp.cuda.Device().synchronize()
        tt = t.get().astype(np.int64).reshape(-1, 2)
        start = tt[:, 0] - tt[:, 0].min()
        first = start < 5_000
        ev = timed(lambda i, f=f: f((grid,), (THREADS,), (t, sm, np.int64(100)),
                                    shared_mem=RESIDENT_SMEM), a.reps)
        row = {"cluster": c, "grid": grid, "smem": RESIDENT_SMEM,
               "concurrent": int(first.sum()),
               "sms_in_first_wave": int(len(set(sm.get()[first].tolist()))),
               "waves": int(np.ceil((start.max() + 1) / 30_000)),
               "event_us_short_spin": float(np.median(ev))}
        record["residency"].append(row)
        print(json.dumps(row), flush=True)

    # 2. the end of a split column, global against cluster
    ws = cp.zeros(CTAS * 64 * 256, cp.float32)
    cnt = cp.zeros(CTAS, cp.int32)
    tt = cp.zeros(2 * CTAS, cp.uint64)
    for r, n in SHAPES:
        out = cp.zeros(CTAS * r * n, cp.float16)
        smem = r * n * 4
        for c in SPLITS:
            want = expected(r, n, c)
            for form in FORMS:
                f = mod.get_function(f"red_{form}_{r}_{n}_{c}")
                f.max_dynamic_shared_size_bytes = max(smem, RESIDENT_SMEM)
                cnt.fill(0)
                ws.fill(0)
                epoch = [0]
                spans, slow = [], []

                def launch(i, f=f):
                    f((CTAS,), (THREADS,), (ws, cnt, np.int32(epoch[0]), out, tt),
                      shared_mem=RESIDENT_SMEM)
                    epoch[0] += 1

                out.fill(0)
                launch(0)
                cp.cuda.Device().synchronize()
                got = out.get()[: (CTAS // c) * r * n]
                equal = bool(np.array_equal(got.view(np.uint16), want.view(np.uint16)))
                for _ in range(a.reps):
                    launch(0)
                    cp.cuda.Device().synchronize()
                    d = np.diff(tt.get().astype(np.int64).reshape(-1, 2), axis=1)[:, 0]
                    spans.append(float(np.median(d)) / 1e3)
                    slow.append(float(d.max()) / 1e3)
                ev = timed(launch, a.reps)
                row = {"rows": r, "cols": n, "split": c, "form": form,
                       "partial_bytes": smem, "bitwise_equal_numpy": equal,
                       "median_cta_us": float(np.median(spans)),
                       "slowest_cta_us": float(np.median(slow)),
                       "event_us": float(np.median(ev))}
                record["reduce"].append(row)
                print(json.dumps(row), flush=True)
    Path(a.out).write_text(json.dumps(record, indent=1))
    print(summary(record), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
