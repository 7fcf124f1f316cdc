"""pytest set-up shared by tests/ and the benchmarks/ suites: the ``gpu`` marker and its skip.

Tests that need a GPU carry ``@pytest.mark.gpu``; on a machine without a usable GPU they are
skipped with the reason (CuPy missing, no driver, zero devices), never silently passed. With
``MARLIN_CUPY_REQUIRE_GPU=1`` (``scripts/device_check.py`` sets it on a machine with an NVIDIA
driver) a run that would skip them stops with an error instead: a broken CuPy on a GPU machine
must not read as a green GPU suite.
"""
from __future__ import annotations

import functools
import os

import pytest


def pytest_configure(config):
    # Also declared in pyproject.toml; repeated here so a run with another ini still knows them.
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped with the reason when none")
    config.addinivalue_line("markers", "slow: long sweeps (deselect with -m 'not slow')")


@functools.lru_cache(maxsize=None)
def gpu_skip_reason():
    """``None`` when a GPU is usable, else why not (asked once per session)."""
    from marlin_cupy import records
    return records.gpu_unavailable_reason()


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    reason = gpu_skip_reason()
    if reason is None:
        return
    if os.environ.get("MARLIN_CUPY_REQUIRE_GPU") == "1":
        pytest.exit(f"MARLIN_CUPY_REQUIRE_GPU=1, but no GPU is usable for the {len(gpu_items)} "
                    f"gpu-marked tests: {reason}", returncode=3)
    skip = pytest.mark.skip(reason=f"no usable GPU: {reason}")
    for item in gpu_items:
        item.add_marker(skip)


def pytest_report_header(config):
    from marlin_cupy import kernels, records
    reason = gpu_skip_reason()
    if reason is None:
        info = records.device_info()
        head = f"marlin-cupy: GPU {info['name']} ({info['sms']} SMs, cc {info['cc']})"
    else:
        head = f"marlin-cupy: no GPU, gpu-marked tests will be skipped ({reason})"
    return [head, "marlin-cupy: kernel defines " + kernels.describe_defines()]


@pytest.fixture(scope="session")
def gpu_device():
    """Facts about GPU 0 (``records.device_info``); skips the test when no GPU is usable."""
    from marlin_cupy import records
    reason = gpu_skip_reason()
    if reason is not None:
        pytest.skip(f"no usable GPU: {reason}")
    return records.device_info()


@pytest.fixture(autouse=True)
def _workspace_locks_zero_after_gpu_tests(request):
    """After every GPU test, the locks of every workspace must be zero again (``ops.Workspace``:
    "zero between calls"; ``ops.locks_left``). A test that left ints there gave later tests'
    launches of other configs wrong sums (benchmarks/NOTES.md entry 100); this names the test
    that left them, and clears them for the tests after it."""
    yield
    if "gpu" not in request.keywords or gpu_skip_reason() is not None:
        return
    import cupy as cp
    from marlin_cupy import ops
    try:
        cp.cuda.Device().synchronize()
    except cp.cuda.runtime.CUDARuntimeError as e:
        # An error the test's own work left on the device (asynchronous: it may surface only
        # here); passing would hand it to the next test.
        pytest.fail(f"the device reported an error after the test: {e}", pytrace=False)
    left = ops.locks_left()
    if left:
        for device in {entry[0] for entry in left}:
            ops._zero_locks(device)
        pytest.fail("the test left non-zero locks in the workspaces: " + "; ".join(
            f"device {dev}, stream {ptr:#x}{' (captures)' if captured else ''}: {count} "
            f"non-zero, first at {first}" for dev, ptr, captured, count, first in left),
            pytrace=False)
