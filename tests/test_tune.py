"""Tuned tables: selection from measurements, spill exclusion, lookup and cache precedence.
The timing itself needs a GPU; everything around it is tested here."""
import hashlib
import json
import re
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marlin_cupy import tune
from marlin_cupy.config import KernelConfig, M_BUCKETS, choose_config


def _rows():
    fast = KernelConfig(256, 1, 16, 8, 4, 8, True).name
    faster_but_spills = KernelConfig(256, 1, 32, 8, 3, 8, True).name
    slow = KernelConfig(256, 1, 8, 8, 6, 8, True).name
    return [
        {"n": 8192, "k": 8192, "m": 16, "config": slow, "median_us": 30.0},
        {"n": 8192, "k": 8192, "m": 16, "config": fast, "median_us": 20.0},
        {"n": 8192, "k": 8192, "m": 16, "config": faster_but_spills, "median_us": 10.0},
        {"n": 8192, "k": 8192, "m": 1024, "config": KernelConfig(256, 4, 16, 8, 4, 8, True).name,
         "median_us": 100.0},
    ], fast, faster_but_spills


class TestSelection:
    def test_fastest_allowed_per_bucket(self):
        rows, fast, spills = _rows()
        entries = tune.select_entries(rows, 128, allowed=lambda c: c.name != spills)
        by_bucket = {e["m_bucket"]: e["config"] for e in entries}
        assert by_bucket[16] == fast
        assert by_bucket[M_BUCKETS[-1]].startswith("t256_m4")

    def test_without_a_filter_the_fastest_wins(self):
        rows, _, spills = _rows()
        entries = tune.select_entries(rows, 128)
        assert {e["m_bucket"]: e["config"] for e in entries}[16] == spills

    def test_a_bucket_measured_at_several_m_is_scored_by_the_sum(self):
        """Bucket 8 is measured at M = 1 and 8 (tune.BUCKET_EXTRA_M): the config with the
        smaller sum wins even when another is faster at M = 8; a config measured at only one
        of the two does not compete; the entry names the M and the sum."""
        assert tune.bucket_ms(8) == (1, 8) and tune.bucket_ms(16) == (16,)
        assert tune.bucket_ms(256) == (256,) and tune.bucket_ms(512) == (384, 512)   # entry 86
        assert tune.bucket_ms(192) == (160, 192)                                       # entry 91
        # entry 107: 65..128 in buckets of 16 rows, one slab height each, measured at the top
        assert [tune.bucket_ms(b) for b in (80, 96, 112, 128)] == [(80,), (96,), (112,), (128,)]
        assert tune.bucket_ms(64) == (64,)
        assert tune.bucket_ms(M_BUCKETS[-1]) == (640, 1024, 2048)   # the open bucket
        a = KernelConfig(256, 1, 16, 8, 4, 8, True).name
        b = KernelConfig(256, 1, 8, 8, 6, 8, True).name
        c = KernelConfig(256, 1, 8, 16, 4, 8, True).name
        rows = [{"n": 8192, "k": 8192, "m": 8, "config": a, "median_us": 20.0},
                {"n": 8192, "k": 8192, "m": 1, "config": a, "median_us": 20.0},
                {"n": 8192, "k": 8192, "m": 8, "config": b, "median_us": 20.1},
                {"n": 8192, "k": 8192, "m": 1, "config": b, "median_us": 19.7},
                {"n": 8192, "k": 8192, "m": 8, "config": c, "median_us": 10.0}]   # no M = 1
        (e,) = tune.select_entries(rows, 128)
        assert (e["config"], e["m"], e["median_us"]) == (b, 8, 20.1)
        assert e["ms"] == [1, 8] and e["summed_us"] == pytest.approx(39.8)
        # the margin applies to the sums: a (40.0) is within 1 % of b (39.8)
        (kept,) = tune.select_entries(rows, 128, incumbents={(8192, 8192, 8): a},
                                      keep_within=0.01)
        assert kept["config"] == a and kept["summed_us"] == pytest.approx(40.0)
        # one M only (tables tuned before BUCKET_EXTRA_M): as before, no ms or sum
        (old,) = tune.select_entries([r for r in rows if r["m"] == 8], 128)
        assert old["config"] == c and "ms" not in old and "summed_us" not in old

    def test_the_shipped_table_reselects_to_itself(self):
        """The scoring by sums gives every stored entry back from the stored measurements."""
        table = json.loads(tune.shipped_path("NVIDIA H200").read_text())
        inc, keep = tune.stored_incumbents(table)
        got = tune.select_entries(table["measurements"], table["entries"][0]["group_size"],
                                  incumbents=inc, keep_within=keep)
        def key(e):
            return (e["n"], e["k"], e["m_bucket"])
        assert {key(e): e["config"] for e in got} == \
            {key(e): e["config"] for e in table["entries"]}

    def test_offline_spill_check_matches_the_compiler(self):
        # 64 rows x 512 columns in one warp row needs 128 accumulators: spills on sm_90.
        assert tune.spills(KernelConfig(256, 4, 32, 8, 3, 8, True), arch="sm_90")
        assert not tune.spills(KernelConfig(256, 1, 8, 8, 4, 8, True), arch="sm_90")


