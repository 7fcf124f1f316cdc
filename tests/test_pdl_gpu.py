"""``matmul(..., pdl=True)``: programmatic dependent launch gives the outputs of ``pdl=False``,
bitwise, including when each launch reads the previous one's output (a kernel that read ``x``
before its wait would read it before it is written). Runs on compute capability 9.0+ only.
"""
import zlib

import numpy as np
import pytest

import marlin_cupy as mc
from marlin_cupy.config import KernelConfig

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

# One per path: mma.sync (serial and parallel reduction, two CTAs per SM), swapped mma.sync,
# wgmma with 64- and 128-row slabs, narrow warps, per-channel scales, and the producer
# warpgroup (wgmma and mma.sync; their pdl=True builds had no griddepcontrol.wait before
# NOTES.md entry 56).
PRODUCER_CONFIGS = ("t256_m2_n32_k8_s4_g8_fp32_sw4_wg_ws",
                    "t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws",
                    "t256_m8_n16_k8_s4_g8_fp32_sw16_wg_ws", "t256_m1_n16_k16_s4_g8_fp32par_sw1_ws")
CONFIGS = ("t256_m4_n8_k16_s4_g8_fp32par", "t128_m1_n4_k8_s4_g8_fp32par_b2",
           "t256_m1_n16_k8_s3_g8_fp32par_sw1_b2", "t256_m2_n16_k8_s4_g8_fp32_sw4_wg",
           "t256_m4_n8_k8_s8_g8_fp32par_sw8_wg_w16", "t256_m8_n16_k8_s4_g8_fp32_sw16_wg",
           "t256_m4_n16_k8_s3_gc_fp32_sw8_wg") + PRODUCER_CONFIGS


def _need_pdl(cfg=None):
    from marlin_cupy.ops import device_facts
    cc = device_facts()["cc"]
    if int(cc) < 90:
        pytest.skip(f"programmatic dependent launch needs compute capability 9.0+; this "
                    f"device is sm_{cc}")
    if cfg is not None and cfg.wgmma and cc != "90":
        pytest.skip(f"{cfg.name} uses wgmma (sm_90a); this device is sm_{cc}")


def _weight(rng, k, n, group, sym=True):
    w = rng.standard_normal((k, n)).astype(np.float32) * 0.02
    return mc.pack(mc.quantize(w, bits=4, group_size=group, sym=sym)).to_device()


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("sym", [True, False], ids=["sym", "zp"])
def test_same_as_plain_launch(name, sym):
    cfg = KernelConfig.from_name(name)
    _need_pdl(cfg)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    group = 16 * cfg.group_blocks if cfg.group_blocks > 0 else -1
    k, n = 16 * cfg.tile_k, 2 * cfg.tile_n
    mw = _weight(rng, k, n, group, sym)
    m = min(cfg.max_m or 200, 200) - 3
    x = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
    want = mc.matmul(x, mw, config=cfg)
    # Back to back, each launch overlapping the one before.
    outs = [mc.matmul(x, mw, config=cfg, pdl=True) for _ in range(20)]
    for got in outs:
        assert cp.array_equal(got.view(cp.uint16), want.view(cp.uint16))


@pytest.mark.parametrize("name", CONFIGS)
def test_padded_launch_keeps_blocks_per_sm(name):
    """A pdl=True plan asks for padded shared memory: the occupancy calculator then gives
    exactly the CTAs per SM the plain plan runs, so no waiting CTA fits beside them."""
    from cupy_backends.cuda.api import driver
    from marlin_cupy import ops
    cfg = KernelConfig.from_name(name)
    _need_pdl(cfg)
    m, k, n = min(cfg.max_m or 64, 64), 16 * cfg.tile_k, 8 * cfg.tile_n
    group = 16 * cfg.group_blocks if cfg.group_blocks > 0 else -1
    plain = ops.plan(m, n, k, group, config=cfg)
    padded = ops.plan(m, n, k, group, config=cfg, pdl=True)
    assert padded.smem >= plain.smem and padded.grid == plain.grid
    per_sm = min(cfg.blocks_per_sm, ops.resident_ctas(cfg, pdl=True))
    assert padded.threads == cfg.launch_threads       # the producer warpgroup's 128 included
    assert driver.occupancyMaxActiveBlocksPerMultiprocessor(
        padded.kernel.kernel.ptr, cfg.launch_threads, padded.smem) == per_sm


