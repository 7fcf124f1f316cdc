"""Do the t128 m1 n4 b2 PDL builds give wrong results whenever launches overlap, whichever host
path launches them? (session 44, call 4)"""
import sys
import zlib
import numpy as np
import cupy as cp
sys.path.insert(0, ".")
import marlin_cupy as mc
from marlin_cupy import ops, jit
from marlin_cupy.config import KernelConfig

spin = jit.load_module(jit.expand_source("timing.cu")).get_function("spin_ns")
NAMES = ["t128_m1_n4_k8_s4_g8_fp32par_b2", "t128_m1_n4_k8_s4_g8_fp32par_sw1_b2",
         "t128_m1_n4_k8_s4_g8_fp32par_sw2_b2", "t256_m1_n16_k8_s3_g8_fp32par_sw1_b2",
         "t256_m4_n8_k16_s4_g8_fp32par", "t256_m4_n8_k8_s8_g8_fp32par_sw8_wg_w16"]


def run(name, k_mult=1, reps=20):
    cfg = KernelConfig.from_name(name)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    group = 16 * cfg.group_blocks if cfg.group_blocks > 0 else -1
    k, n = 16 * cfg.tile_k * k_mult, 2 * cfg.tile_n * k_mult
    w = rng.standard_normal((k, n)).astype(np.float32) * 0.02
    mw = mc.pack(mc.quantize(w, bits=4, group_size=group, sym=True)).to_device()
    m = min(cfg.max_m or 200, 200) - 3
    x = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
    ops.FAST_PATH = False
    want = mc.matmul(x, mw, config=cfg)
    mc.matmul(x, mw, config=cfg, pdl=True)
    cp.cuda.get_current_stream().synchronize()
    res = {}
    for mode in ("checked_pdl_spin", "checked_plain_spin", "checked_pdl_nospin", "fast_pdl_nospin",
                 "fast_pdl_spin", "fast_plain_spin"):
        ops.FAST_PATH = mode.startswith("fast")
        pdl = "_pdl" in mode
        if ops.FAST_PATH:
            mc.matmul(x, mw, config=cfg, pdl=pdl)
            cp.cuda.get_current_stream().synchronize()
        if mode.endswith("_spin"):
            spin((1,), (1,), (np.uint64(4_000_000),))
        outs = [mc.matmul(x, mw, config=cfg, pdl=pdl) for _ in range(reps)]
        cp.cuda.get_current_stream().synchronize()
        bad = sum(0 if bool(cp.array_equal(o.view(cp.uint16), want.view(cp.uint16))) else 1
                  for o in outs)
        res[mode] = bad
    ops.FAST_PATH = True
    print(f"{name} k={k} n={n} m={m}: wrong outputs of {reps}: {res}", flush=True)


for name in NAMES:
    run(name)
for name in NAMES[:3]:
    run(name, k_mult=4)


def variant(name, v, reps=20):
    """The PDL build of variant v launched straight through pdl.launch, 20 launches queued behind
    a spin, against the plain launch."""
    from marlin_cupy import pdl as _pdl
    cfg = KernelConfig.from_name(name)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    group = 16 * cfg.group_blocks if cfg.group_blocks > 0 else -1
    k, n = 16 * cfg.tile_k, 2 * cfg.tile_n
    w = rng.standard_normal((k, n)).astype(np.float32) * 0.02
    mw = mc.pack(mc.quantize(w, bits=4, group_size=group, sym=True)).to_device()
    m = min(cfg.max_m or 200, 200) - 3
    x = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
    ops.FAST_PATH = False
    want = mc.matmul(x, mw, config=cfg)
    p = ops.plan(m, n, k, group, False, config=cfg, pdl=True)
    ker = ops.build_kernel(cfg, False, prefix=f"#define MARLIN_PDL {v}\n" if v else "")
    ker.max_dynamic_shared_size_bytes = p.smem
    locks, scratch = ops.workspace().get(p.locks, p.scratch_floats)
    stream = cp.cuda.get_current_stream()
    res = {}
    for attr in (True, False):
        stream.synchronize()
        spin((1,), (1,), (np.uint64(4_000_000),))
        outs = []
        for _ in range(reps):
            y = cp.empty((m, n), dtype=cp.float16)
            args = (x, mw.qweight, mw.scales, mw.scales, y, scratch, locks, np.int32(m),
                    np.int32(n), np.int32(k), np.int32(p.parallel))
            _pdl.launch(ker, p.grid, p.threads, args, p.smem, stream, pdl=attr)
            outs.append(y)
        stream.synchronize()
        res["attr" if attr else "no_attr"] = sum(
            0 if bool(cp.array_equal(o.view(cp.uint16), want.view(cp.uint16))) else 1 for o in outs)
    res["locks_zero"] = not bool(locks.any())
    ops.FAST_PATH = True
    print(f"{name} MARLIN_PDL {v} via pdl.launch, grid {p.grid}, smem {p.smem}: wrong of {reps}: "
          f"{res}", flush=True)


for v in (4, 3, 1, 0):
    variant(NAMES[0], v)
variant(NAMES[3], 4)
