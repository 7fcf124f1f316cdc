"""compute-sanitizer target for the wgmma instances: each config of config.WGMMA_EXAMPLES that
fits the device runs once on a small problem (two column tiles, a few K tiles, M = 2 slabs - 3
rows, max_ctas=3 so that columns are shared between CTAs) and is compared with the float64
reference. Exit 1 on any mismatch.

    compute-sanitizer --tool racecheck python3 scripts/wgmma_sanitize.py [NAME ...]
"""
import sys

import cupy as cp
import numpy as np

import marlin_cupy as mc
from marlin_cupy.config import WGMMA_EXAMPLES, KernelConfig
from marlin_cupy.ops import device_facts

cp.cuda.set_allocator(None)  # every array its own allocation, for memcheck
names = sys.argv[1:]
cfgs = [KernelConfig.from_name(n) for n in names] if names else list(WGMMA_EXAMPLES)
rng = np.random.default_rng(1)
bad = 0
for cfg in cfgs:
    for zp in (False, True):
        if cfg.smem_bytes(zp) > device_facts()["smem_optin"]:
            continue
        g = -1 if cfg.group_blocks == -1 else 16 * cfg.group_blocks
        k, n = max(3 * cfg.tile_k, 2 * max(g, 0), 256), 2 * cfg.tile_n
        m = 2 * cfg.tile_m - 3
        q = rng.integers(0, 16, (k, n), dtype=np.uint8)
        ng = 1 if g == -1 else k // g
        s = rng.uniform(1e-3, 1e-2, (ng, n)).astype(np.float16)
        z = rng.integers(0, 16, (ng, n), dtype=np.uint8) if zp else None
        qw = mc.QuantizedWeight(q, s, z, None, 4, g)
        x = rng.standard_normal((m, k)).astype(np.float16)
        y = cp.asnumpy(mc.matmul(cp.asarray(x), mc.pack(qw).to_device(), config=cfg, max_ctas=3))
        w = (q.astype(np.float64) - (z.astype(np.float64).repeat(k // ng, 0) if zp else 8.0)) \
            * s.astype(np.float64).repeat(k // ng, 0)
        ref = x.astype(np.float64) @ w
        err = np.linalg.norm(y - ref) / np.linalg.norm(ref)
        ok = err < 2e-3
        bad += not ok
        print(f"{cfg.name}{'_zp' if zp else ''}: rel err {err:.2e} {'ok' if ok else 'WRONG'}")
print(f"WGMMA_SANITIZE failures={bad}")
sys.exit(1 if bad else 0)
