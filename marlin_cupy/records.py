"""JSON records of what a run proved: environment facts, writing, and the minimum schemas.

Every tool that writes under ``benchmarks/results/`` (the benchmark, ``scripts/device_check.sh``)
builds its record from ``environment()``, checks it with ``validate_record`` and writes it with
``write_json``, so every reader can rely on the fields of DESIGN.md section 8. Records may carry
more fields than the schema asks for; they may never carry fewer.

Nothing here imports CuPy at module level: ``environment()`` asks the GPU only when called.
"""
from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import warnings
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Provider names a bench row may use (DESIGN.md s.8, and ``marlin-pdl`` and ``marlin-config``,
#: an explicit ``--config``'s rows; records before it named those ``marlin``, label
#: ``marlin[NAME]``).
PROVIDERS = ("marlin", "marlin-pdl", "marlin-config", "marlin-sparse24", "cublas-fp16",
             "naive-dequant-gemm", "naive-fused", "torch-fp16", "torch-int4")
#: Shape-set names a bench row may use (DESIGN.md s.7).
SETS = ("llama2-7b", "llama2-13b", "llama2-70b", "ideal", "custom")
#: Record kinds that ``validate_record`` knows.
KINDS = ("bench", "device_check")


# ---------------------------------------------------------------------------------------------
# Environment facts
# ---------------------------------------------------------------------------------------------

def utc_now() -> str:
    """The current time as ISO-8601 UTC with seconds, e.g. ``2026-11-29T20:04:00+00:00``."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _git(*args):
    try:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_commit() -> str:
    """The commit the code came from: ``$MARLIN_GIT_COMMIT`` when set (a copied tree has no
    ``.git``), else ``git rev-parse HEAD`` of this checkout, else ``"unknown"``."""
    env = os.environ.get("MARLIN_GIT_COMMIT", "").strip()
    if env:
        return env
    return _git("rev-parse", "HEAD") or "unknown"


def git_dirty():
    """Whether the checkout has uncommitted changes to tracked files (``None`` when that cannot
    be told: no git checkout, or ``$MARLIN_GIT_COMMIT`` names a commit other than the local
    ``HEAD``, as on a copied tree whose ``.git`` is stale or foreign)."""
    head = _git("rev-parse", "HEAD")
    if head is None:
        return None
    env = os.environ.get("MARLIN_GIT_COMMIT", "").strip()
    if env and env != head:
        return None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return None if status is None else bool(status)


def _version(dist: str):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cuda_version(v: int) -> str:
    """CUDA's integer versions (12090) as ``"12.9"``."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def gpu_unavailable_reason():
    """``None`` when CuPy can see a CUDA device, else a sentence saying why not."""
    try:
        import cupy
    except Exception as e:  # ImportError, or a CUDA library that fails to load
        return f"CuPy is not importable ({type(e).__name__}: {e})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDARuntimeError: no driver, no device, insufficient driver
        reason = f"CUDA reports no usable device ({type(e).__name__}: {e})"
        if "InsufficientDriver" in str(e) and not os.path.exists("/proc/driver/nvidia"):
            # With no driver at all the runtime reports an "insufficient" one.
            reason += "; no NVIDIA driver is loaded on this machine"
        return reason
    if count == 0:
        return "CUDA reports 0 devices"
    return None


def raise_if_no_gpu(what: str, err: BaseException) -> None:
    """Called where a CUDA call just raised ``err``: if no GPU is usable at all, raise a
    RuntimeError that says so (``what`` needs one, and why there is none) instead of CuPy's bare
    CUDA error; otherwise return, and the caller re-raises ``err`` as it was."""
    reason = gpu_unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"{what} needs a usable CUDA GPU, and there is none here: "
                           f"{reason}.") from err


def device_info(device_id: int = 0) -> dict:
    """Facts about one GPU that every record carries (needs a usable GPU)."""
    import cupy
    p = cupy.cuda.runtime.getDeviceProperties(device_id)
    name = p["name"]
    return {
        "name": name.decode() if isinstance(name, bytes) else str(name),
        "sms": int(p["multiProcessorCount"]),
        "cc": f"{p['major']}.{p['minor']}",
        "l2_bytes": int(p["l2CacheSize"]),
        "smem_optin_bytes": int(p["sharedMemPerBlockOptin"]),
        "memory_bytes": int(p["totalGlobalMem"]),
    }


