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


def _code_cells(path):
    import json
    nb = json.loads(path.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.mark.gpu
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_gpu_steps_run_on_the_gpu(path, gpu_device, monkeypatch, capsys):
    """Without a GPU the tutorials' GPU steps only say they skip, so CI never runs them: here
    their code cells run in order in one namespace (plain Python, as they are written), from
    the notebook's folder, and no step may skip. The 01 notebook's product is held to the GPU
    tests' error bound: at most twice cuBLAS FP16's relative error, plus 1e-4."""
    import re
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.chdir(path.parent)
    namespace = {"__name__": "__notebook__"}
    for i, source in enumerate(_code_cells(path)):
        exec(compile(source, f"{path.name}[code cell {i}]", "exec"), namespace)  # noqa: S102
    out = capsys.readouterr().out
    assert "No GPU here" not in out, out
    if path.name.startswith("01_"):
        found = re.search(r"marlin rel err ([0-9.e+-]+), cuBLAS fp16 rel err ([0-9.e+-]+)", out)
        assert found, out
        ours, cublas = float(found.group(1)), float(found.group(2))
        assert ours <= 2 * cublas + 1e-4, out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_stored_outputs_are_a_gpu_run(path):
    """The tutorials are about a GPU kernel: their stored outputs must show its GPU step, so
    they come from a run on a GPU (``scripts/execute_notebook.py``, which the H200 can run
    without Jupyter), named in the notebook's metadata. After editing a notebook's code,
    re-execute it there."""
    import json
    import re
    nb = json.loads(path.read_text())
    meta = nb["metadata"].get("marlin_cupy_execution")
    assert meta, "no marlin_cupy_execution metadata: run scripts/execute_notebook.py on a GPU"
    assert meta["ok"] and meta["device"], meta
    outputs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    text = "".join("".join(o.get("text", [])) for o in outputs)
    assert "No GPU here" not in text, text
    if path.name.startswith("01_"):
        found = re.search(r"marlin rel err ([0-9.e+-]+), cuBLAS fp16 rel err ([0-9.e+-]+)", text)
        assert found, text
        assert float(found.group(1)) <= 2 * float(found.group(2)) + 1e-4, text