def _check_chain(x0, mws, launches, config=None):
    """y_{i+1} = y_i @ mws[i % len(mws)], without PDL and then with it, queued behind a busy
    kernel so that the PDL launches really overlap; every y_i must be bitwise equal. Returns
    the plain chain."""
    def chain(pdl):
        ys = [x0]
        for i in range(launches):
            ys.append(mc.matmul(ys[-1], mws[i % len(mws)], config=config, pdl=pdl))
        return ys

    plain = chain(False)
    cp.cuda.get_current_stream().synchronize()
    from marlin_cupy import jit
    spin = jit.load_module(jit.expand_source("timing.cu")).get_function("spin_ns")
    spin((1,), (1,), (np.uint64(2_000_000),))
    overlapped = chain(True)
    for a, b in zip(plain, overlapped):
        assert cp.array_equal(a.view(cp.uint16), b.view(cp.uint16))
    return plain


@pytest.mark.parametrize("m", [1, 16, 64, 200])
def test_dependent_chain(m):
    """y_{i+1} = y_i @ W_i over 12 square layers, default dispatch, with and without PDL."""
    _need_pdl()
    rng = np.random.default_rng(100 + m)
    k = 2048
    mws = [_weight(rng, k, k, 128) for _ in range(3)]
    x0 = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
    _check_chain(x0, mws, 12)


@pytest.mark.parametrize("name", CONFIGS)
def test_dependent_chain_per_config(name):
    """y_{i+1} = y_i @ W_i with one config for every launch, each launch overlapping the one
    before: its input is the previous launch's output, and both use the same locks and
    scratch. Square layers, so the chain can go on."""
    cfg = KernelConfig.from_name(name)
    _need_pdl(cfg)
    rng = np.random.default_rng(zlib.crc32(name.encode()) + 1)
    group = 16 * cfg.group_blocks if cfg.group_blocks > 0 else -1
    k = 2048     # a multiple of every tile; weights of std 0.02 keep |y| about level
    assert k % cfg.tile_k == 0 and k % cfg.tile_n == 0
    mws = [_weight(rng, k, k, group) for _ in range(3)]
    m = min(cfg.max_m or 64, 64) - 1
    x0 = cp.asarray((rng.standard_normal((m, k)) * 0.5).astype(np.float16))
    plain = _check_chain(x0, mws, 16, config=cfg)
    assert bool(cp.isfinite(plain[-1]).all()) and float(cp.abs(plain[-1]).max()) > 0


def test_writer_of_x_just_before():
    """The kernel right before may write x (a norm before a projection): the PDL launch reads x
    only after that kernel has finished."""
    _need_pdl()
    rng = np.random.default_rng(7)
    k, n, m = 4096, 4096, 16
    mw = _weight(rng, k, n, 128)
    x_h = rng.standard_normal((m, k)).astype(np.float16)
    want = mc.matmul(cp.asarray(x_h), mw)
    for _ in range(10):
        x = cp.zeros((m, k), dtype=cp.float16)
        x += cp.asarray(x_h)                 # the elementwise kernel just before writes x
        got = mc.matmul(x, mw, pdl=True)
        assert cp.array_equal(got.view(cp.uint16), want.view(cp.uint16))


def test_marlin_linear_passes_pdl(monkeypatch):
    """A ``pdl=True`` layer launches through programmatic dependent launch (``pdl.launch``, the
    checked path's), a plain one does not; the outputs are the same bits (which they would be
    without PDL too, hence the count)."""
    from marlin_cupy import ops, pdl
    _need_pdl()
    rng = np.random.default_rng(8)
    w = rng.standard_normal((1024, 512)).astype(np.float32) * 0.02
    plain = mc.MarlinLinear.from_float(w)
    lin = mc.MarlinLinear.from_float(w, pdl=True)
    assert lin.pdl
    launches = []
    real_launch = pdl.launch

    def counting(*args, **kwargs):
        launches.append(args[6] if len(args) > 6 else kwargs.get("pdl", True))
        return real_launch(*args, **kwargs)
    monkeypatch.setattr(ops, "FAST_PATH", False)      # every call through the checked path
    monkeypatch.setattr(pdl, "launch", counting)
    x = cp.asarray(rng.standard_normal((5, 1024)).astype(np.float16))
    want = plain(x)
    assert launches == []
    got = lin(x)
    assert launches == [True]
    assert cp.array_equal(got.view(cp.uint16), want.view(cp.uint16))
