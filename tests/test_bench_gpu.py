"""The benchmark harness on a GPU: a tiny sweep end to end, every provider's product against the
reference, the gate rejecting a wrong provider, and the timer against a known GPU time."""
from __future__ import annotations

import numpy as np
import pytest

import marlin_cupy as mc
from marlin_cupy import QuantizedWeight, baselines, records
from marlin_cupy.bench import harness, providers, report, shapes
from marlin_cupy.bench.sweep import SweepOptions, run_sweep
from marlin_cupy.bench.workload import QuantizedLayer

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

LAYER = shapes.Layer("custom", 0, 2048, 1024)
TINY = SweepOptions(batches=(1, 16), budget_ms=2.0, min_reps=3, max_reps=20, warmup=2,
                    cooldown_s=0.0, copy_bandwidth_bytes=1 << 26, progress=False)


def _torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _magnitudes(out, ref) -> str:
    diff = cp.abs(out.astype(cp.float32) - ref)
    return (f"max|diff|={float(diff.max()):.3g} mean|diff|={float(diff.mean()):.3g} "
            f"max|ref|={float(cp.abs(ref).max()):.3g} mean|ref|={float(cp.abs(ref).mean()):.3g}")


def _assert_runs_within_bound(k: int, n: int, m: int, seed: int, config=None):
    """A random g128 layer run at M rows with ``config`` (None: the default dispatch) matches
    the float32 product of the dequantized weights (the tuner tests' entries)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, n)).astype(np.float32) * 0.02
    qw = mc.quantize(w, bits=4, group_size=128)
    x = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
    y = cp.full((m, n), np.nan, dtype=cp.float16)                     # poison
    mc.matmul(x, mc.pack(qw).to_device(), out=y, config=config)
    w_deq = qw.dequantize()
    ref = cp.asarray(cp.asnumpy(x).astype(np.float64) @ w_deq.astype(np.float64))
    # DESIGN.md s.6's rule: at most twice cuBLAS FP16's error on the same weights, plus 1e-4.
    cublas = cp.matmul(x, cp.asarray(w_deq.astype(np.float16))).astype(cp.float64)
    err = float(cp.linalg.norm(y.astype(cp.float64) - ref) / cp.linalg.norm(ref))
    err_cublas = float(cp.linalg.norm(cublas - ref) / cp.linalg.norm(ref))
    assert bool(cp.isfinite(y).all()) and err <= 2 * err_cublas + 1e-4, (
        err, err_cublas, _magnitudes(y, ref.astype(cp.float32)))


def _two_config_table(device_name: str, entry: str, other: str) -> dict:
    """A tuned table of one layer (4096x4096, M <= 8) measured at M = 1 and 8 on two configs,
    ``entry`` the faster, its entry."""
    return {"kind": "tuned_table", "device_name": device_name, "git_commit": "x",
            "entries": [{"n": 4096, "k": 4096, "group_size": 128, "m_bucket": 8, "m": 8,
                         "config": entry, "median_us": 10.0}],
            "measurements": [{"n": 4096, "k": 4096, "m": m, "config": c, "median_us": t}
                             for m in (1, 8) for c, t in ((entry, 10.0), (other, 12.0))]}


# ---------------------------------------------------------------------------------------------
# A tiny sweep, end to end
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_record():
    return run_sweep([LAYER], providers.make_providers(providers.PROVIDER_NAMES), TINY)


def test_tiny_sweep_writes_a_valid_record(tiny_record, tmp_path):
    rec = tiny_record
    records.validate_record(rec)
    assert rec["failed"] == [], rec["failed"]
    assert rec["aborted"] is None
    assert rec["copy_bandwidth_GBps"] > 100
    path = records.write_json(tmp_path / "tiny_bench.json", rec)
    written = report.write_report(report.load(path), path)
    assert all(p.exists() and p.stat().st_size > 0 for p in written)


def test_every_available_provider_has_a_row_or_a_reason(tiny_record):
    rec = tiny_record
    for label, info in rec["providers"].items():
        for m in TINY.batches:
            rows = [r for r in rec["rows"] if r["label"] == label and r["m"] == m]
            skips = [s for s in rec["skipped"] if s["label"] == label and s["m"] == m]
            assert len(rows) + len(skips) == 1, (label, m, rows, skips)
            if not info["available"]:
                assert skips and skips[0]["reason"] == info["reason"]
    # The providers that need nothing beyond CuPy always run.
    for label in ("marlin", "cublas-fp16", "naive-dequant-gemm", "naive-fused"):
        assert {r["m"] for r in rec["rows"] if r["label"] == label} == set(TINY.batches), label


def test_rows_carry_consistent_statistics(tiny_record):
    l2 = tiny_record["device"]["l2_bytes"]
    for r in tiny_record["rows"]:
        assert 0 < r["p20_us"] <= r["median_us"] <= r["p80_us"], r
        assert TINY.min_reps <= r["reps"] <= TINY.max_reps
        assert r["reuse_bytes"] >= TINY.l2_factor * l2          # weights never L2-resident
        assert r["error"] <= r["tolerance"]
        assert r["tflops"] > 0 and r["gbps"] > 0 and r["pct_copy_bw"] > 0
        if r["provider"] == "marlin":
            assert r["config"] and r["registers"] and r["spill_bytes"] == 0
        if r["provider"] in ("cublas-fp16", "torch-fp16", "marlin"):
            assert r["speedup"] is not None and r["baseline"] in ("cublas-fp16", "torch-fp16")


def test_summary_sums_the_one_layer(tiny_record):
    rows = {(r["label"], r["m"]): r for r in tiny_record["rows"]}
    for e in tiny_record["summary"]:
        row = rows[(e["label"], e["m"])]
        assert e["time_us"] == pytest.approx(row["median_us"])
        if e["summed_speedup"] is not None:
            assert e["summed_speedup"] == pytest.approx(row["speedup"])


# ---------------------------------------------------------------------------------------------
# Every provider computes x @ W
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("group_size", [128, -1])
def test_every_provider_matches_the_reference(group_size):
    torch = _torch_or_none()
    layer = QuantizedLayer(1536, 768, group_size, seed=11)
    x = cp.random.RandomState(12).standard_normal((33, 1536), dtype=cp.float32).astype(cp.float16)
    ref = layer.reference(x)
    # The reference itself, against float64 on the host.
    w64 = layer.dequantized(dtype=cp.float32).get().astype(np.float64)
    ref64 = x.get().astype(np.float64) @ w64
    assert harness.relative_error(ref.get(), ref64.astype(np.float32)) < 1e-5
    checked = []
    with harness.bench_stream(torch) as stream:
        for p in providers.make_providers(providers.PROVIDER_NAMES):
            if p.unavailable_reason() is not None:
                continue
            try:
                p.prepare(layer, copies=2)
            except providers.Skip:
                continue
            for m in (1, 7, 33):
                bound = p.bind(x[:m])
                for i in (0, 1):                       # both rotation copies hold the same weights
                    bound.poison()
                    bound.call(i)
                    stream.synchronize()
                    out = bound.output()
                    err = harness.relative_error(out, ref[:m])
                    assert err <= p.tolerance, f"{p.label} m={m} copy {i}: error {err:.3g}; " + _magnitudes(out, ref[:m])
            p.release()
            checked.append(p.label)
    assert {"marlin", "cublas-fp16", "naive-dequant-gemm", "naive-fused"} <= set(checked)


@pytest.mark.parametrize("group_size", [32, 64, 128, -1])
@pytest.mark.parametrize("m", [1, 5, 17, 40])
def test_naive_kernels_match_float64(group_size, m):
    rng = np.random.default_rng(m * 100 + group_size)
    k, n = 512, 200                                   # N not a multiple of the block: column guard
    qw = mc.quantize(rng.standard_normal((k, n)), bits=4, group_size=group_size, sym=True)
    x = rng.standard_normal((m, k)).astype(np.float16)
    ref = x.astype(np.float64) @ qw.dequantize().astype(np.float64)                 # [M, N]
    qweight, scales = (cp.asarray(a) for a in baselines.from_quantized(qw))
    w = baselines.dequantize(qweight, scales, group_size)
    assert np.array_equal(w.get().view(np.uint16), qw.dequantize().astype(np.float16).view(np.uint16))
    xd = cp.asarray(x)
    for name, out in (("fused", baselines.fused_matmul(xd, qweight, scales, group_size)),
                      ("dequant+gemm", baselines.dequant_matmul(xd, qweight, scales, group_size))):
        err = harness.relative_error(out.get(), ref.astype(np.float32))
        assert err < 1e-3, f"{name}: {err:.3g}"


def test_workload_marlin_weight_is_pack_of_the_whole_matrix():
    layer = QuantizedLayer(512, 1024, 128, seed=3)
    mw = layer.marlin()
    assert not layer.packed_whole
    whole = mc.pack(QuantizedWeight(np.tile(layer.codes_host, (1, 1024 // layer.period)),
                                    layer.scales.get(), None, None, 4, 128))
    assert np.array_equal(mw.qweight.get(), whole.qweight)
    assert np.array_equal(mw.scales.get().view(np.uint16), whole.scales.view(np.uint16))


# ---------------------------------------------------------------------------------------------
# The gate: a fast wrong kernel never gets a row
# ---------------------------------------------------------------------------------------------

def _scaled(base):
    """A provider that returns ``base``'s product times 1.01: a 1% error, fast and wrong."""
    class Scaled(base):
        @property
        def label(self):
            return f"{self.name} x1.01"

        def bind(self, x):
            bound = super().bind(x)
            inner = bound.call

            def call(i):
                inner(i)
                bound.output()[...] *= 1.01
            bound.call = call
            return bound
    return Scaled()


