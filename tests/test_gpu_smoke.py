"""The JIT path end to end on a GPU with the trivial kernel: inline includes, compile, launch."""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def test_smoke_kernel_scales(gpu_device):
    import cupy as cp
    from marlin_cupy import jit
    kernel = jit.load_module(jit.expand_source("smoke.cu")).get_function("smoke_scale")
    n = 1000                                  # not a multiple of the block: the guard matters
    x = cp.asarray(np.random.default_rng(0).standard_normal(n).astype(np.float16))
    y = cp.full(n + 8, cp.nan, dtype=cp.float16)          # poisoned, with a tail past n
    kernel(((n + 255) // 256,), (256,), (x, y, np.float32(-2.0), np.int32(n)))
    expected = (x.astype(cp.float32) * -2.0).astype(cp.float16)
    assert cp.array_equal(y[:n], expected), float(cp.abs(y[:n] - expected).max())
    assert bool(cp.isnan(y[n:]).all()), "the kernel wrote past n"


def test_module_is_loaded_once(gpu_device):
    from marlin_cupy import jit
    source = jit.expand_source("smoke.cu")
    assert jit.load_module(source) is jit.load_module(source)
