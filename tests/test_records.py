"""``records.validate_record`` accepts the DESIGN.md s.8 minimum and names every violation."""
from __future__ import annotations

import copy
import json

import pytest

from marlin_cupy import records


def bench_record():
    return {
        "kind": "bench", "date": "2026-11-29T20:00:00+00:00", "git_commit": "abc123",
        "device": {"name": "NVIDIA H200", "sms": 132}, "copy_bandwidth_GBps": 4280.0,
        "group_size": 128,
        "rows": [{"set": "llama2-70b", "provider": "marlin", "m": 16, "k": 8192, "n": 10240,
                  "median_us": 25.5, "config": "t256_m1_n8_k8_s4"},
                 {"set": "llama2-70b", "provider": "cublas-fp16", "m": 16, "k": 8192, "n": 10240,
                  "median_us": 60.0, "config": None}],
    }


def device_check_record():
    return {
        "kind": "device_check", "date": "2026-11-29T20:00:00Z", "git_commit": "unknown",
        "device": {"name": "NVIDIA H200", "sms": 132},
        "pytest": {"passed": 10, "failed": 0, "skipped": 1, "errors": 0},
        "sanitizer": {"memcheck_errors": 0, "racecheck_errors": 0},
    }


@pytest.mark.parametrize("make", [bench_record, device_check_record])
def test_valid_records_pass(make):
    records.validate_record(make())


def test_sanitizer_may_be_null():
    rec = device_check_record()
    rec["sanitizer"] = None
    records.validate_record(rec)


@pytest.mark.parametrize("path, value, message", [
    (("date",), "yesterday", "date: expected an ISO-8601"),
    (("git_commit",), "", "git_commit: expected a commit sha"),
    (("device", "sms"), 132.0, "device.sms: expected a positive int"),
    (("device", "sms"), 0, "device.sms: expected a positive int"),
    (("device", "name"), None, "device.name: expected a string"),
    (("copy_bandwidth_GBps",), float("nan"), "copy_bandwidth_GBps: expected a positive finite"),
    (("copy_bandwidth_GBps",), -4259.0, "copy_bandwidth_GBps: expected a positive finite"),
    (("group_size",), "128", "group_size: expected an int"),
    (("rows",), [], "rows: expected a non-empty list"),
])
def test_bench_ill_typed_fields_are_named(path, value, message):
    rec = bench_record()
    target = rec
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ValueError, match=message):
        records.validate_record(rec)


@pytest.mark.parametrize("key, value, message", [
    ("set", "llama3", "rows\\[1\\].set: expected one of"),
    ("provider", "cutlass", "rows\\[1\\].provider: expected one of"),
    ("m", 0, "rows\\[1\\].m: expected a positive int"),
    ("m", True, "rows\\[1\\].m: expected a positive int"),
    ("median_us", float("inf"), "rows\\[1\\].median_us: expected a positive finite"),
    ("config", 3, "rows\\[1\\].config: expected a string or null"),
])
def test_bench_row_problems_name_the_row(key, value, message):
    rec = bench_record()
    rec["rows"][1][key] = value
    with pytest.raises(ValueError, match=message):
        records.validate_record(rec)


def test_negative_sanitizer_counts_are_refused():
    rec = device_check_record()
    rec["sanitizer"] = {"memcheck_errors": -1, "racecheck_errors": 0}
    records.validate_record(rec)           # -1: the tool printed no summary (device_check.py)
    rec["sanitizer"] = {"memcheck_errors": -2, "racecheck_errors": 0}
    with pytest.raises(ValueError, match=r"sanitizer.memcheck_errors: expected an int >= 0, "
                                         r"or -1 where"):
        records.validate_record(rec)


def test_every_missing_field_is_listed_at_once():
    rec = device_check_record()
    del rec["pytest"]["failed"], rec["git_commit"]
    rec["sanitizer"] = {"memcheck_errors": 0}
    with pytest.raises(ValueError) as err:
        records.validate_record(rec)
    text = str(err.value)
    for missing in ("git_commit: missing", "pytest.failed: missing",
                    "sanitizer.racecheck_errors: missing"):
        assert missing in text, text


@pytest.mark.parametrize("rec, message", [
    ([], "must be a JSON object"),
    ({"kind": "benchmark"}, "kind 'benchmark' is not one of"),
])
def test_unknown_records_are_refused(rec, message):
    with pytest.raises(ValueError, match=message):
        records.validate_record(rec)


def test_explicit_config_rows_have_their_own_provider_and_old_records_still_pass():
    """``--config NAME`` rows are ``marlin-config`` (``marlin`` is the default dispatch's,
    DESIGN.md s.8); records written before it filed them under ``marlin``, label
    ``marlin[NAME]``, and still meet the schema (``test_every_committed_record_...``)."""
    rec = bench_record()
    rec["rows"].append(dict(rec["rows"][0], provider="marlin-config",
                            label="marlin[t256_m1_n8_k8_s4_g8_fp32]",
                            config="t256_m1_n8_k8_s4_g8_fp32"))
    records.validate_record(rec)
    rec["rows"][-1].update(provider="marlin", label="marlin[t256_m1_n8_k8_s4_g8_fp32]")
    records.validate_record(rec)


