#!/usr/bin/env python3
"""The rate of the wgmma loop's step with its dequantization, alone (needs an sm_90 GPU for the
timing; ``--sass`` needs only nvcc and nvdisasm). NOTES.md entry 94.

    python3 scripts/dequant_rate.py OUT.json [--iters 2000]
    python3 scripts/dequant_rate.py --sass            # instructions per step of each variant
    ncu ... python3 scripts/dequant_rate.py OUT.json --only dequant_rate_n64_j2_d1_u2 --wgs 2

``wgmma_rate.py`` times the tensor form with nothing beside it (928 TFLOP/s at N = 64). The
kernel's M = 64 loop runs at 53-62 % of that, and its launches add a stream, a ring, barriers,
a producer and the ends. This probe keeps only the step of ``run_wgmma``: each warpgroup reads
its packed words for the next step from shared memory (one step ahead, as ``fetch_to_registers``
does), unpacks this step's words into the A fragments, issues its group of m64nNk16 wgmma
(activations through the 128-byte swizzle descriptor) and waits for an earlier group, naming
that group's A registers (``mc::wgmma_wait_keep``). No global memory, no ring, no barrier in the
loop, 132 CTAs of 1..4 warpgroups. The code is the kernel's own (``mc::dequant_sym_fma``,
``mc::wgmma_m64k16``, ``mc::sw128_desc``, from cuda/marlin.cuh).

Variants (``VARIANTS``): N (64 is the M = 64 loop's sw8, 32 the M = 32 loop's sw4), J (wgmma
per group: words per thread and step; 2 is the 32-column warps of the 256-wide M = 64 tiles, 4
the 64-column ones), D (groups left in flight at the wait: 1 as the kernel, two A buffers; 2
with three, ``MARLIN_WG_DEPTH 2``'s ring), and the unpacking:

- 0: none (A fragments constant; the form's own rate inside this loop);
- 1: the shifts and masks only (probe 8's unpacking: 3 SHF and 4 LOP3 per word);
- 2: the shipped symmetric form, the group scale inside one HFMA2 per pair
  (``dequant_sym_fma``, 4 more per word), the scale constants made once per 8 (D = 1) or 6
  (D = 2) steps from one shared-memory load.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (str(ROOT), str(ROOT / "scripts")):
    if p not in sys.path:
        sys.path.insert(0, p)

#: (N, J, D, unpacking, most warpgroups per CTA). 32 accumulators per wgmma and thread at
#: N = 64: J = 4 holds 128 and caps a CTA at two warpgroups (255 registers), J = 2 allows four
#: with two A buffers; with three, ptxas serializes the wgmma at 128 registers (its C7512), so
#: three warpgroups (168).
VARIANTS = tuple(
    [(64, 2, 1, u, 4) for u in (0, 1, 2)] + [(64, 2, 2, u, 3) for u in (0, 1, 2)]
    + [(64, 4, d, u, 2) for d in (1, 2) for u in (0, 1, 2)]
    + [(32, 2, 1, u, 4) for u in (0, 2)]
    + [(32, 4, 1, u, 2) for u in (0, 2)])

#: The same step with the kernel's per-unit synchronisation after the unit's last wait, as
#: ``run_wgmma`` issues it (NOTES.md entry 96), by kind: 1 the proxy fence (``fence.proxy.async``,
#: which orders a ring slot's cp.async writes before wgmma's reads and compiles to
#: MEMBAR.ALL.CTA); 2 the ring's mbarrier operations alone (an arrive on an `empty`-like
#: barrier that never completes, a wait on a `full`-like one whose phase has completed); 3
#: both; 4 the arrive alone (release, as ``mc::mbar_arrive``); 5 the wait alone (acquire, as
#: ``mc::mbar_wait``); 6 both mbarrier operations with ``.relaxed`` semantics; 7 those and the
#: fence; 8 the wait by lane 0 only, then ``__syncwarp``; 9 one ``mbarrier.test_wait`` (no
#: loop, no branch; its predicate kept alive); 10 a named barrier of the CTA (``bar.sync 1``)
#: instead; 11 a poll of a flag word in shared memory (``ld.volatile.shared``, set before the
#: loop); 12 the same poll with ``ld.acquire.cta.shared``; 13 kind 3 every other unit (the
#: kernel's ``MARLIN_WS_PAIRS``, entry 97); 14 the poll of kind 12 (its loop inside the asm, as
#: the kernel's ``MARLIN_WS_FLAGS`` does it) and lane 0's ``red.relaxed.cta.shared.add`` on a
#: counter (the release of ``MARLIN_WS_FLAGS``, entry 98); 15 that poll and a
#: ``st.relaxed.cta.shared`` by every lane to its warp's word; 16 the poll's first load issued
#: early (at step 1, into a register) and only checked after the last step's wait (a loop
#: that loads again while the word shows nothing; it never runs here); 17 the same with
#: ``mbarrier.test_wait`` at step 1 and ``try_wait`` at the end only if that failed; 18 kind 17
#: and the proxy fence; 19 kind 16 and kind 14's release at step 1. Entries: (N, J, D,
#: unpacking, most warpgroups);
#: every kind is built for each.
FENCED = ((64, 2, 1, 2, 2), (64, 2, 2, 2, 2), (64, 4, 1, 2, 2))
FENCE_KINDS = tuple(range(1, 20))

UNPACK_NAMES = {0: "none", 1: "shift+mask", 2: "fma (shipped)"}

KERNELS = r'''
using mc::uint32_t;
__device__ __forceinline__ void mbar_arrive_relaxed(uint32_t bar) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.relaxed.cta.shared::cta.b64 st, [%0];\n}\n"
               ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait_relaxed(uint32_t bar, uint32_t parity) {
  asm volatile("{\n .reg .pred p;\nWAIT:\n"
               " mbarrier.try_wait.parity.relaxed.cta.shared::cta.b64 p, [%0], %1;\n"
               " @!p bra WAIT;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}

template <int J> struct WordsOf;
template <> struct WordsOf<2> { using T = uint2; };
template <> struct WordsOf<4> { using T = uint4; };

template <int J>
__device__ __forceinline__ void load_words(const uint32_t* p, uint32_t (&w)[J]) {
  const typename WordsOf<J>::T v = *reinterpret_cast<const typename WordsOf<J>::T*>(p);
  w[0] = v.x; w[1] = v.y;
  if constexpr (J == 4) { w[2] = reinterpret_cast<const uint4&>(v).z; w[3] = reinterpret_cast<const uint4&>(v).w; }
}

// One warpgroup's loop: `iters` units of U steps. Step s unpacks its words into wa[s % (D + 1)],
// issues J wgmma on them, then waits until D groups are pending, naming group s - D's buffer.
template <int N, int J, int D, int UNPACK, int FENCE = 0>
__device__ __forceinline__ void dq_loop(float* out, int iters) {
  constexpr int U = D == 1 ? 8 : 6;   // steps per unit: a multiple of the D + 1 buffers
  extern __shared__ __align__(1024) int4 smem[];
  int4* bsm = smem;                                             // N rows of 128 bytes
  uint32_t* wsm = reinterpret_cast<uint32_t*>(smem + N * 8);     // U steps x 128 threads x J
  uint32_t* ssm = wsm + U * 128 * J;                             // 128 threads x 2 scale words
  for (int i = threadIdx.x; i < N * 8; i += blockDim.x)
    bsm[i] = make_int4(0x3c003c00, 0x3c003c00, 0x3c003c00, 0x3c003c00);   // 1.0
  for (int i = threadIdx.x; i < U * 128 * J; i += blockDim.x)
    wsm[i] = (uint32_t)i * 2654435761u;                          // any nibbles
  for (int i = threadIdx.x; i < 256; i += blockDim.x)
    ssm[i] = 0x20002000u + (uint32_t)(i & 7);                    // scales near 2^-7
  // The kinds with mbarrier operations: two mbarriers after the scales; `full` completes its
  // phase 0 here, `empty` expects more arrivals than the loop makes (2^20 - 1), so neither
  // ever blocks.
  constexpr bool BARS = (FENCE >= 2 && FENCE <= 9) || FENCE == 13 || FENCE == 17 || FENCE == 18;
  const uint32_t full_bar = mc::smem_addr(ssm + 256), empty_bar = full_bar + 8;
  if (BARS && threadIdx.x == 0) {
    mc::mbar_init(full_bar, 1);
    mc::mbar_init(empty_bar, (1 << 20) - 1);
  }
  mc::fence_proxy_async_shared();
  __syncthreads();
  if (BARS && threadIdx.x == 0) mc::mbar_arrive(full_bar);
  const int wt = threadIdx.x % 128;
  const unsigned long long desc = mc::sw128_desc(mc::smem_addr(bsm));
  mc::FragA wa[D + 1][J] = {};
  mc::FragC acc[J][N / 8];
#pragma unroll
  for (int j = 0; j < J; j++)
#pragma unroll
    for (int f = 0; f < N / 8; f++) acc[j][f][0] = acc[j][f][1] = acc[j][f][2] = acc[j][f][3] = 0.f;
  uint32_t cur[J], nxt[J];
  uint32_t tested = 0;   // FENCE 9: the test_wait results, kept alive through the output
  uint32_t seen = 0;     // FENCE 16-19: what the early load or test saw
  // FENCE 11-19: the flag word (a non-zero scale) and kinds 14 and 19's release counter
  const uint32_t flag = mc::smem_addr(ssm + 255);
  auto red_lane0 = [&]() { mc::red_add_lane0(mc::smem_addr(ssm + 256), threadIdx.x % 32); };
  load_words<J>(wsm + wt * J, cur);
  for (int it = 0; it < iters; it++) {
    half2 m0, c0, m1, c1;
    if constexpr (UNPACK == 2) {
      const uint2 sw = *reinterpret_cast<const uint2*>(ssm + 2 * wt);
      const half2 s0 = mc::as_half2(sw.x), s1 = mc::as_half2(sw.y);
      const half2 big = mc::as_half2(0x74007400u), neg8 = mc::as_half2(0xc800c800u);  // 2^14, -8
      m0 = __hmul2(__hmul2(s0, big), mc::as_half2(0x54005400u));   // s 2^20 (2^14 * 2^6)
      c0 = __hmul2(s0, neg8);
      m1 = __hmul2(__hmul2(s1, big), mc::as_half2(0x54005400u));
      c1 = __hmul2(s1, neg8);
    }
#pragma unroll
    for (int sub = 0; sub < U; sub++) {
      if constexpr (UNPACK > 0) load_words<J>(wsm + (((sub + 1) % U) * 128 + wt) * J, nxt);
      mc::FragA (&a)[J] = wa[sub % (D + 1)];
#pragma unroll
      for (int j = 0; j < J; j++) {
        if constexpr (UNPACK == 1) {
          constexpr uint32_t MASK = 0x00f000f0u;
          a[j][0] = (cur[j] << 4) & MASK; a[j][1] = cur[j] & MASK;
          a[j][2] = (cur[j] >> 4) & MASK; a[j][3] = (cur[j] >> 8) & MASK;
        } else if constexpr (UNPACK == 2) {
          mc::FragB f0, f1;
          mc::dequant_sym_fma(cur[j], m0, c0, m1, c1, f0, f1);
          a[j][0] = mc::as_u32(f0[0]); a[j][1] = mc::as_u32(f0[1]);
          a[j][2] = mc::as_u32(f1[0]); a[j][3] = mc::as_u32(f1[1]);
        }
      }
      mc::wgmma_fence();
#pragma unroll
      for (int j = 0; j < J; j++) mc::wgmma_m64k16<N>(&acc[j][0], a[j], desc);
      mc::wgmma_commit();
      mc::wgmma_wait_keep<D>(wa[(sub + 1) % (D + 1)]);
      if constexpr (FENCE >= 16) {
        if (sub == 1) {   // early: the flag's load (or the barrier's test) and kind 19's release
          if constexpr (FENCE == 16 || FENCE == 19) seen = mc::ld_acquire_shared(flag);
          else seen = mc::mbar_test(full_bar, 0u);
          if constexpr (FENCE == 19) red_lane0();
        }
        if (sub == U - 1) {   // late: wait only if the early look saw nothing
          if constexpr (FENCE == 16 || FENCE == 19) {
            mc::poll_at_least<0>(flag, 1u, seen);
          } else {
            mc::mbar_wait_unless(full_bar, 0u, seen);
            if constexpr (FENCE == 18) mc::fence_proxy_async_shared();
          }
        }
      } else if constexpr (FENCE > 0) {
        if (sub == U - 1) {   // as run_wgmma's last step of a unit
          if constexpr (FENCE == 13) {
            if ((it & 1) == 0) {
              mc::mbar_arrive(empty_bar);
              mc::mbar_wait(full_bar, 0u);
              mc::fence_proxy_async_shared();
            }
          }
          if constexpr (FENCE == 2 || FENCE == 3 || FENCE == 4) mc::mbar_arrive(empty_bar);
          if constexpr (FENCE == 2 || FENCE == 3 || FENCE == 5) mc::mbar_wait(full_bar, 0u);
          if constexpr (FENCE == 6 || FENCE == 7) {
            mbar_arrive_relaxed(empty_bar);
            mbar_wait_relaxed(full_bar, 0u);
          }
          if constexpr (FENCE == 8) {
            if ((threadIdx.x & 31) == 0) mc::mbar_wait(full_bar, 0u);
            __syncwarp();
          }
          if constexpr (FENCE == 9) tested += mc::mbar_test(full_bar, 0u);
          if constexpr (FENCE == 10) asm volatile("bar.sync 1, %0;" ::"r"(blockDim.x) : "memory");
          if constexpr (FENCE == 11) {
            while (*reinterpret_cast<volatile uint32_t*>(ssm + 255) == 0u) {}
          }
          if constexpr (FENCE == 12) {
            while (mc::ld_acquire_shared(flag) == 0u) {}
          }
          if constexpr (FENCE == 14 || FENCE == 15) {
            // The flag word holds a non-zero scale: the poll passes at once, as kind 12's.
            mc::poll_at_least<0>(flag, 1u, 0u);
            if constexpr (FENCE == 14) {
              red_lane0();
            } else {
              asm volatile("st.relaxed.cta.shared::cta.b32 [%0], %1;"
                           ::"r"(mc::smem_addr(ssm + 256) + 4 * (threadIdx.x / 32)), "r"(it)
                           : "memory");
            }
          }
          if constexpr (FENCE == 1 || FENCE == 3 || FENCE == 7) mc::fence_proxy_async_shared();
        }
      }
      if constexpr (UNPACK > 0) {
#pragma unroll
        for (int j = 0; j < J; j++) cur[j] = nxt[j];
      }
    }
  }
  mc::wgmma_wait<0>();
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < J; j++)
#pragma unroll
    for (int f = 0; f < N / 8; f++) s += acc[j][f][0] + acc[j][f][1] + acc[j][f][2] + acc[j][f][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s + (float)(tested & 1u);   // keeps them live
}
'''


def steps_per_unit(d: int) -> int:
    return 8 if d == 1 else 6


def entry(n: int, j: int, d: int, u: int, fence: int = 0) -> str:
    return f"dequant_rate_n{n}_j{j}_d{d}_u{u}" + (f"_f{fence}" if fence else "")


def smem_bytes(n: int, j: int, d: int) -> int:
    # + FENCE's mbarriers, or kinds 14 and 15's counter and 16 warps' words
    return n * 128 + steps_per_unit(d) * 128 * j * 4 + 256 * 4 + 64


def all_entries() -> list:
    """(fence kind, N, J, D, unpacking, most warpgroups) of every entry: ``VARIANTS`` without a
    per-unit synchronisation, then ``FENCED`` with each of ``FENCE_KINDS``."""
    return [(0,) + v for v in VARIANTS] + [(f,) + v for f in FENCE_KINDS for v in FENCED]


def source(entries=None) -> str:
    """The module holding ``entries`` (default: ``all_entries()``)."""
    from marlin_cupy import kernels
    body = [kernels._base_source(), KERNELS]
    for fence, n, j, d, u, wgs in all_entries() if entries is None else entries:
        body.append(f'extern "C" __global__ void __launch_bounds__({128 * wgs}, 1)\n'
                    f"{entry(n, j, d, u, fence)}(float* out, int iters) "
                    f"{{ dq_loop<{n}, {j}, {d}, {u}, {fence}>(out, iters); }}\n")
    return "".join(body)


def flop(n: int, j: int, d: int, iters: int, wgs: int, sms: int) -> float:
    return 2.0 * 64 * n * 16 * j * steps_per_unit(d) * iters * wgs * sms


def sass_counts() -> dict:
    """Instructions per step in each variant's unit loop (sm_90a, nvcc), by kind."""
    from collections import Counter
    import sass_identity as si
    from sass_loop_size import opcode
    out = {}
    for v in VARIANTS:
        n, j, d, u, _ = v
        with tempfile.TemporaryDirectory() as tmp:
            loops = si.hot_loops(si.sass_lines(source([(0,) + v]), "sm_90a", Path(tmp),
                                               labels=True))
        if not loops:
            continue
        c = Counter(opcode(x).split(".")[0] for x in loops[0])
        steps = c["HGMMA"] / j    # (ptxas may unroll the unit loop: count steps by the wgmma)
        out[entry(n, j, d, u)] = {"per_step": round(sum(c.values()) / steps, 1),
                                  "hgmma": c["HGMMA"] / steps,
                                  "alu": (c["LOP3"] + c["SHF"] + c["IMAD"]) / steps,
                                  "fp16": (c["HFMA2"] + c["HMUL2"] + c["HADD2"]) / steps,
                                  "lds": c["LDS"] / steps,
                                  "arrive": c["WARPGROUP"] / steps}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?")
    p.add_argument("--iters", type=int, default=2000, help="units (8 or 6 steps) per warpgroup")
    p.add_argument("--sass", action="store_true", help="print instructions per step, no GPU")
    p.add_argument("--only", default="", help="comma-separated entry names (for ncu)")
    p.add_argument("--wgs", default="", help="comma-separated warpgroup counts to run")
    a = p.parse_args(argv)
    if a.sass:
        for k, v in sass_counts().items():
            print(k, v)
        return 0
    if not a.out:
        p.error("OUT.json is needed unless --sass")
    import cupy as cp
    import numpy as np
    from marlin_cupy import jit
    from marlin_cupy.records import environment
    from wgmma_rate import median_launch_us
    only = set(filter(None, a.only.split(",")))
    entries = [e for e in all_entries() if not only or entry(*e[1:5], e[0]) in only]
    if not entries:
        p.error(f"--only names no entry of this script: {sorted(only)}")
    mod = jit.load_module(source(entries), arch_suffix="a")   # only what runs is compiled
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    wgs_list = {int(v) for v in a.wgs.split(",") if v}
    rows = []
    for fence, n, j, d, u, max_wgs in entries:
        ker = mod.get_function(entry(n, j, d, u, fence))
        smem = smem_bytes(n, j, d)
        ker.max_dynamic_shared_size_bytes = smem
        for wgs in range(1, max_wgs + 1):
            if wgs_list and wgs not in wgs_list:
                continue
            threads = 128 * wgs
            out = cp.empty(sms * threads, dtype=cp.float32)
            us = median_launch_us(ker, sms, threads, (out, np.int32(a.iters)), smem)
            finite = bool(cp.isfinite(out).all())
            row = {"n": n, "j": j, "depth": d, "unpack": u, "unpack_name": UNPACK_NAMES[u],
                   "unit_fence": fence,
                   "warpgroups_per_sm": wgs, "iters": a.iters,
                   "registers": int(ker.num_regs), "local_bytes": int(ker.local_size_bytes),
                   "median_us": us, "tflops": flop(n, j, d, a.iters, wgs, sms) / us / 1e6,
                   "finite": finite}
            rows.append(row)
            print(f"m64n{n}k16 x {j}, depth {d}, unpack {UNPACK_NAMES[u]}"
                  f"{f', per-unit sync {fence}' if fence else ''}, {wgs} warpgroup(s): "
                  f"{us:.0f} us, {row['tflops']:.0f} TFLOP/s ({row['registers']} registers)",
                  flush=True)
    with open(a.out, "w") as f:
        json.dump({"kind": "dequant_rate", "environment": environment(), "sms": sms,
                   "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
