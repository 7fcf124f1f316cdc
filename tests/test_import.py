"""``import marlin_cupy`` works on any machine and never loads CuPy (DESIGN.md s.2)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def fresh_python(code: str) -> str:
    """Run ``code`` in a new interpreter (this one has already imported CuPy) and return stdout."""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_import_does_not_load_cupy():
    loaded = fresh_python(
        "import sys, marlin_cupy, marlin_cupy.records\n"
        "print(sorted(m for m in sys.modules if m == 'cupy' or m.startswith(('cupy.', 'cupy_'))))")
    assert loaded.strip() == "[]", f"importing marlin_cupy loaded CuPy modules: {loaded}"


def test_public_names_are_declared():
    import marlin_cupy as mc
    for name in ("quantize", "pack", "unpack", "from_gptq", "to_gptq", "from_awq", "to_awq",
                 "matmul", "MarlinLinear", "KernelConfig", "QuantizedWeight", "MarlinWeight"):
        assert name in mc.__all__, f"{name} missing from marlin_cupy.__all__"


def test_kernel_sources_are_found():
    from marlin_cupy import jit
    assert (jit.cuda_dir() / "smoke.cu").is_file()
