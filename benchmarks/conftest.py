"""pytest-benchmark suites: the ``gpu`` marker and its skip, as tests/conftest.py does for tests/."""
from __future__ import annotations

import functools

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped with the reason when none")


@functools.lru_cache(maxsize=None)
def gpu_skip_reason():
    from marlin_cupy import records
    return records.gpu_unavailable_reason()


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    reason = gpu_skip_reason() if gpu_items else None
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"no usable GPU: {reason}")
    for item in gpu_items:
        item.add_marker(skip)