def test_a_wrong_provider_is_rejected_and_produces_no_row():
    wrong = [_scaled(providers.CublasFP16), _scaled(providers.NaiveDequantGemm)]
    rec = run_sweep([LAYER], [providers.CublasFP16(), *wrong], TINY)
    labels = {p.label for p in wrong}
    assert not [r for r in rec["rows"] if r["label"] in labels]
    assert not [e for e in rec["summary"] if e["label"] in labels]
    failed = {(f["label"], f["m"]): f for f in rec["failed"]}
    for label in labels:
        for m in TINY.batches:
            f = failed[(label, m)]
            assert f["reason"].startswith("gate: relative error")
            assert f["rel_error"] == pytest.approx(0.01, rel=0.1)
    # The honest baseline is still measured, and is its own baseline.
    assert {r["m"] for r in rec["rows"] if r["label"] == "cublas-fp16"} == set(TINY.batches)
    assert all(r["speedup"] == 1.0 for r in rec["rows"])


# ---------------------------------------------------------------------------------------------
# The timer
# ---------------------------------------------------------------------------------------------

def test_timer_reads_a_known_gpu_time():
    with harness.bench_stream() as stream:
        timer = harness.Timer(stream, budget_ms=10.0, min_reps=5, max_reps=40, warmup=2)
        result = timer.measure(lambda i: timer.spin(200.0), copies=3)
    assert 199.0 <= result.stats.median_us <= 215.0, result
    assert not result.starved, result