class TestLookup:
    @pytest.fixture
    def user_cache(self, tmp_path, monkeypatch):
        monkeypatch.setenv("MARLIN_CUPY_CACHE", str(tmp_path))
        tune.load_table.cache_clear()
        yield tmp_path
        tune.load_table.cache_clear()

    def _write(self, path, entries):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"kind": "tuned_table", "entries": entries}))

    def test_user_cache_wins_over_shipped_table(self, user_cache):
        cfg = KernelConfig(128, 1, 8, 4, 3, 8, True)
        self._write(tune.cache_path("NVIDIA H200"),
                    [{"n": 57344, "k": 8192, "group_size": 128, "m_bucket": 16,
                      "config": cfg.name}])
        assert choose_config(16, 57344, 8192, 128, device_name="NVIDIA H200") == cfg
        assert tune.lookup("NVIDIA H200", 9, 57344, 8192, 128) == cfg

    def test_cache_of_another_toolchain_is_ignored(self, user_cache):
        cfg = KernelConfig(128, 1, 8, 4, 3, 8, True)
        self._write(tune.cache_path("NVIDIA H200", tag="cupy0.0_nvrtc0.0"),
                    [{"n": 57344, "k": 8192, "group_size": 128, "m_bucket": 16,
                      "config": cfg.name}])
        assert tune.lookup("NVIDIA H200", 16, 57344, 8192, 128) != cfg

    def test_two_slab_bucket_and_fallback(self, user_cache):
        big = KernelConfig(256, 4, 16, 8, 4, 8, True)
        two = KernelConfig(256, 4, 8, 8, 4, 8, True)
        entry = {"n": 4096, "k": 4096, "group_size": 128}
        self._write(tune.cache_path("GPU A"), [dict(entry, m_bucket=1 << 30, config=big.name)])
        # A table written before the 128 bucket existed serves M = 65..128 from the open one.
        assert tune.lookup("GPU A", 100, 4096, 4096, 128) == big
        self._write(tune.cache_path("GPU B"), [dict(entry, m_bucket=1 << 30, config=big.name),
                                               dict(entry, m_bucket=128, config=two.name)])
        assert [tune.lookup("GPU B", m, 4096, 4096, 128) for m in (65, 128, 129)] == \
            [two, two, big]

    def test_bucket_of_two_or_three_slabs(self, user_cache):
        # M = 129..192: two 128-row slabs (swap_ab=16) against three of 64 rows; a table
        # written before the bucket existed serves it from the open bucket.
        sw16 = KernelConfig.from_name("t256_m8_n16_k8_s4_g8_fp32_sw16_wg")
        sw8 = KernelConfig.from_name("t256_m4_n16_k8_s4_g8_fp32_sw8_wg")
        entry = {"n": 8192, "k": 8192, "group_size": 128}
        self._write(tune.cache_path("GPU C"), [dict(entry, m_bucket=1 << 30, config=sw16.name)])
        assert tune.lookup("GPU C", 150, 8192, 8192, 128) == sw16
        self._write(tune.cache_path("GPU D"), [dict(entry, m_bucket=1 << 30, config=sw16.name),
                                               dict(entry, m_bucket=192, config=sw8.name)])
        assert [tune.lookup("GPU D", m, 8192, 8192, 128) for m in (129, 192, 193)] == \
            [sw8, sw8, sw16]
        assert choose_config(150, 8192, 8192, 128, device_name="GPU D") == sw8

    def test_buckets_above_192_rows(self, user_cache):
        # M = 193..256, 257..512 and the open bucket (NOTES.md entry 86); a table written
        # before they existed serves every M > 192 from its open bucket.
        c1 = KernelConfig.from_name("t128_m8_n8_k8_s4_g8_fp32par_sw16_wg_ws")
        c2 = KernelConfig.from_name("t256_m8_n16_k8_s4_g8_fp32par_sw16_wg_ws")
        c3 = KernelConfig.from_name("t256_m8_n16_k8_s4_g8_fp32_sw16_wg_ws")
        entry = {"n": 8192, "k": 8192, "group_size": 128}
        ms = (193, 256, 257, 512, 513, 4096)
        self._write(tune.cache_path("GPU E"), [dict(entry, m_bucket=1 << 30, config=c3.name)])
        assert [tune.lookup("GPU E", m, 8192, 8192, 128) for m in ms] == [c3] * 6
        self._write(tune.cache_path("GPU F"), [dict(entry, m_bucket=256, config=c1.name),
                                               dict(entry, m_bucket=512, config=c2.name),
                                               dict(entry, m_bucket=1 << 30, config=c3.name)])
        assert [tune.lookup("GPU F", m, 8192, 8192, 128) for m in ms] == \
            [c1, c1, c2, c2, c3, c3]

    def test_other_group_sizes_are_not_guessed(self, user_cache):
        assert tune.lookup("NVIDIA H200", 16, 57344, 8192, 32) is None

    def test_broken_table_says_what_to_do(self, user_cache):
        path = tune.cache_path("Some GPU")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{not json")
        with pytest.raises(ValueError, match="delete it or re-run"):
            tune.load_table("Some GPU")

    def test_a_table_tuned_under_kernel_defines_serves_only_that_build(self, user_cache,
                                                                       monkeypatch):
        """A table tuned under $MARLIN_CUPY_DEFINES (its ``kernel_defines``, as ``tune``
        writes it) measured an experimental build: a build with other switches, or none,
        skips it with a warning naming the file and the switches; one with the same reads it."""
        cfg = KernelConfig(128, 1, 8, 4, 3, 8, True)
        path = tune.cache_path("GPU G")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({
            "kind": "tuned_table", "kernel_defines": {"MARLIN_PAR_COOP": 0},
            "entries": [{"n": 4096, "k": 4096, "group_size": 128, "m_bucket": 16,
                         "config": cfg.name}]}))
        said = re.escape(f"tuned table {path} is not used: it was tuned under "
                         f"MARLIN_CUPY_DEFINES {{'MARLIN_PAR_COOP': 0}}")
        monkeypatch.delenv("MARLIN_CUPY_DEFINES", raising=False)
        with pytest.warns(UserWarning, match=said):
            assert tune.lookup("GPU G", 16, 4096, 4096, 128) is None
        assert tune.table_provenance("GPU G") == []
        monkeypatch.setenv("MARLIN_CUPY_DEFINES", "MARLIN_PAR_COOP=1")
        with pytest.warns(UserWarning, match=said):
            assert tune.lookup("GPU G", 16, 4096, 4096, 128) is None
        monkeypatch.setenv("MARLIN_CUPY_DEFINES", "MARLIN_PAR_COOP=0")
        assert tune.lookup("GPU G", 16, 4096, 4096, 128) == cfg

    def test_a_stale_entry_is_skipped_with_one_warning_not_raised_at_dispatch(self, user_cache):
        """A cache written by an older version can name a config this one cannot parse or
        run: that entry is skipped (the heuristic serves its problems), named once in a
        warning with its file; the table's other entries still serve."""
        good = KernelConfig(128, 1, 8, 4, 3, 8, True)
        entry = {"group_size": 128, "m_bucket": 16}
        path = tune.cache_path("GPU H")
        self._write(path, [dict(entry, n=4096, k=4096, config="t256_m1_n16_k4_s4_g8_fp32_zz9"),
                           dict(entry, n=8192, k=8192, config="t96_m1_n16_k4_s4_g8_fp32"),
                           dict(entry, n=2048, k=2048, config=good.name)])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):
                assert tune.lookup("GPU H", 16, 4096, 4096, 128) is None     # does not parse
                assert tune.lookup("GPU H", 16, 8192, 8192, 128) is None     # threads=96
                assert tune.lookup("GPU H", 16, 2048, 2048, 128) == good
                assert choose_config(16, 4096, 4096, 128, device_name="GPU H") == \
                    choose_config(16, 4096, 4096, 128)
        said = [str(w.message) for w in caught if "tuned table" in str(w.message)]
        assert len(said) == 2, said
        assert all(m.startswith(f"tuned table {path}: entry ") for m in said)
        assert "4096x4096_g128_m16" in said[0] and "_zz9" in said[0]
        assert "8192x8192_g128_m16" in said[1] and "threads=96" in said[1]

    def test_the_tables_the_dispatch_loaded_are_named_with_their_hash(self, user_cache):
        """``table_provenance``: what a benchmark record says served ``marlin``, the shipped
        table and the user's cache as ``load_table`` read them (path, sha256 of the file,
        entries used); nothing for a device without tables."""
        self._write(tune.cache_path("NVIDIA H200"),
                    [{"n": 57344, "k": 8192, "group_size": 128, "m_bucket": 16,
                      "config": KernelConfig(128, 1, 8, 4, 3, 8, True).name}])
        got = tune.table_provenance("NVIDIA H200")
        paths = (tune.shipped_path("NVIDIA H200"), tune.cache_path("NVIDIA H200"))
        assert [g["source"] for g in got] == ["shipped", "user_cache"]
        for g, path in zip(got, paths):
            assert g["path"] == str(path)
            assert g["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert got[0]["entries"] == len(json.loads(paths[0].read_text())["entries"])
        assert got[1]["entries"] == 1
        assert tune.table_provenance("GPU without tables") == []

    def test_cache_path_names_device_and_toolchain(self, user_cache):
        p = tune.cache_path("NVIDIA H200", tag="cupy14.2.0_nvrtc12.9")
        assert p.parent == user_cache / "tuned"
        assert p.name == "NVIDIA_H200__cupy14_2_0_nvrtc12_9.json"


def test_candidates_fit_and_divide():
    for m in (8, 16, 48, 256):
        for cfg in tune.candidates(m, 8192, 28672, 128, 232448):
            assert not cfg.problems()
            assert 8192 % cfg.tile_n == 0 and 28672 % cfg.tile_k == 0
            assert cfg.max_m is None or m <= cfg.max_m
            cfg.validate(232448)


def test_candidates_offer_swapped_operands_where_they_serve_m():
    swaps = {m: {c.swap_ab for c in tune.candidates(m, 8192, 8192, 128, 232448)}
             for m in (8, 16, 32)}
    assert swaps == {8: {0, 1, 2}, 16: {0, 2}, 32: {0}}


def test_no_gpu_exits_2(capsys):
    from marlin_cupy.records import gpu_unavailable_reason
    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is present: this checks the no-GPU path")
    assert tune.main(["--sets", "llama2-7b"]) == 2
    assert "no GPU" in capsys.readouterr().err


def test_parallel_reduction_candidates_only_on_request():
    plain = tune.candidates(64, 8192, 8192, 128, 232448, wgmma=True)
    both = tune.candidates(64, 8192, 8192, 128, 232448, wgmma=True, parallel_reduce=True)
    assert not any(c.parallel_reduce for c in plain)
    assert both[:len(plain)] == plain
    assert both[len(plain):] == [c.with_(parallel_reduce=True) for c in plain]
    assert all(not c.problems() for c in both)


def test_wgmma_candidates_only_on_request():
    plain = tune.candidates(32, 8192, 8192, 128, 232448)
    wg = tune.candidates(32, 8192, 8192, 128, 232448, wgmma=True)
    assert not any(c.wgmma for c in plain)
    extra = [c for c in wg if c.wgmma]
    assert extra and all(c.swap_ab == 4 and c.tile_m == 32 and not c.problems() for c in extra)


def test_producer_twins_of_the_wgmma_candidates():
    """Every wgmma candidate that may take a producer warpgroup is offered with one too, right
    after it; no other candidate is."""
    wg = tune.candidates(64, 8192, 8192, 128, 232448, wgmma=True)
    twins = [c for c in wg if c.producer]
    assert twins and all(c.wgmma and not c.problems() for c in twins)
    for c in wg:
        if c.wgmma and not c.producer and not c.with_(producer=True).problems():
            assert wg[wg.index(c) + 1] == c.with_(producer=True)
    assert not any(c.producer for c in tune.candidates(64, 8192, 8192, 128, 232448))


def _bucket_range(bucket: int) -> range:
    """The M values whose bucket is ``bucket``."""
    i = M_BUCKETS.index(bucket)
    lo = 1 if i == 0 else M_BUCKETS[i - 1] + 1
    return range(lo, min(bucket, 1024) + 1)


def test_every_shipped_entry_is_dispatched_at_every_m_of_its_bucket(monkeypatch, tmp_path):
    """The tuner measured an entry at one M of its bucket; the dispatcher must choose it (with
    as many 16-row blocks as M needs, for unswapped tiles) at every M of the bucket. A wgmma
    entry's row blocks are fixed by its operand swap, and once a 48-row M fell back to the
    heuristic (1.4-1.8x slower) because they were overwritten."""
    monkeypatch.setenv("MARLIN_CUPY_CACHE", str(tmp_path))   # the shipped table, no user cache
    tune.load_table.cache_clear()
    table = json.loads(tune.shipped_path("NVIDIA H200").read_text())
    try:
        for e in table["entries"]:
            want = KernelConfig.from_name(e["config"])
            ms = _bucket_range(e["m_bucket"])
            for m in sorted({*ms[::7], ms[-1], e["m"]}):
                got = choose_config(m, e["n"], e["k"], e["group_size"],
                                    device_name="NVIDIA H200")
                if want.swap_ab == 0:
                    want_m = want.with_(thread_m_blocks=min(4, -(-m // 16)))
                else:
                    want_m = want
                assert got == want_m, (e, m, got.name)
    finally:
        tune.load_table.cache_clear()


class TestPartialRetune:
    """--buckets and --merge: re-tuning some buckets of a shipped table keeps the rest."""

    def test_parse_buckets(self):
        assert tune.parse_buckets("") == M_BUCKETS
        assert tune.parse_buckets("16, 8,16") == (16, 8)
        assert tune.parse_buckets("rest") == (M_BUCKETS[-1],)
        for bad in ("7", "x", "-8"):
            with pytest.raises(ValueError, match="unknown M bucket"):
                tune.parse_buckets(bad)

    def _table(self, commit, rows):
        entries = tune.select_entries(rows, 128)
        return {"kind": "tuned_table", "device_name": "NVIDIA H200", "git_commit": commit,
                "date": commit, "versions": {"v": commit}, "entries": entries,
                "measurements": rows, "reselected": {"arch": "sm_90", "dropped_spilling": []}}

    def test_merge_replaces_only_the_tuned_pairs(self):
        a = KernelConfig(256, 1, 16, 8, 4, 8, True).name
        b = KernelConfig(256, 1, 8, 8, 6, 8, True).name
        big = KernelConfig(256, 4, 16, 8, 4, 8, True).name
        base = self._table("old", [
            {"n": 8192, "k": 8192, "m": 16, "config": a, "median_us": 20.0},
            {"n": 8192, "k": 8192, "m": 16, "config": b, "median_us": 30.0},
            {"n": 4096, "k": 4096, "m": 16, "config": a, "median_us": 5.0},   # layer not re-tuned
            {"n": 8192, "k": 8192, "m": 1024, "config": big, "median_us": 100.0},
        ])
        new = self._table("new", [
            {"n": 8192, "k": 8192, "m": 16, "config": a, "median_us": 21.0},
            {"n": 8192, "k": 8192, "m": 16, "config": b, "median_us": 19.0},
        ])
        snapshot = json.loads(json.dumps(base))
        out = tune.merge_tables(base, new, [(8192, 8192)], (16,))
        by = {(e["n"], e["k"], e["m_bucket"]): e for e in out["entries"]}
        assert by[(8192, 8192, 16)]["config"] == b          # the re-tuned pair: new winner
        assert by[(4096, 4096, 16)]["median_us"] == 5.0     # another layer: kept
        assert by[(8192, 8192, M_BUCKETS[-1])]["config"] == big   # another bucket: kept
        assert len(out["entries"]) == 3
        kept = [r for r in out["measurements"] if (r["n"], r["m"]) == (8192, 16)]
        assert sorted(r["median_us"] for r in kept) == [19.0, 21.0]   # old rows of the pair gone
        assert len(out["measurements"]) == 4
        assert out["git_commit"] == "new" and out["merged"]["base_git_commit"] == "old"
        assert "reselected" not in out   # the merged table must be reselected again
        assert base == snapshot   # the base table is not modified

    def test_tuning_into_the_cache_keeps_its_other_layers(self, tmp_path):
        """Without --out, a model tuned after another joins the cache (same device and group
        size: the other layers kept, the tuned ones replaced); a cache of another group size or
        device, or an unreadable one, is replaced, and the line says so."""
        a = KernelConfig(256, 1, 16, 8, 4, 8, True).name
        b = KernelConfig(256, 1, 8, 8, 6, 8, True).name
        first = self._table("first", [
            {"n": 4096, "k": 4096, "m": 16, "config": a, "median_us": 5.0},
            {"n": 8192, "k": 8192, "m": 16, "config": a, "median_us": 20.0}])
        second = self._table("second", [
            {"n": 8192, "k": 8192, "m": 16, "config": b, "median_us": 19.0},
            {"n": 6144, "k": 4096, "m": 16, "config": b, "median_us": 7.0}])
        path = tmp_path / "cache.json"
        assert tune.into_cache(second, path, [], M_BUCKETS) == (second, "a new cache")
        path.write_text(json.dumps(first))
        table, note = tune.into_cache(second, path, [(8192, 8192), (4096, 6144)], M_BUCKETS)
        by = {(e["n"], e["k"]): e["config"] for e in table["entries"]}
        assert by == {(4096, 4096): a, (8192, 8192): b, (6144, 4096): b}
        assert note == "kept the cache's 1 other entries"
        other_gs = dict(first, entries=[dict(e, group_size=64) for e in first["entries"]])
        path.write_text(json.dumps(other_gs))
        table, note = tune.into_cache(second, path, [(8192, 8192)], M_BUCKETS)
        assert table is second and "group size(s) [64]" in note and "--out" in note
        path.write_text(json.dumps(dict(first, device_name="NVIDIA H100")))
        assert tune.into_cache(second, path, [], M_BUCKETS)[0] is second
        path.write_text("{not json")
        assert tune.into_cache(second, path, [], M_BUCKETS) == (
            second, "replaced a cache that could not be read")
        # A cache of another build ($MARLIN_CUPY_DEFINES) is replaced, never merged: merged,
        # its entries would be served to this run's build under this run's label.
        for old_defines, new_defines in (({"MARLIN_WG_DEPTH": 2}, None),
                                         (None, {"MARLIN_WG_DEPTH": 2})):
            old = dict(first, **({"kernel_defines": old_defines} if old_defines else {}))
            new = dict(second, **({"kernel_defines": new_defines} if new_defines else {}))
            path.write_text(json.dumps(old))
            table, note = tune.into_cache(new, path, [(8192, 8192)], M_BUCKETS)
            assert table is new and "tuned under MARLIN_CUPY_DEFINES" in note, note
        same = dict(first, kernel_defines={"MARLIN_WG_DEPTH": 2})
        path.write_text(json.dumps(same))
        table, note = tune.into_cache(dict(second, kernel_defines={"MARLIN_WG_DEPTH": 2}), path,
                                      [(8192, 8192)], M_BUCKETS)
        assert note == "kept the cache's 1 other entries"

    def test_merge_keeps_the_incumbent_within_the_margin(self, tmp_path):
        """--keep-within: a winner by less than the margin does not replace the base table's
        config; one by more does; the rule is stored and --reselect applies it again."""
        a = KernelConfig(256, 1, 16, 8, 4, 8, True).name
        b = KernelConfig(256, 1, 8, 8, 6, 8, True).name
        base = self._table("old", [
            {"n": 8192, "k": 8192, "m": 8, "config": a, "median_us": 20.0},
            {"n": 8192, "k": 8192, "m": 8, "config": b, "median_us": 30.0},
            {"n": 4096, "k": 4096, "m": 8, "config": a, "median_us": 10.0},
            {"n": 4096, "k": 4096, "m": 8, "config": b, "median_us": 12.0},
        ])
        assert {e["config"] for e in base["entries"]} == {a}
        new = self._table("new", [
            {"n": 8192, "k": 8192, "m": 8, "config": a, "median_us": 20.1},   # 0.5 % slower
            {"n": 8192, "k": 8192, "m": 8, "config": b, "median_us": 20.0},
            {"n": 4096, "k": 4096, "m": 8, "config": a, "median_us": 10.5},   # 5 % slower
            {"n": 4096, "k": 4096, "m": 8, "config": b, "median_us": 10.0},
        ])
        shapes, buckets = [(8192, 8192), (4096, 4096)], (8,)

        def by(t):
            return {(e["n"], e["m_bucket"]): (e["config"], e["median_us"]) for e in t["entries"]}
        plain = tune.merge_tables(base, new, shapes, buckets)
        assert by(plain) == {(8192, 8): (b, 20.0), (4096, 8): (b, 10.0)}
        assert "keep_within" not in plain["merged"]
        kept = tune.merge_tables(base, new, shapes, buckets, keep_within=0.01)
        assert by(kept) == {(8192, 8): (a, 20.1), (4096, 8): (b, 10.0)}
        assert kept["merged"]["keep_within"] == 0.01
        path = tmp_path / "t.json"
        path.write_text(json.dumps(kept))
        assert tune.main(["--reselect", str(path), "--arch", "sm_90"]) == 0
        assert by(json.loads(path.read_text())) == by(kept)

    def test_a_later_merge_keeps_earlier_incumbents_and_records(self, tmp_path):
        """A merge of other layers (a --prior run after a --keep-within re-tune) keeps the
        earlier merge's incumbents for the pairs it leaves alone, so --reselect still gives
        every entry back, and keeps the earlier merge's record under ``earlier``; a pair the
        later merge re-tunes loses its incumbent."""
        a = KernelConfig(256, 1, 16, 8, 4, 8, True).name
        b = KernelConfig(256, 1, 8, 8, 6, 8, True).name
        base = self._table("old", [
            {"n": 8192, "k": 8192, "m": 8, "config": a, "median_us": 20.0},
            {"n": 4096, "k": 4096, "m": 8, "config": a, "median_us": 10.0}])
        retune = self._table("new", [
            {"n": 8192, "k": 8192, "m": 8, "config": a, "median_us": 20.1},
            {"n": 8192, "k": 8192, "m": 8, "config": b, "median_us": 20.0},
            {"n": 4096, "k": 4096, "m": 8, "config": a, "median_us": 10.1},
            {"n": 4096, "k": 4096, "m": 8, "config": b, "median_us": 10.0}])
        first = tune.merge_tables(base, retune, [(8192, 8192), (4096, 4096)], (8,), 0.01)
        later = self._table("later", [
            {"n": 2048, "k": 2048, "m": 8, "config": b, "median_us": 5.0},
            {"n": 4096, "k": 4096, "m": 8, "config": b, "median_us": 9.0}])
        second = tune.merge_tables(first, dict(later, prior={"per_class": 2, "top": 12}),
                                   [(2048, 2048), (4096, 4096)], (8,))
        by = {(e["n"], e["m_bucket"]): e["config"] for e in second["entries"]}
        assert by == {(8192, 8): a, (4096, 8): b, (2048, 8): b}
        inc, keep = tune.stored_incumbents(second)
        assert inc == {(8192, 8192, 8): a} and keep == {(8192, 8192, 8): 0.01}
        assert second["merged"]["prior"] == {"per_class": 2, "top": 12}
        assert second["merged"]["earlier"]["keep_within"] == 0.01
        assert "keep_within" not in second["merged"]
        path = tmp_path / "t.json"
        path.write_text(json.dumps(second))
        assert tune.main(["--reselect", str(path), "--arch", "sm_90"]) == 0
        again = {(e["n"], e["m_bucket"]): e["config"]
                 for e in json.loads(path.read_text())["entries"]}
        assert again == by

    def test_a_split_buckets_incumbent_is_what_served_its_rows(self, tmp_path):
        """A bucket the base table predates (97..112, split off 97..128: NOTES.md entry 107)
        has as incumbent the entry that served its rows, the taller bucket's: kept within the
        margin (the new bucket's entry then names it), replaced beyond it; stored, so that
        --reselect gives the entries back."""
        tall = "t256_m8_n16_k8_s4_g8_fp32_sw16_wg_ws"
        twin = "t256_m7_n16_k8_s4_g8_fp32par_sw14_wg_w32_ws"
        base = self._table("old", [
            {"n": n, "k": 4096, "m": 128, "config": tall, "median_us": us}
            for n, us in ((22016, 41.0), (12288, 30.0))])
        new = self._table("new", [
            {"n": 22016, "k": 4096, "m": 112, "config": tall, "median_us": 40.7},
            {"n": 22016, "k": 4096, "m": 112, "config": twin, "median_us": 40.5},   # 0.5 %
            {"n": 12288, "k": 4096, "m": 112, "config": tall, "median_us": 30.0},
            {"n": 12288, "k": 4096, "m": 112, "config": twin, "median_us": 28.4}])  # 5.6 %
        shapes = [(4096, 22016), (4096, 12288)]
        assert tune.served(base, 22016, 4096, 112, 128).name == tall
        out = tune.merge_tables(base, new, shapes, (112,), keep_within=0.01)
        by = {(e["n"], e["m_bucket"]): e["config"] for e in out["entries"]}
        assert by == {(22016, 112): tall, (12288, 112): twin, (22016, 128): tall,
                      (12288, 128): tall}
        inc, _ = tune.stored_incumbents(out)
        assert inc == {(22016, 4096, 112): tall, (12288, 4096, 112): tall}
        path = tmp_path / "t.json"
        path.write_text(json.dumps(out))
        assert tune.main(["--reselect", str(path), "--arch", "sm_90"]) == 0
        assert {(e["n"], e["m_bucket"]): e["config"]
                for e in json.loads(path.read_text())["entries"]} == by

    def test_suspect_pairs_are_withdrawn_to_the_base_state(self):
        """A pair whose served config went unmeasured, or where a config took more than
        GLITCH_RATIO times its base time at the same M (a stall of the run), is suspect;
        withdrawn, it is as the base table held it (measurements, entry, incumbent; nothing
        where the base predates the bucket) and listed with its reason; other pairs keep the
        re-tune's outcome."""
        a = "t256_m8_n16_k8_s4_g8_fp32_sw16_wg_ws"
        b = "t256_m8_n16_k8_s4_g8_fp32par_sw16_wg_ws"
        t = "t256_m7_n16_k8_s4_g8_fp32par_sw14_wg_w32_ws"
        base = self._table("old", [
            {"n": 4096, "k": 4096, "m": 128, "config": a, "median_us": 17.0},
            {"n": 4096, "k": 4096, "m": 128, "config": b, "median_us": 18.0},
            {"n": 8192, "k": 8192, "m": 128, "config": a, "median_us": 34.0},
            {"n": 8192, "k": 8192, "m": 128, "config": b, "median_us": 35.0}])
        new = self._table("new", [
            {"n": 4096, "k": 4096, "m": 112, "config": t, "median_us": 17.4},   # a unmeasured
            {"n": 4096, "k": 4096, "m": 128, "config": a, "median_us": 17.1},
            {"n": 4096, "k": 4096, "m": 128, "config": b, "median_us": 16.9},
            {"n": 8192, "k": 8192, "m": 112, "config": a, "median_us": 34.0},
            {"n": 8192, "k": 8192, "m": 112, "config": t, "median_us": 31.9},
            {"n": 8192, "k": 8192, "m": 128, "config": a, "median_us": 34.1},
            {"n": 8192, "k": 8192, "m": 128, "config": b, "median_us": 70.2}])  # 2.0x: no stall
        shapes, buckets = [(4096, 4096), (8192, 8192)], (112, 128)
        merged = tune.merge_tables(base, new, shapes, buckets, keep_within=0.01)
        assert tune.suspect_pairs(base, merged, shapes, buckets) == {
            (4096, 4096, 112): f"the config served before, {a}, was not measured"}
        stalled = [dict(r, median_us=110.0) if r["config"] == b and r["n"] == 8192 else r
                   for r in merged["measurements"]]
        why = tune.suspect_pairs(base, dict(merged, measurements=stalled), shapes, buckets)
        assert why[(8192, 8192, 128)].startswith(f"{b} took 110.0 us at M = 128 against 35.0")
        out = tune.withdraw_pairs(merged, base, tune.suspect_pairs(base, merged, shapes, buckets))
        by = {(e["n"], e["m_bucket"]): e["config"] for e in out["entries"]}
        assert by == {(4096, 128): b, (8192, 112): t, (8192, 128): a}   # no 4096 x 112 entry
        assert not [r for r in out["measurements"] if (r["n"], r["m"]) == (4096, 112)]
        assert out["merged"]["withdrawn"] == [{"n": 4096, "k": 4096, "m_bucket": 112,
                                               "why": f"the config served before, {a}, was not measured"}]
        inc, _ = tune.stored_incumbents(out)
        assert (4096, 4096, 112) not in inc and inc[(8192, 8192, 112)] == a
        assert tune.lookup_in(tune.entry_map(out), 100, 4096, 4096, 128).name == b
        # a served config the run found unmeasurable (it spills there) does not hold the pair
        spilled = dict(new, served_unmeasurable=[{"n": 4096, "k": 4096, "m_bucket": 112,
                                                  "config": a}])
        again = tune.merge_tables(base, spilled, shapes, buckets, keep_within=0.01)
        assert tune.suspect_pairs(base, again, shapes, buckets) == {}

    def test_a_tuned_pair_measured_for_nothing_is_withdrawn_not_emptied(self):
        """A pair the re-tune tuned but measured no row for (--narrow with --no-wgmma can
        filter out every candidate) is withdrawn, as the README says: kept as the base held it
        (measurements, entry), listed once under ``merged.withdrawn``, and named by
        ``suspect_pairs``, merged or not."""
        a = KernelConfig(256, 1, 16, 8, 4, 8, True).name
        b = KernelConfig(256, 1, 8, 8, 6, 8, True).name
        base = self._table("old", [
            {"n": 8192, "k": 8192, "m": 16, "config": a, "median_us": 20.0},
            {"n": 4096, "k": 4096, "m": 16, "config": b, "median_us": 5.0},
            {"n": 4096, "k": 4096, "m": 16, "config": a, "median_us": 6.0}])
        new = self._table("new", [{"n": 8192, "k": 8192, "m": 16, "config": c, "median_us": us}
                                  for c, us in ((a, 20.5), (b, 18.0))])   # none at 4096 x 4096
        shapes, buckets = [(8192, 8192), (4096, 4096)], (16,)
        merged = tune.merge_tables(base, new, shapes, buckets)
        assert {(e["n"], e["config"]) for e in merged["entries"]} == {(8192, b), (4096, b)}
        assert sorted(r["median_us"] for r in merged["measurements"] if r["n"] == 4096) == \
            [5.0, 6.0]
        gone = {(4096, 4096, 16): tune.UNMEASURED}
        assert merged["merged"]["withdrawn"] == [{"n": 4096, "k": 4096, "m_bucket": 16,
                                                  "why": tune.UNMEASURED}]
        assert tune.suspect_pairs(base, merged, shapes, buckets) == gone
        assert tune.suspect_pairs(base, new, shapes, buckets) == gone
        out = tune.withdraw_pairs(merged, base, gone)      # what main does next
        assert out["merged"]["withdrawn"] == merged["merged"]["withdrawn"]
        assert sorted(map(json.dumps, out["entries"])) == sorted(map(json.dumps,
                                                                     merged["entries"]))
        # with the incumbents' rule, the withdrawn pair keeps none that base did not store
        kept = tune.merge_tables(base, new, shapes, buckets, keep_within=0.01)
        inc, _ = tune.stored_incumbents(kept)
        assert set(inc) == {(8192, 8192, 16)}

    def test_restrict_to_tested_chooses_among_tested_kernels(self, tmp_path):
        """--tested TABLE: every entry is chosen among the kernels the GPU tests ran with TABLE
        shipped (its entries, the instantiated table, the sm_90 heuristic's); a grid cap is the
        same kernel; the pairs that gave up a faster untested kernel are returned and recorded;
        a pair with no tested kernel measured is an error, not a lost entry; --reselect takes
        the option too (NOTES.md entry 91)."""
        untested = KernelConfig(256, 1, 16, 8, 5, 8, True).name     # in no table or heuristic
        tested = KernelConfig(256, 1, 16, 8, 4, 8, True).name
        capped = KernelConfig.from_name(tested).with_(column_ctas=2).name
        old = self._table("old", [{"n": 4096, "k": 4096, "m": 8, "config": tested,
                                   "median_us": 10.0}])
        assert KernelConfig.from_name(tested).compiled in tune.tested_kernels(old)
        assert KernelConfig.from_name(untested).compiled not in tune.tested_kernels(old)
        new = self._table("new", [
            {"n": 8192, "k": 8192, "m": 8, "config": untested, "median_us": 19.0},
            {"n": 8192, "k": 8192, "m": 8, "config": capped, "median_us": 19.5},
            {"n": 8192, "k": 8192, "m": 8, "config": tested, "median_us": 20.0},
            {"n": 4096, "k": 4096, "m": 8, "config": tested, "median_us": 10.0},
            {"n": 4096, "k": 4096, "m": 8, "config": untested, "median_us": 10.5}])
        assert {(e["n"], e["config"]) for e in new["entries"]} == {(8192, untested),
                                                                   (4096, tested)}
        t = json.loads(json.dumps(new))
        changed = tune.restrict_to_tested(t, old)
        assert changed == [(8192, 8192, 8, untested, capped)]
        assert {(e["n"], e["config"]) for e in t["entries"]} == {(8192, capped), (4096, tested)}
        assert t["restricted_to_tested"]["passed_over"] == [[8192, 8192, 8, untested, capped]]
        only_untested = self._table("bad", [{"n": 2048, "k": 2048, "m": 8, "config": untested,
                                             "median_us": 5.0}])
        with pytest.raises(ValueError, match="no tested kernel"):
            tune.restrict_to_tested(only_untested, old)
        path, tested_path = tmp_path / "t.json", tmp_path / "old.json"
        path.write_text(json.dumps(new))
        tested_path.write_text(json.dumps(old))
        assert tune.main(["--reselect", str(path), "--arch", "sm_90",
                          "--tested", str(tested_path)]) == 0
        assert {(e["n"], e["config"]) for e in json.loads(path.read_text())["entries"]} == \
            {(8192, capped), (4096, tested)}
        bad_path = tmp_path / "bad.json"     # no tested kernel: exit 1, the file as it was
        bad_path.write_text(json.dumps(only_untested))
        assert tune.main(["--reselect", str(bad_path), "--arch", "sm_90",
                          "--tested", str(tested_path)]) == 1
        assert json.loads(bad_path.read_text()) == only_untested

    def test_keep_within_needs_merge(self, capsys):
        with pytest.raises(SystemExit):
            tune.main(["--buckets", "8", "--keep-within", "1"])
        assert "--keep-within needs --merge" in capsys.readouterr().err

    def test_wide_needs_narrow(self, capsys):
        with pytest.raises(SystemExit):
            tune.main(["--buckets", "8", "--merge", "x.json", "--wide"])
        assert "--wide needs --narrow" in capsys.readouterr().err

    def test_narrow_needs_merge(self, capsys):
        with pytest.raises(SystemExit):
            tune.main(["--buckets", "8", "--narrow", "4"])
        assert "--narrow needs --merge" in capsys.readouterr().err

    def test_prior_without_merge_ranks_by_the_device_tables(self, monkeypatch, tmp_path,
                                                            capsys):
        """``--prior`` without ``--merge``: the shipped table's and the user cache's
        measurements rank the candidates, the layers they hold are left out, and the result
        joins the user cache; at a group size no table of the device holds, a clear error
        before any tuning. (The tuning itself is faked: no GPU here.)"""
        from marlin_cupy import ops, records
        monkeypatch.setenv("MARLIN_CUPY_CACHE", str(tmp_path))
        monkeypatch.setattr(records, "gpu_unavailable_reason", lambda: None)
        monkeypatch.setattr(ops, "device_facts", lambda: {"name": "NVIDIA H200"})
        monkeypatch.setattr(tune, "cache_path", lambda name, tag=None: tmp_path / "cache.json")
        cfg = "t256_m1_n8_k8_s6_g8_fp32par_sw1_eb"
        seen = {}

        def fake_tune(shapes, group_size, **kw):
            seen.update(shapes=shapes, group_size=group_size, prior=kw["prior"])
            return {"kind": "tuned_table", "device_name": "NVIDIA H200", "git_commit": "x",
                    "entries": [{"n": 2048, "k": 1024, "group_size": 128, "m_bucket": 8, "m": 8,
                                 "config": cfg, "median_us": 5.0}],
                    "measurements": [{"n": 2048, "k": 1024, "m": 8, "config": cfg,
                                      "median_us": 5.0}]}
        monkeypatch.setattr(tune, "tune", fake_tune)
        shipped = json.loads(tune.shipped_path("NVIDIA H200").read_text())["measurements"]
        assert tune.main(["--sets", "llama2-7b", "--shapes", "1024,2048", "--prior", "2",
                          "--no-progress"]) == 0
        assert seen["shapes"] == [(1024, 2048)]        # llama2-7b's layers are held
        table, per_class, top = seen["prior"]
        assert (per_class, top) == (2, 12) and len(table["measurements"]) == len(shipped)
        assert "4 layer(s)" in capsys.readouterr().out
        cached = json.loads((tmp_path / "cache.json").read_text())
        assert [(e["k"], e["n"]) for e in cached["entries"]] == [(1024, 2048)]
        # the cache's measurements now rank too, and its layer is held
        assert len(tune.device_measurements("NVIDIA H200", 128)["measurements"]) == \
            len(shipped) + 1
        with pytest.raises(SystemExit):
            tune.main(["--shapes", "1024,2048", "--prior", "2"])
        assert "already hold(s) every layer" in capsys.readouterr().err
        with pytest.raises(SystemExit):
            tune.main(["--shapes", "1024,2048", "--prior", "2", "--group-size", "64"])
        assert "no tuned table for 'NVIDIA H200' at group size 64" in capsys.readouterr().err

    def test_a_merge_measures_the_served_config_and_withdraws_what_it_could_not(
            self, monkeypatch, tmp_path, capsys):
        """``--merge``: the tuner is handed the base table (``served_from``) so that every
        pair's served config is a candidate; a pair where it still went unmeasured is
        withdrawn to the base's state, and the run says so. (The tuning itself is faked.)"""
        from marlin_cupy import ops, records
        monkeypatch.setattr(records, "gpu_unavailable_reason", lambda: None)
        monkeypatch.setattr(ops, "device_facts", lambda: {"name": "NVIDIA H200"})
        tall = "t256_m8_n16_k8_s4_g8_fp32_sw16_wg_ws"
        twin = "t256_m7_n16_k8_s4_g8_fp32par_sw14_wg_w32_ws"
        base = dict(self._table("old", [{"n": n, "k": 4096, "m": 128, "config": tall,
                                         "median_us": 30.0} for n in (12288, 22016)]),
                    device_name="NVIDIA H200")
        base_path = tmp_path / "base.json"
        base_path.write_text(json.dumps(base))
        seen = {}

        def fake_tune(shapes, group_size, **kw):
            seen.update(kw)
            rows = [{"n": 12288, "k": 4096, "m": 112, "config": c, "median_us": us}
                    for c, us in ((tall, 30.0), (twin, 28.0))]
            rows.append({"n": 22016, "k": 4096, "m": 112, "config": twin, "median_us": 40.0})
            return dict(self._table("new", rows), device_name="NVIDIA H200")
        monkeypatch.setattr(tune, "tune", fake_tune)
        out = tmp_path / "out.json"
        assert tune.main(["--sets", "", "--shapes", "4096,12288;4096,22016", "--buckets", "112",
                          "--merge", str(base_path), "--keep-within", "1", "--out", str(out),
                          "--no-progress"]) == 0
        assert seen["served_from"]["entries"] == base["entries"]
        got = json.loads(out.read_text())
        assert {(e["n"], e["m_bucket"]): e["config"] for e in got["entries"]} == {
            (12288, 112): twin, (12288, 128): tall, (22016, 128): tall}
        assert [(w["n"], w["m_bucket"]) for w in got["merged"]["withdrawn"]] == [(22016, 112)]
        said = capsys.readouterr().out
        assert "withdrew 1 (N, K, bucket) pair(s)" in said and "4096x22016 bucket 112" in said

    def test_merge_needs_buckets(self, capsys):
        with pytest.raises(SystemExit):
            tune.main(["--merge", "x.json"])
        assert "--merge needs --buckets" in capsys.readouterr().err

    def test_prior_not_with_narrow_and_counts_at_least_0(self, capsys):
        with pytest.raises(SystemExit):
            tune.main(["--merge", "x.json", "--prior", "2", "--narrow", "3"])
        assert "one or the other" in capsys.readouterr().err
        with pytest.raises(SystemExit):
            tune.main(["--merge", "x.json", "--prior", "2", "--prior-top", "-1"])
        assert "at least 0" in capsys.readouterr().err



def test_early_bottom_twins_only_where_they_apply():
    """--early-bottom adds the _eb twin of each candidate that can take it: FP32 partials,
    tiles below 32 rows, no producer; nothing at M = 32 and up, nothing by default."""
    from marlin_cupy import tune
    for m in (8, 16):
        base = tune.candidates(m, 4096, 11008, 128, 232448, wgmma=True, parallel_reduce=True)
        both = tune.candidates(m, 4096, 11008, 128, 232448, wgmma=True, parallel_reduce=True,
                               early_bottom=True)
        eb = [c for c in both if c.early_bottom]
        assert not any(c.early_bottom for c in base) and both[:len(base)] == base
        assert eb and {c.with_(early_bottom=False) for c in eb} <= set(base)
        assert all(c.fp32_reduce and c.tile_m < 32 and not c.producer for c in eb)
        assert len(eb) == sum(1 for c in base if not c.with_(early_bottom=True).problems())
    assert not any(c.early_bottom for c in tune.candidates(
        32, 4096, 11008, 128, 232448, wgmma=True, parallel_reduce=True, early_bottom=True))


def test_a_table_file_dispatches_as_the_device_table_does(tmp_path, monkeypatch):
    """tune.table_entries + lookup_in + config.fit_tuned (what ab_probe --table-a runs) give
    the shipped H200 table's dispatch for every entry, and another file its own entries."""
    from marlin_cupy.config import choose_config, fit_tuned
    monkeypatch.setenv("MARLIN_CUPY_CACHE", str(tmp_path))     # no user cache in the way
    tune.load_table.cache_clear()
    try:
        name = "NVIDIA H200"
        path = tune.shipped_path(name)
        entries = tune.table_entries(path)
        data = json.loads(path.read_text())
        for e in data["entries"]:
            m, n, k = e["m"], e["n"], e["k"]
            want = choose_config(m, n, k, 128, device_name=name)
            assert fit_tuned(tune.lookup_in(entries, m, n, k, 128), m, n, k) == want
        other = tmp_path / "other.json"
        e = data["entries"][0]
        other.write_text(json.dumps({"entries": [dict(e, config="t256_m1_n8_k8_s4_g8_fp32")]}))
        got = tune.lookup_in(tune.table_entries(other), e["m"], e["n"], e["k"], 128)
        assert got == KernelConfig.from_name("t256_m1_n8_k8_s4_g8_fp32")
        assert tune.lookup_in(tune.table_entries(other), 4096, 64, 64, 128) is None
    finally:
        tune.load_table.cache_clear()


def test_top_sum_twins_only_where_they_apply():
    """--top-sum adds the _ts twin of each parallel-reduction candidate below 32 rows without
    a producer (never of an _eb twin: it includes the early bottom); nothing at M = 32 and up,
    nothing by default."""
    from marlin_cupy import tune
    for m in (8, 16):
        base = tune.candidates(m, 4096, 11008, 128, 232448, wgmma=True, parallel_reduce=True,
                               early_bottom=True)
        both = tune.candidates(m, 4096, 11008, 128, 232448, wgmma=True, parallel_reduce=True,
                               early_bottom=True, top_sum=True)
        ts = [c for c in both if c.top_sum]
        assert not any(c.top_sum for c in base) and both[:len(base)] == base
        assert ts and {c.with_(top_sum=False) for c in ts} <= set(base)
        assert all(c.parallel_reduce and c.tile_m < 32 and not c.producer
                   and not c.early_bottom for c in ts)
        assert len(ts) == sum(1 for c in base
                              if not c.early_bottom and not c.with_(top_sum=True).problems())
    assert not any(c.top_sum for c in tune.candidates(
        32, 4096, 11008, 128, 232448, wgmma=True, parallel_reduce=True, top_sum=True))


def test_narrow_candidates_are_the_tables_fastest_with_their_variants():
    """--narrow N: the N configs a table's measurements score fastest for a pair (summed over
    the bucket's M; a config missing one M does not compete), each plain, as stored, and with
    the variants asked for where valid; nothing for a pair the table never measured."""
    from marlin_cupy import tune
    from marlin_cupy.config import KernelConfig
    eb = "t256_m1_n16_k8_s6_g8_fp32par_sw1_eb"
    serial = "t256_m1_n16_k8_s4_g8_fp32_sw1_b2"
    slow = "t256_m1_n8_k16_s6_g8_fp32par_sw1"
    partial = "t256_m1_n16_k16_s4_g8_fp32par_sw1"
    rows = [{"n": 4096, "k": 4096, "m": m, "config": c, "median_us": t + m / 100}
            for c, t in ((eb, 10.0), (serial, 11.0), (slow, 12.0)) for m in (1, 8)]
    rows.append({"n": 4096, "k": 4096, "m": 8, "config": partial, "median_us": 1.0})
    rows.append({"n": 4096, "k": 4096, "m": 16, "config": slow, "median_us": 0.5})  # bucket 16
    table = {"measurements": rows}
    got = [c.name for c in tune.narrow_candidates(table, 4096, 4096, 8, 2, True, True)]
    plain = KernelConfig.from_name(eb).with_(early_bottom=False)
    assert got == [plain.name, eb, plain.with_(top_sum=True).name,
                   "t256_m1_n16_k8_s4_g8_fp32_sw1_b2", "t256_m1_n16_k8_s4_g8_fp32_sw1_eb_b2",
                   "t256_m1_n16_k8_s4_g8_fp32par_sw1_ts_b2"]   # the serial one's: par + _ts
    assert [c.name for c in tune.narrow_candidates(table, 4096, 4096, 8, 1)] == [plain.name, eb]
    assert tune.narrow_candidates(table, 4096, 8192, 8, 3) == []
    # --wide: the 512-thread twins of the one-CTA mma.sync ones (not of the _b2 serial one)
    wide = [c.name for c in tune.narrow_candidates(table, 4096, 4096, 8, 2, True, True, True)]
    assert wide == got[:3] + [f"t512_m1_n16_k8_s6_g8_fp32par_sw1{w}{v}"
                              for v in ("", "_eb", "_ts") for w in ("", "_w32")] + got[3:]


def test_prior_scores_rank_by_mean_log_slowdown_over_fully_measured_pairs():
    """--prior's ranking: mean log slowdown against each pair's fastest, over the pairs a full
    run measured (a narrow re-tune's few winners do not set anyone's coverage), configs on
    fewer than three quarters of them and capped grids left out; other buckets ignored."""
    import math
    from marlin_cupy import tune
    a, b, c, d = ("t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws",
                  "t256_m4_n16_k8_s4_g8_fp32par_sw8_wg_w32_ws",
                  "t256_m4_n8_k8_s8_g8_fp32par_sw8_wg_w16_ws",
                  "t256_m4_n16_k4_s6_g8_fp32par_sw8_wg_w32_ws")
    rows = []
    for n, times in ((4096, {a: 10, b: 20, c: 40, d: 11}), (8192, {a: 30, b: 15, c: 60, d: 16}),
                     (12288, {a: 5, b: 5, c: 10}), (16384, {a: 8, b: 8, c: 8})):
        rows += [dict(m=64, n=n, k=4096, config=x, median_us=us) for x, us in times.items()]
    rows.append(dict(m=64, n=4096, k=4096, config=a + "_c1", median_us=1))    # capped: out
    rows.append(dict(m=64, n=5120, k=4096, config=c, median_us=1))     # narrow pair: 1 of 4
    rows.append(dict(m=128, n=4096, k=4096, config=c, median_us=1))    # another bucket
    got = tune.prior_scores(rows, 64)
    assert set(got) == {a, b, c}            # d measured on 2 of the 4 full pairs: out
    assert got[a] == pytest.approx(math.log(2) / 4)
    assert got[b] == pytest.approx(math.log(2) / 4)
    assert got[c] == pytest.approx((math.log(4) + math.log(4) + math.log(2)) / 4)
    assert tune.prior_scores(rows, 16) == {}


def test_prior_candidates_fit_the_layer_keep_each_class_and_the_heuristic():
    """--prior's candidates for a layer the prior never measured: the top-ranked that fit, the
    best of each class (tile, reduction, loop), and the sm_90 heuristic's configs, each once;
    on a small layer (N = K = 896) only tiles that divide it."""
    from marlin_cupy import config, tune
    every = tune.candidates(64, 4096, 4096, 128, 232448, wgmma=True, parallel_reduce=True,
                            early_bottom=True, top_sum=True)
    scores = {c.name: i / 10 for i, c in enumerate(every)}
    got = tune.prior_candidates(scores, 64, 4096, 4096, 128, 232448, per_class=1, top=3,
                                sms=132)
    assert len(got) == len(set(got))
    assert got[:3] == every[:3]
    classes = {tune.prior_class(c) for c in every}
    firsts = {cls: next(c for c in every if tune.prior_class(c) == cls) for cls in classes}
    assert set(firsts.values()) <= set(got)
    heur = config.sm90_candidates(64, 4096, 4096, 128)
    assert set(heur) <= set(got)
    assert len(got) <= 3 + len(classes) + len(heur) + 1
    small = tune.prior_candidates(scores, 64, 896, 896, 128, 232448, per_class=2, top=12,
                                  sms=132)
    assert small and all(896 % c.tile_n == 0 and 896 % c.tile_k == 0 for c in small)
    assert not any(c.column_ctas for c in small)     # the tuner adds the caps
    # the heuristic's capped pick is there uncapped (its cap is one of column_variants')
    pick = config.sm90_choice(64, 9728, 896, 128, sms=132)
    assert pick.column_ctas == 1
    wide = tune.prior_candidates(scores, 64, 9728, 896, 128, 232448, 1, 3, sms=132)
    assert pick.with_(column_ctas=0) in wide
    assert pick in tune.column_variants(pick.with_(column_ctas=0), 64, 9728, 896,
                                        132 * pick.blocks_per_sm)
    # unranked candidates are left out, but the heuristic's stay
    assert set(tune.prior_candidates({}, 64, 4096, 4096, 128, 232448, 2, 12, 132)) == set(heur)
    # on another compute capability the dispatch's own heuristic pick is among them
    generic = config.choose_config(64, 4096, 4096, 128, smem_limit=166912, cc="80")
    assert generic in tune.prior_candidates({}, 64, 4096, 4096, 128, 166912, 2, 12, 108, "80")


def test_heuristic_candidates_are_what_the_dispatch_runs_without_a_table():
    """``--prior`` and ``--narrow`` also time the heuristic's configs: the sm_90 bucket's list
    and the dispatch's pick (uncapped: its cap is one of ``column_variants``), once each."""
    from marlin_cupy import config
    got = tune.heuristic_candidates(64, 9728, 896, 128, 232448, 132, "90")
    pick = config.choose_config(64, 9728, 896, 128, cc="90", sms=132)
    assert pick.column_ctas == 1 and pick.with_(column_ctas=0) in got
    assert set(config.sm90_candidates(64, 9728, 896, 128)) <= set(got)
    assert len(got) == len(set(got)) and not any(c.column_ctas for c in got)
    off = tune.heuristic_candidates(64, 4096, 4096, 128, 166912, 108, "80")
    assert config.choose_config(64, 4096, 4096, 128, smem_limit=166912, cc="80") in off


def test_column_variants_only_where_the_cap_bites():
    """The tuner's grid caps (NOTES.md entry 84): one and two CTAs per column where that grid is
    at least a quarter of the persistent one and below it and the layer's units."""
    cfg = KernelConfig.from_name("t256_m1_n8_k8_s6_g8_fp32par_sw1_eb")
    names = lambda cs: [c.name[len(cfg.name):] for c in cs]     # noqa: E731
    # 896x9728: 76 columns of 128, 7 units deep; 132 SMs
    assert names(tune.column_variants(cfg, 8, 9728, 896, 132)) == ["_c1"]     # _c2: 152 >= 132
    assert names(tune.column_variants(cfg, 8, 4864, 896, 132)) == ["_c1", "_c2"]  # 38, 76
    assert names(tune.column_variants(cfg, 8, 2176, 896, 132)) == ["_c2"]     # 17 < 33 <= 34
    assert tune.column_variants(cfg, 8, 2048, 896, 132) == []                 # 16, 32: < 33
    # a cap at or above the layer's units changes nothing: two units per column take no _c2
    assert names(tune.column_variants(cfg, 8, 9728, 256, 264)) == ["_c1"]
    # already capped, or handed out at run time: nothing
    assert tune.column_variants(cfg.with_(column_ctas=1), 8, 4864, 896, 132) == []
    dyn = KernelConfig(swap_ab=1, parallel_reduce=True, dyn_chunk=8)
    assert tune.column_variants(dyn, 8, 4864, 896, 132) == []
    # row slabs count: 64-row tiles at M = 256 have four
    wg = KernelConfig.from_name("t256_m4_n8_k8_s8_g8_fp32par_sw8_wg_w16_ws")
    assert [c.column_grid(256, 1152) for c in tune.column_variants(wg, 256, 1152, 896, 132)] \
        == [36, 72]


def test_the_heuristic_rule_leaves_capped_grids_out():
    """Measurements on capped grids neither compete in the sm_90 rule nor set a layer's best."""
    a, b = ("t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws", "t256_m4_n16_k8_s4_g8_fp32par_sw8_wg_w32_ws")
    rows = [dict(m=64, n=n, k=896, config=c, median_us=us)
            for n, times in ((4096, (10, 11, 1)), (8192, (20, 19, 1)))
            for c, us in zip((a, b, a + "_c1"), times)]
    without = [r for r in rows if not r["config"].endswith("_c1")]
    assert tune.heuristic_rule(rows) == tune.heuristic_rule(without)
    assert tune.heuristic_rule(rows)[64] == (a,)


_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8),
                       st.floats(allow_nan=False, allow_infinity=False))
_json = st.recursive(_json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8)


@given(head=st.dictionaries(st.text(max_size=6), _json, max_size=4),
       entries=st.lists(st.dictionaries(st.text(max_size=4), _json_leaf, max_size=4), max_size=3),
       measurements=st.one_of(st.none(), st.lists(
           st.dictionaries(st.text(max_size=4), _json_leaf, max_size=4), max_size=3)))
@settings(max_examples=60, deadline=None)
def test_write_table_round_trips(tmp_path_factory, head, entries, measurements):
    """``write_table``'s one-row-per-line JSON reads back as the same table, any keys, order
    kept."""
    table = {**head, "entries": entries}
    if measurements is not None:
        table["measurements"] = measurements
    path = tmp_path_factory.mktemp("w") / "t.json"
    tune.write_table(path, table)
    back = json.loads(path.read_text())
    assert back == table and list(back) == list(table)


def test_the_shipped_table_is_written_by_write_table(tmp_path):
    """The shipped H200 table is in ``write_table``'s form (one measurement per line), so a
    re-tune's diff names its rows and the file stays a fifth smaller than indented JSON."""
    path = tune.shipped_path("NVIDIA H200")
    tune.write_table(tmp_path / "t.json", json.loads(path.read_text()))
    assert (tmp_path / "t.json").read_text() == path.read_text()



def test_tall_twins_keep_the_tile_and_take_the_buckets_slab():
    """A narrow re-tune's tall twins (NOTES.md entry 104): the 96-row twin of a 128- or 64-row
    wgmma config keeps its tile, depth (or fewer stages), reduction and producer, with warps of
    at most 32 columns; the 48-row twin of a 32- or 64-row one keeps 64-column warps; other
    buckets, heights and mma.sync configs have none; every twin is a valid config."""
    k = KernelConfig.from_name
    assert [c.name for c in tune.tall_twins(k("t256_m8_n16_k8_s4_g8_fp32par_sw16_wg_ws"), 96)] \
        == ["t256_m6_n16_k8_s4_g8_fp32par_sw12_wg_w32_ws"]
    assert [c.name for c in tune.tall_twins(k("t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws"), 96)] \
        == ["t256_m6_n16_k8_s4_g8_fp32par_sw12_wg_w32_ws"]     # fewer stages: shared memory
    assert [c.name for c in tune.tall_twins(k("t256_m4_n32_k8_s3_g8_fp32_sw8_wg_ws"), 48)] \
        == ["t256_m3_n32_k8_s3_g8_fp32_sw6_wg_ws"]
    assert tune.tall_twins(k("t256_m4_n32_k8_s3_g8_fp32_sw8_wg_ws"), 96) == []   # 16 warps of 32
    assert tune.tall_twins(k("t256_m8_n16_k8_s4_g8_fp32par_sw16_wg_ws"), 48) == []
    assert tune.tall_twins(k("t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws"), 128) == []
    assert tune.tall_twins(k("t256_m1_n16_k8_s6_g8_fp32par_sw1_eb"), 48) == []
    assert [c.name for c in tune.tall_twins(k("t128_m8_n8_k4_s4_g8_fp32par_sw16_wg_ws_b2"), 96)] \
        == ["t128_m6_n8_k4_s4_g8_fp32par_sw12_wg_w32_ws_b2"]
    assert tune.tall_twins(k("t128_m8_n8_k4_s4_g8_fp32par_sw16_wg_ws_b2"), 48) == []  # 128 rows
    assert [c.name for c in tune.tall_twins(k("t256_m2_n8_k8_s8_g8_fp32par_sw4_wg_w16_ws"), 48)] \
        == ["t256_m3_n8_k8_s8_g8_fp32par_sw6_wg_w16_ws"]
    assert tune.tall_twins(k("t256_m2_n8_k8_s8_g8_fp32par_sw4_wg_w16_ws"), 96) == []   # 32 rows
    for name, b in (("t256_m8_n16_k8_s4_g8_fp32par_sw16_wg_ws", 96),
                    ("t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws", 96),
                    ("t256_m4_n32_k8_s3_g8_fp32_sw8_wg_ws", 48),
                    ("t128_m8_n8_k4_s4_g8_fp32par_sw16_wg_ws_b2", 96),
                    ("t256_m2_n8_k8_s8_g8_fp32par_sw4_wg_w16_ws", 48)):
        (twin,) = tune.tall_twins(k(name), b)
        assert twin.problems() == [] and twin.swap_ab == tune.TALL_TWIN_OF[b][0], (name, b)


def test_a_narrow_retune_measures_the_heuristics_tall_twins_on_every_layer(monkeypatch):
    """The narrow re-tune of bucket 48 or 96 measures the sm_90 heuristic's configs and their
    tall twins on every layer, also where the table's own top few have no twin (an mma.sync
    winner), so that ``heuristic_rule`` can rank a tall slab over the whole layer set."""
    from marlin_cupy import config
    name = "t128_m3_n4_k8_s4_g8_fp32par"               # an mma.sync config: no tall twin
    table = {"measurements": [{"n": 4096, "k": 4096, "m": m, "config": name, "median_us": 9.0}
                              for m in (40, 48, 80, 96)]}

    def got(bucket):
        return tune.narrow_job_candidates(table, 4096, 4096, bucket, 3, 128,
                                          tune.SM90_SMEM_OPTIN, 132)
    for bucket in (48, 96):
        heur = config.sm90_candidates(bucket, 4096, 4096, 128, smem_limit=tune.SM90_SMEM_OPTIN)
        twins = [t for c in heur for t in tune.tall_twins(c, bucket)]
        picked = got(bucket)
        assert picked[0].name == name and heur and len(set(picked)) == len(picked)
        assert all(c in picked for c in heur + twins)
        assert any(c.swap_ab == tune.TALL_TWIN_OF[bucket][0] for c in picked)
    # A heuristic of 64-row slabs (before NOTES.md entry 105): each gets its 48-row twin.
    sixty_four = ("t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws",
                  "t256_m4_n8_k8_s8_g8_fp32par_sw8_wg_w16_ws")
    monkeypatch.setitem(config.SM90_HEURISTIC, 48, sixty_four)
    names = [c.name for c in got(48)]
    assert names == [name, *sixty_four, "t256_m3_n16_k8_s6_g8_fp32par_sw6_wg_w32_ws",
                     "t256_m3_n8_k8_s8_g8_fp32par_sw6_wg_w16_ws"]
    # Where the bucket has no tall slab, the heuristic's configs alone.
    assert not any(c.swap_ab in (6, 12) for c in got(16))


def test_a_merge_run_measures_the_served_config_and_its_twin():
    """The config the table serves at a bucket's M is a candidate of every --merge run
    (``served_candidates``), with its tall twin, also where the bucket's stored measurements
    hold nothing (a bucket split off a taller one: NOTES.md entry 107, where 26 of 35 pairs of
    97..112 never measured it)."""
    served = "t256_m8_n16_k8_s4_g8_fp32_sw16_wg_ws_c1"
    table = {"entries": [{"n": 22016, "k": 4096, "group_size": 128, "m_bucket": 128,
                          "config": served}],
             "measurements": [{"n": 22016, "k": 4096, "m": 128, "config": served,
                               "median_us": 41.0}]}
    names = [c.name for c in tune.served_candidates(table, 22016, 4096, 112, 128,
                                                    tune.SM90_SMEM_OPTIN)]
    assert names == [served, "t256_m7_n16_k8_s4_g8_fp32_sw14_wg_w32_ws_c1"]
    assert [c.name for c in tune.served_candidates(table, 22016, 4096, 128, 128,
                                                    tune.SM90_SMEM_OPTIN)] == [served]
    # another group size, or a layer the table lacks: nothing served from the table
    assert tune.served_candidates(table, 22016, 4096, 112, 64, tune.SM90_SMEM_OPTIN) == []
    assert tune.served_candidates(table, 4096, 4096, 112, 128, tune.SM90_SMEM_OPTIN) == []


def test_slab_twins_of_80_and_112_rows():
    """``slab_twin`` (NOTES.md entry 106): the 80- and 112-row twins of the 96- and 128-row
    configs keep tile, depth, reduction, producer and grid cap, with warps of at most 32
    columns (64-column warps would hold 160 and 224 accumulators per thread, over the bound
    of 128); a config that is not wgmma, or a swap that is not a wgmma slab, has none."""
    k = KernelConfig.from_name
    assert tune.slab_twin(k("t256_m6_n16_k8_s4_g8_fp32par_sw12_wg_w32_ws"), 10).name \
        == "t256_m5_n16_k8_s4_g8_fp32par_sw10_wg_w32_ws"
    assert tune.slab_twin(k("t256_m8_n16_k8_s4_g8_fp32_sw16_wg_ws_c1"), 14).name \
        == "t256_m7_n16_k8_s4_g8_fp32_sw14_wg_w32_ws_c1"
    assert tune.slab_twin(k("t256_m8_n8_k4_s8_g8_fp32par_sw16_wg_w16_ws"), 14).name \
        == "t256_m7_n8_k4_s8_g8_fp32par_sw14_wg_w16_ws"
    assert tune.slab_twin(k("t128_m4_n4_k8_s4_g8_fp32par"), 10) is None
    assert tune.slab_twin(k("t256_m6_n16_k8_s4_g8_fp32par_sw12_wg_w32_ws"), 9) is None
    for swap in (10, 14):
        t = tune.slab_twin(k("t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws"), swap)
        assert not t.problems() and t.tile_m == 8 * swap and t.warp_cols == 32
    # The 80- and 112-row wgmma configs are valid only with thread_m_blocks = swap / 2.
    assert k("t256_m5_n16_k8_s4_g8_fp32par_sw10_wg_w32_ws").problems() == []
    assert k("t256_m6_n16_k8_s4_g8_fp32par_sw10_wg_w32_ws").problems()
    assert k("t256_m7_n16_k8_s4_g8_fp32par_sw14_wg_ws").problems()   # 64-column warps: 224 accumulators


@pytest.mark.parametrize("option", ["--reselect", "--tested"])
@pytest.mark.parametrize("content,match", [
    (None, "cannot read"), ("{not json", "cannot read"), ("{}", "is not a tuned table")])
def test_table_arguments_that_cannot_be_read_are_usage_errors(tmp_path, capsys, option,
                                                              content, match):
    path = tmp_path / "table.json"
    if content is not None:
        path.write_text(content)
    args = [option, str(path)] + (["--reselect", str(path)] if option == "--tested" else [])
    with pytest.raises(SystemExit) as e:
        tune.main(args)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"{option}: " in err and match in err and "Traceback" not in err, err
