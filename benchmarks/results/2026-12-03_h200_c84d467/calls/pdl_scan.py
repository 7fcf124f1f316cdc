"""Every config of the H200 table: 20 pdl=True launches through the checked path, queued behind a
spin so that they overlap, against the plain launch (session 44, call 4)."""
import json
import sys
import time
import zlib
import numpy as np
import cupy as cp
sys.path.insert(0, ".")
import marlin_cupy as mc
from marlin_cupy import ops, jit, kernels
from marlin_cupy.config import KernelConfig

t0 = time.time()
spin = jit.load_module(jit.expand_source("timing.cu")).get_function("spin_ns")
table = json.load(open("marlin_cupy/tuned/NVIDIA_H200.json"))
names = sorted({e["config"] for e in table["entries"]})
cfgs = [KernelConfig.from_name(n) for n in names]
srcs = []
for c in cfgs:
    fma = c.scale_fma_preferred
    src = kernels.marlin_source(c, False, fma=fma)
    srcs += [(src, c.arch_suffix), (ops.PDL_PREFIX + src, c.arch_suffix)]
print(f"warming {len(srcs)} builds", flush=True)
jit.warm_cache(srcs, workers=16)
print(f"warm in {time.time() - t0:.0f} s", flush=True)
ops.FAST_PATH = False
bad_cfgs = []
for name, cfg in zip(names, cfgs):
    if time.time() - t0 > 170:
        print("time budget reached", flush=True)
        break
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    group = 16 * cfg.group_blocks if cfg.group_blocks > 0 else -1
    k, n = 16 * cfg.tile_k * 2, 2 * cfg.tile_n
    w = rng.standard_normal((k, n)).astype(np.float32) * 0.02
    mw = mc.pack(mc.quantize(w, bits=4, group_size=group, sym=True)).to_device()
    m = max(1, min(cfg.max_m or 200, 200) - 3)
    x = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
    try:
        want = mc.matmul(x, mw, config=cfg)
        mc.matmul(x, mw, config=cfg, pdl=True)
    except ValueError as e:
        print(f"{name}: skipped ({e})", flush=True)
        continue
    s = cp.cuda.get_current_stream()
    s.synchronize()
    spin((1,), (1,), (np.uint64(3_000_000),))
    outs = [mc.matmul(x, mw, config=cfg, pdl=True) for _ in range(20)]
    s.synchronize()
    wrong = sum(0 if bool(cp.array_equal(o.view(cp.uint16), want.view(cp.uint16))) else 1
                for o in outs)
    if wrong:
        bad_cfgs.append(name)
    print(f"{name} m={m} k={k} n={n}: wrong {wrong}/20", flush=True)
print(f"configs with wrong overlapped PDL results: {len(bad_cfgs)}: {bad_cfgs}", flush=True)
print(f"elapsed {time.time() - t0:.0f} s")
