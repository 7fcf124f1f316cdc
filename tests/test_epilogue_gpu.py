"""The staged epilogue (``MARLIN_EPI_STAGE``) writes exactly what the direct
stores write: bitwise equal outputs on every swapped wgmma config of the shipped tables, for
the three places it is used (a column a CTA holds whole at the end of its stripe, the serial
chain's last CTA, and the CTAs that share the sum of a split column), with partial slabs,
several slabs and zero points. Runs on sm_90 only.
"""
import zlib

import numpy as np
import pytest

import marlin_cupy as mc
from marlin_cupy.config import KernelConfig, tuned_instances

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

# 2: staged wherever the layout allows it, the 128-register builds included (the shipped
# setting leaves those out); the reference is built with the direct stores whatever the default.
PREFIX = "#define MARLIN_EPI_STAGE 2\n"
DIRECT = "#define MARLIN_EPI_STAGE 0\n"
CONFIGS = sorted({c.name for cs in tuned_instances().values() for c in cs
                  if c.wgmma and c.swap_ab >= 2})


def _need_sm90():
    from marlin_cupy.ops import device_facts
    cc = device_facts()["cc"]
    if cc != "90":
        pytest.skip(f"the wgmma instances need sm_90a; this device is sm_{cc}")


@pytest.fixture(scope="module")
def builds():
    """The staged and the direct build of every config, sym and zero-point, compiled in
    parallel once; the kernels are loaded into the returned dict as the tests ask for them."""
    _need_sm90()
    from marlin_cupy import jit, kernels
    jobs = [(prefix + kernels.marlin_source(KernelConfig.from_name(n), zp), "a")
            for n in CONFIGS for zp in (False, True) for prefix in (PREFIX, DIRECT)]
    jit.warm_cache(jobs, 16)
    return {}


def _build(cache, cfg, zp, prefix):
    from marlin_cupy import ops
    key = (cfg, zp, prefix)
    if key not in cache:
        cache[key] = ops.build_kernel(cfg, zp, prefix=prefix)
    return cache[key]


@pytest.mark.parametrize("name", CONFIGS)
def test_staged_epilogue_matches(builds, name):
    from marlin_cupy import ops
    cfg = KernelConfig.from_name(name)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    tile_m = cfg.tile_m
    # (K in units of k_unit, N in tiles, M, max_ctas, zero points). k_unit is the tile depth,
    # or one group where the tile is shallower (64-deep tiles: K = 2 tiles would be one group,
    # which check_problem rejects as channelwise for group_blocks=8).
    k_unit = max(cfg.tile_k, 128)
    cases = [
        (2, 6, tile_m, 6, False),            # one whole column per CTA: the stripe's end
        (2, 6, tile_m - 3, 6, True),         # the same, last rows missing, zero points
        (8, 2, tile_m, 3, False),            # columns split: the serial chain's last CTA
        (8, 2, 2 * tile_m + 5, 5, False),    # several slabs, the last one partial
        (4, 3, tile_m - 1, None, True),      # the default grid
        (16, 1, tile_m, 6, False),           # one column over 6 CTAs: up to 6 share the sum
        (16, 1, 2 * tile_m + 5, 6, True),
    ]
    for kt, nt, m, ctas, zp in cases:
        k, n = kt * k_unit, nt * cfg.tile_n
        w = rng.standard_normal((k, n)).astype(np.float32) * 0.02
        mw = mc.pack(mc.quantize(w, bits=4, group_size=128, sym=not zp)).to_device()
        x = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
        want = cp.full((m, n), cp.nan, dtype=cp.float16)
        with ops.use_kernel(cfg, _build(builds, cfg, zp, DIRECT), has_zp=zp):
            mc.matmul(x, mw, out=want, config=cfg, max_ctas=ctas)
        got = cp.full((m, n), cp.nan, dtype=cp.float16)
        with ops.use_kernel(cfg, _build(builds, cfg, zp, PREFIX), has_zp=zp):
            mc.matmul(x, mw, out=got, config=cfg, max_ctas=ctas)
        assert not bool(cp.isnan(got).any()), (name, kt, nt, m, ctas, zp)
        assert cp.array_equal(got.view(cp.uint16), want.view(cp.uint16)), \
            (name, kt, nt, m, ctas, zp)
