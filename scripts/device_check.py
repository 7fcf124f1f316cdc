#!/usr/bin/env python3
"""Everything a GPU machine can prove, in one run: see ``scripts/device_check.sh``.

Stages (each bounded in time, none stops the others; logs under OUTDIR/logs/):
1. environment: ``records.environment()`` and ``nvidia-smi``, whose report goes to
   OUTDIR/nvidia-smi.txt;
2. pytest: first a kernel-cache warm-up (``kernels.warm_instantiated``, every dispatchable kernel
   compiled in parallel, at most 240 s, logs/warm_cache.log), then ``python3 -m pytest -m gpu``
   (logs/pytest_gpu.log) with a JUnit XML report, OUTDIR/pytest_gpu.xml, parsed into counts;
3. sanitizer: ``scripts/sanitize_case.py`` plainly (warms the kernel cache, checks results,
   measures cuBLAS FP16's errors into logs/fp16_errors.json), then under ``compute-sanitizer
   --tool memcheck`` and ``--tool racecheck``, which read those errors and so watch no cuBLAS
   kernel, counting errors;
4. bench: ``python3 -m marlin_cupy.bench --sets llama2-70b --batches 1,16,64,256 --out OUTDIR``
   when that module exists.
Writes OUTDIR/device_check.json (DESIGN.md s.8, validated) and OUTDIR/device_check.md, and exits
1 when anything failed (a test, a sanitizer error, a stage that timed out, no GPU), else 0.

Environment variables:
  SKIP_PYTEST=1, SKIP_SANITIZER=1, SKIP_BENCH=1   leave a stage out
  GPU_TESTS_TIMEOUT (default 420), SANITIZER_TIMEOUT (per tool, default 240),
  BENCH_TIMEOUT (default 150), DEVICE_CHECK_BUDGET (whole run, default 580) in seconds
  PYTEST_ARGS    extra pytest arguments, e.g. "-k odd_m -x"
  SANITIZE_ARGS  arguments for sanitize_case.py, e.g. "--all-configs"
  MARLIN_GIT_COMMIT  the commit this tree came from, when it has no .git
A sanitizer count of -1 means the tool printed no summary (it timed out or crashed).
"""
from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from marlin_cupy import records  # noqa: E402

BENCH_ARGS = ["--sets", "llama2-70b", "--batches", "1,16,64,256"]
FP16_PROVIDERS = ("cublas-fp16", "torch-fp16")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip() not in ("", "0", "false", "no")


