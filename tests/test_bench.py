"""The benchmark harness without a GPU: statistics, accounting, rotation, summaries, the record's
schema, the report from a saved JSON, the command line, and the no-GPU exit."""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import marlin_cupy as mc
from marlin_cupy import QuantizedWeight, records
from marlin_cupy.baselines import pack_gptq_codes, unpack_gptq_codes
from marlin_cupy.bench import __main__ as cli
from marlin_cupy.bench import harness, metrics, providers, report, shapes, workload
from marlin_cupy.layout import is_per_channel

REPO = Path(__file__).resolve().parent.parent
H200_L2 = 62_914_560        # 60 MB, as cudaDeviceProp.l2CacheSize reports it on the H200


# ---------------------------------------------------------------------------------------------
# Statistics, rotation, repetitions
# ---------------------------------------------------------------------------------------------

def test_summarize_percentiles_of_known_data():
    samples = np.random.default_rng(0).permutation(np.arange(1, 102, dtype=float))  # 1..101 shuffled
    s = harness.summarize(samples)
    assert (s.median_us, s.p20_us, s.p80_us, s.reps) == (51.0, 21.0, 81.0, 101)


def test_summarize_interpolates_between_order_statistics():
    s = harness.summarize([10.0, 20.0, 30.0, 40.0])
    assert s.median_us == pytest.approx(25.0)
    assert s.p20_us == pytest.approx(16.0)      # 10 + 0.6 * 10
    assert s.p80_us == pytest.approx(34.0)      # 30 + 0.4 * 10


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [float("inf")]])
def test_summarize_refuses_empty_or_non_finite(bad):
    with pytest.raises(ValueError, match="finite sample"):
        harness.summarize(bad)


@pytest.mark.parametrize("weight_bytes, expected", [
    # llama2-7b 4096x4096 int4 g128: 8.65 MB -> 15 copies read 130 MB >= 2 x 60 MB between reuses
    (metrics.weight_bytes("int4", 4096, 4096, 128), 15),
    # llama2-70b 8192x57344 fp16: one copy already spans 2 x L2
    (metrics.weight_bytes("fp16", 8192, 57344, 128), 1),
    (2 * H200_L2, 1),
    (2 * H200_L2 - 1, 2),
])
def test_rotation_copies_clear_twice_the_l2(weight_bytes, expected):
    n = harness.rotation_copies(weight_bytes, H200_L2, cap_bytes=40 * 10 ** 9)
    assert n == expected
    assert harness.reuse_bytes(n, weight_bytes) >= 2 * H200_L2              # clears the L2 ...
    assert n == 1 or harness.reuse_bytes(n - 1, weight_bytes) < 2 * H200_L2  # ... with no copy to spare


@pytest.mark.parametrize("weight_bytes, cap, expected", [
    (10 ** 6, 10 ** 7, 10),      # 1 MB copies would need 126: at most 10 MB of them
    (10 ** 10, 10 ** 9, 1),      # one copy larger than the cap is still made
])
def test_rotation_copies_respect_the_memory_cap(weight_bytes, cap, expected):
    assert harness.rotation_copies(weight_bytes, H200_L2, cap) == expected


def test_rotation_copies_refuses_empty_weights():
    with pytest.raises(ValueError, match="weight_bytes must be positive"):
        harness.rotation_copies(0, H200_L2, 10 ** 9)


@pytest.mark.parametrize("estimate_us, expected", [
    (100.0, 200),      # 500 would fit the 50 ms budget: capped at max_reps
    (1000.0, 50),      # 50 ms / 1 ms
    (20000.0, 5),      # 2.5 fit: raised to min_reps
    (0.0, 200),        # no estimate: max_reps
])
def test_reps_for_budget(estimate_us, expected):
    assert harness.reps_for_budget(estimate_us, 50.0, 5, 200) == expected


def test_reps_for_budget_refuses_inverted_bounds():
    with pytest.raises(ValueError, match="min_reps <= max_reps"):
        harness.reps_for_budget(10.0, 50.0, 10, 5)


# ---------------------------------------------------------------------------------------------
# The correctness gate's error
# ---------------------------------------------------------------------------------------------

def test_relative_error_and_gate():
    ref = np.random.default_rng(1).standard_normal((16, 256)).astype(np.float32)
    assert harness.relative_error(ref.astype(np.float16), ref) < 1e-3
    scaled = harness.relative_error(ref * 1.01, ref)
    assert scaled == pytest.approx(0.01, rel=1e-4)
    assert not harness.gate_passes(scaled, harness.FP16_TOLERANCE)   # a 1% error never passes fp16
    poisoned = ref.copy()
    poisoned[3, 7] = np.nan
    assert harness.relative_error(poisoned, ref) == math.inf
    assert not harness.gate_passes(math.inf, harness.BF16_TOLERANCE)
    assert harness.relative_error(ref, np.zeros_like(ref)) == math.inf


