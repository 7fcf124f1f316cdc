"""Host-side packing cost (issue: pack a 28672x8192 layer in under 2 s on 2 cores, with peak
temporary memory under 4x the layer's FP16 size). Recorded, not asserted: run

    pytest benchmarks/test_pack_cpu.py --benchmark-json benchmarks/results/<date>_cpu_pack.json

Peak memory is traced with ``tracemalloc`` (NumPy reports its buffers to it) around one call.
"""
import tracemalloc

import numpy as np
import pytest

import marlin_cupy as mc

SHAPES = [(28672, 8192), (8192, 57344)]


def _layer(k, n):
    rng = np.random.default_rng(0)
    return mc.QuantizedWeight(rng.integers(0, 16, (k, n), dtype=np.uint8),
                              rng.uniform(1e-3, 1e-2, (k // 128, n)).astype(np.float16),
                              None, None, 4, 128)


def _peak_bytes(fn, arg):
    tracemalloc.start()
    try:
        fn(arg)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("k, n", SHAPES, ids=lambda v: str(v))
def test_pack(benchmark, k, n):
    qw = _layer(k, n)
    peak = _peak_bytes(mc.pack, qw)
    mw = benchmark.pedantic(mc.pack, args=(qw,), rounds=3, iterations=1, warmup_rounds=1)
    fp16 = 2 * k * n
    benchmark.extra_info.update(k=k, n=n, peak_bytes=peak, fp16_bytes=fp16,
                                peak_over_fp16=peak / fp16)
    assert mw.qweight.shape == (k // 16, 2 * n)


@pytest.mark.parametrize("k, n", SHAPES[:1], ids=lambda v: str(v))
def test_unpack(benchmark, k, n):
    mw = mc.pack(_layer(k, n))
    peak = _peak_bytes(mc.unpack, mw)
    qw = benchmark.pedantic(mc.unpack, args=(mw,), rounds=3, iterations=1, warmup_rounds=1)
    benchmark.extra_info.update(k=k, n=n, peak_bytes=peak, peak_over_fp16=peak / (2 * k * n))
    assert qw.q.shape == (k, n)