def versions() -> dict:
    """Versions of Python and the libraries a result depends on (``None`` where absent)."""
    out = {
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        # Read from package metadata so that recording it never imports torch.
        "torch": _version("torch"),
        "cupy": None, "cuda_runtime": None, "cuda_driver": None, "nvrtc": None,
    }
    try:
        import cupy
    except Exception:
        return out
    out["cupy"] = cupy.__version__
    try:
        out["nvrtc"] = "%d.%d" % cupy.cuda.nvrtc.getVersion()
    except Exception:
        pass
    for key, query in (("cuda_runtime", cupy.cuda.runtime.runtimeGetVersion),
                       ("cuda_driver", cupy.cuda.runtime.driverGetVersion)):
        try:
            v = query()
        except Exception:  # no driver on this machine
            continue
        out[key] = _cuda_version(v) if v else None   # the driver query gives 0 without a driver
    return out


def environment() -> dict:
    """The common head of every record: date, commit, device (or why there is none), versions."""
    reason = gpu_unavailable_reason()
    from_env = bool(os.environ.get("MARLIN_GIT_COMMIT", "").strip())
    commit, dirty = git_commit(), git_dirty()
    if not from_env and dirty:
        # A tree copied to a GPU machine can carry a stale .git: its HEAD is not the code that
        # ran (this happened: NOTES.md entry 21). Say so where the run is watched.
        warnings.warn(f"git_commit {commit[:12]} is the HEAD of a checkout with uncommitted "
                      f"changes, which may not be the code that ran; set MARLIN_GIT_COMMIT to "
                      f"the commit the tree came from", stacklevel=2)
    env = {
        "date": utc_now(),
        "git_commit": commit,
        "git_commit_from": ("MARLIN_GIT_COMMIT" if from_env
                            else "git rev-parse HEAD" if commit != "unknown" else None),
        "git_dirty": dirty,
        "device": None if reason else device_info(),
        "versions": versions(),
        "platform": platform.platform(),
    }
    from .kernels import defines
    if defines():
        # $MARLIN_CUPY_DEFINES built every kernel of this run with these switches: an
        # experimental build, not the shipped one.
        env["kernel_defines"] = defines()
    if reason:
        env["gpu_unavailable"] = reason
    return env


# ---------------------------------------------------------------------------------------------
# Writing and reading
# ---------------------------------------------------------------------------------------------

def _plain(obj):
    """JSON fallback for NumPy scalars and arrays and for paths."""
    if hasattr(obj, "item") and getattr(obj, "ndim", 1) == 0:
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot write {type(obj).__name__} to JSON: {obj!r}")


def write_json(path, record: dict, validate: bool = True) -> Path:
    """Write ``record`` to ``path`` (parents created), validating known kinds first.

    NaN and infinity are refused (they are not JSON), and the file is replaced atomically so a
    reader never sees half a record.
    """
    if validate and record.get("kind") in KINDS:
        validate_record(record)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(record, indent=2, default=_plain, allow_nan=False)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text + "\n")
    tmp.replace(path)
    return path


def read_json(path) -> dict:
    """A record from ``path``; a name ending in ``.gz`` is read through gzip. Superseded
    records under ``benchmarks/results/`` are stored compressed (``gzip -9n``, the same JSON
    inside), so that the tree stays small enough to copy to the GPU machine (see that folder's
    README.md)."""
    path = Path(path)
    if path.suffix == ".gz":
        import gzip
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return json.load(f)
    return json.loads(path.read_text())


def newest_sweep(root, sets=None, device: str | None = None):
    """``(path, record)`` of the newest full benchmark sweep under ``root`` (searched at any
    depth; sessions keep their sweeps in sub-folders, plain or gzipped), or ``None``.

    A full sweep is a ``bench`` record of the shipped build that covers every set of ``sets``
    (default: the benchmark's shape sets, ``bench.shapes.SHAPE_SETS``), every default batch size
    (``bench.shapes.DEFAULT_BATCHES``) and every default provider (``bench.providers.
    PROVIDER_NAMES``, available on that machine or not) with single launches: not aborted, no
    ``kernel_defines`` (an experimental build), no chain of launches (``method.chain_len`` 0).
    A narrower sweep (``--batches``, ``--providers``) is a measurement, not the newest record.
    ``device`` is matched against the device's name (case-insensitive substring). Newest is by
    the record's own ``date``, not the folder's name or the file's time."""
    # here, not at the top: bench imports this module
    from .bench.providers import PROVIDER_NAMES
    from .bench.shapes import DEFAULT_BATCHES, SHAPE_SETS
    if sets is None:
        sets = SHAPE_SETS
    best = None
    for path in sorted(Path(root).rglob("*_bench.json*")):
        if not path.name.endswith(("_bench.json", "_bench.json.gz")):
            continue
        rec = read_json(path)
        if rec.get("kind") != "bench" or rec.get("aborted") or rec.get("kernel_defines"):
            continue
        if (rec.get("method") or {}).get("chain_len", 0):
            continue
        name = (rec.get("device") or {}).get("name") or ""
        if device is not None and device.lower() not in name.lower():
            continue
        if not set(sets) <= set(rec.get("sets") or ()):
            continue
        if not set(DEFAULT_BATCHES) <= set(rec.get("batches") or ()):
            continue
        measured = {(v or {}).get("provider", k) for k, v in (rec.get("providers") or {}).items()}
        if not set(PROVIDER_NAMES) <= measured:
            continue
        when = _when(rec.get("date"))
        if when is not None and (best is None or when > best[0]):
            best = (when, path, rec)
    return best[1:] if best else None