def _env_seconds(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


class Budget:
    """Clamps every stage's timeout to the time left for the whole run."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def clamp(self, seconds: float) -> float:
        return max(1.0, min(seconds, self.end - time.monotonic()))


# ---------------------------------------------------------------------------------------------
# Running a stage
# ---------------------------------------------------------------------------------------------

def run_logged(cmd, log: Path, timeout: float, interrupt_first: bool = False) -> dict:
    """Run ``cmd`` with stdout+stderr to ``log`` (and echoed), killed after ``timeout`` s.

    The command gets its own process group so that a timeout ends everything it started.
    With ``interrupt_first`` it gets SIGINT first and 30 s to finish (pytest then still writes
    its JUnit report of the tests it ran).
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"$ {shlex.join(str(c) for c in cmd)}   (timeout {timeout:.0f} s, log {log})",
          flush=True)
    start = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.Popen([str(c) for c in cmd], cwd=ROOT, stdout=f,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        timed_out = False
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            if interrupt_first:
                os.killpg(proc.pid, signal.SIGINT)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
            f.write(f"\n[device_check] timed out after {timeout:.0f} s\n")
    seconds = round(time.monotonic() - start, 1)
    text = log.read_text(errors="replace")
    tail = "\n".join(text.splitlines()[-15:])
    print(tail + f"\n-> exit {rc}{' (timed out)' if timed_out else ''} after {seconds} s\n",
          flush=True)
    return {"cmd": [str(c) for c in cmd], "rc": rc, "timed_out": timed_out,
            "seconds": seconds, "log": str(log.relative_to(log.parent.parent)), "text": text}


def _public(stage: dict) -> dict:
    return {k: v for k, v in stage.items() if k != "text"}


# ---------------------------------------------------------------------------------------------
# Parsers (pure functions, tested on the CPU in tests/test_device_check.py)
# ---------------------------------------------------------------------------------------------

def parse_junit(path: Path) -> dict:
    """Counts from a pytest JUnit XML report, plus the names of failed and errored tests."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failed = []
    for suite in suites:
        for key in total:
            total[key] += int(suite.get(key, 0))
        for case in suite.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed.append(f"{case.get('classname')}::{case.get('name')}")
    return {"passed": total["tests"] - total["failures"] - total["errors"] - total["skipped"],
            "failed": total["failures"], "skipped": total["skipped"],
            "errors": total["errors"], "failed_tests": failed}


_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error")
_RACECHECK_SUMMARY = re.compile(r"RACECHECK SUMMARY:\s*\d+\s+hazards? displayed\s*\((\d+)\s+error")


def parse_sanitizer(text: str):
    """Errors that compute-sanitizer reported, or ``None`` when it printed no summary."""
    found = [int(n) for n in _ERROR_SUMMARY.findall(text)]
    if not found:
        found = [int(n) for n in _RACECHECK_SUMMARY.findall(text)]
    return sum(found) if found else None


_CASE_SUMMARY = re.compile(r"SANITIZE_CASE smoke=(\w+) matmul_cases=(\d+) failures=(\d+)"
                           r"(?: skipped=(\d+))?")


def parse_case_summary(text: str):
    m = _CASE_SUMMARY.search(text)
    if not m:
        return None
    return {"smoke": m.group(1), "matmul_cases": int(m.group(2)), "failures": int(m.group(3)),
            "skipped": int(m.group(4) or 0)}


def bench_summary(rec: dict) -> list:
    """Per (set, M): summed Marlin time against the summed fastest FP16 time of each layer."""
    times = {}
    for row in rec["rows"]:
        times.setdefault((row["set"], row["m"]), {}).setdefault(
            (row["k"], row["n"]), {})[row["provider"]] = row["median_us"]
    out = []
    for (set_name, m), layers in sorted(times.items()):
        if not all("marlin" in p and any(f in p for f in FP16_PROVIDERS)
                   for p in layers.values()):
            continue
        marlin = sum(p["marlin"] for p in layers.values())
        fp16 = sum(min(p[f] for f in FP16_PROVIDERS if f in p) for p in layers.values())
        out.append({"set": set_name, "m": m, "marlin_us": round(marlin, 2),
                    "fp16_us": round(fp16, 2), "speedup": round(fp16 / marlin, 3)})
    return out


# ---------------------------------------------------------------------------------------------
# Stages
# ---------------------------------------------------------------------------------------------

def stage_nvidia_smi(out: Path):
    """Save ``nvidia-smi``'s report to OUTDIR/nvidia-smi.txt; return the driver version."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        (out / "nvidia-smi.txt").write_text("nvidia-smi not found on PATH\n")
        return None
    parts, driver = [], None
    query = ["--query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,"
             "power.limit,persistence_mode", "--format=csv"]
    for args in ([], query):
        try:
            res = subprocess.run([smi, *args], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as e:
            parts.append(f"nvidia-smi {' '.join(args)} failed: {e}\n")
            continue
        parts.append(res.stdout + res.stderr)
        if args and res.returncode == 0 and len(res.stdout.splitlines()) > 1:
            driver = res.stdout.splitlines()[1].split(",")[1].strip()
    (out / "nvidia-smi.txt").write_text("\n".join(parts))
    return driver


def stage_pytest(out: Path, budget: Budget) -> tuple:
    if _env_flag("SKIP_PYTEST"):
        return {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}, {"status": "skipped"}
    junit = out / "pytest_gpu.xml"
    junit.unlink(missing_ok=True)
    # Compile every dispatchable kernel in parallel first; the tests then load them from
    # CuPy's cache instead of compiling hundreds of instances one after another.
    warm = [sys.executable, "-c", "import os; from marlin_cupy import kernels; "
            "print('warmed', kernels.warm_instantiated(os.cpu_count() or 4))"]
    run_logged(warm, out / "logs" / "warm_cache.log", budget.clamp(240))
    if os.path.exists("/proc/driver/nvidia") or shutil.which("nvidia-smi"):
        # A GPU machine: gpu-marked tests that would skip (a broken CuPy, say) stop pytest with
        # an error instead of reading as a pass (conftest.py).
        os.environ.setdefault("MARLIN_CUPY_REQUIRE_GPU", "1")
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-ra", "-p", "no:cacheprovider",
           f"--junitxml={junit}", *shlex.split(os.environ.get("PYTEST_ARGS", ""))]
    run = run_logged(cmd, out / "logs" / "pytest_gpu.log",
                     budget.clamp(_env_seconds("GPU_TESTS_TIMEOUT", 420)), interrupt_first=True)
    stage = _public(run)
    if junit.is_file():
        counts = parse_junit(junit)
        stage["failed_tests"] = counts.pop("failed_tests")
    else:
        counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 1}
        stage["note"] = "pytest wrote no JUnit report"
    if run["rc"] == 5:
        stage["note"] = "pytest collected no gpu-marked test (exit code 5)"
    if run["timed_out"]:
        counts["errors"] += 1
        stage["note"] = "pytest timed out; counts cover the tests that finished"
    stage["status"] = ("ok" if run["rc"] == 0 and not counts["failed"] and not counts["errors"]
                       else "failed")
    return counts, stage


