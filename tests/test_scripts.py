"""Every script in scripts/ answers --help without a GPU: it imports against the current package
and argument parser, prints its usage, exits 0 and writes nothing (compile_times.py once took
"--help" for its output path and compiled every kernel into a file of that name)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p for p in (ROOT / "scripts").glob("*.py") if not p.name.startswith("_"))


def test_scripts_found():
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help(script, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, str(script), "--help"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip(), "no usage text"
    assert list(tmp_path.iterdir()) == [], "--help wrote files"