def test_write_json_validates_and_round_trips(tmp_path):
    rec = bench_record()
    path = records.write_json(tmp_path / "sub" / "x_bench.json", rec)
    assert json.loads(path.read_text()) == rec
    bad = copy.deepcopy(rec)
    del bad["rows"][0]["median_us"]
    with pytest.raises(ValueError, match="rows\\[0\\].median_us: missing"):
        records.write_json(tmp_path / "bad_bench.json", bad)
    assert not (tmp_path / "bad_bench.json").exists()


def test_read_json_reads_a_gzipped_record_as_the_same_json(tmp_path):
    import gzip
    rec = bench_record()
    plain = records.write_json(tmp_path / "x_bench.json", rec)
    packed = tmp_path / "x_bench.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert records.read_json(packed) == records.read_json(plain) == rec


RESULTS = records.REPO_ROOT / "benchmarks" / "results"


def _committed_records():
    """Every bench and device-check record under benchmarks/results, plain or gzipped."""
    found = []
    for path in sorted(RESULTS.rglob("*.json*")):
        name = path.name.removesuffix(".gz")
        if name.endswith(".json") and ("bench" in name or "device_check" in name):
            found.append(path)
    return found


def test_every_committed_record_meets_the_minimum_schema():
    """DESIGN.md s.8: what the records claim, every reader can check. Superseded records are
    stored gzipped (benchmarks/results/README.md), and are checked the same way."""
    if not RESULTS.is_dir():
        pytest.skip("no benchmarks/results in this tree (an installed package)")
    paths = _committed_records()
    assert paths, "no records found under benchmarks/results"
    checked = 0
    for path in paths:
        rec = records.read_json(path)
        if isinstance(rec, dict) and "kind" not in rec and {"machine_info", "benchmarks"} <= set(rec):
            # pytest-benchmark's own report (benchmarks/, `--benchmark-json`), which its name
            # matches; benchmarks/results/README.md lists them. Not a record of ours.
            continue
        records.validate_record(rec)     # any other file the pattern matches is one
        checked += 1
    assert checked >= 1


def test_the_tracked_tree_fits_the_gpu_machine_copy():
    """The device tool copies the working tree to the H200 only while it is under 64 MiB
    (tracked files, plus untracked ones and what a call carries). Stay under 48 MiB of tracked
    files so that a session's records and a carried build still fit; when this fails, gzip
    superseded records (benchmarks/results/README.md)."""
    import shutil
    import subprocess
    if shutil.which("git") is None or not (records.REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=records.REPO_ROOT, check=True,
                         capture_output=True).stdout
    total = 0
    for name in filter(None, out.decode().split("\0")):
        path = records.REPO_ROOT / name
        if path.is_file():
            total += path.stat().st_size
    assert total < 48 * 2**20, f"tracked files hold {total / 2**20:.1f} MiB"


def test_write_json_converts_numpy_scalars(tmp_path):
    np = pytest.importorskip("numpy")
    path = records.write_json(tmp_path / "x.json", {"a": np.float32(1.5), "b": np.arange(3)})
    assert json.loads(path.read_text()) == {"a": 1.5, "b": [0, 1, 2]}


def test_environment_has_the_common_head():
    env = records.environment()
    assert records._is_date(env["date"])
    assert isinstance(env["git_commit"], str) and env["git_commit"]
    assert env["versions"]["python"]
    if env["device"] is None:
        assert env["gpu_unavailable"]
    else:
        assert env["device"]["sms"] > 0


def test_git_commit_prefers_the_environment(monkeypatch):
    monkeypatch.setenv("MARLIN_GIT_COMMIT", "0123abcd")
    assert records.git_commit() == "0123abcd"


def test_git_dirty_is_unknown_for_a_commit_other_than_head(monkeypatch):
    from marlin_cupy import records
    monkeypatch.setattr(records, "_git", lambda *a: "abc" if a[0] == "rev-parse" else " M x")
    monkeypatch.setenv("MARLIN_GIT_COMMIT", "def")
    assert records.git_dirty() is None       # a copied tree's .git says nothing about "def"
    monkeypatch.setenv("MARLIN_GIT_COMMIT", "abc")
    assert records.git_dirty() is True
    monkeypatch.delenv("MARLIN_GIT_COMMIT")
    assert records.git_dirty() is True


def test_environment_says_where_the_commit_came_from(monkeypatch):
    from marlin_cupy import records
    monkeypatch.setenv("MARLIN_GIT_COMMIT", "abc1234")
    env = records.environment()
    assert env["git_commit"] == "abc1234"
    assert env["git_commit_from"] == "MARLIN_GIT_COMMIT"


