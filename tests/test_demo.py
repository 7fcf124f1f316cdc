"""The demo (README's main command) runs end to end at a small size and says what it skipped."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
