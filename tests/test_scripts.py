"""Every script in scripts/ answers --help without a GPU: it imports against the current package
and argument parser, prints its usage, exits 0 and writes nothing (compile_times.py once took
"--help" for its output path and compiled every kernel into a file of that name)."""
import math
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


def _load(name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_timeline_summary_parts_and_wraparound():
    np = pytest.importorskip("numpy")
    tp = _load("timeline_probe")
    t0 = (1 << 32) - 500                      # %globaltimer_lo wraps inside this launch
    pts = np.array([[0, 100, 300, 1500, 8000, 8500, 9500],
                    [50, 150, 400, 1600, 8500, 8900, 10000]], dtype=np.int64) + t0
    st = np.zeros((3, tp.STRIDE), dtype=np.int64)
    st[:2, :7] = pts % (1 << 32)
    st[2, 0] = (t0 + 20) % (1 << 32)          # a CTA without work: entry only
    s = tp.summarize(st.astype(np.uint32).view(np.int32), 12.0)
    assert s["busy_ctas"] == 2 and s["start_skew"] == 50 and s["span"] == 10000
    assert (s["setup"], s["issue"], s["first_wait"]) == (100, 225, 1200)
    assert (s["stream"], s["cta_reduce"], s["cross"]) == (6700, 450, 1050)
    assert s["stream_max"] == 6900 and s["imbalance"] == 10000 - 9725
    # No CTA ended in a split column (points 7 and 8 never written): no cross split.
    assert s["split_ctas"] == 0
    assert all(s[p] == 0.0 and s[p + "_max"] == 0.0 for p in tp.CROSS_PARTS)
    # Now the first CTA's last column is split: it waited 300 ns after its in-CTA reduction
    # (point 7 at 8800), added until 9400 (point 8) and exited at 9500.
    st[0, 7], st[0, 8] = (t0 + 8800) % (1 << 32), (t0 + 9400) % (1 << 32)
    s = tp.summarize(st.astype(np.uint32).view(np.int32), 12.0)
    assert s["split_ctas"] == 1
    assert (s["cross_wait"], s["cross_sum"], s["cross_end"]) == (300, 600, 100)
    assert s["cross_sum_max"] == 600 and s["cross"] == 1050   # over every busy CTA, as before
    # critical(): the CTA that exits last is the second (10000), whose column is not split.
    c = tp.critical(st.astype(np.uint32).view(np.int32))
    assert c["crit_start"] == 50 and c["crit_setup"] == 100 and c["crit_stream"] == 6900
    assert c["crit_cross"] == 1100 and c["crit_split"] == 0.0
    assert all(c["crit_" + p] == 0.0 for p in tp.CROSS_PARTS)
    assert c["crit_stream_lag"] == 8500 - 8250             # its stream end past the median
    # Now the first CTA exits last (10200) after a split column's wait, sum and release.
    st[0, 6] = (t0 + 10200) % (1 << 32)
    c = tp.critical(st.astype(np.uint32).view(np.int32))
    assert c["crit_start"] == 0 and c["crit_split"] == 1.0
    assert (c["crit_cross_wait"], c["crit_cross_sum"], c["crit_cross_end"]) == (300, 600, 800)
    assert c["crit_cross"] == 1700 and c["crit_stream_lag"] == 8000 - 8250


def test_timeline_slow_sm_consistency():
    np = pytest.importorskip("numpy")
    tp = _load("timeline_probe")

    def launch(stream_by_sm, order):
        sm = np.array(order)
        rel = np.zeros((len(sm), 7), dtype=np.int64)
        rel[:, 3] = 1000
        rel[:, 4] = 1000 + np.array([stream_by_sm[k] for k in sm])
        return rel, sm

    fixed = {0: 100, 1: 200, 2: 300, 3: 400}
    # The same SMs slow every time, whichever CTA ran where: 1.
    same = [launch(fixed, [0, 1, 2, 3]), launch(fixed, [3, 2, 1, 0])]
    assert tp.slow_sm_consistency(same) == pytest.approx(1.0)
    # The order reversed in the second launch: -1.
    rev = {k: 500 - v for k, v in fixed.items()}
    assert tp.slow_sm_consistency([launch(fixed, [0, 1, 2, 3]),
                                   launch(rev, [0, 1, 2, 3])]) == pytest.approx(-1.0)
    # One launch, or one SM in common: no answer.
    assert np.isnan(tp.slow_sm_consistency(same[:1]))
    assert np.isnan(tp.slow_sm_consistency([launch(fixed, [0]), launch(fixed, [0, 1])]))
    # relative(): busy CTAs only, times after the first entry, SM ids from the last column.
    st = np.zeros((3, tp.STRIDE), dtype=np.int64)
    st[0, :7] = [10, 20, 30, 40, 50, 60, 70]
    st[1, :7] = [15, 25, 35, 45, 55, 65, 75]
    st[2, 0] = 12                              # no work
    st[:, tp.STRIDE - 1] = [5, 9, 7]
    rel, sm = tp.relative(st.astype(np.int32))
    assert rel.tolist() == [[0, 10, 20, 30, 40, 50, 60], [5, 15, 25, 35, 45, 55, 65]]
    assert sm.tolist() == [5, 9]


def test_wgmma_probe_summary_sums_dispatch_best_and_better_of_both():
    wp = _load("wgmma_probe")
    rows = [{"k": 1, "n": 2, "m": 4, "config": "dispatch", "median_us": 10.0},
            {"k": 1, "n": 2, "m": 4, "config": "a", "median_us": 8.0},
            {"k": 1, "n": 2, "m": 4, "config": "b", "median_us": 9.0},
            {"k": 3, "n": 2, "m": 4, "config": "dispatch", "median_us": 5.0},
            {"k": 3, "n": 2, "m": 4, "config": "a", "median_us": 6.0},
            {"k": 3, "n": 2, "m": 4, "config": "c", "error": "boom"},
            {"k": 1, "n": 2, "m": 8, "config": "dispatch", "median_us": 20.0}]
    s = wp.summarize(rows)
    assert s[4] == {"dispatch_us": 15.0, "best_us": 14.0, "either_us": 13.0, "layers_won": 1}
    # a layer with no candidate counts as never won, and the better of both is the dispatch
    assert s[8]["either_us"] == 20.0 and s[8]["layers_won"] == 0


def test_sass_identity_loop_region_is_the_schedule_between_the_mmas():
    si = _load("sass_identity")
    insns = ["MOV R1, c[0x0][0x28]", "HMMA.16816.F32 R4, R8, R12, R4", "LOP3.LUT R2, R3, 0xf, RZ",
             "HADD2 R5, R5, -1032", "HGMMA.64x16x16.F32 R24, gdesc[UR4], R24", "BRA 0x10", "EXIT"]
    assert si.loop_region(insns) == ["HMMA.16816.F32 R, R, R, R", "LOP3.LUT R, R, 0xf, RZ",
                                     "HADD2 R, R, -1032", "HGMMA.64x16x16.F32 R, gdesc[R], R"]
    assert si.loop_region(["MOV R1, R2", "EXIT"]) == []
    # Another register allocation is the same schedule; a swapped pair is two moved lines.
    other = [t.replace("R4", "R40") for t in insns]
    assert si.differing(si.loop_region(insns), si.loop_region(other)) == 0
    swapped = insns[:2] + [insns[3], insns[2]] + insns[4:]
    assert si.differing(si.loop_region(insns), si.loop_region(swapped)) == 2


def test_sass_identity_hot_loops_are_the_bodies_with_mmas():
    si = _load("sass_identity")
    lines = [".L_x_0:", "MOV R1, R2", "@P0 BRA `(.L_x_0)", "S2R R0, SR_TID.X",
             ".L_x_1:", "LDS R4, [R2]", "HMMA.16816.F32 R8, R4, R6, R8", "ISETP.NE P1, R3, R9",
             "@P1 BRA `(.L_x_1)", ".L_x_2:", "HMMA.16816.F32 R8, R4, R6, R8", "BRA `(.L_x_3)",
             ".L_x_3:", "EXIT"]
    loops = si.hot_loops(lines)
    # The first loop holds no MMA; the branch to .L_x_3 goes forward: one loop.
    assert loops == [["LDS R, [R]", "HMMA.16816.F32 R, R, R, R", "ISETP.NE R, R, R",
                      "@R BRA `(L)"]]
    # Other registers and labels: the same body.
    other = [x.replace("R4", "R12").replace("P1", "P3").replace("_x_1", "_x_7") for x in lines]
    assert si.hot_loops(other) == loops
    # An outer loop around it counts as a second, larger one.
    outer = [".L_x_9:"] + lines[4:9] + ["IADD3 R2, R2, 1, RZ", "@P2 BRA `(.L_x_9)"]
    assert [len(x) for x in si.hot_loops(outer)] == [4, 6]


def test_sass_loop_size_reads_the_opcode_through_a_predicate():
    lm = _load("sass_loop_size")
    assert lm.opcode("@!P0 LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64] ;") == \
        "LDGSTS.E.BYPASS.128"
    assert lm.opcode("HMMA.16816.F32 R, R, R, R ;") == "HMMA.16816.F32"
    assert lm.opcode("EXIT;") == "EXIT"


def test_sm_spread_separates_the_sms_own_part_from_the_launch():
    pytest.importorskip("numpy")
    ss = _load("sm_spread")

    def launch(streams, sm):
        return [[0, 0, 0, 0, t, 0, 0] for t in streams], sm
    # SM 3 is twice as slow in both launches: its own part, which a speed-aware partition
    # removes (bound 1.0); the other SMs are the median.
    s = ss.spread([launch([10, 10, 10, 20], [0, 1, 2, 3]),
                   launch([10, 10, 10, 20], [0, 1, 2, 3])], [4, 4, 4, 4])
    assert s["sm_part"] == {0: 1.0, 1: 1.0, 2: 1.0, 3: 2.0}
    assert s["max_rel"] == [2.0, 2.0] and s["bound"] == [1.0, 1.0]
    # A short last stripe is less work, not a fast SM.
    s = ss.spread([launch([10, 10, 10, 5], [0, 1, 2, 3])], [4, 4, 4, 2])
    assert s["sm_part"][3] == 1.0 and s["max"] == 1.0
    # A slow CTA on another SM in each launch is the launch's, not the SM's: it stays.
    s = ss.spread([launch([10, 10, 10, 15], [0, 1, 2, 3]),
                   launch([15, 10, 10, 10], [0, 1, 2, 3])], [4, 4, 4, 4])
    assert s["sm_part"][0] == s["sm_part"][3] == 1.25
    assert s["bound"] == [1.2, 1.2]


def test_power_probe_takes_a_list_of_probe_builds():
    """--probe: one build, several in the order given (each once), or none (0)."""
    pp = _load("power_probe")
    assert pp.probe_list("8") == [8]
    assert pp.probe_list("1,8,16") == [1, 8, 16]
    assert pp.probe_list("16,1,16") == [16, 1]
    assert pp.probe_list("0") == [] and pp.probe_list("0,8") == [8]
    with pytest.raises(ValueError):
        pp.probe_list("-1")


def test_l2_read_probe_keeps_the_slowest_cta():
    np = pytest.importorskip("numpy")
    lp = _load("l2_read_probe")
    t = np.array([[100, 400], [120, 900], [50, 60]], dtype=np.uint64)
    assert lp.slowest_ns(t) == 780.0
    assert lp.slowest_ns(t.reshape(-1)) == 780.0     # as the kernel writes it: flat pairs


@pytest.mark.parametrize("name", ["wgmma_rate", "ss_probe", "l2_read_probe", "cluster_probe",
                                  "path_probe", "tma_probe", "dequant_rate"])
def test_probe_kernels_compile_for_sm90a_without_spills(name):
    """The standalone probes' kernels (built from strings, so check_compile does not see them)
    compile through NVRTC for sm_90a with no local memory."""
    pytest.importorskip("cupy", reason="NVRTC comes with CuPy")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    import importlib
    from marlin_cupy import jit
    module = importlib.import_module(name)
    src = module.source(True) if name == "l2_read_probe" else module.source()  # with --bulk
    _, reports = jit.compile_offline(src, "sm_90a")
    assert reports
    for r in reports:
        assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, r


def test_dequant_rate_counts_the_flops_of_its_steps():
    """A unit is 8 steps with two A buffers and 6 with three (a multiple of the buffers, so
    the loop's buffer index is a constant); each step is J m64nNk16 wgmma per warpgroup."""
    dr = _load("dequant_rate")
    assert dr.steps_per_unit(1) == 8 and dr.steps_per_unit(2) == 6
    for n, j, d, u, wgs in dr.VARIANTS:
        assert dr.steps_per_unit(d) % (d + 1) == 0
        assert n in (32, 64) and j in (2, 4) and u in dr.UNPACK_NAMES and 1 <= wgs <= 4
        assert dr.smem_bytes(n, j, d) <= 227 * 1024
    assert dr.flop(64, 2, 1, 10, 2, 132) == 2.0 * 64 * 64 * 16 * 2 * 8 * 10 * 2 * 132
    assert dr.entry(64, 4, 2, 1) == "dequant_rate_n64_j4_d2_u1"
    assert dr.entry(64, 2, 1, 2, 3) == "dequant_rate_n64_j2_d1_u2_f3"
    src = dr.source()
    assert all(dr.entry(*v[:4]) in src for v in dr.VARIANTS)
    assert all(dr.entry(*v[:4], f) in src for v in dr.FENCED for f in dr.FENCE_KINDS)
    assert len(dr.all_entries()) == len(dr.VARIANTS) + len(dr.FENCED) * len(dr.FENCE_KINDS)
    one = dr.source([(3, 64, 2, 2, 2, 2)])     # what --only selects is all that is built
    assert dr.entry(64, 2, 2, 2, 3) in one and dr.entry(64, 2, 2, 2) + "(" not in one


def test_ss_probe_packing_puts_k_in_order_after_the_dequantization():
    """Nibble i of a word holds K row PERM[i]: the magic-number dequantization yields pairs
    (nibble 0, 4), (1, 5), (2, 6), (3, 7), which must be K rows (0, 1), (2, 3), (4, 5), (6, 7)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    import numpy as np
    import ss_probe
    pairs = [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert [(ss_probe.PERM[a], ss_probe.PERM[b]) for a, b in pairs] == [(0, 1), (2, 3), (4, 5),
                                                                         (6, 7)]
    q = np.random.default_rng(0).integers(0, 16, (16, 3), dtype=np.uint8)
    words = ss_probe.pack(q, np)
    for j in range(2):
        for n in range(3):
            nib = [(int(words[j, n]) >> (4 * i)) & 15 for i in range(8)]
            assert [nib[i] for pair in pairs for i in pair] == list(q[8 * j:8 * j + 8, n])


def test_ss_probe_tiled_layout_puts_a_columns_stage_in_32_contiguous_bytes():
    """tile_words: word (8 kt + j, n) of the row layout sits at flat index
    ((n // 256 * K/64 + kt) * 256 + n % 256) * 8 + j, which is what load_words<TILED> reads."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    import numpy as np
    import ss_probe
    k8, n = 3 * 8, 2 * ss_probe.BN
    words = np.arange(k8 * n, dtype=np.uint32).reshape(k8, n)
    flat = ss_probe.tile_words(words, np)
    kt_count = k8 // 8
    for kt in range(kt_count):
        for col in (0, 1, 255, 256, 511):
            for j in range(8):
                idx = ((col // ss_probe.BN * kt_count + kt) * ss_probe.BN + col % ss_probe.BN) * 8 + j
                assert flat[idx] == words[8 * kt + j, col]
    assert sorted(flat.tolist()) == list(range(k8 * n))


# A wgmma main loop in nvdisasm's format: prologue, a unit loop whose K steps hold the HGMMAs,
# a forward branch over the column epilogue, the unit tail, and code after the loop.
_SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   STL [R1], R114 ;
.L_x_1:
        /*0020*/                   IMAD R2, R3, 0x800, R4 ;
        /*0030*/                   HGMMA.64x64x16.F32 R24, R168, gdesc[UR4], R24 ;
        /*0040*/                   R2UR UR4, R2 ;
        /*0050*/                   LDC R5, c[0x0][0x210] ;
        /*0060*/                   LDL R6, [R1] ;
        /*0070*/                   HGMMA.64x64x16.F32 R24, R152, gdesc[UR4], R24 ;
        /*0080*/              @P0 BRA `(.L_x_2) ;
        /*0090*/                   STG.E desc[UR6][R8.64], R9 ;
        /*00a0*/                   STL [R1+0x4], R9 ;
.L_x_2:
        /*00b0*/                   IADD3 R3, R3, 0x1, RZ ;
        /*00c0*/              @P1 BRA `(.L_x_1) ;
        /*00d0*/                   LDL R7, [R1+0x4] ;
        /*00e0*/                   EXIT ;
""".splitlines()


def test_sass_spill_sites_classifies_regions_and_uniform_moves():
    ss = _load("sass_spill_sites")
    counts, sizes, moves = ss.classify(_SASS)
    assert counts == {"prologue": 1, "k_steps": 1, "epilogue": 1, "unit_tail": 0,
                      "after_loop": 1}
    assert sizes == {"prologue": 2, "k_steps": 5, "epilogue": 3, "unit_tail": 3, "after_loop": 2}
    assert moves == {"R2UR": 1, "LDC": 1}


def test_stripe_balance_cuts_as_the_kernel_does():
    from marlin_cupy.config import KernelConfig
    sb = _load("stripe_balance")
    # 8192x8192 with 256x128 tiles at M = 64: 32 x 64 = 2048 units; 132 SMs give stripes of
    # ceil(2048 / 132) = 16 units, so 128 CTAs have work and 4 SMs none.
    cfg = KernelConfig.from_name("t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32")
    assert sb.stripes(cfg, 64, 8192, 8192, 132) == (2048, 16, 128, 2048 / (132 * 16))
    # 65 rows run as two 64-row slabs: twice the units.
    assert sb.stripes(cfg, 65, 8192, 8192, 132)[:3] == (4096, 32, 128)
    # Two CTAs per SM: 264 slots. 5120x5120 with 256x128 tiles: 800 units, stripes of 4.
    b2 = KernelConfig.from_name("t128_m1_n16_k8_s4_g8_fp32par_sw2_wg_b2")
    assert sb.stripes(b2, 16, 5120, 5120, 132) == (800, 4, 200, 800 / (264 * 4))
    # Fewer units than slots: one unit per CTA, the rest of the grid absent.
    assert sb.stripes(cfg, 64, 256, 1024, 132) == (8, 1, 8, 8 / 132)


def test_stripe_balance_depths_shorten_or_fill_the_stripes():
    from marlin_cupy.config import KernelConfig
    sb = _load("stripe_balance")
    cfg = KernelConfig.from_name("t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32")
    # 8192x8192 at M = 64: 128 CTAs x 16. One unit shorter: 131 x 15 at K = 7808; every slot
    # busy with stripes of 16: K = 8448 (2112 = 132 x 16 units).
    assert sb.depths(cfg, 64, 8192, 8192, 132) == (7808, 8448)
    assert sb.stripes(cfg, 64, 8192, 7808, 132)[1:3] == (15, 131)
    assert sb.stripes(cfg, 64, 8192, 8448, 132)[1:4] == (16, 132, 1.0)
    # 5120x5120 at M = 8 with 256-deep tiles: 100 CTAs x 4; K in multiples of 256.
    sw1 = KernelConfig.from_name("t256_m1_n16_k16_s4_g8_fp32par_sw1")
    assert sb.depths(sw1, 8, 5120, 5120, 132) == (4864, 6656)
    # 64-deep tiles move K in whole groups (128); stripes of one unit have no shorter K.
    k4 = KernelConfig.from_name("t256_m8_n16_k4_s8_g8_fp32par_sw16_wg")
    lo, fill = sb.depths(k4, 128, 5120, 13824, 132)
    assert lo % 128 == 0 and fill % 128 == 0
    assert sb.depths(cfg, 64, 256, 1024, 132)[0] is None


@pytest.mark.parametrize("args, message", [
    (["--define", "MARLIN_BULK=1.5"], "--define: 'MARLIN_BULK=1.5' is not NAME=INTEGER"),
    (["--define", ","], "give --define (naming a switch), --variant, or both"),
    ([], "give --define (naming a switch), --variant, or both"),
    (["--variant", "fast"], "--variant 'fast': 'producer', 'early_bottom', 'top_sum', 'dyn=Q' or"),
    (["--variant", "threads=384"], "threads=T wants 128, 256 or 512"),
    (["--variant", "threads=x"], "threads=T wants 128, 256 or 512"),
    (["--variant", "threads=512,warp_n=8"], "threads=T wants 128, 256 or 512"),
    (["--variant", "dyn=0"], "dyn=Q wants a positive number of units per chunk"),
    (["--variant", "dyn=x"], "dyn=Q wants a positive number of units per chunk"),
    (["--define", "MARLIN_BULK=1", "--base-define", "bulk=1"], "--base-define: 'bulk=1'"),
    (["--table-a", "t.json", "--variant", "producer"], "--table-a compares two tables"),
    (["--table-a", "t.json", "--top", "2"], "--table-a compares two tables"),
])
def test_ab_probe_refuses_malformed_switches(args, message, tmp_path, monkeypatch, capsys):
    """ab_probe parses its switches as $MARLIN_CUPY_DEFINES does, before touching a GPU."""
    monkeypatch.delenv("MARLIN_CUPY_DEFINES", raising=False)
    ab = _load("ab_probe")
    with pytest.raises(SystemExit) as e:
        ab.main([str(tmp_path / "out.json"), *args])
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_timeline_select_layers():
    tp = _load("timeline_probe")
    shapes = [(4096, 12288), (4096, 4096), (8192, 57344)]
    assert tp.select_layers(shapes, "") == shapes
    assert tp.select_layers(shapes, "8192,57344; 4096,12288") == [(4096, 12288), (8192, 57344)]
    with pytest.raises(ValueError, match="not among"):
        tp.select_layers(shapes, "57344,8192")
    with pytest.raises(ValueError, match="K,N pair"):
        tp.select_layers(shapes, "8192x57344")


def test_dynamic_bound_fluid_limit():
    np = pytest.importorskip("numpy")
    db = _load("dynamic_bound")
    assert db.stripe_units(10, 4).tolist() == [3, 3, 3, 1]
    # Two CTAs with 4 units each, both starting at 0: one streams at 1 unit/ns, the other at
    # 0.5. Static: the slow one ends at 8. Shared: 1.5 units/ns for 8 units ends at 16/3.
    pts = np.zeros((2, 7))
    pts[:, 4] = [4.0, 8.0]
    last, f, med, fluid = db.fluid_end(pts, np.array([4.0, 4.0]))
    assert last == 8.0 and f == pytest.approx(16 / 3) and fluid == pytest.approx(16 / 3)
    assert med == 6.0
    # Equal rates and starts: nothing to gain.
    pts = np.zeros((2, 7))
    pts[:, 3] = [1.0, 1.0]
    pts[:, 4] = [5.0, 5.0]
    last, f, _, _ = db.fluid_end(pts, np.array([4.0, 4.0]))
    assert f == pytest.approx(last) == 5.0
    # Equal rates, one CTA starting 1 ns later: the early one takes half a unit more.
    pts[0, 3], pts[0, 4] = 0.0, 4.0
    last, f, _, _ = db.fluid_end(pts, np.array([4.0, 4.0]))
    assert last == 5.0 and f == pytest.approx(4.5)


def test_dynamic_bound_handout_by_hand():
    np = pytest.importorskip("numpy")
    db = _load("dynamic_bound")
    # Rates 1 and 0.5 units/ns from 0, 8 units in chunks of one: both draw at 0 (index order),
    # CTA 0 again at 1, both at 2 (CTA 0 first), CTA 0 at 3, both at 4 (the last two units):
    # CTA 1's last unit ends at 6. The static stripes (4 + 4) end at 8, the fluid limit 16/3.
    assert db.handout_end([0, 0], [1, 0.5], 8, 1, 0.0) == pytest.approx(6.0)
    # Equal rates, whole stripes' worth of units: nothing moves, whatever the chunk.
    for chunk in (1, 2, 4):
        assert db.handout_end([0, 0], [1, 1], 8, chunk, 0.0) == pytest.approx(4.0)
    # A chunk's cost is paid only between two pieces of work on one CTA: one CTA, four chunks.
    assert db.handout_end([0], [1], 8, 2, 0.5) == pytest.approx(8 + 3 * 0.5)
    # Guided, one CTA: 10 units as 5, 3, 1, 1 (ceil(left / 2), at least 1): three ends paid.
    assert db.handout_end([0], [1], 10, 1, 1.0, guided=2) == pytest.approx(13.0)
    # A static share of 1 is the static stripes, whatever the cost.
    units = np.array([4.0, 4.0])
    assert db.scheme_end([0, 1], [1, 0.5], units, chunk=1, cost=9.0, share=1.0) == \
        pytest.approx(9.0)
    # Half static: 2 + 2 units first (ending at 2 and 5), then 4 in chunks of 2: CTA 0 at 2
    # (after the cost, 3 to 5), then at 5 both are free and CTA 0 (the lower index) takes the
    # last chunk (6 to 8); CTA 1 finds none left.
    assert db.scheme_end([0, 1], [1, 0.5], units, chunk=2, cost=1.0, share=0.5) == \
        pytest.approx(8.0)
    with pytest.raises(ValueError, match="static units exceed"):
        db.handout_end([0], [1], 2, 1, 0.0, static=[3])
    with pytest.raises(ValueError, match="positive rates"):
        db.handout_end([0], [0], 2, 1, 0.0)


@pytest.mark.parametrize("text, kw", [("q4", {"chunk": 4}), ("h0.85q2", {"chunk": 2, "share": 0.85}),
                                      ("h1q1", {"chunk": 1, "share": 1.0}),
                                      ("g2q1", {"chunk": 1, "guided": 2.0})])
def test_dynamic_bound_schemes_parse(text, kw):
    assert _load("dynamic_bound").parse_scheme(text) == kw


@pytest.mark.parametrize("text", ["q0", "h0q2", "h1.5q2", "x4", "q", "g2", "h.5"])
def test_dynamic_bound_schemes_refused(text):
    with pytest.raises(ValueError, match="scheme"):
        _load("dynamic_bound").parse_scheme(text)


def test_dynamic_bound_handout_between_fluid_and_one_chunk_more():
    """List scheduling from a common start: the last draw comes no later than the fluid end F
    (every CTA busy until then), so the end is within one chunk of the slowest CTA past F."""
    np = pytest.importorskip("numpy")
    hyp = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")
    db = _load("dynamic_bound")

    @hyp.settings(max_examples=200, deadline=None)
    @hyp.given(st.lists(st.floats(0.05, 4.0), min_size=1, max_size=12),
               st.integers(1, 300), st.integers(1, 8), st.sampled_from([0.0, 1.5, 3.0]))
    def check(rates, total, chunk, guided):
        rates = np.array(rates)
        end = db.handout_end(np.zeros(len(rates)), rates, total, chunk, 0.0, guided=guided)
        fluid = total / rates.sum()
        longest = max(chunk, math.ceil(total / (guided * len(rates)))) if guided else chunk
        assert fluid * (1 - 1e-9) <= end <= fluid + longest / rates.min() + 1e-9

    check()


def test_dynamic_bound_row_handout(tmp_path):
    db = _load("dynamic_bound")
    # t256_m1_n8_k8: 128 x 128 units; 512 x 256 at M = 1 is 4 x 2 = 8 units, two stripes of 4.
    # CTA 0 streams from 0 to 4 ns, CTA 1 from 0 to 8: as in the hand-worked case, q1 at no
    # cost ends at 6 ns, 2 ns (0.002 µs) sooner.
    pts = [[0, 0, 0, 0, 4, 5, 6], [0, 0, 0, 0, 8, 9, 10]]
    row = {"k": 512, "n": 256, "m": 1, "config": "t256_m1_n8_k8_s8_g8_fp32par_sw1", "grid": 2,
           "raw": [{"points_ns": pts, "sm": [0, 1]}]}
    got = db.row_handout(row, ["q1", "h1q1"], [0.0, 0.001])
    assert got[("q1", 0.0)] == pytest.approx(0.002)
    assert got[("h1q1", 0.0)] == got[("h1q1", 0.001)] == pytest.approx(0.0)
    lines = db.handout_table([row], ["q1", "h1q1"], [0.0, 0.001])
    assert lines[-1] == "| 1 | best per layer, or static | +0.00 | +0.00 |"
    assert any(x.startswith("| 512x256 | 1 | q1 | +0.00 | ") for x in lines)


def test_dynamic_bound_row_needs_raw_points():
    db = _load("dynamic_bound")
    with pytest.raises(ValueError, match="--raw"):
        db.row_bound({"k": 4096, "n": 4096, "m": 1, "config": "t256_m1_n8_k8_s8_g8_fp32par_sw1",
                      "grid": 132})


def test_tune_classes_best_per_class_and_first_match_wins(tmp_path, capsys):
    import gzip
    import json
    import re
    tc = _load("tune_classes")
    meas = [dict(n=8, k=16, m=64, config=c, median_us=t) for c, t in (
        ("t512_a_ws", 9.0), ("t512_b_ws", 12.0), ("t512_c", 11.0), ("t256_x", 10.0),
        ("t256_y", 10.5))] + [dict(n=8, k=16, m=128, config="t256_x", median_us=20.0),
                              dict(n=8, k=16, m=8, config="t512_c", median_us=1.0)]
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"device_name": "X", "git_commit": "c", "date": "d", "measurements": meas}, f)
    # "t512_a_ws" matches both classes: the first one named takes it.
    assert tc.main([str(path), "--class", "ws=^t512.*_ws$", "--class", "t512=^t512",
                    "--m", "64,128", "--out", str(tmp_path / "s.md")]) == 0
    best = tc.best_by_class(meas, [("ws", re.compile("^t512.*_ws$")), ("t512", re.compile("^t512"))],
                            {64, 128})
    assert best[(8, 16, 64)] == {"ws": ("t512_a_ws", 9.0), "t512": ("t512_c", 11.0),
                                 "others": ("t256_x", 10.0)}
    assert best[(8, 16, 128)] == {"others": ("t256_x", 20.0)}
    assert (8, 16, 8) not in best
    text = (tmp_path / "s.md").read_text()
    assert "| 8 | 16 | 64 | 10.00 | `t256_x` | `t512_a_ws` | -10.0 % | `t512_c` | +10.0 % |" in text
    assert "- ws: faster than the others' best on 1 of 1 layer-buckets" in text
    assert "- t512: faster than the others' best on 0 of 1 layer-buckets" in text
    with pytest.raises(SystemExit):
        tc.main([str(path), "--class", "others=x"])


def _ab_sets_text(tmp_path, record, *args) -> str:
    """ab_sets.py's markdown for one A/B ``record`` written to a file, with ``args`` added."""
    import json
    path, out = tmp_path / "ab.json", tmp_path / "s.md"
    path.write_text(json.dumps(record))
    assert _load("ab_sets").main([str(path), *args, "--out", str(out)]) == 0
    return out.read_text()


def test_ab_sets_sums_dispatched_rows_of_complete_sets(tmp_path):
    import json
    ab = _load("ab_sets")
    sets = {"s1": ((16, 8), (32, 8)), "s2": ((16, 8), (64, 8))}
    rows = [dict(k=16, n=8, m=1, a_us=1.0, b_us=2.0, dispatch=True),
            dict(k=32, n=8, m=1, a_us=3.0, b_us=4.0, dispatch=True),
            dict(k=32, n=8, m=1, a_us=0.1, b_us=0.1, dispatch=False),   # a --top row: not summed
            dict(k=64, n=8, m=2, a_us=5.0, b_us=5.0, dispatch=True)]
    # s2 lacks (64, 8) at M = 1 and (16, 8) at M = 2: left out, not summed short.
    assert ab.set_sums(rows, sets) == {("s1", 1): (4.0, 6.0)}
    path = tmp_path / "ab.json"
    path.write_text(json.dumps({"define": "X=1", "rows": rows, "environment": {"git_commit": "c"},
                                "table_commit": "t"}))
    out = tmp_path / "s.md"
    with pytest.raises(SystemExit):   # main() sums the real sets: none is complete in these rows
        ab.main([str(path), "--out", str(out)])
    path.write_text(json.dumps({"define": "X=1", "rows": [
        dict(k=k, n=n, m=16, a_us=1.0, b_us=2.0, dispatch=True)
        for k, n in ((4096, 12288), (4096, 4096), (4096, 22016), (11008, 4096))]}))
    assert ab.main([str(path), "--out", str(out)]) == 0
    assert "| llama2-7b | 16 | 8.0 | 4.0 | -50.0 % |" in out.read_text()


def test_wave_probe_oversubscribes_only_configs_that_never_wait():
    """A grid beyond residency deadlocks a config whose CTAs wait on each other (the serial
    chain, the shared sum of tiles from 32 rows): wave_probe.py must leave those alone. The
    kernel draws the same line (tests/test_kernel_source.py, test_shared_sum_from_32_rows)."""
    pytest.importorskip("cupy")
    from marlin_cupy.config import KernelConfig
    never_waits = _load("wave_probe").never_waits
    assert never_waits(KernelConfig.from_name("t256_m1_n16_k8_s4_g8_fp32par_sw1_b2"))
    assert never_waits(KernelConfig.from_name("t128_m1_n16_k8_s3_g8_fp32par_sw2_wg_ws_b2"))
    assert not never_waits(KernelConfig.from_name("t256_m2_n16_k8_s6_g8_fp32par_sw4_wg_w32_ws"))
    assert not never_waits(KernelConfig.from_name("t256_m1_n8_k16_s6_g8_fp32"))
    assert not never_waits(KernelConfig.from_name("t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws"))
    # The early-bottom and top-sum builds wait for each other's words (a review, session 60).
    from marlin_cupy.config import EARLY_BOTTOM_EXAMPLES, TOP_SUM_EXAMPLES
    for cfg in (*EARLY_BOTTOM_EXAMPLES, *TOP_SUM_EXAMPLES):
        assert not never_waits(cfg), cfg.name
    assert not never_waits(KernelConfig.from_name("t256_m1_n16_k8_s4_g8_fp32par_sw1_b2")
                           .with_(dyn_chunk=8))


def test_launch_cost_fit_recovers_a_fixed_cost_and_a_rate():
    """Times made as fixed + bytes / rate are split back into the two; the gap to another
    provider splits into the layers' share of the fixed costs and the bytes' share of the
    rates, with nothing left over."""
    pytest.importorskip("numpy")
    fit_mod = _load("launch_cost_fit")
    sizes = [(4096, 4096), (4096, 12288), (8192, 28672), (5120, 5120)]
    mine = [("s", k, n, k * n // 2, 9.0 + k * n / 2 / 1e6 / 4.2) for k, n in sizes]
    read = [("s", k, n, k * n // 2, 4.5 + k * n / 2 / 1e6 / 4.5) for k, n in sizes]
    fixed, rate, resid = fit_mod.fit([(b, t) for *_, b, t in mine])
    assert fixed == pytest.approx(9.0) and rate == pytest.approx(4.2) and resid < 1e-9
    (t_m, t_r, f_part, r_part), = fit_mod.split_gap(mine, read).values()
    assert f_part == pytest.approx(4 * 4.5)
    assert t_m - t_r == pytest.approx(f_part + r_part)
    with pytest.raises(ValueError):
        fit_mod.fit([(1e6, 3.0), (1e6, 4.0)])     # one size: no slope


def test_stripe_stall_counts_mid_stripe_split_ends():
    ss = _load("stripe_stall")
    # 2 columns of 6 units, 4 CTAs of 3 units: columns end at units 5 and 11, each at a
    # stripe's last unit, so no CTA has a mid-stripe end.
    assert ss.mid_stripe_splits(12, 6, 4).tolist() == [0, 0, 0, 0]
    # 3 columns of 4 units, 4 CTAs of 3 units: column 0 (units 0..3) ends at unit 3, inside
    # CTA 1's stripe (3..5) and shared with CTA 0; column 1 likewise in CTA 2's; column 2 ends
    # with CTA 3's stripe.
    assert ss.mid_stripe_splits(12, 4, 4).tolist() == [0, 1, 1, 0]
    # A column held whole inside a stripe is not split: 12 units of columns of 2, 2 CTAs.
    assert ss.mid_stripe_splits(12, 2, 2).tolist() == [0, 0]


def test_stripe_stall_row_groups_and_penalty():
    np = pytest.importorskip("numpy")
    ss = _load("stripe_stall")
    # t256_m1_n8_k8_s8_g8_fp32par_sw1: tile_k 128, tile_n 128. K = 512 (4 k tiles), N = 384
    # (3 columns), grid 4: iters 3, CTAs 1 and 2 have a mid-stripe split end (as above).
    cfg = "t256_m1_n8_k8_s8_g8_fp32par_sw1"
    pts = np.zeros((4, 7))
    pts[:, 3] = 100.0
    pts[:, 4] = 100.0 + np.array([3000.0, 4000.0, 4200.0, 3100.0])
    row = {"k": 512, "n": 384, "m": 1, "config": cfg, "grid": 4,
           "raw": [{"points_ns": pts.tolist(), "sm": [0, 1, 2, 3]}] * 2}
    s = ss.row_stalls(row)
    assert s["groups"][0]["ctas"] == 2 and s["groups"][1]["ctas"] == 2
    assert s["groups"][1]["max_us"] == pytest.approx(4.2)
    assert s["penalty_us"] == pytest.approx((4.0 + 4.2) / 2 - (3.0 + 3.1) / 2)
    assert s["slowest_has_split"] == 1.0
    with pytest.raises(ValueError, match="--raw"):
        ss.row_stalls({k: v for k, v in row.items() if k != "raw"})


def test_stripe_stall_what_if_moves_the_groups_by_their_latest_arrival():
    np = pytest.importorskip("numpy")
    ss = _load("stripe_stall")
    # The layout above: 3 columns of 4 units, 4 CTAs of 3. CTAs 1 and 2 hold the bottoms of
    # columns 0 and 1 inside their stripes; by their last column the CTAs wait as {0}, {1}
    # and {2, 3} (column 2, split between CTAs 2 and 3).
    cfg = "t256_m1_n8_k8_s8_g8_fp32par_sw1"
    stream = np.array([3000.0, 4000.0, 4200.0, 3100.0])
    pts = np.zeros((4, 9))
    pts[:, 3] = 100.0
    pts[:, 4] = 100.0 + stream
    pts[:, 5] = pts[:, 4] + 10.0
    pts[:, 6] = pts[:, 5] + 1000.0
    row = {"k": 512, "n": 384, "m": 1, "config": cfg, "grid": 4,
           "raw": [{"points_ns": pts.tolist(), "sm": [0, 1, 2, 3]}] * 3}
    # Penalty 1.05 µs (entry above); less the store's 0.4 µs, CTAs 1 and 2 stream 0.65 µs
    # less (their excess over the median 3.05 µs is more). CTA 2 arrived last in its group,
    # so CTA 3 exits 0.65 µs earlier too; the span (CTA 2's exit, 5.31 µs) falls to 4.66.
    w = ss.what_if(row, store_us=0.4)
    assert w["span_us"] == pytest.approx(5.31) and w["played_us"] == pytest.approx(4.66)
    assert w["gain_us"] == pytest.approx(0.65)
    # A store that costs the whole penalty leaves nothing to take.
    assert ss.what_if(row, store_us=2.0)["gain_us"] == pytest.approx(0.0)
    # CTA 3 arriving last in {2, 3} (1.5 µs later, after the same stream) holds the group:
    # only CTA 1's exit moves, and the span stays CTA 3's.
    pts[3, 5:7] += 1500.0
    row["raw"] = [{"points_ns": pts.tolist(), "sm": [0, 1, 2, 3]}]
    w = ss.what_if(row, store_us=0.4)
    assert w["span_us"] == pytest.approx(5.71) and w["gain_us"] == pytest.approx(0.0)


def test_sanitize_case_fp16_errors_file_round_trip(tmp_path):
    """sanitize_case --fp16-errors: what the plain run writes, the sanitized runs read back
    under the same keys (one per shape, group size and symmetry); a missing file is empty."""
    sc = _load("sanitize_case")
    path = tmp_path / "fp16_errors.json"
    assert sc.load_baseline(path) == {} and sc.load_baseline(None) == {}
    keys = {sc.baseline_key(1, 512, 512, True, 128), sc.baseline_key(1, 512, 512, False, 128),
            sc.baseline_key(1, 512, 512, True, -1), sc.baseline_key(7, 512, 512, True, 128)}
    assert len(keys) == 4
    errors = {k: 1e-4 * (i + 1) for i, k in enumerate(sorted(keys))}
    import json
    path.write_text(json.dumps(errors))
    assert sc.load_baseline(path) == errors


def test_early_split_probe_pairs_and_shares():
    """early_split_probe: the twins it times, and the shares it reports from four times."""
    pytest.importorskip("cupy")
    from marlin_cupy.config import KernelConfig
    es = _load("early_split_probe")
    cfg = KernelConfig.from_name("t256_m1_n16_k8_s6_g8_fp32par_sw1_eb")
    p, e = es.pairs_for(cfg)
    assert e == cfg and p == cfg.with_(early_bottom=False) and not p.early_bottom
    assert es.pairs_for(p) == (p, e)
    assert es.pairs_for(KernelConfig.from_name("t256_m1_n32_k8_s4_g8_fp32_sw2_wg_ws")) is None
    # The column's top summing: against the twin with neither; not on the serial chain.
    p, t = es.pairs_for(cfg, "top_sum")
    assert p == cfg.with_(early_bottom=False) and t == p.with_(top_sum=True)
    assert es.pairs_for(KernelConfig.from_name("t256_m1_n16_k8_s4_g8_fp32_sw1_b2"),
                        "top_sum") is None
    s = es.split({"P": 10.0, "E": 10.2, "R1": 10.1, "R0": 10.4})
    assert s == pytest.approx({"end_us": -0.3, "schedule_us": 0.4, "total_us": 0.2})
    assert es.ORDER == tuple(reversed(es.ORDER))   # symmetric: drifts fall on all alike


def test_cluster_probe_expected_sums_each_group_in_rank_order():
    """The probe checks all three forms against this: group g's tile is the FP32 sum of CTAs
    g*C .. g*C + C - 1's partials, in that order, rounded to FP16 once."""
    np = pytest.importorskip("numpy")
    cl = _load("cluster_probe")
    r, n, c = 1, 128, 2
    want = cl.expected(r, n, c)
    assert want.dtype == np.float16 and want.size == (cl.CTAS // c) * r * n
    i = np.arange(r * n)
    v = [((cta * 977 + i * 131) % 1999 - 999) * 0.0078125 for cta in (2, 3)]
    assert np.array_equal(want[r * n: 2 * r * n], (v[0] + v[1]).astype(np.float16))


def test_cluster_fit_pairs_deal_whole_columns_and_halve_k():
    from marlin_cupy.config import KernelConfig
    cf = _load("cluster_fit")
    # 4096x4096 at M = 1 with 128x256 tiles: 32 columns of 16 K units over 132 CTAs (4-unit
    # stripes, 128 CTAs busy; a column meets 5 of them where stripes cut it mid-way)...
    cfg = KernelConfig.from_name("t256_m1_n8_k16_s6_g8_fp32par_sw1")
    t = cf.today(cfg, 1, 4096, 4096, 132)
    assert (t["units"], t["cols"], t["k_units"], t["iters"], t["ctas"]) == (512, 32, 16, 4, 128)
    assert t["sharers"] == 5
    # ...as pairs: 66 pairs, one round of columns, 8 units per CTA: 32 of 66 pairs busy.
    p = cf.pairs(cfg, 1, 4096, 4096, 132)
    assert (p["pairs"], p["rounds"], p["half"]) == (66, 1, 8)
    assert p["eff"] == 512 / (132 * 8)
    # The 64-wide twin has 64 columns: 64 of 66 pairs busy, 8 units per CTA.
    twins = cf.narrower(cfg, 4096)
    assert [c.tile_n for c in twins] == [64]
    assert cf.pairs(twins[0], 1, 4096, 4096, 132)["eff"] == 1024 / (132 * 8)


def test_ceiling_table_takes_the_larger_floor_per_layer_and_reads_targets():
    """Each layer's floor is the larger of its read and tensor times, summed per set and M;
    the target of M = 1..16 is the issue's first column; ours is the record's summed speedup
    where the set is complete."""
    mod = _load("ceiling_table")
    rate = {"rows": [{"tflops": 500.0}, {"tflops": 1000.0}]}
    assert mod.peak_tflops(rate) == 1000.0
    # 2 * 64 * 4096 * 4096 FLOP at 1000 TFLOP/s: 2.147 µs; the read takes 3 (M = 1: it wins)
    read = {"rows": [{"set": "llama2-7b", "k": 4096, "n": 4096, "read_us": 3.0,
                      "fp16_us_m1": 12.0, "fp16_us_m64": 14.0},
                     {"set": "llama2-7b", "k": 4096, "n": 8192, "read_us": 1.0,
                      "fp16_us_m1": 6.0, "fp16_us_m64": 8.0}]}
    c = mod.ceilings(read, 1000.0)
    t64 = 2 * 64 * 4096 * 4096 / 1e9
    assert c[("llama2-7b", 1)][3] == pytest.approx(4.0, rel=1e-3)
    assert c[("llama2-7b", 64)][3] == pytest.approx(3.0 + 2 * t64)
    assert mod.target("llama2-7b", 8) == 3.0 and mod.target("llama2-70b", 32) == 3.0
    assert mod.target("llama2-7b", 256) is None and mod.target("ideal", 1) is None
    entry = {"set": "llama2-7b", "label": "marlin", "layers": 4, "layers_in_set": 4}
    bench = {"rows": [], "summary": [
        dict(entry, m=1, summed_speedup=3.0),
        dict(entry, m=64, layers=3, summed_speedup=2.0),              # a layer failed: no sum
        dict(entry, label="cublas-fp16", m=1, summed_speedup=1.0)]}
    assert mod.ours(bench) == {("llama2-7b", 1): pytest.approx(3.0)}
    text = mod.table(read, rate, bench)
    assert "| llama2-7b | 1 | 18.0 | 4.0 | 0.1 | 4.50x | 3.0x | 67 % | 3.00x | 67 % |" in text
    assert text.endswith("| 3.02x | 1.6x | 53 % | - | - |")   # M = 64: a failed row, no sum


def test_ab_sets_bench_column_says_what_the_target_asks_of_b(tmp_path):
    """--bench adds ours / target - 1 per set and M from a benchmark record's own summed
    speedup: 'met' where the record already meets the target, the needed change elsewhere."""
    ab = _load("ab_sets")
    bench = ROOT / "benchmarks/results/2026-12-01_h200_9cc2e56/2026-12-01_nvidia-h200_bench.json.gz"
    from marlin_cupy.records import read_json
    need = ab.needs(read_json(bench))
    assert need[("llama2-70b", 128)] >= 0 and need[("llama2-7b", 1)] < -0.2
    ct = _load("ceiling_table")
    mine = ct.ours(read_json(bench))
    assert need[("llama2-13b", 64)] == pytest.approx(mine[("llama2-13b", 64)] / 1.8 - 1)
    rows = [dict(k=k, n=n, m=m, a_us=1.0, b_us=2.0, dispatch=True)
            for k, n in ((4096, 12288), (4096, 4096), (4096, 22016), (11008, 4096),
                         (8192, 10240), (8192, 8192), (8192, 57344), (28672, 8192))
            for m in (1, 128)]
    text = _ab_sets_text(tmp_path, {"define": "X=1", "rows": rows}, "--bench", str(bench))
    assert "| llama2-70b | 128 | 8.0 | 4.0 | -50.0 % | met |" in text
    assert f"| llama2-7b | 1 | 8.0 | 4.0 | -50.0 % | {100 * need[('llama2-7b', 1)]:+.1f} % |" in text


def test_tma_probe_checksum_weights_each_word_by_its_place():
    """tma_probe.py's host checksum: the sum of word x (2 index + 1) over the array, wrapping
    at 2^64, changes when two words trade places (a copy into the wrong place is caught, not
    only a missing or doubled one), and the kernel's box walks the array's elements once."""
    import numpy as np
    tp = _load("tma_probe")
    assert tp.UNIT_BYTES == tp.BOX_X * tp.BOX_Y * 8 == 16384
    rng = np.random.default_rng(1)
    a = rng.integers(0, 2**63, size=(16, 512), dtype=np.uint64)
    idx = np.arange(a.size, dtype=np.uint64).reshape(a.shape)
    s = lambda x: int(np.sum(x * (2 * idx + np.uint64(1)), dtype=np.uint64))  # noqa: E731
    b = a.copy()
    b[0, 0], b[3, 7] = a[3, 7], a[0, 0]
    assert s(a) != s(b)
    # the consumers' words: unit (n_tile, kt), word o = j * CONSUMERS + t of the 2048
    seen = np.zeros(a.shape, dtype=int)
    for n_tile in range(a.shape[1] // tp.BOX_X):
        for kt in range(a.shape[0] // tp.BOX_Y):
            for j in range(tp.BOX_X * tp.BOX_Y // tp.CONSUMERS):
                o = j * tp.CONSUMERS + np.arange(tp.CONSUMERS)
                seen[kt * tp.BOX_Y + o // tp.BOX_X, n_tile * tp.BOX_X + o % tp.BOX_X] += 1
    assert (seen == 1).all()


def test_ab_sets_fp16_columns_divide_the_records_fp16_by_each_side(tmp_path):
    """--fp16: each side's summed speedup over the benchmark records' best FP16 GEMM
    (baseline_us of the marlin rows), only where every layer of the set has one."""
    import json
    from marlin_cupy.bench.shapes import OTHER_SETS
    layers = OTHER_SETS["phi3-mini"]
    rows = [dict(k=k, n=n, m=m, a_us=4.0, b_us=2.0, dispatch=True) for k, n in layers
            for m in (1, 64)]
    bench = [dict(set="custom", provider="marlin", label="marlin", k=k, n=n, m=m,
                  median_us=2.0, baseline_us=3.0) for k, n in layers for m in (1, 64)]
    bench += [dict(set="custom", provider="marlin", label="marlin[x]", k=k, n=n, m=1,
                   median_us=1.0, baseline_us=99.0) for k, n in layers]
    del bench[-len(layers) - 1]          # M = 64 of the last layer: no FP16 there
    bpath = tmp_path / "bench.json"
    bpath.write_text(json.dumps({"kind": "bench", "rows": bench}))
    text = _ab_sets_text(tmp_path, {"table_a": "generic", "rows": rows}, "--fp16", str(bpath))
    assert "| phi3-mini | 1 | 8.0 | 16.0 | +100.0 % | 1.50x | 0.75x |" in text
    assert "| phi3-mini | 64 | 8.0 | 16.0 | +100.0 % | - | - |" in text
    assert "what matmul dispatches" in text


def test_graph_probe_markdown_speedups():
    pytest.importorskip("cupy")
    gp = _load("graph_probe")
    row = {"set": "llama2-7b", "m": 16, "equal": True, "marlin_stream_us": 80.0,
           "marlin_graph_us": 70.0, "marlin_graph_pdl_us": 50.0, "fp16_stream_us": 160.0,
           "fp16_graph_us": 150.0}
    md = gp.markdown({"device": {"name": "GPU"}, "git_commit": "abcdef1234567890",
                      "date": "2026-12-01T00:00:00+00:00", "rows": [row]})
    line = [ln for ln in md.splitlines() if ln.startswith("| llama2-7b")][0]
    cells = [c.strip() for c in line.strip("|").split("|")]
    # times in VARIANTS order, then fp16 graph / marlin graph, / marlin graph pdl, stream's
    assert cells[2:7] == ["80.0", "70.0", "50.0", "160.0", "150.0"]
    assert cells[7:10] == ["2.14", "3.00", "2.00"] and cells[10] == "True"


def test_ab_sets_forms_split_by_the_two_step_build_and_apply_the_shipped_rule(tmp_path):
    """--forms (records of ab_probe.py --scale-fma): each M's rows summed by the form of the
    config's two-step build, and the shipped rule against entry 87's dispatch: A counted where
    ops.use_scale_fma takes the fused build now, against A where entry 87 took it."""
    from marlin_cupy import ops
    from marlin_cupy.config import KernelConfig
    sw8 = "t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws"         # fold -> fused (entry 88)
    sw4 = "t256_m2_n16_k8_s6_g8_fp32par_sw4_wg_w32_ws"         # keeps the fold
    sw16 = "t256_m8_n16_k8_s4_g8_fp32_sw16_wg_ws"              # fused since entry 87
    assert KernelConfig.from_name(sw8).wg_defer and KernelConfig.from_name(sw4).wg_defer
    assert ops.use_scale_fma(KernelConfig.from_name(sw8), False, True)
    assert not ops.use_scale_fma(KernelConfig.from_name(sw4), False, True)
    layers = ((4096, 12288), (4096, 4096), (4096, 22016), (11008, 4096))    # llama2-7b
    cfg_of = dict(zip(layers, (sw8, sw4, sw16, sw8)))
    rows = [dict(k=k, n=n, m=64, config=cfg_of[(k, n)], a_us=1.0, b_us=2.0, dispatch=True)
            for k, n in layers]
    text = _ab_sets_text(tmp_path, {"scale_fma": True, "rows": rows}, "--forms")
    assert "| 64 | FP32 fold, swap_ab = 8 | 2 | 4.0 | 2.0 | -50.0 % |" in text
    assert "| 64 | FP32 fold, swap_ab = 4 | 1 | 2.0 | 1.0 | -50.0 % |" in text
    assert "| 64 | weights scaled, fused build | 1 | 2.0 | 1.0 | -50.0 % |" in text
    # The rule: now fused on sw8 (A) and sw16 (A), the fold on sw4 (B) = 1 + 2 + 1 + 1 = 5;
    # entry 87: fused on sw16 only = 2 + 2 + 1 + 2 = 7.
    assert "| llama2-7b | 64 | 7.0 | 5.0 | -28.6 % |" in text
    with pytest.raises(SystemExit):      # --forms reads --scale-fma records only
        _ab_sets_text(tmp_path, {"define": "X=1", "rows": rows}, "--forms")


def test_h200_records_stages(tmp_path):
    """h200_records.sh refuses an unknown stage before running anything; check-kernel and
    check-rest hand device_check.sh the two halves of the GPU test files (the kernel file, and
    everything but it), the caller's PYTEST_ARGS after them, and check-kernel leaves the
    sanitizer to check-rest and gives pytest 560 s unless the caller set a limit. Run on a copy of the script beside a stub device_check.sh."""
    script = ROOT / "scripts" / "h200_records.sh"
    assert (ROOT / "tests" / "test_kernel_gpu.py").is_file()
    res = subprocess.run(["bash", str(script), str(tmp_path / "out"), "0" * 40, "bogus"],
                         capture_output=True, text=True)
    assert res.returncode == 2
    assert "unknown stage 'bogus'" in res.stderr
    assert not (tmp_path / "out").exists()
    tree = tmp_path / "tree" / "scripts"
    tree.mkdir(parents=True)
    (tree / "h200_records.sh").write_text(script.read_text())
    (tree / "device_check.sh").write_text(
        'mkdir -p "$1"; echo "${PYTEST_ARGS:-}|${SKIP_SANITIZER:-}|${GPU_TESTS_TIMEOUT:-}"'
        ' > "$1/device_check.md"\n'
        'echo "{}" > "$1/device_check.json"\n')
    seen = {}
    for stage in ("check-kernel", "check-rest", "check"):
        out = tmp_path / stage
        env = dict(os.environ, PYTEST_ARGS="-x")
        env.pop("SKIP_SANITIZER", None)
        env.pop("GPU_TESTS_TIMEOUT", None)
        res = subprocess.run(["bash", str(tree / "h200_records.sh"), str(out), "0" * 40, stage],
                             capture_output=True, text=True, env=env)
        assert res.returncode == 0, res.stderr
        seen[stage] = (out / "device_check.md").read_text().strip()
    assert seen == {"check-kernel": "tests/test_kernel_gpu.py -x|1|560",
                    "check-rest": "--ignore=tests/test_kernel_gpu.py -x||",
                    "check": "-x||"}
    # A caller's own limit wins.
    out = tmp_path / "own"
    env = dict(os.environ, GPU_TESTS_TIMEOUT="300")
    res = subprocess.run(["bash", str(tree / "h200_records.sh"), str(out), "0" * 40,
                          "check-kernel"], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    assert (out / "device_check.md").read_text().strip().endswith("|300")


def test_grid_probe_caps_are_multiples_of_whole_columns_below_the_full_grid():
    pytest.importorskip("cupy")
    gp = _load("grid_probe")
    # 32 tile columns x 1 slab on 132 CTAs: whole 32, half 64, c3 96, c4 128; c5 (160) is not
    # below the full grid, so it is not a cap; an unknown label is ignored.
    caps = gp.grid_caps({"full", "whole", "half", "c3", "c4", "c5", "cx"}, 32, 132)
    assert caps == {"full": None, "whole": 32, "half": 64, "c3": 96, "c4": 128}
    assert list(caps) == ["full", "whole", "half", "c3", "c4"]
    assert gp.grid_caps({"c2"}, 48, 132) == {"c2": 96}      # without the full grid
    assert gp.grid_caps({"full", "c1"}, 200, 132) == {"full": None}


def _power_record(order, rows, idle_w=80.0):
    return {"kind": "power_probe", "order": order, "idle": {"power.draw": {"median": idle_w}},
            "environment": {"git_commit": "abc", "date": "2026-12-02"},
            "rows": [{"k": 8, "n": 16, "m": m, "run": run, "us_per_call": us,
                      "clocks.sm": {"median": mhz}, "power.draw": {"median": w},
                      "reasons": reasons}
                     for m, run, us, mhz, w, reasons in rows]}


def test_power_table_energy_and_parts():
    """power_table: energy per call (power x time), the part above the idle board, and the
    stream-only (probe 1) plus math-only (probe 16) builds' parts against ours."""
    pt = _load("power_table")
    rec = _power_record("marlin, probes, cublas", [
        (1, "marlin", 100.0, 1800, 700.0, ["0x4"]),
        (1, "marlin-probe1", 80.0, 1980, 580.0, ["0x0"]),
        (1, "marlin-probe16", 50.0, 1980, 380.0, ["0x0"]),
        (1, "cublas-fp16", 200.0, 1980, 600.0, ["0x0"]),
        (16, "marlin", 120.0, 1700, 690.0, ["0x0", "0x4"]),
        (16, "cublas-fp16", 210.0, 1980, 610.0, []),
    ])
    rows = pt.energy_rows(rec)
    assert [(r["m"], r["run"]) for r in rows] == [
        (1, "marlin"), (1, "marlin-probe1"), (1, "marlin-probe16"), (1, "cublas-fp16"),
        (16, "marlin"), (16, "cublas-fp16")]
    r0 = rows[0]
    assert r0["mj"] == pytest.approx(100.0 * 700.0 / 1e3)
    assert r0["mj_above_idle"] == pytest.approx(100.0 * 620.0 / 1e3)
    assert r0["cap"] == "always" and rows[1]["cap"] is None and rows[4]["cap"] == "at times"
    parts = pt.parts(rec)
    assert list(parts) == [(8, 16, 1)]           # M = 16 has no probe builds
    p = parts[(8, 16, 1)]
    assert p["ours"] == pytest.approx(62.0)
    assert p["stream"] == pytest.approx(80.0 * 500.0 / 1e3)
    assert p["math"] == pytest.approx(50.0 * 300.0 / 1e3)
    assert p["sum"] == pytest.approx(p["stream"] + p["math"])


def test_power_table_ranges_over_records():
    """Two records (both orders) give one row per case with each figure's range."""
    pt = _load("power_table")
    a = _power_record("marlin, probes, cublas", [(1, "marlin", 100.0, 1800, 700.0, ["0x4"])])
    b = _power_record("reversed", [(1, "marlin", 110.0, 1750, 690.0, ["0x4"])], idle_w=70.0)
    md = pt.markdown([a, b])
    line = [s for s in md.splitlines() if s.startswith("| 8x16, 1 | marlin |")]
    assert len(line) == 1
    assert "100.0-110.0" in line[0] and "1750-1800" in line[0] and "690-700" in line[0]
    assert "cap" in line[0]
    assert pt.fmt_range([3.0, 3.0], "{:.1f}") == "3.0"
    # A record that is not the power probe's is refused.
    with pytest.raises(ValueError):
        pt.energy_rows({"kind": "bench", "rows": []})


def test_host_probe_markdown_speedups_are_torch_fp16_over_ours():
    hp = _load("host_probe")
    host = {v: float(i + 1) for i, v in enumerate(hp.VARIANTS)}
    eager = {v: 100.0 for v in hp.VARIANTS}
    eager.update(marlin=50.0, marlin_checked=80.0, marlin_torch=200.0, torch_fp16=120.0)
    row = {"set": "llama2-7b", "m": 1, "layers": 4, "host_us": host, "eager_block_us": eager,
           "gpu_block_us": {v: 40.0 for v in hp.VARIANTS}}
    md = hp.markdown({"environment": {"device": {"name": "GPU"}, "git_commit": "abcdef1234567890",
                                      "date": "2026-12-03"},
                      "variants": list(hp.VARIANTS), "rows": [row], "outputs_equal": True})
    line = [ln for ln in md.splitlines() if ln.startswith("| llama2-7b")][0]
    cells = [c.strip() for c in line.strip("|").split("|")]
    nv = len(hp.VARIANTS)
    assert cells[2:2 + nv] == [f"{i + 1}.0" for i in range(nv)]
    assert cells[2 + nv:] == ["50.0", "80.0", "200.0", "40.0", "120.0", "40.0", "2.40", "0.60"]
    assert "GPU" in md and "abcdef123456" in md


def test_pdl_race_probe_problem_and_markdown():
    pr = _load("pdl_race_probe")
    from marlin_cupy.config import KernelConfig
    cfg = KernelConfig.from_name("t128_m1_n4_k8_s4_g8_fp32par_b2")
    assert pr.problem(cfg) == (197, 16 * cfg.tile_k, 2 * cfg.tile_n)
    form = {"wrong": 0, "host_us_per_launch": 12.0}
    row = {"config": cfg.name, "m": 197, "k": 2048, "n": 128,
           "fresh": dict(form, wrong=3), "prepared": form, "spin": form, "plain": form,
           "locks_zero": True}
    md = pr.markdown({"environment": {"device": {"name": "GPU"}, "git_commit": "0123456789abcdef",
                                      "date": "2026-12-03"}, "launches": 20,
                      "forms": list(pr.FORMS), "rows": [row, {"config": "c", "m": 1, "k": 2,
                                                              "n": 3, "skipped": "no"}],
                      "configs_wrong": [cfg.name]})
    line = [ln for ln in md.splitlines() if ln.startswith(f"| {cfg.name}")][0]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[3] == "128" and cells[4] == "3 (12.0 µs)" and cells[-1] == "True"
    assert "skipped: no" in md and cfg.name in md.splitlines()[-1]


def test_launch_floor_shapes_and_table():
    lf = _load("launch_floor")
    grids = {lf.grid_of(g, 132) for g, _, _ in lf.SHAPES}
    assert grids == {132, 264, 2112}
    # every shape fits one SM's 228 KB at the residency it asks for
    for g, t, s in lf.SHAPES:
        per_sm = 2 if g == "2sms" else 1
        assert per_sm * s <= 227 * 1024 and t <= 1024
    md = lf.table([{"kernel": "empty", "grid": 132, "threads": 384, "smem": 200 * 1024,
                    "bytes": 0, "median_us": 2.5, "p20_us": 2.4, "p80_us": 2.61}])
    assert md.splitlines()[2] == "| empty | 132 | 384 | 200 | 0 | 2.50 | 2.40 | 2.61 |"


def _notebook(*sources):
    return {"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# t\n"]}]
            + [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                "source": [s]} for s in sources],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_execute_notebook_stores_streams_figures_and_the_first_error(tmp_path):
    import json
    pytest.importorskip("matplotlib")
    nb = tmp_path / "t.ipynb"
    nb.write_text(json.dumps(_notebook(
        "import sys\nx = 6 * 7\nprint('x =', x)\nprint('warn', file=sys.stderr)",
        "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2], [x, x])\n"
        "plt.show()",
        "open('made_here.txt', 'w').write(str(x))",
        "raise ValueError('boom')",
        "print('never')")))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = tmp_path / "out.ipynb"
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "execute_notebook.py"), str(nb),
                          "--out", str(out)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    cells = [c for c in json.loads(out.read_text())["cells"] if c["cell_type"] == "code"]
    assert [c["execution_count"] for c in cells] == [1, 2, 3, 4, None]
    assert cells[0]["outputs"] == [
        {"output_type": "stream", "name": "stdout", "text": ["x = 42\n"]},
        {"output_type": "stream", "name": "stderr", "text": ["warn\n"]}]
    (fig,) = cells[1]["outputs"]                 # plt.show() printed nothing, warned nothing
    assert fig["output_type"] == "display_data" and fig["data"]["image/png"]
    assert (tmp_path / "made_here.txt").read_text() == "42"     # cells run in the notebook's folder
    (err,) = cells[3]["outputs"]
    assert (err["output_type"], err["ename"], err["evalue"]) == ("error", "ValueError", "boom")
    assert cells[4]["outputs"] == []
    meta = json.loads(out.read_text())["metadata"]["marlin_cupy_execution"]
    assert meta["ok"] is False and meta["executor"] == "scripts/execute_notebook.py"
    assert json.loads(nb.read_text())["cells"][1]["outputs"] == []      # --out: input untouched


def test_execute_notebook_in_process_leaves_the_process_as_it_was(tmp_path, monkeypatch):
    plt = pytest.importorskip("matplotlib.pyplot")
    monkeypatch.setenv("MPLBACKEND", "pdf")
    show, cwd = plt.show, os.getcwd()
    nb = _notebook("import os\nprint(os.environ['MPLBACKEND'], os.path.basename(os.getcwd()))")
    assert _load("execute_notebook").execute(nb, tmp_path)
    assert nb["cells"][1]["outputs"][0]["text"] == [f"Agg {tmp_path.name}\n"]
    assert (plt.show, os.getcwd(), os.environ["MPLBACKEND"]) == (show, cwd, "pdf")


def test_offset_precision_activation_kinds():
    """offset_precision.py's three activation kinds: FP16 [M, K]; ``shifted`` has mean about 2
    (large group sums of A), ``outliers`` 1 % of the channels about 30 times the others, and an
    unknown kind is refused."""
    np = pytest.importorskip("numpy")
    op = _load("offset_precision")
    rng = np.random.default_rng(0)
    m, k = 64, 4096
    xs = {kind: op.activations(kind, m, k, rng).astype(np.float64) for kind in op.KINDS}
    assert all(x.shape == (m, k) for x in xs.values())
    assert all(op.activations(kind, 2, 8, rng).dtype == np.float16 for kind in op.KINDS)
    assert abs(xs["normal"].mean()) < 0.05 and abs(xs["shifted"].mean() - 2.0) < 0.05
    rms = np.sqrt((xs["outliers"] ** 2).mean(axis=0))      # per channel
    loud = rms > 10.0
    assert loud.sum() == k // 100 and 20.0 < rms[loud].mean() < 40.0
    assert rms[~loud].max() < 2.0
    with pytest.raises(ValueError, match="unknown activation kind"):
        op.activations("uniform", 2, 8, rng)


def test_order_check_reads_the_order_and_compares_the_means():
    """order_check: the order comes from the record's providers field (unavailable providers
    do not count), and the change is last's mean speedup against first's."""
    oc = _load("order_check")

    def record(names, speedup, unavailable=()):
        provs = {n: {"provider": n, "available": n not in unavailable} for n in names}
        summary = [{"set": "s", "label": "marlin", "provider": "marlin", "m": 1,
                    "summed_speedup": speedup, "time_us": 10.0, "baseline_us": 10.0 * speedup},
                   {"set": "s", "label": "marlin", "provider": "marlin", "m": 2,
                    "summed_speedup": None, "time_us": 1.0, "baseline_us": None}]
        return {"providers": provs, "summary": summary, "clocks": {}, "method": {}}

    first = record(["marlin", "cublas-fp16", "torch-fp16"], 2.0)
    last = record(["torch-int4", "cublas-fp16", "torch-fp16", "marlin"], 2.2)
    last_off = record(["cublas-fp16", "marlin", "torch-fp16"], 2.1, unavailable=("torch-fp16",))
    mixed = record(["cublas-fp16", "marlin", "torch-fp16"], 9.0)
    assert [oc.order_of(r) for r in (first, last, last_off, mixed)] == ["first", "last", "last", "mixed"]
    res = oc.compare([first, last, last_off, mixed])
    row = res["table"][("s", 1)]
    assert row["mean_first"] == pytest.approx(2.0)
    assert row["mean_last"] == pytest.approx(2.15)
    assert row["change_pct"] == pytest.approx(7.5)
    assert ("s", 2) not in res["table"]              # incomplete sets have no summed speedup
    with pytest.raises(ValueError, match="did not run"):
        oc.order_of(record(["cublas-fp16"], 1.0))
    text = oc.markdown([first, last], ["a.json", "b.json"])
    assert "| s | 1 | 2.000x (10.0 / 20.0) | 2.200x (10.0 / 22.0) | 2.000x | 2.200x | +10.00 % |" in text


def test_alloc_probe_markdown_spreads_over_copies_and_rounds():
    ap = _load("alloc_probe")
    assert ap.spread([200.0, 230.0, 210.0]) == pytest.approx(15.0)

    def stats(v):
        return {"median_us": v, "p20_us": v - 1, "p80_us": v + 1, "reps": 200}

    rec = {"shape": [8192, 57344], "m": 1, "rounds": 2, "device": {"name": "NVIDIA H200"},
           "git_commit": "abc1234",
           "providers": [{"label": "cublas-fp16", "copies": [
               {"copy": 0, "address": 0x1000, "rounds": [stats(200.0), stats(202.0)]},
               {"copy": 1, "address": 0x2000, "rounds": [stats(230.0), stats(230.0)]}]}]}
    text = ap.markdown(rec)
    assert "| cublas-fp16 | 1 | 0x2000 | 230.0 (229.0-231.0) | 230.0 (229.0-231.0) |" in text
    assert "| cublas-fp16 | 15.0 %, 13.9 % | 1.0 % |" in text
