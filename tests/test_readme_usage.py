"""README.md's "Using it" examples run as written.

The section's Python blocks run in order in one namespace, as a reader would paste them: the
blocks whose first line is ``# runs without a GPU`` here on any machine, every block on a GPU
(where the results are also checked against the float64 product of the dequantized weights).
The names the section's code and prose give (``mc.X``, ``ops.X``) must exist."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

import marlin_cupy as mc
from marlin_cupy import ops

README = Path(__file__).resolve().parent.parent / "README.md"
CPU_MARK = "# runs without a GPU"


def section() -> str:
    text = README.read_text()
    start = text.index("\n## Using it\n")
    return text[start:text.index("\n## ", start + 1)]


def blocks() -> list:
    return re.findall(r"```python\n(.*?)```", section(), re.S)


def run(code_blocks) -> dict:
    namespace = {"__name__": "readme"}
    for i, code in enumerate(code_blocks):
        exec(compile(code, f"README.md 'Using it' block {i + 1}", "exec"), namespace)
    return namespace


def test_the_section_has_examples_of_both_kinds():
    found = blocks()
    assert sum(b.startswith(CPU_MARK) for b in found) >= 1
    assert sum(not b.startswith(CPU_MARK) for b in found) >= 1


def test_every_name_the_section_gives_exists():
    names = set(re.findall(r"\bmc\.(\w+)", section()))
    for code in blocks():
        for node in ast.walk(ast.parse(code)):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "mc"):
                names.add(node.attr)
    assert {"matmul", "MarlinLinear", "load_gptq_checkpoint", "pack"} <= names
    missing = sorted(n for n in names if not hasattr(mc, n))
    assert not missing, f"README names mc.{missing}, which marlin_cupy lacks"
    for name in re.findall(r"\bops\.(\w+)", section()):
        assert hasattr(ops, name), f"README names ops.{name}, which marlin_cupy.ops lacks"


def test_every_package_name_the_readme_gives_exists():
    # The whole README: `mc.X` and `marlin_cupy.module.X` (a function or a submodule).
    import importlib.util
    text = README.read_text()
    for name in set(re.findall(r"\bmc\.(\w+)", text)):
        assert hasattr(mc, name), f"README names mc.{name}"
    for module, name in set(re.findall(r"\bmarlin_cupy\.(\w+)\.(\w+)", text)):
        if importlib.util.find_spec(f"marlin_cupy.{module}") is None:
            continue                       # marlin_cupy.demo.py, say: a file, not a name
        found = (hasattr(importlib.import_module(f"marlin_cupy.{module}"), name)
                 or importlib.util.find_spec(f"marlin_cupy.{module}.{name}") is not None)
        assert found, f"README names marlin_cupy.{module}.{name}"


def test_the_examples_that_need_no_gpu_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ns = run([b for b in blocks() if b.startswith(CPU_MARK)])
    assert ns["mw"].k == 4096 and ns["mw"].n == 4096 and not ns["mw"].on_device
    assert ns["qw"].equals(mc.unpack(ns["mw"]))


@pytest.mark.gpu
def test_every_example_runs_on_a_gpu(gpu_device, tmp_path, monkeypatch):
    torch = pytest.importorskip("torch", reason="the README's torch example needs torch")
    import cupy as cp
    monkeypatch.chdir(tmp_path)
    ns = run(blocks())

    def check(y, ref, what):
        # The kernel's products against float64 ones of the same dequantized weights: the
        # error bound of tests/test_kernel_gpu.py is far tighter; this catches a wrong example.
        err = float(np.abs(y - ref).max())
        assert err <= 1e-2 * float(np.abs(ref).max()) + 1e-3, (what, err)

    w_deq = ns["qw"].dequantize().astype(np.float64)                  # [K, N]
    x = cp.asnumpy(ns["x"]).astype(np.float64)                        # [16, K]
    assert isinstance(ns["y"], cp.ndarray) and ns["y"].dtype == cp.float16
    check(cp.asnumpy(ns["y"]).astype(np.float64), x @ w_deq, "mc.matmul")
    assert cp.array_equal(ns["out"], ns["y"])

    layer, xt, yt = ns["layer"], ns["xt"], ns["yt"]
    assert isinstance(yt, torch.Tensor) and yt.dtype == torch.float16 and yt.is_cuda
    assert repr(layer.weight).endswith(f"on='GPU {cp.cuda.Device().id}')")
    w_layer = mc.unpack(layer.weight).dequantize().astype(np.float64)
    ref = (xt.double().cpu().numpy() @ w_layer
           + ns["linear"].bias.detach().double().cpu().numpy())
    check(yt.double().cpu().numpy(), ref, "MarlinLinear")
