"""Where does the kernel's time go? Times the real kernel next to its measurement builds
(MARLIN_PROBE in cuda/marlin.cuh: 1 stream only, 2 no dequantization, 3 no MMA) and a plain
read-only streaming kernel over the same bytes, on a GPU, weights never L2-resident.

    python3 scripts/ceiling_probe.py OUT.json [M ...]

Exploration tool for benchmarks/NOTES.md; the probe builds compute garbage by design.
"""
from __future__ import annotations

import time

import cupy as cp
import numpy as np

import marlin_cupy as mc
from marlin_cupy import jit, kernels, ops
from marlin_cupy.config import KernelConfig
from marlin_cupy.records import environment, write_json

LAYERS = {"llama2-70b": [(8192, 10240), (8192, 8192), (8192, 57344), (28672, 8192)],
          "llama2-7b": [(4096, 12288), (4096, 4096), (4096, 22016), (11008, 4096)]}
PROBES = {0: "real", 1: "stream-only", 2: "no-dequant", 3: "no-mma"}

READ_SRC = r'''
extern "C" __global__ void read_stream(const int4* __restrict__ p, long long n, int* sink) {
  int acc = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    int4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x7fffffff) sink[0] = acc;   // never true for our data; keeps the loads
}
extern "C" __global__ void spin(long long ns) {
  long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
'''


def main():
    import argparse
    p = argparse.ArgumentParser(description="The kernel next to its MARLIN_PROBE measurement "
                                "builds and a plain read of the same bytes (needs a GPU).")
    p.add_argument("out", help="output JSON")
    p.add_argument("m", nargs="*", type=int, default=[1, 16], help="batch sizes (default 1 16)")
    a = p.parse_args()
    out_path, ms = a.out, a.m
    rng = np.random.default_rng(0)
    mod = cp.RawModule(code=READ_SRC)
    read_stream, spin = mod.get_function("read_stream"), mod.get_function("spin")
    sink = cp.zeros(1, cp.int32)
    l2 = cp.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]
    sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]

    def gpu_us(fn, reps=40):
        fn(0), fn(1)
        cp.cuda.get_current_stream().synchronize()
        ev = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(reps)]
        spin((1,), (1,), (np.int64(8_000_000),))
        for i in range(reps):
            ev[i][0].record(); fn(i); ev[i][1].record()
        ev[-1][1].synchronize()
        t = np.array([cp.cuda.get_elapsed_time(a, b) * 1e3 for a, b in ev])
        return float(np.median(t)), float(np.percentile(t, 20)), float(np.percentile(t, 80))

    def probe_kernel(cfg, probe):
        # In the form the default dispatch takes for these weights (the group scale inside the
        # unpacking where the config has it: their scales lie below 2^-4), as use_kernel is told.
        return ops.build_kernel(cfg, prefix=f"#define MARLIN_PROBE {probe}\n",
                                fma=ops.use_scale_fma(cfg, False, True))

    extra_cfgs = {"t256_m1_n16_k8_s4_g8_fp32", "t256_m1_n16_k8_s8_g8_fp32",
                  "t256_m1_n16_k16_s4_g8_fp32", "t512_m1_n16_k8_s4_g8_fp32",
                  "t128_m1_n8_k8_s4_g8_fp32"}
    def plan_cfgs(m, n, k):
        tuned = ops.plan(m, n, k, 128).config
        cfgs = [tuned] + [KernelConfig.from_name(c) for c in sorted(extra_cfgs)
                          if m <= 16 and KernelConfig.from_name(c).name != tuned.name]
        return tuned, [c for c in cfgs if n % c.tile_n == 0 and k % c.tile_k == 0]

    def probes_for(cfg, tuned):
        return [p for p in PROBES if p in (0, 1) or cfg is tuned]

    # Compile every build first, in parallel (NVRTC is the slow part of a cold start).
    t_start = time.time()
    sources = set()
    for layers in LAYERS.values():
        for k, n in layers:
            for m in ms:
                tuned, cfgs = plan_cfgs(m, n, k)
                for cfg in cfgs:
                    for p in probes_for(cfg, tuned):
                        sources.add((f"#define MARLIN_PROBE {p}\n" + kernels.marlin_source(
                            cfg, fma=ops.use_scale_fma(cfg, False, True)), cfg.arch_suffix))
    jit.warm_cache(sorted(sources), 16)
    print(f"compiled {len(sources)} builds in {time.time() - t_start:.0f} s", flush=True)
    rows = []
    for setname, layers in LAYERS.items():
        for k, n in layers:
            nbytes = k * n // 2
            copies = max(2, -(-3 * l2 // nbytes))
            qw = mc.QuantizedWeight(rng.integers(0, 16, (k, n), dtype=np.uint8),
                                    rng.uniform(0.001, 0.01, (k // 128, n)).astype(np.float16),
                                    None, None, 4, 128)
            mw0 = mc.pack(qw)
            mws = [mw0.to_device() for _ in range(copies)]
            flat = [w.qweight.reshape(-1).view(cp.int32) for w in mws]
            n16 = flat[0].size // 4
            for grid in (sms, 2 * sms, 4 * sms, 8 * sms):
                med, p20, p80 = gpu_us(lambda i: read_stream(
                    (grid,), (512,), (flat[i % copies], np.int64(n16), sink)))
                rows.append(dict(set=setname, k=k, n=n, m=0, kind="read-stream", grid=grid,
                                 us=med, p20=p20, p80=p80, gbps=nbytes / med / 1e3))
            for m in ms:
                x = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
                tuned, cfgs = plan_cfgs(m, n, k)
                for cfg in cfgs:
                    for probe in probes_for(cfg, tuned):
                        pname = PROBES[probe]
                        assert mws[0].fma_scales
                        with ops.use_kernel(cfg, probe_kernel(cfg, probe),
                                            fma=ops.use_scale_fma(cfg, False, True)):
                            med, p20, p80 = gpu_us(
                                lambda i: mc.matmul(x, mws[i % copies], config=cfg))
                        byts = nbytes + (k // 128) * n * 2 + m * k * 2 + m * n * 2
                        rows.append(dict(set=setname, k=k, n=n, m=m, kind=pname, config=cfg.name,
                                         tuned=cfg is tuned, us=med, p20=p20, p80=p80,
                                         gbps=byts / med / 1e3))
                        print(f"{setname} {k}x{n} M={m} {cfg.name:34s} {pname:12s} "
                              f"{med:8.1f} us {byts / med / 1e3:7.0f} GB/s", flush=True)
            del mws, flat
            cp.get_default_memory_pool().free_all_blocks()
    write_json(out_path, {"kind": "ceiling-probe", **environment(),
                          "seconds": time.time() - t_start, "rows": rows})
    for r in rows:
        if r["kind"] == "read-stream":
            print(f"read-stream {r['k']}x{r['n']} grid {r['grid']}: {r['us']:.1f} us "
                  f"{r['gbps']:.0f} GB/s")


if __name__ == "__main__":
    main()
