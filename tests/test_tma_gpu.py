"""``MARLIN_WS_TMA_A`` (benchmarks/NOTES.md entry 101, a measurement build): the producer builds'
activations as tensor copies through a map of ``x`` that ``matmul`` writes into the module
before every launch. It must give the shipped build's bits for every row count (rows past M as
zeros from the map's bounds, several row slabs), on the 64- and 128-row tiles, one and two boxes
per fill, and a map that follows ``x`` from call to call (no stale map, no fast path)."""
import pytest

import marlin_cupy as mc
from marlin_cupy import ops
from marlin_cupy.config import KernelConfig
from test_fast_path_gpu import _same, _weight, _x   # (tests/ is on sys.path under pytest)

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

TMA = "#define MARLIN_WS_TMA_A 1\n"
# 64-row tiles with two boxes per fill (k8), 128-row tiles with one (k4), 128 threads two CTAs
# per SM, and a 128-row k8 tile: configs of the H200 table for M = 33..128
CONFIGS = ["t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws", "t256_m8_n16_k4_s6_g8_fp32_sw16_wg_ws",
           "t128_m8_n8_k4_s4_g8_fp32par_sw16_wg_ws_b2", "t256_m8_n16_k8_s4_g8_fp32_sw16_wg_ws"]


def _need_sm90():
    from marlin_cupy.ops import device_facts
    cc = device_facts()["cc"]
    if cc != "90":
        pytest.skip(f"the wgmma instances need sm_90a; this device is sm_{cc}")


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("zp,act", [(False, False), (True, False), (False, True)])
def test_the_tensor_copied_activations_give_the_shipped_bits(name, zp, act):
    _need_sm90()
    cfg = KernelConfig.from_name(name)
    k, n = 2048, 4096
    mw = _weight(k, n, zp=zp, act=act)
    p = ops.plan(64, n, k, 128, has_zp=zp, config=cfg, fma_scales=bool(mw.fma_scales))
    build = ops.build_kernel(cfg, zp, prefix=TMA, fma=p.scale_fma)
    assert build.kernel.ptr in ops._tma_maps
    for m in (1, 37, 64, 100, 130, 257):
        x = _x(m, k, seed=m)
        want = mc.matmul(x, mw, config=cfg)
        with ops.use_kernel(cfg, build, has_zp=zp, fma=p.scale_fma):
            got = mc.matmul(x, mw, config=cfg)
            # a second x of the same shape right after (another buffer): its own map
            x2 = _x(m, k, seed=1000 + m)
            got2 = mc.matmul(x2, mw, config=cfg)
        assert _same(got, want), (name, m)
        assert _same(got2, mc.matmul(x2, mw, config=cfg)), (name, m)


def test_the_map_follows_x_between_calls_and_no_call_takes_the_fast_path(monkeypatch):
    _need_sm90()
    cfg = KernelConfig.from_name(CONFIGS[0])
    k, n = 1024, 2048
    mw = _weight(k, n)
    p = ops.plan(64, n, k, 128, config=cfg, fma_scales=bool(mw.fma_scales))
    build = ops.build_kernel(cfg, False, prefix=TMA, fma=p.scale_fma)
    xs = [_x(48, k, seed=s) for s in range(4)]
    want = [mc.matmul(x, mw, config=cfg) for x in xs]
    cp.cuda.get_current_stream().synchronize()
    calls = {"n": 0}
    real = ops._matmul_checked

    def counting(*args):
        calls["n"] += 1
        return real(*args)
    monkeypatch.setattr(ops, "_matmul_checked", counting)
    with ops.use_kernel(cfg, build, fma=p.scale_fma):
        # queued back to back on one stream, each launch after its own map's write
        got = [mc.matmul(x, mw, config=cfg) for x in xs + xs]
    assert calls["n"] == 8
    for i, g in enumerate(got):
        assert _same(g, want[i % 4]), i


def test_a_tma_build_refuses_graph_capture():
    _need_sm90()
    cfg = KernelConfig.from_name(CONFIGS[0])
    k, n = 1024, 2048
    mw = _weight(k, n)
    p = ops.plan(64, n, k, 128, config=cfg, fma_scales=bool(mw.fma_scales))
    build = ops.build_kernel(cfg, False, prefix=TMA, fma=p.scale_fma)
    x = _x(64, k)
    stream = cp.cuda.Stream(non_blocking=True)
    with ops.use_kernel(cfg, build, fma=p.scale_fma), stream:
        mc.matmul(x, mw, config=cfg)          # compiled and planned outside the capture
        stream.begin_capture()
        try:
            with pytest.raises(ValueError, match="MARLIN_WS_TMA_A"):
                mc.matmul(x, mw, config=cfg)
        finally:
            stream.end_capture()