def test_timer_excludes_host_launch_overhead():
    """A ~5 us kernel timed back to back: host launch cost (tens of us in Python) stays out."""
    a = cp.ones(1 << 16, dtype=cp.float32)
    with harness.bench_stream() as stream:
        timer = harness.Timer(stream, budget_ms=5.0, min_reps=50, max_reps=100, warmup=3)
        result = timer.measure(lambda i: timer.spin(5.0), copies=1)
    assert result.stats.median_us < 12.0, result
    assert not result.starved, result
    del a


@pytest.mark.parametrize("k, n", [(8192, 8192), (1536, 768)])
def test_marlin_row_names_the_config_that_ran(k, n):
    """The record's config is the one matmul launches (tuned table or heuristic), not a guess."""
    from marlin_cupy import ops
    layer = QuantizedLayer(k, n, 128, seed=5)
    p = providers.Marlin()
    p.prepare(layer, copies=1)
    for m in (1, 16, 48, 200):
        assert p.describe(m)["config"] == ops.plan(m, n, k, 128).config.name


def test_random_weight_rotation_clears_the_l2():
    """The tuner's and probes' weights: distinct device buffers, same contents, enough of
    them that a round robin reads at least L2_FACTOR L2s between two reads of a byte."""
    dev = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    l2 = int(dev["l2CacheSize"])
    k, n = 1024, 512
    mws = harness.random_weight_rotation(k, n, 128, np.random.default_rng(0))
    assert len(mws) == harness.rotation_copies(k * n // 2, l2, 8 << 30)
    assert len(mws) * k * n // 2 >= harness.L2_FACTOR * l2
    assert len({int(mw.qweight.data.ptr) for mw in mws}) == len(mws)
    assert all(cp.array_equal(mw.qweight, mws[0].qweight) for mw in mws[1:])


def test_random_weight_rotation_zero_points_keep_the_symmetric_draws():
    """``zero_points=True`` adds zero points (for ab_probe.py --zp) and leaves the codes and
    scales that the same seed gives without them."""
    k, n = 256, 128
    sym = harness.random_weight_rotation(k, n, 128, np.random.default_rng(3), cap_bytes=k * n)
    asym = harness.random_weight_rotation(k, n, 128, np.random.default_rng(3), cap_bytes=k * n,
                                          zero_points=True)
    assert sym[0].zeros is None and asym[0].zeros is not None
    assert cp.array_equal(sym[0].qweight, asym[0].qweight)
    assert cp.array_equal(sym[0].scales, asym[0].scales)


def test_layer_cases_one_rotation_per_layer_and_activations_per_m():
    rng = np.random.default_rng(0)
    cases = list(harness.layer_cases([(256, 128), (512, 256)], (1, 5), 128, rng))
    assert [(k, n, m) for k, n, m, _, _ in cases] == [
        (256, 128, 1), (256, 128, 5), (512, 256, 1), (512, 256, 5)]
    for k, n, m, x, mws in cases:
        assert x.shape == (m, k) and x.dtype == cp.float16
        assert mws[0].qweight.shape == (k // 16, n * 2)
    assert cases[0][4] is cases[1][4] and cases[2][4] is cases[3][4]


def test_probe_configs_start_with_the_dispatch_and_fit_the_layer():
    from marlin_cupy import ops, tune
    name = ops.device_facts()["name"]
    for m, n, k in ((1, 4096, 4096), (64, 12288, 4096), (40, 5120, 5120)):
        cfgs = tune.probe_configs(name, m, n, k, 128, 5)
        assert cfgs[0] == ops.plan(m, n, k, 128).config
        assert len(cfgs) == len(set(cfgs))
        assert all(n % c.tile_n == 0 and k % c.tile_k == 0 for c in cfgs)
        assert all(c.max_m is None or m <= c.max_m for c in cfgs)


def test_the_tuner_measures_grid_caps_and_its_entry_runs(monkeypatch):
    """One candidate on a layer of short columns whose whole columns fill half the grid: the
    tuner times it on the full grid and capped at one CTA per column (``_c1``; ``_c2`` would
    be the full grid), and the entry it keeps runs within the bound."""
    from marlin_cupy import ops, tune
    from marlin_cupy.config import KernelConfig
    base = KernelConfig.from_name("t256_m1_n8_k8_s4_g8_fp32par_sw1")
    sms = ops.device_facts()["sms"]
    k, n = 896, 128 * (sms // 2)
    monkeypatch.setattr(tune, "candidates", lambda *args, **kwargs: [base])
    table = tune.tune([(k, n)], 128, buckets=(8,), progress=False)
    assert {(r["config"], r["m"]) for r in table["measurements"]} == {
        (c, m) for c in (base.name, base.name + "_c1") for m in (1, 8)}
    assert all(r["median_us"] > 0 for r in table["measurements"])
    (entry,) = table["entries"]
    cfg = KernelConfig.from_name(entry["config"])
    assert cfg.compiled == base
    _assert_runs_within_bound(k, n, 8, 5, cfg)
    assert ops.plan(8, n, k, 128, config=cfg).grid == (sms // 2 if cfg.column_ctas else sms)


def test_the_tuner_with_a_prior_tunes_only_new_layers_and_merges(tmp_path):
    """``--merge TABLE --prior``: a layer TABLE holds keeps its entry; a new one is measured on
    the candidates TABLE's measurements rank (and the heuristic's), and its entry runs."""
    import json
    from marlin_cupy import config, ops, tune
    from marlin_cupy.config import KernelConfig
    facts = ops.device_facts()
    a, b = "t256_m1_n8_k8_s6_g8_fp32par_sw1_eb", "t256_m1_n8_k8_s4_g8_fp32par_sw1"
    base = _two_config_table(facts["name"], a, b)
    src, out = tmp_path / "base.json", tmp_path / "out.json"
    src.write_text(json.dumps(base))
    assert tune.main(["--sets", "", "--shapes", "4096,4096;896,1152", "--buckets", "8",
                      "--merge", str(src), "--prior", "1", "--prior-top", "1",
                      "--out", str(out), "--no-progress"]) == 0
    table = json.loads(out.read_text())
    old = [e for e in table["entries"] if (e["k"], e["n"]) == (4096, 4096)]
    assert old == base["entries"]
    (entry,) = [e for e in table["entries"] if (e["k"], e["n"]) == (896, 1152)]
    measured = {r["config"] for r in table["measurements"] if (r["k"], r["n"]) == (896, 1152)}
    heur = {c.name for c in config.sm90_candidates(8, 1152, 896, 128)}
    assert {a, b} & measured and heur <= measured and entry["config"] in measured
    assert table["merged"]["prior"] == {"per_class": 1, "top": 1}
    _assert_runs_within_bound(896, 1152, 8, 6, KernelConfig.from_name(entry["config"]))


def test_the_tuner_with_a_prior_and_no_table_tunes_into_the_user_cache(tmp_path, monkeypatch):
    """``--prior`` without ``--merge`` (a user's own model): the candidates are ranked by this
    device's tables (the shipped one and the user cache, here seeded with one layer so that any
    GPU has a prior), the new layer joins the cache, the cache's own entry stays, and the
    default dispatch then picks the new entry and computes with it."""
    import json
    from marlin_cupy import config, ops, tune
    from marlin_cupy.config import KernelConfig
    name = ops.device_facts()["name"]
    cache = tmp_path / "cache.json"
    monkeypatch.setattr(tune, "cache_path", lambda device_name, tag=None: cache)
    seeded = _two_config_table(name, "t256_m1_n8_k8_s4_g8_fp32par_sw1",
                               "t256_m1_n8_k8_s6_g8_fp32par_sw1_eb")
    cache.write_text(json.dumps(seeded))
    k, n = 1280, 1792                       # a layer no shipped table holds
    assert (k, n) not in {(r["k"], r["n"]) for r in tune.device_measurements(name, 128)[
        "measurements"]}
    try:
        assert tune.main(["--sets", "", "--shapes", f"{k},{n}", "--buckets", "8",
                          "--prior", "1", "--prior-top", "1", "--no-progress"]) == 0
        table = json.loads(cache.read_text())
        assert [e for e in table["entries"] if (e["k"], e["n"]) == (4096, 4096)] == \
            seeded["entries"]
        (entry,) = [e for e in table["entries"] if (e["k"], e["n"]) == (k, n)]
        rows = [r for r in table["measurements"] if (r["k"], r["n"]) == (k, n)]
        measured = {r["config"] for r in rows}
        heur = {c.name for c in config.sm90_candidates(8, n, k, 128)} \
            if ops.device_facts()["cc"] == "90" else set()
        assert heur <= measured and entry["config"] in measured
        assert {r["m"] for r in rows} == {1, 8}
        assert table["merged"]["prior"] == {"per_class": 1, "top": 1}
        cfg = KernelConfig.from_name(entry["config"])
        assert ops.plan(8, n, k, 128).config == cfg      # the dispatch reads the cache
        _assert_runs_within_bound(k, n, 5, 7)             # the default dispatch, M = 5
    finally:
        tune.load_table.cache_clear()
        ops._plan.cache_clear()


# ---------------------------------------------------------------------------------------------
# Chains (--chain-len) and marlin-pdl
# ---------------------------------------------------------------------------------------------

def test_chain_sweep_times_marlin_pdl_and_skips_it_per_call():
    from dataclasses import replace
    from marlin_cupy.ops import device_facts
    names = ("marlin", "marlin-pdl", "cublas-fp16")
    per_call = run_sweep([LAYER], providers.make_providers(names), TINY)
    info = per_call["providers"]["marlin-pdl"]
    hopper = int(device_facts()["cc"]) >= 90
    assert not info["available"]
    assert ("chain" if hopper else "compute capability 9.0") in info["reason"], info
    rec = run_sweep([LAYER], providers.make_providers(names), replace(TINY, chain_len=4))
    records.validate_record(rec)
    assert rec["failed"] == [] and rec["method"]["chain_len"] == 4
    assert "chains of 4 calls" in rec["method"]["timing"]
    rows = {(r["label"], r["m"]): r for r in rec["rows"]}
    for m in TINY.batches:
        assert rows[("marlin", m)]["max_gap_us"] is None
        assert rows[("cublas-fp16", m)]["median_us"] > 0
        if hopper:
            assert rows[("marlin-pdl", m)]["median_us"] > 0
        else:
            assert ("marlin-pdl", m) not in rows


def test_chain_timer_divides_by_the_chain():
    """A chain of spin kernels of known length: the time per call is that length."""
    with harness.bench_stream() as stream:
        timer = harness.Timer(stream, budget_ms=2.0, min_reps=3, max_reps=10, warmup=1,
                              chain_len=8)
        meas = timer.measure(lambda i: timer.spin(100.0), 1)
    assert meas.max_gap_us is None
    assert 99.0 <= meas.stats.median_us <= 110.0, meas.stats


def test_random_weight_rotation_takes_a_given_number_of_copies():
    rng = np.random.default_rng(7)
    mws = harness.random_weight_rotation(256, 512, 128, rng, copies=3)
    assert len(mws) == 3
    assert all(cp.array_equal(m.qweight, mws[0].qweight) for m in mws[1:])
    assert len({m.qweight.data.ptr for m in mws}) == 3
