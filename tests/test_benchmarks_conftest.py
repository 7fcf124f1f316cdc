"""benchmarks/conftest.py: pytest-benchmark's report names the commit that ran and the GPU."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _conftest():
    spec = importlib.util.spec_from_file_location("benchmarks_conftest",
                                                  ROOT / "benchmarks" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_commit_info_from_marlin_git_commit(monkeypatch):
    hook = _conftest().pytest_benchmark_update_commit_info
    info = {"id": "stale", "dirty": True, "branch": "main"}
    monkeypatch.setenv("MARLIN_GIT_COMMIT", "6be34d1")
    hook(None, info)
    assert info == {"id": "6be34d1", "dirty": False, "source": "MARLIN_GIT_COMMIT"}
    info = {"id": "from-git", "dirty": False}
    monkeypatch.delenv("MARLIN_GIT_COMMIT")
    hook(None, info)
    assert info == {"id": "from-git", "dirty": False}      # no override: pytest-benchmark's own


def test_report_carries_the_environment_head(monkeypatch):
    monkeypatch.setenv("MARLIN_GIT_COMMIT", "6be34d1")
    out = {}
    _conftest().pytest_benchmark_update_json(None, [], out)
    env = out["marlin_cupy"]
    assert env["git_commit"] == "6be34d1" and env["git_commit_from"] == "MARLIN_GIT_COMMIT"
    assert "date" in env and "versions" in env and "device" in env
