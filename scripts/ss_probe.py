"""The loop of a kernel that dequantizes into shared memory, alone (NOTES.md entry 31; needs an
sm_90 GPU). Written before any measurement: a first step toward next lever 2, not a kernel of
the package.

    python3 scripts/ss_probe.py OUT.json [--m 64|32] [--producers 256,128] [--k 8192]
                                [--reps 5] [--check]

One CTA per SM computes a 64 x 256 tile of C = A @ W over all of K: N = 256 x (SMs). Warp roles:
- two producer warpgroups (``--producers 256``; or one, 128, with two columns per thread): each
  thread owns one of the tile's 256 weight columns. It loads
  that column's packed words for a stage of 64 K (8 words, coalesced across threads) two
  stages ahead into registers, dequantizes and scales them, and stores each word as one 16-byte
  chunk of the fp16 tile in the 128-byte-swizzled K-major layout. The activations of the stage
  go in by cp.async. Then it arrives on the stage's "full" mbarrier;
- one consumer warpgroup: waits for "full", issues 4 k16 steps of two m64n128k16 wgmma with both
  operands from shared memory, and after the next stage's group is issued and the previous one
  is done, arrives on that stage's "empty" mbarrier.

Weights here are this probe's own layout, not the package's: uint32 [K/8, N], word (j, n) holds
K rows 8j..8j+7 of column n with its nibbles in the order 0, 2, 4, 6, 1, 3, 5, 7, so that the
kernel's magic-number dequantization (``mc::dequant_sym``) yields the 8 values in K order.
Symmetric uint4b8 codes, fp16 scales per 128 rows of K.

``--m 32`` runs the swapped form instead: the same fp16 tile is wgmma's A operand (4 x
m64n32k16 per k16 step) and the 32 activation rows are B, so the tensor work falls with M while
the producers' work does not.

Prints TFLOP/s, to hold against ``wgmma_rate.py`` (about 930 for the form alone) and today's
loop (495 on 8192x57344 at M = 64). ``--check`` compares C with an FP32 reference first.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BN, BK, STAGES = 256, 64, 4
B_BYTES = BN * BK * 2


def smem_bytes(m: int) -> int:
    """Shared memory of the probe for M activation rows: the two rings and the mbarriers."""
    return STAGES * (m * BK * 2 + B_BYTES) + 2 * STAGES * 8


#: M -> entry stem: 64 rows as wgmma's A operand; 32 rows as B of the swapped form.
ENTRIES = {64: "ss_probe_m64", 32: "ss_probe_m32_swapped"}


LAYOUTS = ("rows", "tiled")


def entry(m: int, producers: int, ahead: int, layout: str) -> str:
    return f"{ENTRIES[m]}_p{producers}_a{ahead}_{layout}"


def entries_source(m: int, variants) -> str:
    """One extern "C" kernel per (producers, ahead, layout) of ``variants``."""
    lines = []
    for prod, ahead, layout in variants:
        lines.append(
            f'extern "C" __global__ void __launch_bounds__({prod + 128}, 1)\n'
            f"{entry(m, prod, ahead, layout)}(const int4* A, const mc::uint32_t* W, "
            f"const half* S, half* C, int N, int K) {{\n"
            f"  ss::ss_loop<{m}, {'true' if m == 32 else 'false'}, {prod}, {ahead}, "
            f"{'true' if layout == 'tiled' else 'false'}>(A, W, S, C, N, K);\n}}\n")
    return "".join(lines)
#: Nibble i of a word holds K row PERM[i] of its 8 (see the module docstring).
PERM = (0, 2, 4, 6, 1, 3, 5, 7)

KERNEL = r'''
namespace ss {
using mc::uint32_t;
constexpr int BN = 256, BK = 64, STAGES = 4;
constexpr int B_INT4 = BN * BK / 8;   // 16-byte chunks of the weight tile per stage

__device__ __forceinline__ void mbar_init(unsigned long long* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mc::smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.release.cta.shared::cta.b64 st, [%0];\n}\n"
               ::"r"(mc::smem_addr(bar)) : "memory");
}
// Arrives when this thread's earlier cp.async copies have landed (the pending count is raised
// now and lowered then, so it delays the phase without counting as one of its arrivals).
__device__ __forceinline__ void mbar_arrive_cp_async(unsigned long long* bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(mc::smem_addr(bar))
               : "memory");
}
// Wait for the phase of parity `parity`. A probe that has never run may deadlock: after about
// 4 million unsuccessful tries (seconds) it traps instead of hanging the GPU.
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, int parity) {
  for (int tries = 0;; tries++) {
    mc::uint32_t done;
    asm volatile("{\n.reg .pred p;\n"
                 "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(mc::smem_addr(bar)), "r"(parity) : "memory");
    if (done) return;
    if (tries > (1 << 22)) __trap();
  }
}

#define SS_ACC(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
// D[64 x 128] += A[64 x 16] * B[16 x 128], both from shared memory, both K-major.
__device__ __forceinline__ void wgmma_ss_n128(mc::FragC* d, unsigned long long da,
                                              unsigned long long db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
               "%64, %65, p, 1, 1, 0, 0;\n}\n"
               : SS_ACC(0), SS_ACC(1), SS_ACC(2), SS_ACC(3), SS_ACC(4), SS_ACC(5), SS_ACC(6), SS_ACC(7),
                 SS_ACC(8), SS_ACC(9), SS_ACC(10), SS_ACC(11), SS_ACC(12), SS_ACC(13), SS_ACC(14), SS_ACC(15)
               : "l"(da), "l"(db), "r"(1));
}
// Swapped: D[64 x 32] += A[64 x 16] * B[16 x 32], A = 64 weight columns, B = 32 activation rows.
__device__ __forceinline__ void wgmma_ss_n32(mc::FragC* d, unsigned long long da,
                                             unsigned long long db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
               "%16, %17, p, 1, 1, 0, 0;\n}\n"
               : SS_ACC(0), SS_ACC(1), SS_ACC(2), SS_ACC(3)
               : "l"(da), "l"(db), "r"(1));
}
#undef SS_ACC

// Stage kt's 8 packed words of weight column n, and its group scale. ROWS: words [K/8, N]
// (one LDG.32 per word, coalesced across the warp); TILED: [N/256][K/64][256][8] (a column's
// 8 words of a stage are 32 contiguous bytes, two LDG.128, and a CTA's stage is 8 KB contiguous).
template <bool TILED>
__device__ __forceinline__ void load_words(uint32_t (&w)[8], half& s, const uint32_t* W,
                                           const half* S, int kt, int n, int N, int KT) {
  if constexpr (TILED) {
    const int4* src = reinterpret_cast<const int4*>(W) +
                      (static_cast<size_t>(n / BN) * KT + kt) * (BN * 2) + (n % BN) * 2;
    const int4 lo = __ldg(src), hi = __ldg(src + 1);
    w[0] = lo.x; w[1] = lo.y; w[2] = lo.z; w[3] = lo.w;
    w[4] = hi.x; w[5] = hi.y; w[6] = hi.z; w[7] = hi.w;
  } else {
#pragma unroll
    for (int j = 0; j < 8; j++) w[j] = __ldg(W + static_cast<size_t>(kt * 8 + j) * N + n);
  }
  s = S[static_cast<size_t>(kt / 2) * N + n];
}

// BM activation rows: 64 as wgmma's A operand (the weights are B, 2 x n128 per k16 step), or
// SWAP with 32 rows as B of the swapped form (the weights are A, 4 x m64n32 per k16 step).
// PRODUCERS: 256 (two warpgroups, one weight column per thread) or 128 (one, two columns each).
// AHEAD: stages of packed words in flight in each producer's registers. The register sets form a
// ring of AHEAD + 1 indexed at compile time (the stage loop is unrolled by AHEAD + 1), so no
// register copy waits for a load that is still in flight. TILED: the weight layout (load_words).
template <int BM, bool SWAP, int PRODUCERS, int AHEAD, bool TILED>
__device__ __forceinline__ void ss_loop(const int4* A, const mc::uint32_t* W, const half* S,
                                        half* C, int N, int K) {
  constexpr int A_INT4 = BM * BK / 8;     // 16-byte chunks of the activation tile per stage
  constexpr int A_PER_THREAD = A_INT4 / PRODUCERS;
  static_assert(A_INT4 % PRODUCERS == 0, "whole chunks per producer");
  static_assert(SWAP ? BM == 32 : BM == 64, "the two forms of this probe");
  static_assert(PRODUCERS == 128 || PRODUCERS == 256, "one or two producer warpgroups");
  static_assert(AHEAD >= 1 && AHEAD <= 4, "1 to 4 stages of words in flight");
  constexpr int COLS = BN / PRODUCERS;    // weight columns per producer thread
  extern __shared__ __align__(1024) int4 smem[];
  int4* sh_a = smem;                                   // STAGES x BM rows x 128 B
  int4* sh_b = smem + STAGES * A_INT4;                 // STAGES x 256 rows x 128 B
  unsigned long long* full = reinterpret_cast<unsigned long long*>(sh_b + STAGES * B_INT4);
  unsigned long long* empty = full + STAGES;
  const int tid = threadIdx.x, n0 = blockIdx.x * BN, KT = K / BK;
  if (tid == 0) {
    for (int s = 0; s < STAGES; s++) {
      mbar_init(&full[s], PRODUCERS);
      mbar_init(&empty[s], 128);
    }
  }
  __syncthreads();

  if (tid < PRODUCERS) {
    // ---- producers: columns p + c * PRODUCERS of the tile; stage kt's words AHEAD stages early.
    const int p = tid;
    constexpr int RING = AHEAD + 1;
    mc::uint32_t w[RING][COLS][8];
    half s[RING][COLS];
#pragma unroll
    for (int d = 0; d < AHEAD; d++)
#pragma unroll
      for (int c = 0; c < COLS; c++)
        if (d < KT) load_words<TILED>(w[d][c], s[d][c], W, S, d, n0 + p + c * PRODUCERS, N, KT);
    for (int kt0 = 0; kt0 < KT; kt0 += RING) {
#pragma unroll
      for (int d = 0; d < RING; d++) {
        const int kt = kt0 + d;
        if (kt >= KT) break;
        // The set processed one step ago is free: stage kt + AHEAD goes into it.
        if (kt + AHEAD < KT) {
#pragma unroll
          for (int c = 0; c < COLS; c++)
            load_words<TILED>(w[(d + AHEAD) % RING][c], s[(d + AHEAD) % RING][c], W, S,
                              kt + AHEAD, n0 + p + c * PRODUCERS, N, KT);
        }
        const int slot = kt % STAGES;
        mbar_wait(&empty[slot], ((kt / STAGES) & 1) ^ 1);
        // Activations: BM rows x 8 chunks (1 or 2 per thread), swizzled as wgmma reads them.
        int4* a_sh = sh_a + slot * A_INT4;
#pragma unroll
        for (int i = 0; i < A_PER_THREAD; i++) {
          const int q = p + i * PRODUCERS, r = q / 8, c = q % 8;
          mc::cp_async16(a_sh + r * 8 + (c ^ (r & 7)), A + static_cast<size_t>(r) * (K / 8) + kt * 8 + c);
        }
        mbar_arrive_cp_async(&full[slot]);
        // Weights: word j (K rows 8j..8j+7) of column row becomes chunk j of that row.
#pragma unroll
        for (int c = 0; c < COLS; c++) {
          const int row = p + c * PRODUCERS;
          int4* b_sh = sh_b + slot * B_INT4 + row * 8;
          const half2 sc = __half2half2(s[d][c]);
#pragma unroll
          for (int j = 0; j < 8; j++) {
            mc::FragB f0, f1;
            mc::dequant_sym(w[d][c][j], f0, f1);
            f0[0] = __hmul2(f0[0], sc); f0[1] = __hmul2(f0[1], sc);
            f1[0] = __hmul2(f1[0], sc); f1[1] = __hmul2(f1[1], sc);
            b_sh[j ^ (row & 7)] = make_int4(static_cast<int>(mc::as_u32(f0[0])), static_cast<int>(mc::as_u32(f0[1])),
                                            static_cast<int>(mc::as_u32(f1[0])), static_cast<int>(mc::as_u32(f1[1])));
          }
        }
        mc::fence_proxy_async_shared();
        mbar_arrive(&full[slot]);
      }
    }
  } else {
    // ---- consumer warpgroup: all 256 columns of the tile.
    constexpr int HALVES = SWAP ? 4 : 2;      // instructions per k16 step
    constexpr int FRAGS = SWAP ? BM / 8 : 16;  // n8 accumulator fragments per instruction
    mc::FragC acc[HALVES][FRAGS];
#pragma unroll
    for (int h = 0; h < HALVES; h++)
#pragma unroll
      for (int i = 0; i < FRAGS; i++) acc[h][i][0] = acc[h][i][1] = acc[h][i][2] = acc[h][i][3] = 0.f;
    for (int kt = 0; kt < KT; kt++) {
      const int slot = kt % STAGES;
      mbar_wait(&full[slot], (kt / STAGES) & 1);
      mc::fence_proxy_async_shared();
      const mc::uint32_t a_addr = mc::smem_addr(sh_a + slot * A_INT4);
      const mc::uint32_t b_addr = mc::smem_addr(sh_b + slot * B_INT4);
      mc::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < 4; ks++) {
        if constexpr (SWAP) {
          const unsigned long long dx = mc::sw128_desc(a_addr + 32 * ks);
#pragma unroll
          for (int h = 0; h < 4; h++)
            wgmma_ss_n32(&acc[h][0], mc::sw128_desc(b_addr + h * 64 * 128 + 32 * ks), dx);
        } else {
          const unsigned long long da = mc::sw128_desc(a_addr + 32 * ks);
          wgmma_ss_n128(&acc[0][0], da, mc::sw128_desc(b_addr + 32 * ks));
          wgmma_ss_n128(&acc[1][0], da, mc::sw128_desc(b_addr + 128 * 128 + 32 * ks));
        }
      }
      mc::wgmma_commit();
      mc::wgmma_wait<1>();          // the previous stage's group is done: its slot is free
      if (kt > 0) mbar_arrive(&empty[(kt - 1) % STAGES]);
    }
    mc::wgmma_wait<0>();
    const int t = tid - PRODUCERS, warp = t / 32, lane = t % 32;
#pragma unroll
    for (int h = 0; h < HALVES; h++)
#pragma unroll
      for (int i = 0; i < FRAGS; i++) {
        if constexpr (SWAP) {
          // D^T: fragment rows are weight columns, fragment columns are activation rows.
          const int col = n0 + h * 64 + 16 * warp + lane / 4, row = 8 * i + 2 * (lane % 4);
          C[static_cast<size_t>(row) * N + col] = __float2half_rn(acc[h][i][0]);
          C[static_cast<size_t>(row + 1) * N + col] = __float2half_rn(acc[h][i][1]);
          C[static_cast<size_t>(row) * N + col + 8] = __float2half_rn(acc[h][i][2]);
          C[static_cast<size_t>(row + 1) * N + col + 8] = __float2half_rn(acc[h][i][3]);
        } else {
          const int row = 16 * warp + lane / 4, col = n0 + h * 128 + 8 * i + 2 * (lane % 4);
          *reinterpret_cast<half2*>(C + static_cast<size_t>(row) * N + col) =
              __floats2half2_rn(acc[h][i][0], acc[h][i][1]);
          *reinterpret_cast<half2*>(C + static_cast<size_t>(row + 8) * N + col) =
              __floats2half2_rn(acc[h][i][2], acc[h][i][3]);
        }
      }
  }
}
}  // namespace ss

'''


def source(m: int = 64, variants=((256, 2, "tiled"),)) -> str:
    from marlin_cupy import kernels
    return kernels._base_source() + KERNEL + entries_source(m, variants)


def pack(q, cp):
    """Codes [K, N] (uint8, 0..15) -> words [K/8, N] in this probe's nibble order."""
    k, n = q.shape
    g = q.reshape(k // 8, 8, n).astype(cp.uint32)
    words = cp.zeros((k // 8, n), dtype=cp.uint32)
    for i, row in enumerate(PERM):
        words |= g[:, row, :] << (4 * i)
    return words


def tile_words(words, cp):
    """Words [K/8, N] -> the tiled layout [N/256][K/64][256][8] (flat), see ``load_words``."""
    k8, n = words.shape
    t = words.reshape(k8 // 8, 8, n // BN, BN).transpose(2, 0, 3, 1)
    return cp.ascontiguousarray(t).reshape(-1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--k", type=int, default=8192)
    p.add_argument("--m", type=int, default=64, choices=sorted(ENTRIES),
                   help="activation rows: 64 (weights as wgmma's B) or 32 (the swapped form)")
    p.add_argument("--producers", default="256,128",
                   help="producer threads per CTA to time, comma-separated: 256 (two "
                        "warpgroups, one column each) and/or 128 (one, two columns each)")
    p.add_argument("--ahead", default="1,2,3",
                   help="stages of packed words in flight in registers, comma-separated (1-4)")
    p.add_argument("--layout", default="rows,tiled",
                   help="weight layouts, comma-separated: rows ([K/8, N] words, LDG.32) and/or "
                        "tiled ([N/256][K/64][256][8], LDG.128)")
    p.add_argument("--reps", type=int, default=5, help="fewest timed launches per variant")
    p.add_argument("--check", action="store_true", help="compare C with an FP32 reference")
    a = p.parse_args(argv)
    if a.k % 128:
        p.error("--k must be a multiple of 128")
    producers = [int(v) for v in a.producers.split(",") if v]
    if not producers or any(v not in (128, 256) for v in producers):
        p.error("--producers takes 128 and/or 256")
    aheads = [int(v) for v in a.ahead.split(",") if v]
    if not aheads or any(not 1 <= v <= 4 for v in aheads):
        p.error("--ahead takes values from 1 to 4")
    layouts = [v for v in a.layout.split(",") if v]
    if not layouts or any(v not in LAYOUTS for v in layouts):
        p.error(f"--layout takes {' and/or '.join(LAYOUTS)}")
    variants = [(pr, ah, lay) for pr in producers for ah in aheads for lay in layouts]
    import cupy as cp
    import numpy as np
    from marlin_cupy import jit
    from marlin_cupy.bench.harness import Timer, bench_stream
    from marlin_cupy.records import environment
    module = jit.load_module(source(a.m, variants), arch_suffix="a")
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    k, n, m = a.k, BN * sms, a.m
    smem = smem_bytes(m)
    rs = cp.random.RandomState(0)
    q = rs.randint(0, 16, size=(k, n), dtype=cp.uint8)
    scales = rs.uniform(1e-3, 1e-2, size=(k // 128, n)).astype(cp.float16)
    x = rs.standard_normal((m, k), dtype=cp.float32).astype(cp.float16)
    words = {"rows": pack(q, cp)}
    if "tiled" in layouts:
        words["tiled"] = tile_words(words["rows"], cp)
    ref = None
    if a.check:
        w = (q.astype(cp.float32) - 8) * cp.repeat(scales.astype(cp.float32), 128, axis=0)
        ref = x.astype(cp.float32) @ w
        del w
    del q
    runs, failed = [], False
    for prod, ahead, layout in variants:
        name, threads = entry(m, prod, ahead, layout), prod + 128
        ker = module.get_function(name)
        ker.max_dynamic_shared_size_bytes = smem
        out = cp.full((m, n), cp.nan, dtype=cp.float16)
        args = (x, words[layout], scales, out, np.int32(n), np.int32(k))
        ker((sms,), (threads,), args, shared_mem=smem)
        cp.cuda.Device().synchronize()
        run = {"entry": name, "producers": prod, "ahead": ahead, "layout": layout,
               "threads": threads,
               "registers": int(ker.num_regs), "local_bytes": int(ker.local_size_bytes)}
        if ref is not None:
            err = float(cp.linalg.norm(out.astype(cp.float32) - ref) / cp.linalg.norm(ref))
            run["rel_error"] = err
            failed |= not err < 2e-3
            print(f"{name}: relative error against FP32 {err:.3e}"
                  f"{'' if err < 2e-3 else '  (too large: the kernel is wrong)'}", flush=True)
        with bench_stream() as stream:
            timer = Timer(stream, budget_ms=20.0, min_reps=a.reps, max_reps=max(a.reps, 50))
            us = timer.measure(lambda i: ker((sms,), (threads,), args, shared_mem=smem),
                               1).stats.median_us
        run.update(median_us=us, tflops=2.0 * m * n * k / us / 1e6,
                   packed_gbps=(k * n // 2 + k // 128 * n * 2) / us / 1e3)
        runs.append(run)
        print(f"{name}: M={m} K={k} N={n}: {us:.1f} us, {run['tflops']:.0f} TFLOP/s, packed "
              f"weights {run['packed_gbps']:.0f} GB/s; {run['registers']} registers, "
              f"{run['local_bytes']} bytes local", flush=True)
    with open(a.out, "w") as f:
        json.dump({"kind": "ss_probe", "environment": environment(), "m": m, "k": k, "n": n,
                   "sms": sms, "smem": smem, "stages": STAGES, "runs": runs}, f, indent=1)
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