def find_sanitizer():
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for base in [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]:
        if base and (Path(base) / "bin" / "compute-sanitizer").is_file():
            return str(Path(base) / "bin" / "compute-sanitizer")
    return None


def stage_sanitizer(out: Path, budget: Budget) -> tuple:
    """``(sanitizer field of the record or None, stage info)``."""
    if _env_flag("SKIP_SANITIZER"):
        return None, {"status": "skipped", "note": "SKIP_SANITIZER is set"}
    tool = find_sanitizer()
    if tool is None:
        return None, {"status": "skipped", "note": "compute-sanitizer not found on PATH or in "
                                                    "CUDA_HOME/bin, /usr/local/cuda/bin"}
    # The plain run measures cuBLAS FP16's errors into the file and the sanitized runs read
    # them, so the sanitizer watches no cuBLAS kernel (NOTES.md entry 70).
    baseline = out / "logs" / "fp16_errors.json"
    baseline.unlink(missing_ok=True)
    case = [sys.executable, str(ROOT / "scripts" / "sanitize_case.py"),
            *shlex.split(os.environ.get("SANITIZE_ARGS", "")), "--fp16-errors", str(baseline)]
    timeout = _env_seconds("SANITIZER_TIMEOUT", 240)
    stage = {"tool": tool, "runs": {}}
    plain = run_logged(case, out / "logs" / "sanitize_case.log", budget.clamp(timeout))
    stage["runs"]["plain"] = _public(plain)
    stage["cases"] = parse_case_summary(plain["text"])
    counts, ok = {}, plain["rc"] == 0
    for name in ("memcheck", "racecheck"):
        run = run_logged([tool, "--tool", name, *case], out / "logs" / f"{name}.log",
                         budget.clamp(timeout))
        stage["runs"][name] = _public(run)
        errors = parse_sanitizer(run["text"])
        counts[f"{name}_errors"] = -1 if errors is None else errors
        ok = ok and errors == 0 and run["rc"] == 0
    stage["status"] = "ok" if ok else "failed"
    return counts, stage


def stage_bench(out: Path, budget: Budget) -> dict:
    if _env_flag("SKIP_BENCH"):
        return {"status": "skipped", "note": "SKIP_BENCH is set"}
    if importlib.util.find_spec("marlin_cupy.bench.__main__") is None:
        return {"status": "skipped", "note": "marlin_cupy.bench does not exist yet"}
    before = set(out.glob("*bench*.json"))
    cmd = [sys.executable, "-m", "marlin_cupy.bench", *BENCH_ARGS, "--out", out]
    run = run_logged(cmd, out / "logs" / "bench.log",
                     budget.clamp(_env_seconds("BENCH_TIMEOUT", 150)))
    stage = _public(run)
    files = sorted(set(out.glob("*bench*.json")) - before) or sorted(out.glob("*bench*.json"))
    stage["files"] = [f.name for f in files]
    stage["summary"], problems = [], []
    for f in files:
        try:
            rec = records.read_json(f)
            records.validate_record(rec)
            stage["summary"] += bench_summary(rec)
        except ValueError as e:
            problems.append(f"{f.name}: {e}")
    if problems:
        stage["problems"] = problems
    stage["status"] = "ok" if run["rc"] == 0 and files and not problems else "failed"
    return stage


# ---------------------------------------------------------------------------------------------
# The record
# ---------------------------------------------------------------------------------------------

def _tool_count(san: dict, stage: dict, name: str) -> str:
    """"memcheck 0 errors", or why the record holds -1 for the tool: its run printed no
    summary, because it timed out or exited early (the log under logs/ has what it printed)."""
    count = san.get(f"{name}_errors", -1)
    if count >= 0:
        return f"{name} {count} errors"
    run = (stage.get("runs") or {}).get(name) or {}
    if run.get("timed_out"):
        why = f"timed out after {run.get('seconds', '?')} s (SANITIZER_TIMEOUT)"
    else:
        why = f"exit {run.get('rc', '?')}"
    return f"{name} incomplete: no summary printed, {why} (-1 in the record)"


