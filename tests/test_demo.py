"""The demo (README's main command) runs end to end at a small size and says what it skipped."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from marlin_cupy import records

ROOT = Path(__file__).resolve().parent.parent


def test_demo_runs_small_layer():
    out = subprocess.run([sys.executable, "-m", "marlin_cupy.demo", "--k", "256", "--n", "512",
                          "--m", "4", "--reps", "3"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "relative error ||W - W_hat|| / ||W||" in out.stdout, out.stdout
    if records.gpu_unavailable_reason() is None:
        assert "No GPU" not in out.stdout, out.stdout
    else:
        assert "No GPU: skipped the kernel part (reason: " in out.stdout, out.stdout


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 16, 100])
def test_demo_kernel_part_runs_on_the_gpu(m, gpu_device):
    """The test above runs the demo where CI is, without a GPU, where its kernel part only says
    it skips; the device checks run ``pytest -m gpu``, so this is what runs that part on a GPU:
    a llama2-7b-shaped layer (the demo's default K and N), every step run, the kernel's result
    within the demo's bound (DESIGN.md s.6) and both timings printed."""
    out = subprocess.run([sys.executable, "-m", "marlin_cupy.demo", "--m", str(m), "--reps", "20"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "No GPU" not in text and "unavailable in this build" not in text, text
    assert f"3. GPU {gpu_device['name']}" in text, text
    assert re.search(r"relative error against float64: marlin \S+, cuBLAS FP16 .* -> PASS", text), text
    assert re.search(r"marlin [0-9.]+ us, cupy\.matmul FP16 [0-9.]+ us -> speedup [0-9.]+x", text), text
