"""The parsers of scripts/device_check.py, on made-up tool output (no GPU needed)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import device_check  # noqa: E402  (scripts/ is not a package)

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites name="pytest tests"><testsuite name="pytest" errors="1" failures="2" skipped="3"
 tests="10" time="1.0">
<testcase classname="tests.test_a" name="test_ok" time="0.1"/>
<testcase classname="tests.test_a" name="test_bad[odd_m]" time="0.1"><failure message="x"/>
</testcase>
<testcase classname="tests.test_b" name="test_bad2" time="0.1"><failure message="y"/></testcase>
<testcase classname="tests.test_b" name="test_err" time="0.1"><error message="z"/></testcase>
</testsuite></testsuites>"""


def test_parse_junit_counts(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    counts = device_check.parse_junit(path)
    assert {k: counts[k] for k in ("passed", "failed", "skipped", "errors")} == {
        "passed": 4, "failed": 2, "skipped": 3, "errors": 1}
    assert counts["failed_tests"] == ["tests.test_a::test_bad[odd_m]", "tests.test_b::test_bad2",
                                      "tests.test_b::test_err"]


@pytest.mark.parametrize("text, errors", [
    ("========= COMPUTE-SANITIZER\nsmoke ok\n========= ERROR SUMMARY: 0 errors\n", 0),
    ("========= Invalid __global__ read of size 2 bytes\n========= ERROR SUMMARY: 12 errors\n", 12),
    ("========= RACECHECK SUMMARY: 3 hazards displayed (1 error, 2 warnings)\n", 1),
    ("========= ERROR SUMMARY: 1 error\n", 1),
    ("Traceback (most recent call last):\n...\n[device_check] timed out after 120 s\n", None),
])
def test_parse_sanitizer(text, errors):
    assert device_check.parse_sanitizer(text) == errors


def test_parse_case_summary():
    text = "ok   cfg M=1\nSANITIZE_CASE smoke=ok matmul_cases=12 failures=1 skipped=3\n"
    assert device_check.parse_case_summary(text) == {"smoke": "ok", "matmul_cases": 12,
                                                     "failures": 1, "skipped": 3}
    assert device_check.parse_case_summary("crashed") is None


def test_bench_summary_takes_the_fastest_fp16_per_layer():
    def row(provider, k, us):
        return {"set": "llama2-70b", "provider": provider, "m": 16, "k": k, "n": k,
                "median_us": us}
    rows = [row("marlin", 1, 10.0), row("cublas-fp16", 1, 40.0), row("torch-fp16", 1, 30.0),
            row("marlin", 2, 20.0), row("cublas-fp16", 2, 30.0)]
    (summary,) = device_check.bench_summary({"rows": rows})
    assert summary == {"set": "llama2-70b", "m": 16, "marlin_us": 30.0, "fp16_us": 60.0,
                       "speedup": 2.0}


def test_run_logged_kills_on_timeout(tmp_path):
    run = device_check.run_logged([sys.executable, "-c", "import time; print('hi', flush=True); "
                                   "time.sleep(60)"], tmp_path / "logs" / "x.log", timeout=1)
    assert run["timed_out"] and run["rc"] != 0
    assert "hi" in run["text"] and "timed out" in run["text"]


def test_sanitized_runs_read_the_plain_runs_fp16_errors(tmp_path, monkeypatch):
    """The plain run of sanitize_case writes cuBLAS FP16's errors to a file that both runs
    under compute-sanitizer read, so the sanitizer watches no cuBLAS kernel (NOTES.md entry
    70); a file left by an earlier run is removed first."""
    calls = []

    def fake_run(cmd, log, timeout, interrupt_first=False):
        calls.append(list(cmd))
        if "--tool" not in cmd:
            return {"rc": 0, "timed_out": False, "seconds": 0.1, "log": str(log),
                    "text": "SANITIZE_CASE smoke=ok matmul_cases=3 failures=0 skipped=0\n"}
        return {"rc": 0, "timed_out": False, "seconds": 0.1, "log": str(log),
                "text": "========= ERROR SUMMARY: 0 errors\n"}
    monkeypatch.setattr(device_check, "run_logged", fake_run)
    monkeypatch.setattr(device_check, "find_sanitizer", lambda: "/x/compute-sanitizer")
    monkeypatch.delenv("SKIP_SANITIZER", raising=False)
    stale = tmp_path / "logs" / "fp16_errors.json"
    stale.parent.mkdir()
    stale.write_text('{"M=1 K=512 N=512 g128 sym": 9.0}')
    counts, stage = device_check.stage_sanitizer(tmp_path, device_check.Budget(60))
    assert not stale.exists()
    assert [c[:3] for c in calls[1:]] == [["/x/compute-sanitizer", "--tool", "memcheck"],
                                          ["/x/compute-sanitizer", "--tool", "racecheck"]]
    for cmd in calls:
        assert cmd[cmd.index("--fp16-errors") + 1] == str(stale)
    assert counts == {"memcheck_errors": 0, "racecheck_errors": 0} and stage["status"] == "ok"


def test_the_markdown_says_why_a_sanitizer_count_is_missing():
    """A tool that printed no summary is -1 in the record; the markdown says it is incomplete
    and why (a racecheck run out of its time read as "-1 errors" once: session 47)."""
    stage = {"status": "failed",
             "cases": {"smoke": "ok", "matmul_cases": 628, "failures": 0, "skipped": 92},
             "runs": {"memcheck": {"rc": 0, "timed_out": False, "seconds": 20.0},
                      "racecheck": {"rc": -9, "timed_out": True, "seconds": 120.0}}}
    san = {"memcheck_errors": 0, "racecheck_errors": -1}
    assert device_check._tool_count(san, stage, "memcheck") == "memcheck 0 errors"
    text = device_check._tool_count(san, stage, "racecheck")
    assert text.startswith("racecheck incomplete") and "timed out after 120.0 s" in text
    stage["runs"]["racecheck"] = {"rc": 1, "timed_out": False, "seconds": 3.0}
    assert "exit 1" in device_check._tool_count(san, stage, "racecheck")
    rec = {"device": {"name": "NVIDIA H200", "sms": 132}, "date": "2026-12-03T16:00:00+00:00",
           "git_commit": "abc", "ok": False,
           "versions": dict.fromkeys(("python", "numpy", "cupy", "cuda_runtime", "cuda_driver", "torch",
                                      "nvrtc"), "x"),
           "pytest": {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}, "sanitizer": san,
           "stages": {"sanitizer": stage, "pytest": {"status": "skipped"}}}
    md = device_check.markdown(rec)
    assert "memcheck 0 errors, racecheck incomplete: no summary printed, exit 1" in md
    assert "-1 errors" not in md


def test_a_gpu_machine_that_would_skip_the_gpu_tests_stops_instead(monkeypatch):
    """conftest.py: with MARLIN_CUPY_REQUIRE_GPU=1 (device_check.py sets it where an NVIDIA
    driver is), gpu-marked tests that would be skipped (a broken CuPy on a GPU machine) stop
    the run with an error; without it they are skipped with the reason."""
    import importlib.util
    import types
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent / "conftest.py"
    spec = importlib.util.spec_from_file_location("root_conftest_under_test", root)
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    monkeypatch.setattr(conftest, "gpu_skip_reason", lambda: "CuPy is not importable (boom)")
    marked = []
    item = types.SimpleNamespace(keywords={"gpu": True}, add_marker=marked.append)
    monkeypatch.delenv("MARLIN_CUPY_REQUIRE_GPU", raising=False)
    conftest.pytest_collection_modifyitems(None, [item])
    assert marked and "no usable GPU: CuPy is not importable (boom)" in str(marked[0].kwargs)
    monkeypatch.setenv("MARLIN_CUPY_REQUIRE_GPU", "1")
    with pytest.raises(pytest.exit.Exception, match="MARLIN_CUPY_REQUIRE_GPU=1, but no GPU is "
                                                    "usable for the 1 gpu-marked tests"):
        conftest.pytest_collection_modifyitems(None, [item])
