"""Providers side by side under pytest-benchmark, per layer shape and batch size.

    pytest benchmarks/ --benchmark-group-by=group --benchmark-columns=median,iqr,rounds
    pytest benchmarks/ --benchmark-autosave          # then: pytest-benchmark compare

pytest-benchmark's own statistics time one call plus a stream synchronize on the host clock
(launch overhead included). The GPU time that matters, the CUDA-event median from the harness
with weights rotated out of L2, is in ``extra_info`` (``gpu_median_us``, ``gpu_p20_us``,
``gpu_p80_us``, ``tflops``, ``gbps``, ``speedup`` is left to the report). Every provider passes
the correctness gate before it is timed; one that fails fails its test.
"""
from __future__ import annotations

import itertools

import pytest

pytest.importorskip("pytest_benchmark")

from marlin_cupy.bench import harness, metrics, providers  # noqa: E402

pytestmark = pytest.mark.gpu

SHAPES = [(4096, 4096), (8192, 28672)]          # llama2-7b attention output, llama2-70b-like MLP
BATCHES = [1, 16, 128]
GROUP_SIZE = 128


class Bench:
    """One stream, one timer and the layers, shared by the module's tests."""

    def __init__(self, stream, timer):
        self.stream, self.timer, self._layers = stream, timer, {}

    def layer(self, k, n):
        import cupy as cp
        from marlin_cupy.bench.workload import QuantizedLayer
        if (k, n) not in self._layers:
            for old, _, _ in self._layers.values():   # one layer at a time keeps memory small
                old.release()
            self._layers.clear()
            layer = QuantizedLayer(k, n, GROUP_SIZE, seed=k + n)
            x = cp.random.RandomState(k).standard_normal((max(BATCHES), k), dtype=cp.float32).astype(cp.float16)
            self._layers[(k, n)] = (layer, x, layer.reference(x))
        return self._layers[(k, n)]


@pytest.fixture(scope="module")
def bench():
    try:
        import torch
        torch = torch if torch.cuda.is_available() else None
    except ImportError:
        torch = None
    from marlin_cupy import records
    with harness.bench_stream(torch) as stream:
        b = Bench(stream, harness.Timer(stream))
        b.l2_bytes = records.device_info()["l2_bytes"]
        yield b


@pytest.mark.parametrize("provider", providers.PROVIDER_NAMES)
@pytest.mark.parametrize("m", BATCHES)
@pytest.mark.parametrize("k, n", SHAPES)
def test_provider(benchmark, bench, k, n, m, provider):
    benchmark.group = f"K={k} N={n} M={m}"
    p = providers.make_providers((provider,))[0]
    reason = p.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if p.max_m is not None and m > p.max_m:
        pytest.skip(f"{provider} is measured up to M={p.max_m}")
    layer, x_all, ref_all = bench.layer(k, n)
    wbytes = metrics.weight_bytes(p.weight_format, k, n, GROUP_SIZE)
    copies = harness.rotation_copies(wbytes, bench.l2_bytes, 16 * 10 ** 9)
    try:
        p.prepare(layer, copies)
        bound = p.bind(x_all[:m])
    except providers.Skip as e:
        pytest.skip(str(e))

    bound.poison()
    bound.call(0)
    bench.stream.synchronize()
    err = harness.relative_error(bound.output(), ref_all[:m])
    assert harness.gate_passes(err, p.tolerance), f"{p.label}: relative error {err:.3g} > {p.tolerance}"

    meas = bench.timer.measure(bound.call, copies)
    s = meas.stats
    fmt = p.weight_format
    benchmark.extra_info.update(
        provider=p.name, m=m, k=k, n=n, group_size=GROUP_SIZE, rel_error=err,
        gpu_median_us=s.median_us, gpu_p20_us=s.p20_us, gpu_p80_us=s.p80_us, gpu_reps=s.reps,
        copies=copies, starved=meas.starved,
        tflops=metrics.flops(m, k, n) / (s.median_us * 1e-6) / 1e12,
        gbps=metrics.min_bytes(fmt, m, k, n, GROUP_SIZE) / (s.median_us * 1e-6) / 1e9,
        **p.describe(m))

    turn = itertools.count(1)

    def one_call():
        bound.call(next(turn) % copies)
        bench.stream.synchronize()

    benchmark.pedantic(one_call, rounds=30, warmup_rounds=3, iterations=1)
    p.release()
