"""Execute a notebook's code cells in order and store their outputs, without Jupyter.

    python3 scripts/execute_notebook.py NOTEBOOK.ipynb [--out OUT.ipynb]

For machines that have the project's dependencies but no Jupyter kernel (the H200 has no nbclient,
nbformat or ipykernel), so that a tutorial's stored outputs can come from a GPU run: every code
cell runs in one namespace with the notebook's folder as the working directory; what it prints
to stdout and stderr becomes its stream outputs, and every matplotlib figure open at its end
becomes a PNG display output (the Agg backend; ``plt.show()`` does nothing), as Jupyter's inline
backend would show it. The notebook's metadata gets a ``marlin_cupy_execution`` entry: the
executor, the date, the commit (``records.environment``) and the GPU, or why there was none.
The first cell that raises is stored with its error output, the notebook is written anyway
(for inspection), and the exit status is 1. Plain JSON in and out: no nbformat needed.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import os
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _lines(text: str) -> list:
    """A multi-line string the way .ipynb files store it: a list of lines, newlines kept."""
    return text.splitlines(keepends=True)


def _figures() -> list:
    """Display outputs for the matplotlib figures open now (closed afterwards); none if
    matplotlib was never imported."""
    if "matplotlib.pyplot" not in sys.modules:
        return []
    plt = sys.modules["matplotlib.pyplot"]
    outs = []
    for num in plt.get_fignums():
        fig = plt.figure(num)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        w, h = fig.get_size_inches() * fig.dpi
        outs.append({"output_type": "display_data", "metadata": {},
                     "data": {"image/png": base64.b64encode(buf.getvalue()).decode("ascii"),
                              "text/plain": [f"<Figure size {w:g}x{h:g} with "
                                             f"{len(fig.axes)} Axes>"]}})
    plt.close("all")
    return outs


def execute(nb: dict, cwd: Path) -> bool:
    """Run ``nb``'s code cells in place (outputs and execution counts replaced); False if a cell
    raised (that cell holds the error, the cells after it are cleared)."""
    old_backend = os.environ.get("MPLBACKEND")
    os.environ["MPLBACKEND"] = "Agg"
    try:                    # imported first, so that no cell's plt.show() warns under Agg
        import matplotlib.pyplot as plt
        old_show, plt.show = plt.show, (lambda *args, **kwargs: None)
    except ImportError:
        plt = None
    namespace = {"__name__": "__main__"}
    count, ok = 0, True
    old = Path.cwd()
    os.chdir(cwd)
    try:
        for cell in nb["cells"]:
            if cell.get("cell_type") != "code":
                continue
            if not ok:
                cell["outputs"], cell["execution_count"] = [], None
                continue
            count += 1
            source = "".join(cell.get("source", []))
            out, err = io.StringIO(), io.StringIO()
            error = None
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    exec(compile(source, f"<cell {count}>", "exec"), namespace)  # noqa: S102
                except Exception as e:  # noqa: BLE001 - stored as the cell's error output
                    error = e
            outputs = []
            for name, buf in (("stdout", out), ("stderr", err)):
                if buf.getvalue():
                    outputs.append({"output_type": "stream", "name": name,
                                    "text": _lines(buf.getvalue())})
            if error is None:
                outputs.extend(_figures())
            else:
                ok = False
                outputs.append({"output_type": "error", "ename": type(error).__name__,
                                "evalue": str(error),
                                "traceback": traceback.format_exception(error)})
            cell["outputs"], cell["execution_count"] = outputs, count
    finally:               # the caller's process as it was (a test may run this in pytest's)
        os.chdir(old)
        if plt is not None:
            plt.show = old_show
        if old_backend is None:
            os.environ.pop("MPLBACKEND", None)
        else:
            os.environ["MPLBACKEND"] = old_backend
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("notebook")
    ap.add_argument("--out", help="where to write the executed notebook (default: in place)")
    a = ap.parse_args(argv)
    src = Path(a.notebook).resolve()
    nb = json.loads(src.read_text())
    ok = execute(nb, src.parent)
    from marlin_cupy import records
    env = records.environment()
    nb.setdefault("metadata", {})["marlin_cupy_execution"] = {
        "executor": "scripts/execute_notebook.py", "date": env["date"],
        "git_commit": env["git_commit"],
        "device": env["device"]["name"] if env.get("device") else None,
        "gpu_unavailable": env.get("gpu_unavailable"), "ok": ok}
    out = Path(a.out) if a.out else src
    # nbformat's own layout (sorted keys, one-space indent), so that a re-run's diff is its outputs
    out.write_text(json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n")
    print(f"{'executed' if ok else 'FAILED'}: {src.name} -> {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