def test_environment_warns_on_a_dirty_checkout_without_the_variable(monkeypatch):
    import pytest
    from marlin_cupy import records
    monkeypatch.delenv("MARLIN_GIT_COMMIT", raising=False)
    monkeypatch.setattr(records, "git_commit", lambda: "0123456789abcdef")
    monkeypatch.setattr(records, "git_dirty", lambda: True)
    with pytest.warns(UserWarning, match="MARLIN_GIT_COMMIT"):
        env = records.environment()
    assert env["git_commit_from"] == "git rev-parse HEAD"
    monkeypatch.setattr(records, "git_dirty", lambda: False)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        records.environment()


def test_environment_names_experimental_kernel_builds(monkeypatch):
    monkeypatch.delenv("MARLIN_CUPY_DEFINES", raising=False)
    assert "kernel_defines" not in records.environment()
    monkeypatch.setenv("MARLIN_CUPY_DEFINES", "MARLIN_DESC_ADD=1, MARLIN_PAR_COOP=0")
    assert records.environment()["kernel_defines"] == {"MARLIN_DESC_ADD": 1, "MARLIN_PAR_COOP": 0}


def _sweep(date, **extra):
    rec = bench_record()
    from marlin_cupy.bench.providers import PROVIDER_NAMES
    from marlin_cupy.bench.shapes import DEFAULT_BATCHES, SHAPE_SETS
    rec.update(date=date, sets={s: [[4096, 4096]] for s in SHAPE_SETS},
               batches=list(DEFAULT_BATCHES),
               providers={n: {"provider": n, "available": n != "torch-int4"} for n in PROVIDER_NAMES},
               method={"chain_len": 0}, aborted=None)
    rec.update(extra)
    return rec


def test_newest_sweep_searches_every_depth_and_compares_dates(tmp_path):
    import gzip
    older = records.write_json(tmp_path / "z_late_name" / "a_bench.json",
                               _sweep("2026-12-01T10:00:00+00:00"))
    newer = records.write_json(tmp_path / "a_early_name" / "call7" / "bench" / "b_bench.json",
                               _sweep("2026-12-03T09:00:00Z"))
    packed = tmp_path / "x" / "c_bench.json.gz"
    packed.parent.mkdir()
    packed.write_bytes(gzip.compress(json.dumps(_sweep("2026-12-02T23:59:00+00:00")).encode()))
    path, rec = records.newest_sweep(tmp_path)
    assert path == newer and rec["date"].startswith("2026-12-03")
    newer.unlink()
    assert records.newest_sweep(tmp_path)[0] == packed        # gzipped ones count, by date
    packed.unlink()
    assert records.newest_sweep(tmp_path)[0] == older


@pytest.mark.parametrize("extra", [
    {"kernel_defines": {"MARLIN_PROBE": 1}},                  # an experimental build
    {"aborted": "budget"},
    {"method": {"chain_len": 16}},                            # chains, another method
    {"sets": {"llama2-70b": [[8192, 8192]]}},                 # not every set
    {"batches": [1, 8, 16, 32, 64, 128]},                     # not every batch size
    {"providers": {"marlin": {"provider": "marlin", "available": True},
                   "cublas-fp16": {"provider": "cublas-fp16", "available": True}}},
    {"kind": "device_check"},
    {"date": "not a date"},
])
def test_newest_sweep_skips_what_is_not_a_full_sweep_of_the_shipped_build(tmp_path, extra):
    kept = records.write_json(tmp_path / "old_bench.json", _sweep("2026-11-01T00:00:00+00:00"))
    new = _sweep("2026-12-01T00:00:00+00:00")
    new.update(extra)
    records.write_json(tmp_path / "new_bench.json", new, validate=False)
    assert records.newest_sweep(tmp_path)[0] == kept


def test_newest_sweep_filters_by_device_and_says_when_there_is_none(tmp_path):
    assert records.newest_sweep(tmp_path) is None
    records.write_json(tmp_path / "a_bench.json", _sweep("2026-12-01T00:00:00+00:00"))
    assert records.newest_sweep(tmp_path, device="h200") is not None
    assert records.newest_sweep(tmp_path, device="A100") is None


def test_the_readme_names_the_newest_committed_sweep():
    """README.md's "Latest H200 results" points at the newest full H200 sweep committed (the
    notebook reads it through ``newest_sweep`` too): a new sweep needs the README updated."""
    if not RESULTS.is_dir():
        pytest.skip("no benchmarks/results in this tree (an installed package)")
    found = records.newest_sweep(RESULTS, device="H200")
    assert found is not None
    folder = found[0].parent.relative_to(records.REPO_ROOT).as_posix()
    readme = (records.REPO_ROOT / "README.md").read_text()
    section = readme.split("## Latest H200 results", 1)[1].split("\n## ", 1)[0]
    assert f"`{folder}/`" in section, f"README's latest results do not name {folder}/"
    assert found[1]["git_commit"][:7] in section