# ---------------------------------------------------------------------------------------------
# Bytes and FLOPs
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("provider", sorted(metrics.WEIGHT_FORMAT))
def test_min_bytes_per_provider(provider):
    m, k, n, gs = 16, 4096, 11008, 128
    a_and_c = 2 * m * k + 2 * m * n
    expected = {"int4": k * n // 2 + (k // gs) * n * 2, "fp16": 2 * k * n}[metrics.WEIGHT_FORMAT[provider]]
    assert metrics.min_bytes(metrics.provider_format(provider), m, k, n, gs) == expected + a_and_c


def test_min_bytes_per_channel_scales():
    assert metrics.weight_bytes("int4", 4096, 1024, -1) == 4096 * 1024 // 2 + 1024 * 2


def test_flops_and_derived_rates():
    row = {"provider": "marlin", "m": 16, "k": 8192, "n": 8192, "median_us": 20.0}
    metrics.derive(row, 128, copy_bandwidth_GBps=4000.0)
    nbytes = 8192 * 8192 // 2 + 64 * 8192 * 2 + 2 * 16 * 8192 * 2
    assert row["min_bytes"] == nbytes
    assert row["tflops"] == pytest.approx(2 * 16 * 8192 * 8192 / 20e-6 / 1e12)
    assert row["gbps"] == pytest.approx(nbytes / 20e-6 / 1e9)
    assert row["pct_copy_bw"] == pytest.approx(100 * row["gbps"] / 4000.0)


def test_ideal_speedup():
    assert metrics.ideal_speedup(128) == pytest.approx(16 / 4.125)      # 3.879
    assert metrics.ideal_speedup(32) == pytest.approx(16 / 4.5)
    assert metrics.ideal_speedup(-1) == 4.0
    assert metrics.ideal_speedup(-1, k=4096) == pytest.approx(16 / (4 + 16 / 4096))


def test_unknown_provider_is_named():
    with pytest.raises(ValueError, match="unknown provider 'cutlass'"):
        metrics.provider_format("cutlass")


# ---------------------------------------------------------------------------------------------
# Speedups and per-set sums
# ---------------------------------------------------------------------------------------------

def _row(provider, layer, m, median_us, k=4096, n=4096, label=None, set_name="llama2-7b"):
    row = {"set": set_name, "layer": layer, "provider": provider, "label": label or provider,
           "m": m, "k": k, "n": n, "median_us": median_us, "p20_us": median_us * 0.98,
           "p80_us": median_us * 1.02, "reps": 50, "config": None}
    return metrics.derive(row, 128, 4000.0)


def test_speedup_is_against_the_fastest_fp16_per_layer():
    rows = [_row("cublas-fp16", 0, 1, 100.0), _row("torch-fp16", 0, 1, 80.0),
            _row("cublas-fp16", 1, 1, 300.0), _row("torch-fp16", 1, 1, 400.0),
            _row("marlin", 0, 1, 30.0), _row("marlin", 1, 1, 90.0),
            _row("marlin", 0, 1, 40.0, label="marlin[t128_x]"), _row("marlin", 1, 1, 100.0, label="marlin[t128_x]")]
    metrics.add_speedups(rows)
    marlin = [r for r in rows if r["label"] == "marlin"]
    assert [r["baseline"] for r in marlin] == ["torch-fp16", "cublas-fp16"]
    assert marlin[0]["speedup"] == pytest.approx(80 / 30)
    assert marlin[1]["speedup"] == pytest.approx(300 / 90)

    summary = {(e["label"], e["m"]): e for e in metrics.summarize_sets(rows, {"llama2-7b": 2}, 4000.0)}
    assert summary[("marlin", 1)]["summed_speedup"] == pytest.approx((80 + 300) / (30 + 90))
    assert summary[("marlin[t128_x]", 1)]["summed_speedup"] == pytest.approx(380 / 140)
    assert summary[("cublas-fp16", 1)]["summed_speedup"] == pytest.approx(380 / 400)
    nbytes = 2 * metrics.min_bytes("int4", 1, 4096, 4096, 128)
    assert summary[("marlin", 1)]["summed_pct_roofline"] == pytest.approx(
        100 * nbytes / 120e-6 / 1e9 / 4000.0)


def test_summary_is_null_for_an_incomplete_set():
    rows = [_row("cublas-fp16", 0, 1, 100.0), _row("cublas-fp16", 1, 1, 100.0), _row("marlin", 0, 1, 30.0)]
    metrics.add_speedups(rows)
    summary = {(e["label"], e["m"]): e for e in metrics.summarize_sets(rows, {"llama2-7b": 2}, 4000.0)}
    assert summary[("marlin", 1)]["summed_speedup"] is None           # layer 1 has no Marlin row
    assert summary[("marlin", 1)]["summed_pct_roofline"] is None
    assert summary[("cublas-fp16", 1)]["summed_speedup"] == pytest.approx(1.0)


def test_no_baseline_no_speedup():
    rows = [_row("marlin", 0, 1, 30.0)]
    metrics.add_speedups(rows)
    assert rows[0]["speedup"] is None and rows[0]["baseline_us"] is None


# ---------------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------------

def test_shape_sets_are_design_s7():
    assert shapes.SHAPE_SETS["llama2-70b"] == ((8192, 10240), (8192, 8192), (8192, 57344), (28672, 8192))
    assert shapes.ideal_shape(132) == (135168, 33792)
    assert shapes.DEFAULT_BATCHES == (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
    layers = shapes.resolve_layers(shapes.DEFAULT_SETS, [(4096, 1024)], 132, 128)
    assert len(layers) == 3 * 4 + 1 + 1
    assert layers[-2] == shapes.Layer("ideal", 0, 135168, 33792)
    assert layers[-1] == shapes.Layer("custom", 0, 4096, 1024)


def test_other_models_sets_are_selectable_not_default():
    """The other models' sets (NOTES.md entry 81): sets for the probe scripts, custom shapes for
    the benchmark (whose records name only DESIGN.md s.8's sets), never run by default, and
    and the shipped H200 table holds every one of their layers at every M bucket (tuned with
    --prior, NOTES.md entry 85; llama3-8b's o is llama2-7b's) but the pairs a re-tune withdrew,
    and serves every M of them from an entry."""
    import json

    from marlin_cupy import records, tune
    assert not set(shapes.OTHER_SETS) & set(shapes.SET_NAMES)
    assert set(shapes.SET_NAMES) | {shapes.CUSTOM} == set(records.SETS)
    with pytest.raises(ValueError, match="unknown shape set"):
        shapes.parse_sets("llama3-8b")
    assert shapes.parse_shapes(" qwen2.5-0.5b ") == shapes.OTHER_SETS["qwen2.5-0.5b"]
    assert shapes.set_shapes("phi3-mini,llama3-8b")[0] == (3072, 9216)
    layers = shapes.resolve_layers((), shapes.parse_shapes("qwen2.5-7b"), 132, 128)
    assert [(l.set, l.k, l.n) for l in layers][:1] == [("custom", 3584, 4608)]
    table = json.loads(tune.shipped_path("NVIDIA H200").read_text())
    tuned = {(e["k"], e["n"], e["m_bucket"]) for e in table["entries"]}
    # pairs a re-tune withdrew (NOTES.md entry 107) are served by the next bucket's entry
    withdrawn = {(w["k"], w["n"], w["m_bucket"]) for w in table["merged"].get("withdrawn", [])}
    from marlin_cupy.config import M_BUCKETS
    assert all((k, n, b) in tuned | withdrawn for v in shapes.OTHER_SETS.values()
               for (k, n) in v for b in M_BUCKETS)
    assert all(tune.lookup_in(tune.entry_map(table), m, n, k, 128) is not None
               for v in shapes.OTHER_SETS.values() for (k, n) in v for m in range(1, 1100, 7))


@pytest.mark.parametrize("text, expected", [
    ("4096,4096;8192,1024", ((4096, 4096), (8192, 1024))),
    (" 4096 , 4096 ; ", ((4096, 4096),)),
])
def test_parse_shapes(text, expected):
    assert shapes.parse_shapes(text) == expected


@pytest.mark.parametrize("text, message", [
    ("4096", "'4096' is not a K,N pair"),
    ("4096,4096,1", "is not a K,N pair"),
    ("4096,abc", "holds a non-integer"),
    ("0,4096", "non-positive"),
    (";", "expected K,N pairs separated by ';'"),
])
def test_parse_shapes_errors_say_what_to_write(text, message):
    with pytest.raises(ValueError, match=message):
        shapes.parse_shapes(text)


@pytest.mark.parametrize("k, gs, message", [
    (4100, 128, "K=4100 is not a multiple of 16"),
    (4160, 128, "K=4160 is not a multiple of group_size=128"),
])
def test_check_shape(k, gs, message):
    with pytest.raises(ValueError, match=message):
        shapes.check_shape(k, 4096, gs)


# ---------------------------------------------------------------------------------------------
# Weights: the periodic Marlin construction and the GPTQ-style words, on the host
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k, n, expected", [
    (4096, 12288, 1024), (4096, 22016, 512), (28672, 8192, 1024), (135168, 33792, 256), (256, 320, 320)])
