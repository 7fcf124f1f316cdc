"""pytest-benchmark's JSON report, made to name the code and the GPU that ran.

pytest-benchmark takes ``commit_info`` from the checkout's ``.git``. On the H200 the tree is a
copy whose ``.git``, where there is one, is stale (benchmarks/NOTES.md entry 21), so, as the
project's own records do (``records.environment``), ``$MARLIN_GIT_COMMIT`` names the commit
when it is set; and every report carries the project's environment head (date, commit, GPU,
CuPy/CUDA versions) under ``marlin_cupy``.
"""
from __future__ import annotations

import os


def pytest_benchmark_update_commit_info(config, commit_info):
    commit = os.environ.get("MARLIN_GIT_COMMIT", "").strip()
    if commit:
        commit_info.clear()
        commit_info.update(id=commit, dirty=False, source="MARLIN_GIT_COMMIT")


def pytest_benchmark_update_json(config, benchmarks, output_json):
    from marlin_cupy import records
    output_json["marlin_cupy"] = records.environment()