def markdown(rec: dict) -> str:
    dev, py, san, stages = rec["device"], rec["pytest"], rec["sanitizer"], rec["stages"]
    v = rec["versions"]
    lines = [
        f"# Device check: {dev['name']} ({'ok' if rec['ok'] else 'FAILED'})", "",
        f"- date {rec['date']}, commit `{rec['git_commit']}`"
        + (" (working tree had uncommitted changes)" if rec.get("git_dirty") else ""),
        f"- device: {dev['name']}, {dev['sms']} SMs, cc {dev.get('cc', '?')}, "
        f"L2 {dev.get('l2_bytes', 0) / 2**20:.0f} MiB, "
        f"opt-in shared memory {dev.get('smem_optin_bytes', 0)} bytes per block",
        f"- Python {v['python']}, NumPy {v['numpy']}, CuPy {v['cupy']}, CUDA runtime "
        f"{v['cuda_runtime']}, driver API {v['cuda_driver']}, NVRTC {v['nvrtc']}, "
        f"torch {v['torch']}, NVIDIA driver {v.get('nvidia_driver')}",
        "", "| stage | status | seconds | note |", "| --- | --- | ---: | --- |"]
    for name, st in stages.items():
        secs = st.get("seconds", sum(r.get("seconds", 0) for r in st.get("runs", {}).values()))
        secs = round(secs, 1)
        lines.append(f"| {name} | {st['status']} | {secs} | {st.get('note', '')} |")
    lines += ["", f"**pytest -m gpu**: {py['passed']} passed, {py['failed']} failed, "
              f"{py['skipped']} skipped, {py['errors']} errors"]
    failed = stages.get("pytest", {}).get("failed_tests", [])
    lines += [f"- failed: `{t}`" for t in failed[:30]]
    if len(failed) > 30:
        lines.append(f"- ... and {len(failed) - 30} more (see pytest_gpu.xml)")
    if san is None:
        lines += ["", f"**compute-sanitizer**: not run ({stages['sanitizer'].get('note', '')})"]
    else:
        cases = stages["sanitizer"].get("cases") or {}
        lines += ["", f"**compute-sanitizer** (scripts/sanitize_case.py: smoke kernel "
                  f"{cases.get('smoke', '?')}, {cases.get('matmul_cases', '?')} matmul cases, "
                  f"{cases.get('failures', '?')} failures, {cases.get('skipped', '?')} skipped): "
                  f"{_tool_count(san, stages['sanitizer'], 'memcheck')}, "
                  f"{_tool_count(san, stages['sanitizer'], 'racecheck')}"]
    summary = stages.get("bench", {}).get("summary")
    if summary:
        lines += ["", "**bench** (sum over the set's layers; FP16 = fastest of "
                  f"{', '.join(FP16_PROVIDERS)} per layer)", "",
                  "| set | M | marlin us | FP16 us | speedup |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        lines += [f"| {r['set']} | {r['m']} | {r['marlin_us']} | {r['fp16_us']} | "
                  f"{r['speedup']:.2f}x |" for r in summary]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__)
        return 2
    out = Path(argv[0]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    budget = Budget(_env_seconds("DEVICE_CHECK_BUDGET", 580))

    env = records.environment()
    env["versions"]["nvidia_driver"] = stage_nvidia_smi(out)
    stages = {}
    if env["device"] is None:
        # Nothing below can run; still write the record so the failure is on file.
        device = {"name": "none", "sms": 0}
        stages["environment"] = {"status": "failed", "note": env["gpu_unavailable"]}
        counts, sanitizer = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}, None
        stages["sanitizer"] = {"status": "skipped", "note": "no GPU"}
    else:
        device = env["device"]
        stages["environment"] = {"status": "ok"}
        counts, stages["pytest"] = stage_pytest(out, budget)
        sanitizer, stages["sanitizer"] = stage_sanitizer(out, budget)
        stages["bench"] = stage_bench(out, budget)

    ok = all(st["status"] in ("ok", "skipped") for st in stages.values())
    rec = {"kind": "device_check", **env, "device": device, "pytest": counts,
           "sanitizer": sanitizer, "stages": stages, "ok": ok}
    records.write_json(out / "device_check.json", rec)
    (out / "device_check.md").write_text(markdown(rec))
    print((out / "device_check.md").read_text())
    print(f"wrote {out / 'device_check.json'} and device_check.md: "
          f"{'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