def _when(date):
    """A record's ISO 8601 ``date`` as an aware datetime (naive ones read as UTC), or None."""
    try:
        when = datetime.fromisoformat(str(date).replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


# ---------------------------------------------------------------------------------------------
# Minimum schemas (DESIGN.md s.8)
# ---------------------------------------------------------------------------------------------

def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v):
    return (isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v))


def _is_str(v):
    return isinstance(v, str) and v != ""


def _is_date(v):
    return isinstance(v, str) and _when(v) is not None


class _Checker:
    """Collects every problem of a record so that one error lists them all."""

    def __init__(self):
        self.problems = []

    def field(self, obj, key, ok, what, where):
        if not isinstance(obj, dict) or key not in obj:
            self.problems.append(f"{where}{key}: missing ({what})")
            return False
        if not ok(obj[key]):
            self.problems.append(f"{where}{key}: expected {what}, got {obj[key]!r}")
            return False
        return True


def validate_record(rec: dict) -> None:
    """Raise ``ValueError`` listing every missing or ill-typed field of a bench or device-check
    record; return ``None`` when the record meets DESIGN.md section 8."""
    if not isinstance(rec, dict):
        raise ValueError(f"a record must be a JSON object (dict); got {type(rec).__name__}")
    kind = rec.get("kind")
    if kind not in KINDS:
        raise ValueError(f"record kind {kind!r} is not one of {KINDS}")
    c = _Checker()
    c.field(rec, "date", _is_date, "an ISO-8601 date string", "")
    c.field(rec, "git_commit", _is_str, "a commit sha string (or 'unknown')", "")
    if c.field(rec, "device", lambda v: isinstance(v, dict), "an object", ""):
        c.field(rec["device"], "name", _is_str, "a string", "device.")
        c.field(rec["device"], "sms", lambda v: _is_int(v) and v > 0, "a positive int",
                "device.")

    if kind == "bench":
        c.field(rec, "copy_bandwidth_GBps", lambda v: _is_number(v) and v > 0,
                "a positive finite number", "")
        c.field(rec, "group_size", _is_int, "an int", "")
        if c.field(rec, "rows", lambda v: isinstance(v, list) and v, "a non-empty list", ""):
            for i, row in enumerate(rec["rows"]):
                where = f"rows[{i}]."
                if not isinstance(row, dict):
                    c.problems.append(f"rows[{i}]: expected an object, got {row!r}")
                    continue
                c.field(row, "set", lambda v: v in SETS, f"one of {SETS}", where)
                c.field(row, "provider", lambda v: v in PROVIDERS, f"one of {PROVIDERS}", where)
                for key in ("m", "k", "n"):
                    c.field(row, key, lambda v: _is_int(v) and v > 0, "a positive int", where)
                c.field(row, "median_us", lambda v: _is_number(v) and v > 0,
                        "a positive finite number", where)
                c.field(row, "config", lambda v: v is None or isinstance(v, str),
                        "a string or null", where)
    else:  # device_check
        if c.field(rec, "pytest", lambda v: isinstance(v, dict), "an object", ""):
            for key in ("passed", "failed", "skipped", "errors"):
                c.field(rec["pytest"], key, lambda v: _is_int(v) and v >= 0,
                        "a non-negative int", "pytest.")
        if c.field(rec, "sanitizer", lambda v: v is None or isinstance(v, dict),
                   "an object or null", "") and rec["sanitizer"] is not None:
            for key in ("memcheck_errors", "racecheck_errors"):
                # -1: the tool printed no summary (scripts/device_check.py: timed out, crashed).
                c.field(rec["sanitizer"], key, lambda v: _is_int(v) and v >= -1,
                        "an int >= 0, or -1 where the tool printed no summary", "sanitizer.")

    if c.problems:
        raise ValueError(f"{kind} record does not meet the schema of DESIGN.md s.8:\n  "
                         + "\n  ".join(c.problems))
