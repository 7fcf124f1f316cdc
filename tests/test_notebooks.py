"""The tutorials run top to bottom (on a machine without a GPU their GPU step says so and skips)."""
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path):
    nbformat = pytest.importorskip("nbformat", reason="install the test extra (nbformat)")
    nbclient = pytest.importorskip("nbclient", reason="install the test extra (nbclient)")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()   # raises CellExecutionError on the first failing cell
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors


def _execute_notebook():
    import importlib.util
    path = Path(__file__).resolve().parent.parent / "scripts" / "execute_notebook.py"
    spec = importlib.util.spec_from_file_location("execute_notebook", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _assert_a_gpu_run(path, nb):
    """The notebook's outputs show no error and no skipped GPU step, and the 01 notebook's product
    meets the GPU tests' error bound: at most twice cuBLAS FP16's relative error, plus 1e-4."""
    import re
    outputs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"], outputs
    text = "".join("".join(o.get("text", [])) for o in outputs)
    assert "No GPU here" not in text, text
    if path.name.startswith("01_"):
        found = re.search(r"marlin rel err ([0-9.e+-]+), cuBLAS fp16 rel err ([0-9.e+-]+)", text)
        assert found, text
        assert float(found.group(1)) <= 2 * float(found.group(2)) + 1e-4, text


@pytest.mark.gpu
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_gpu_steps_run_on_the_gpu(path, gpu_device):
    """Without a GPU the tutorials' GPU steps only say they skip, so CI never runs them: here
    their code cells run as ``scripts/execute_notebook.py`` runs them (in order, one namespace,
    from the notebook's folder), and no step may skip or fail."""
    import json
    nb = json.loads(path.read_text())
    assert _execute_notebook().execute(nb, path.parent)
    _assert_a_gpu_run(path, nb)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_stored_outputs_are_a_gpu_run(path):
    """The tutorials are about a GPU kernel: their stored outputs must show its GPU step, so
    they come from a run on a GPU (``scripts/execute_notebook.py``, which the H200 can run
    without Jupyter), named in the notebook's metadata. After editing a notebook's code,
    re-execute it there."""
    import json
    nb = json.loads(path.read_text())
    meta = nb["metadata"].get("marlin_cupy_execution")
    assert meta, "no marlin_cupy_execution metadata: run scripts/execute_notebook.py on a GPU"
    assert meta["ok"] and meta["device"], meta
    _assert_a_gpu_run(path, nb)
