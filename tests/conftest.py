"""Hypothesis profiles for tests/ (the ``gpu`` marker, its skip and ``gpu_device`` live in the
repository's root conftest.py, shared with the benchmarks/ suites)."""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# A GPU test's first example compiles kernels (seconds); a deadline would flag that as a failure.
# "dev" is the default; HYPOTHESIS_PROFILE=thorough runs longer sweeps.
settings.register_profile("dev", deadline=None, print_blob=True)
settings.register_profile("thorough", deadline=None, print_blob=True, max_examples=500,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