def test_choose_period(k, n, expected):
    p = workload.choose_period(k, n)
    assert p == expected and n % p == 0


@pytest.mark.parametrize("k, group_size", [(512, 128), (256, 32), (256, -1), (128, 128)])
@pytest.mark.parametrize("period, n", [(256, 1024), (1024, 2048)])
def test_repeated_tile_packs_like_the_whole_matrix(k, group_size, period, n):
    """The benchmark's weights: a packed tile repeated along N, scales moved as pack moves them,
    must equal mc.pack of the whole code matrix bit for bit."""
    rng = np.random.default_rng(k + n)
    g = 1 if group_size == -1 else k // group_size
    tile = rng.integers(0, 16, size=(k, period), dtype=np.uint8)                   # [K, P]
    scales = rng.uniform(0.5, 1.5, size=(g, n)).astype(np.float16)                 # [G, N]
    whole = mc.pack(QuantizedWeight(np.tile(tile, (1, n // period)), scales, None, None, 4, group_size))
    perm = workload.marlin_scale_perm(period, group_size, is_per_channel(group_size, k))
    tile_q = mc.pack(QuantizedWeight(tile, np.ones((g, period), np.float16), None, None, 4, group_size)).qweight
    qweight, moved = workload.repeat_packed(tile_q, scales, perm, period)
    assert np.array_equal(qweight, whole.qweight)
    assert np.array_equal(moved.view(np.uint16), whole.scales.view(np.uint16))


def test_gptq_words_round_trip_and_match_autogptq():
    q = np.random.default_rng(2).integers(0, 16, size=(256, 96), dtype=np.uint8)
    words = pack_gptq_codes(q)
    assert words.dtype == np.int32 and words.shape == (32, 96)
    assert (words[5, 7].view(np.uint32) >> 12) & 0xF == q[8 * 5 + 3, 7]           # nibble i = row 8r+i
    assert np.array_equal(unpack_gptq_codes(words), q)
    qw = QuantizedWeight(q, np.ones((2, 96), np.float16), None, None, 4, 128)
    assert np.array_equal(mc.to_gptq(qw)["qweight"], words)                          # AutoGPTQ layout


def test_gptq_words_refuse_ragged_k():
    with pytest.raises(ValueError, match="K=12 is not a multiple of 8"):
        pack_gptq_codes(np.zeros((12, 8), np.uint8))


# ---------------------------------------------------------------------------------------------
# Providers
# ---------------------------------------------------------------------------------------------

def test_make_providers_orders_and_labels():
    made = providers.make_providers(("marlin", "cublas-fp16"), configs=("t256_a", "t128_b"))
    assert [p.label for p in made] == ["marlin", "marlin[t256_a]", "marlin[t128_b]", "cublas-fp16"]
    # "marlin" is the default dispatch's alone (DESIGN.md s.8): an explicit config has its own
    assert [p.name for p in made] == ["marlin", "marlin-config", "marlin-config", "cublas-fp16"]
    assert all(p.name in records.PROVIDERS and p.weight_format == "int4" and
               p.copies_key == "marlin" for p in made[:3])
    assert providers.make_providers(("naive-fused",), naive_fused_max_m=32)[0].max_m == 32
    with pytest.raises(ValueError, match="unknown provider"):
        providers.make_providers(("cutlass",))


def test_every_provider_has_a_weight_format_and_tolerance():
    for p in providers.make_providers(providers.PROVIDER_NAMES):
        assert p.weight_format in ("int4", "fp16")
        assert p.tolerance == (harness.BF16_TOLERANCE if p.name == "torch-int4" else harness.FP16_TOLERANCE)
        assert p.name in records.PROVIDERS


# ---------------------------------------------------------------------------------------------
# The record, and the report made from it alone
# ---------------------------------------------------------------------------------------------

def synthetic_record() -> dict:
    """A small record shaped like run_sweep's output: one set of two layers, two batch sizes."""
    rows = []
    times = {"cublas-fp16": 100.0, "torch-fp16": 90.0, "marlin": 30.0, "naive-dequant-gemm": 140.0}
    for layer, (k, n) in enumerate(((4096, 4096), (4096, 11008))):
        for m in (1, 16):
            for prov, t in times.items():
                rows.append(_row(prov, layer, m, t * (1 + layer) * (1 if m == 1 else 2), k=k, n=n,
                                 set_name="custom"))
    for r in rows:
        r["config"] = "t256_m1_n16_k4_s4_g8_fp32" if r["provider"] == "marlin" else None
    metrics.add_speedups(rows)
    return {
        "kind": "bench", "date": "2026-11-29T20:00:00+00:00", "git_commit": "0123abc",
        "device": {"name": "NVIDIA H200", "sms": 132, "l2_bytes": H200_L2},
        "versions": {"cupy": "14.2.0", "cuda_runtime": "13.2", "cuda_driver": "13.0", "torch": "2.11.0"},
        "clocks": {"start": {"sm_mhz": 1980, "mem_mhz": 3201}, "end": None},
        "copy_bandwidth_GBps": 4000.0, "group_size": 128, "batches": [1, 16],
        "sets": {"custom": [[4096, 4096], [4096, 11008]]},
        "providers": {p: {"provider": p, "available": True, "reason": None} for p in times},
        "rows": rows,
        "summary": metrics.summarize_sets(rows, {"custom": 2}, 4000.0),
        "failed": [{"set": "custom", "layer": 0, "provider": "naive-fused", "label": "naive-fused",
                    "m": 16, "k": 4096, "n": 4096, "reason": "gate: relative error 0.0101 > tolerance 0.005",
                    "rel_error": 0.0101, "tolerance": 0.005}],
        "skipped": [{"set": "custom", "layer": i, "provider": "torch-int4", "label": "torch-int4",
                     "m": m, "k": 4096, "n": 4096, "reason": "torch is not importable"}
                    for i in (0, 1) for m in (1, 16)],
        "aborted": None,
    }


def test_synthetic_record_meets_the_schema(tmp_path):
    rec = synthetic_record()
    records.validate_record(rec)
    path = records.write_json(tmp_path / "x_bench.json", rec)
    assert json.loads(path.read_text())["rows"][0]["median_us"] == rec["rows"][0]["median_us"]


def test_markdown_from_a_saved_record(tmp_path):
    rec = synthetic_record()
    text = report.markdown(rec)
    assert "# Marlin benchmark on NVIDIA H200 (132 SMs)" in text
    assert "## custom (4096x4096, 4096x11008)" in text
    # m=1 summed times: marlin 30 + 60 = 90 us; best fp16 (torch) 90 + 180 = 270 us -> 3.00x
    header = "| M | cublas-fp16 | torch-fp16 | marlin | naive-dequant-gemm |"
    assert header in text
    assert "| 1 | 300.0 | 270.0 | 90.0 | 420.0 |" in text
    assert "| 1 | 3.00 | 0.64 |" in text                              # marlin x, naive x
    assert "## Failed (no timing row was recorded)" in text and "0.0101" in text
    assert "| torch-int4 | 4 | 1,16 | torch is not importable |" in text


def test_report_command_writes_table_and_plots(tmp_path):
    path = tmp_path / "2026-11-29_nvidia-h200_bench.json"
    path.write_text(json.dumps(synthetic_record()))
    assert report.main([str(path)]) == 0
    md = tmp_path / "2026-11-29_nvidia-h200_bench.md"
    assert md.read_text().startswith("# Marlin benchmark")
    for png in ("_speedup.png", "_roofline.png"):
        data = (tmp_path / f"2026-11-29_nvidia-h200_bench{png}").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_report_reads_a_gzipped_record_and_names_its_outputs_without_the_suffixes(tmp_path):
    import gzip
    path = tmp_path / "old_bench.json.gz"
    path.write_bytes(gzip.compress(json.dumps(synthetic_record()).encode()))
    out = report.write_report(report.load(path), path, plots=False)
    assert [p.name for p in out] == ["old_bench.md"]
    assert "| 1 | 3.00 | 0.64 |" in out[0].read_text()


def test_report_recomputes_a_missing_summary(tmp_path):
    rec = synthetic_record()
    del rec["summary"]
    assert "| 1 | 3.00 | 0.64 |" in report.markdown(rec)


def test_report_refuses_other_records(tmp_path, capsys):
    path = tmp_path / "device_check.json"
    path.write_text(json.dumps({"kind": "device_check"}))
    assert report.main([str(path)]) == 2
    assert "is not a bench record" in capsys.readouterr().err


def test_headline_table_is_computed_from_the_record(tmp_path, capsys):
    text = report.headline_table(synthetic_record())
    assert text.splitlines()[0] == "| M | custom |"
    assert "| 1 | 3.00x (" in text                     # marlin, summed over the set's layers
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(synthetic_record()))
    assert report.main([str(path), "--headline", "1"]) == 0
    out = capsys.readouterr().out
    assert "| 1 | 3.00x (" in out and not list(tmp_path.glob("*.md"))


def test_headline_table_never_prints_an_explicit_configs_rows(tmp_path, capsys):
    """Records before ``marlin-config`` filed ``--config`` rows under provider ``marlin``
    (label ``marlin[NAME]``), and listed them first without ``--providers marlin``: the
    headline is the default dispatch's rows or nothing."""
    rec = synthetic_record()
    explicit = [dict(r, label="marlin[t128_x]", median_us=2 * r["median_us"])
                for r in rec["rows"] if r["label"] == "marlin"]
    rec["rows"] = explicit + rec["rows"]
    rec["providers"] = {"marlin[t128_x]": {"provider": "marlin", "available": True,
                                           "reason": None}, **rec["providers"]}
    rec["summary"] = metrics.summarize_sets(rec["rows"], {"custom": 2}, 4000.0)
    text = report.headline_table(rec)
    assert "| 1 | 3.00x (" in text and "1.50x" not in text
    only_explicit = dict(rec, rows=[r for r in rec["rows"] if r["label"] != "marlin"])
    only_explicit.pop("summary")
    with pytest.raises(ValueError, match="no rows labelled 'marlin'"):
        report.headline_table(only_explicit)
    path = tmp_path / "explicit_bench.json"
    path.write_text(json.dumps(only_explicit))
    assert report.main([str(path), "--headline", "1"]) == 2
    assert "no rows labelled 'marlin'" in capsys.readouterr().err


def test_per_channel_ideal_is_stated_for_the_records_k(tmp_path):
    """Group size -1 (one scale per column): 16 / (4 + 16/K) for the K measured, never the
    group-size formula with -1 put in (16 / (4 + 16/-1))."""
    rec = synthetic_record()
    rec["group_size"] = -1
    text = report.markdown(rec)
    assert "16/-1" not in text
    assert f"16 / (4 + 16/K) with per-channel scales = {16 / (4 + 16 / 4096):.2f}x at K = 4096" \
        in text
    rec["sets"]["custom"].append([11008, 4096])
    assert f"at K = 4096 to {16 / (4 + 16 / 11008):.2f}x at K = 11008" in report.markdown(rec)
    assert "16 / (4 + 16/128) = 3.88x" in report.markdown(synthetic_record())
    report.plot_speedup(rec, tmp_path / "gs-1_speedup.png")      # its label too


def test_markdown_shows_the_clocks_after_warm_up(tmp_path):
    rec = synthetic_record()
    rec["clocks"]["after_warmup"] = {"sm_mhz": 1980, "mem_mhz": 3201, "sm_max_mhz": 1980,
                                     "throttle_reasons": "0x0000000000000000"}
    assert ("after warm-up: SM 1980 MHz (max 1980), memory 3201 MHz, clock event reasons "
            "0x0000000000000000; at end: n/a") in report.markdown(rec)


def test_short_table_names_every_set():
    text = report.short_table(synthetic_record())
    assert "custom" in text and "3.00x" in text


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

def test_cli_defaults_are_the_full_sweep():
    args = cli.parse_args([])
    assert args.sets == shapes.DEFAULT_SETS and args.shapes == ()
    assert args.batches == shapes.DEFAULT_BATCHES and args.group_size == 128
    assert args.providers == providers.PROVIDER_NAMES and args.config == []


def test_cli_custom_shapes_alone_measure_only_them():
    args = cli.parse_args(["--shapes", "4096,4096;8192,1024", "--batches", "1,16,16",
                           "--providers", "marlin,torch-fp16", "--config", "abc", "--group-size", "-1"])
    assert args.sets == () and args.shapes == ((4096, 4096), (8192, 1024))
    assert args.batches == (1, 16) and args.providers == ("marlin", "torch-fp16")
    assert args.config == ["abc"] and args.group_size == -1


@pytest.mark.parametrize("argv, message", [
    (["--shapes", "4096"], "argument --shapes: '4096' is not a K,N pair"),
    (["--shapes", "4096,x"], "holds a non-integer"),
    (["--shapes", "4160,4096"], "K=4160 is not a multiple of group_size=128"),
    (["--batches", "1,0"], "batch size 0 is not positive"),
    (["--sets", "llama3"], "unknown shape set(s) ['llama3']"),
    (["--providers", "cutlass"], "unknown provider(s) ['cutlass']"),
    (["--group-size", "100"], "group size must be one of"),
    (["--min-reps", "10", "--max-reps", "5"], "--min-reps 10 is larger than --max-reps 5"),
])
def test_cli_errors_are_clear(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_file_stem_matches_the_record_glob():
    assert cli.file_stem(None, "2026-11-29T20:00:00+00:00", "NVIDIA H200") == "2026-11-29_nvidia-h200_bench"
    assert cli.file_stem("trial", "", "x") == "trial_bench"
    assert cli.file_stem("my-bench-1", "", "x") == "my-bench-1"
    # another model's block names its record, so that one model's does not overwrite another's
    assert cli.file_stem(None, "2026-12-02T00:40:00+00:00", "NVIDIA H200", "qwen2.5-7b") == \
        "2026-12-02_nvidia-h200_qwen2.5-7b_bench"
    assert cli.file_stem("trial", "", "x", "qwen2.5-7b") == "trial_bench"


def test_no_gpu_exits_2_and_says_nothing_was_measured(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(harness, "gpu_unavailable_reason", lambda: "CUDA reports 0 devices")
    assert cli.main(["--sets", "llama2-7b", "--out", str(tmp_path)]) == cli.EXIT_NOT_MEASURED
    err = capsys.readouterr().err
    assert "no GPU is present (CUDA reports 0 devices); nothing was measured" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(records.gpu_unavailable_reason() is None, reason="a GPU is present: this checks the no-GPU path")
def test_no_gpu_command_line_exit_code(tmp_path):
    out = subprocess.run([sys.executable, "-m", "marlin_cupy.bench", "--out", str(tmp_path)],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "no GPU is present" in out.stderr and "nothing was measured" in out.stderr


class _FakeSmi:
    """``subprocess.run`` of an nvidia-smi that knows ``fields`` and prints ``values``."""

    def __init__(self, fields, values):
        self.fields, self.values, self.queries = set(fields), values, []

    def __call__(self, argv, **kw):
        asked = argv[1].removeprefix("--query-gpu=").split(",")
        self.queries.append(asked)
        bad = [f for f in asked if f not in self.fields]
        if bad:
            return subprocess.CompletedProcess(argv, 2, f'Field "{bad[0]}" is not a valid field '
                                                        f'to query.\n', "")
        return subprocess.CompletedProcess(argv, 0, ", ".join(self.values[f] for f in asked)
                                           + "\n", "")


@pytest.mark.parametrize("known, values, expected", [
    (("clocks.sm", "clocks.mem", "clocks.max.sm", "clocks_event_reasons.active"),
     {"clocks.sm": "1980", "clocks.mem": "3201", "clocks.max.sm": "1980",
      "clocks_event_reasons.active": "0x0000000000000004"},
     {"sm_mhz": 1980, "mem_mhz": 3201, "sm_max_mhz": 1980, "throttle_reasons": "0x0000000000000004"}),
    (("clocks.sm", "clocks.mem", "clocks.max.sm", "clocks_throttle_reasons.active"),   # older
     {"clocks.sm": "345", "clocks.mem": "3201", "clocks.max.sm": "[N/A]",
      "clocks_throttle_reasons.active": "0x0000000000000001"},
     {"sm_mhz": 345, "mem_mhz": 3201, "sm_max_mhz": None, "throttle_reasons": "0x0000000000000001"}),
    (("clocks.sm", "clocks.mem"), {"clocks.sm": "345", "clocks.mem": "3201"},
     {"sm_mhz": 345, "mem_mhz": 3201, "sm_max_mhz": None, "throttle_reasons": None}),
    ((), {}, None),                                               # answers nothing
])
def test_gpu_clocks_takes_what_this_nvidia_smi_gives(monkeypatch, known, values, expected):
    smi = _FakeSmi(known, values)
    monkeypatch.setattr(harness.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(harness.subprocess, "run", smi)
    assert harness.gpu_clocks() == expected
    assert smi.queries[0] == list(harness.CLOCK_QUERIES[0])


def test_gpu_clocks_is_none_without_nvidia_smi_or_when_it_fails(monkeypatch):
    monkeypatch.setattr(harness.shutil, "which", lambda name: None)
    assert harness.gpu_clocks() is None

    def broken(argv, **kw):
        raise subprocess.TimeoutExpired(argv, 10)
    monkeypatch.setattr(harness.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(harness.subprocess, "run", broken)
    assert harness.gpu_clocks() is None


def test_the_sweep_records_clocks_after_warm_up_and_the_tables_that_served(monkeypatch,
                                                                            tmp_path):
    """The clocks at start are read before any GPU work (an idle card: 345 MHz on the H200);
    the record also holds them after the copy bandwidth's second of copies, and the tuned
    tables the default dispatch read (``tune.table_provenance``). The GPU work is faked."""
    from marlin_cupy import tune
    from marlin_cupy.bench import sweep
    monkeypatch.setenv("MARLIN_CUPY_CACHE", str(tmp_path))       # the shipped table alone
    tune.load_table.cache_clear()
    log = []
    monkeypatch.setattr(records, "environment", lambda: {
        "date": "2026-12-01T00:00:00+00:00", "git_commit": "abc", "versions": {},
        "device": {"name": "NVIDIA H200", "sms": 132, "l2_bytes": H200_L2}})
    monkeypatch.setattr(harness, "gpu_clocks", lambda: log.append("clocks") or {
        "sm_mhz": 1980 if "copy" in log else 345, "mem_mhz": 3201})
    monkeypatch.setattr(harness, "bench_stream", lambda torch=None: contextlib.nullcontext(None))
    monkeypatch.setattr(harness, "Timer", lambda *a, **kw: None)
    stats = harness.Stats(500.0, 499.0, 501.0, 10)
    monkeypatch.setattr(harness, "copy_bandwidth", lambda timer, nbytes: log.append("copy") or (
        4280.0, harness.Measurement(stats, 0.0, 1.0)))
    rec = sweep.run_sweep([], [], sweep.SweepOptions(progress=False))
    assert log == ["clocks", "copy", "clocks", "clocks"]
    assert rec["clocks"]["start"]["sm_mhz"] == 345
    assert rec["clocks"]["after_warmup"]["sm_mhz"] == 1980
    shipped = tune.shipped_path("NVIDIA H200")
    assert rec["tuned_tables"] == [{
        "source": "shipped", "path": str(shipped),
        "sha256": hashlib.sha256(shipped.read_bytes()).hexdigest(),
        "entries": len(json.loads(shipped.read_text())["entries"])}]
    assert "kernel_defines" not in rec and rec["git_commit_from"] is None
    # An experimental build says so in its record, with where its commit came from
    # (records.newest_sweep skips such sweeps; README: records say where their commit came
    # from).
    monkeypatch.setattr(records, "environment", lambda: {
        "date": "2026-12-01T00:00:00+00:00", "git_commit": "abc", "versions": {},
        "git_commit_from": "MARLIN_GIT_COMMIT", "kernel_defines": {"MARLIN_WG_DEPTH": 2},
        "device": {"name": "NVIDIA H200", "sms": 132, "l2_bytes": H200_L2}})
    rec = sweep.run_sweep([], [], sweep.SweepOptions(progress=False))
    assert rec["kernel_defines"] == {"MARLIN_WG_DEPTH": 2}
    assert rec["git_commit_from"] == "MARLIN_GIT_COMMIT"
    tune.load_table.cache_clear()


def test_import_needs_neither_cupy_nor_torch():
    code = ("import sys, marlin_cupy.bench, marlin_cupy.bench.__main__, marlin_cupy.bench.sweep, "
            "marlin_cupy.bench.report; bad = [m for m in ('cupy', 'torch', 'matplotlib') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_set_shapes_distinct_layers_in_order_and_unknown_sets_refused():
    both = shapes.set_shapes("llama2-7b, llama2-7b,llama2-13b")
    assert both == list(dict.fromkeys(
        tuple(s) for name in ("llama2-7b", "llama2-13b") for s in shapes.SHAPE_SETS[name]))
    assert shapes.set_shapes("llama2-70b")[0] == tuple(shapes.SHAPE_SETS["llama2-70b"][0])
    for bad in ("", "llama3", "llama2-7b,ideal"):
        with pytest.raises(ValueError, match="unknown shape set"):
            shapes.set_shapes(bad)


# ---------------------------------------------------------------------------------------------
# Chains (--chain-len) and marlin-pdl
# ---------------------------------------------------------------------------------------------

def test_chain_count_covers_the_reps_and_the_minimum():
    assert harness.chain_count(100, 16, 5) == 7        # ceil(100 / 16)
    assert harness.chain_count(10, 16, 5) == 5         # the minimum
    assert harness.chain_count(160, 16, 5) == 10
    with pytest.raises(ValueError, match="chain_len must be at least 1"):
        harness.chain_count(10, 0, 5)


def test_a_chain_measurement_has_no_gap_and_is_not_starved():
    stats = harness.summarize([1.0, 2.0, 3.0])
    assert not harness.Measurement(stats, None, 5.0).starved
    assert harness.Measurement(stats, harness.STARVED_GAP_US + 1, 5.0).starved


def test_cli_chain_len_and_the_extra_provider():
    args = cli.parse_args([])
    assert args.chain_len == 0 and "marlin-pdl" not in args.providers
    args = cli.parse_args(["--chain-len", "16", "--providers", "marlin,marlin-pdl,cublas-fp16"])
    assert args.chain_len == 16 and args.providers == ("marlin", "marlin-pdl", "cublas-fp16")
    with pytest.raises(SystemExit):
        cli.parse_args(["--chain-len", "-1"])


def test_marlin_pdl_provider():
    made = providers.make_providers(("marlin", "marlin-pdl"), configs=["t128_m1_n4_k8_s4_g8_fp32"])
    assert [p.label for p in made] == ["marlin", "marlin[t128_m1_n4_k8_s4_g8_fp32]", "marlin-pdl"]
    pdl = made[-1]
    assert isinstance(pdl, providers.MarlinPDL) and pdl.pdl and pdl.chains_only
    assert pdl.weight_format == "int4" and pdl.copies_key == "marlin"
    assert not any(p.chains_only for p in made[:-1])


def test_records_accept_marlin_pdl_rows():
    rec = {"kind": "bench", "date": "2026-11-30T06:00:00+00:00", "git_commit": "abc123",
           "device": {"name": "NVIDIA H200", "sms": 132}, "copy_bandwidth_GBps": 4257.0,
           "group_size": 128,
           "rows": [{"set": "llama2-7b", "provider": "marlin-pdl", "m": 1, "k": 4096, "n": 4096,
                     "median_us": 6.7, "config": "t256_m1_n8_k16_s6_g8_fp32par_sw1"}]}
    from marlin_cupy import records
    records.validate_record(rec)


def test_report_says_how_the_times_were_taken(tmp_path, capsys):
    rec = synthetic_record()
    assert "medians of CUDA-event GPU times per call" in report.markdown(rec)
    rec["method"] = {"chain_len": 16}
    text = report.markdown(rec)
    assert "chains of 16 calls back to back" in text and "per call," not in text
    # --provider picks whose speedups the headline prints (marlin-pdl in a chain record).
    for r in rec["rows"]:
        if r["provider"] == "naive-dequant-gemm":
            r["provider"] = r["label"] = "marlin-pdl"
    rec["providers"]["marlin-pdl"] = rec["providers"].pop("naive-dequant-gemm")
    rec["summary"] = metrics.summarize_sets(rec["rows"], {"custom": 2}, 4000.0)
    path = tmp_path / "chain_bench.json"
    path.write_text(json.dumps(rec))
    assert report.main([str(path), "--headline", "1", "--provider", "marlin-pdl"]) == 0
    assert "| 1 | 0.64x (" in capsys.readouterr().out      # 270 / 420 summed
