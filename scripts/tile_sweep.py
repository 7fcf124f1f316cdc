"""Tile sweep on a GPU (exploration; the autotuner, python -m marlin_cupy.tune, supersedes it).

GPU-only kernel times (host kept ahead by a spin kernel, weights rotated past 3x the L2) per
tile shape and pipeline depth on the llama2-70b and llama2-7b layers, next to torch and cuBLAS
FP16. Usage: python3 scripts/tile_sweep.py OUT.json
"""
import json, sys, time
import numpy as np
import cupy as cp
import marlin_cupy as mc
from marlin_cupy import ops
from marlin_cupy.config import KernelConfig, choose_config

def main():
    import argparse
    p = argparse.ArgumentParser(description="Tile sweep on a GPU (exploration; superseded by "
                                "python -m marlin_cupy.tune).")
    p.add_argument("out", help="output JSON")
    out_path = p.parse_args().out
    import torch  # only on the GPU machine
    rng = np.random.default_rng(0)
    spin = cp.RawKernel(r'''extern "C" __global__ void spin(long long ns) {
      long long t0, t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
      do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns); }''', "spin")

    def gpu_times(fn, reps=30, head_us=6000):
        fn(0); fn(1); cp.cuda.get_current_stream().synchronize()
        ev = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(reps)]
        spin((1,), (1,), (np.int64(head_us * 1000),))
        for i in range(reps):
            ev[i][0].record(); fn(i); ev[i][1].record()
        ev[-1][1].synchronize()
        ts = [cp.cuda.get_elapsed_time(a, b) * 1e3 for a, b in ev]
        gaps = [cp.cuda.get_elapsed_time(ev[i][1], ev[i + 1][0]) * 1e3 for i in range(reps - 1)]
        return float(np.median(ts)), float(max(gaps))

    res = {"host": {}, "rows": []}
    from marlin_cupy import jit, kernels
    warm = [KernelConfig(t, mb, nb, kb, st, 8, True) for (t, nb, kb) in [(256, 16, 4), (256, 16, 8), (256, 8, 8), (128, 8, 4), (512, 16, 8), (512, 16, 4)]
            for mb in (1, 2, 4) for st in (4, 6, 8, 12, 16) if t != 512 or mb == 1]
    warm = [c for c in warm if c.smem_bytes(False) <= 232448]
    t0 = time.time(); jit.warm_cache([kernels.marlin_source(c) for c in warm], 16); print("warm", len(warm), time.time() - t0, flush=True)
    # host overhead per call
    k, n = 4096, 4096
    qw = mc.QuantizedWeight(rng.integers(0, 16, (k, n), dtype=np.uint8), np.full((k // 128, n), 0.01, np.float16), None, None, 4, 128)
    mw = mc.pack(qw).to_device(); x = cp.asarray(rng.standard_normal((1, k)).astype(np.float16))
    for _ in range(20): mc.matmul(x, mw)
    cp.cuda.runtime.deviceSynchronize(); t = time.perf_counter()
    for _ in range(500): mc.matmul(x, mw)
    res["host"]["matmul_us"] = (time.perf_counter() - t) / 500 * 1e6
    cp.cuda.runtime.deviceSynchronize()
    print(res["host"], flush=True)

    sets = {"llama2-70b": [(8192, 10240), (8192, 8192), (8192, 57344), (28672, 8192)],
            "llama2-7b": [(4096, 12288), (4096, 4096), (4096, 22016), (11008, 4096)]}
    shapes_t = [(256, 16, 4), (256, 16, 8), (256, 8, 8), (128, 8, 4), (512, 16, 8), (512, 16, 4)]
    L2 = 60e6
    for setname, layers in sets.items():
        for (k, n) in layers:
            nq = max(2, int(np.ceil(3 * L2 / (k * n / 2))))
            nf = max(2, int(np.ceil(3 * L2 / (k * n * 2))))
            qw = mc.QuantizedWeight(rng.integers(0, 16, (k, n), dtype=np.uint8),
                                    rng.uniform(0.001, 0.01, (k // 128, n)).astype(np.float16), None, None, 4, 128)
            mw0 = mc.pack(qw); mws = [mw0.to_device() for _ in range(nq)]
            wf = [cp.asarray(rng.standard_normal((k, n)).astype(np.float16)) for _ in range(nf)]
            wt = [torch.from_dlpack(a) for a in wf]
            for m in (1, 16, 32, 64, 128):
                x = cp.asarray(rng.standard_normal((m, k)).astype(np.float16)); xt = torch.from_dlpack(x)
                t_cub, g1 = gpu_times(lambda i: cp.matmul(x, wf[i % nf]))
                with ops.cupy_stream_of(torch.cuda.current_stream(), cp):
                    t_tor, g2 = gpu_times(lambda i: torch.matmul(xt, wt[i % nf]))
                best = min(t_cub, t_tor)
                mb = min(4, -(-m // 16))
                cands = [None]
                for (t, nb, kb) in shapes_t:
                    for st in (4, 6, 8, 12, 16):
                        if t == 512 and mb > 1: continue
                        c = KernelConfig(t, mb, nb, kb, st, 8, True)
                        if n % c.tile_n or k % c.tile_k or c.smem_bytes(False) > 232448: continue
                        cands.append(c)
                for c in cands:
                    tm, gap = gpu_times(lambda i: mc.matmul(x, mws[i % nq], config=c))
                    name = c.name if c else "default:" + choose_config(m, n, k, 128).name
                    byts = k * n / 2 + k // 128 * n * 2 + m * k * 2 + m * n * 2
                    r = dict(set=setname, k=k, n=n, m=m, cfg=name, us=tm, gap_us=gap, cublas_us=t_cub, torch_us=t_tor,
                             speedup=best / tm, pct_bw=byts / tm / 1e3 / 4280 * 100)
                    res["rows"].append(r)
                rows = [r for r in res["rows"] if r["k"] == k and r["n"] == n and r["m"] == m]
                bestr = min(rows, key=lambda r: r["us"])
                print(f"{setname} {k}x{n} m={m}: best {bestr['cfg']} {bestr['us']:.1f}us {bestr['pct_bw']:.0f}%bw x{bestr['speedup']:.2f} | default {rows[0]['us']:.1f}us | torch {t_tor:.1f} cublas {t_cub:.1f} gaps {g1:.1f},{g2:.1f},{rows[0]['gap_us']:.1f}", flush=True)
            del mws, wf, wt
            cp.get_default_memory_pool().free_all_blocks()
    json.dump(res, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main()
