"""$MARLIN_CUPY_DEFINES: compile-time switches of cuda/marlin.cuh for every kernel of a process
(to run the GPU tests on an experimental build). No GPU needed."""
from __future__ import annotations

import re

import numpy as np

import pytest

from marlin_cupy import jit, kernels
from marlin_cupy.config import KernelConfig

CFG = KernelConfig.from_name("t256_m1_n8_k16_s6_g8_fp32par_sw1")


def test_unset_means_the_shipped_source(monkeypatch):
    monkeypatch.delenv("MARLIN_CUPY_DEFINES", raising=False)
    src = kernels.marlin_source(CFG)
    assert kernels.extra_defines() == ""
    assert src.startswith(kernels._base_source())


def test_defines_go_in_front_and_change_the_cache_key(monkeypatch):
    monkeypatch.delenv("MARLIN_CUPY_DEFINES", raising=False)
    plain = kernels.marlin_source(CFG)
    monkeypatch.setenv("MARLIN_CUPY_DEFINES", " MARLIN_PAR_COOP=0, MARLIN_PROBE=0 ,")
    src = kernels.marlin_source(CFG)
    assert src.startswith("#define MARLIN_PAR_COOP 0\n#define MARLIN_PROBE 0\n")
    assert src.endswith(plain)
    assert jit.source_hash(src) != jit.source_hash(plain)


@pytest.mark.parametrize("bad", ["MARLIN_PAR_COOP", "marlin_probe=1", "MARLIN_PROBE=1.5",
                                 "MARLIN_PROBE=1;MARLIN_PAR_COOP=2", "MARLIN_PROBE=a"])
def test_malformed_defines_are_refused(monkeypatch, bad):
    monkeypatch.setenv("MARLIN_CUPY_DEFINES", bad)
    with pytest.raises(ValueError, match="MARLIN_CUPY_DEFINES: .* is not NAME=INTEGER"):
        kernels.marlin_source(CFG)


@pytest.mark.parametrize("spec,close", [("MARLIN_PROBEE=4", "MARLIN_PROBE"),
                                        ("MARLIN_WG_DEPHT=2", "MARLIN_WG_DEPTH"),
                                        ("NOT_A_SWITCH=1", None)])
def test_a_switch_the_source_never_mentions_is_refused(monkeypatch, spec, close):
    """A misspelt switch built the shipped kernel while every log called it the experiment
    (``describe_defines``)."""
    monkeypatch.setenv("MARLIN_CUPY_DEFINES", spec)
    name = spec.split("=")[0]
    with pytest.raises(ValueError, match=rf"MARLIN_CUPY_DEFINES: {name} is not a switch of the "
                                         rf"kernel source" + (f".*{close}" if close else "")):
        kernels.describe_defines()
    # Switches without an #ifndef default (read by #if, 0 when undefined) are switches too.
    for known in ("MARLIN_STAMPS", "MARLIN_NO_MATH", "MARLIN_PROBE"):
        assert kernels.parse_defines(f"{known}=1", "x") == {known: 1}


def test_template_args_trail_only_up_to_the_last_non_default():
    """PAR_REDUCE, WARP_N and MIN_BLOCKS have defaults in cuda/marlin.cuh; they are written only
    up to the last that differs, so an instance that uses none keeps its source text."""
    base = dict(wgmma=True, swap_ab=8, thread_m_blocks=4)
    tail = lambda **kw: kernels.template_args(KernelConfig(**base, **kw)).split(", ")[10:]  # noqa: E731
    assert tail() == []
    assert tail(parallel_reduce=True) == ["true"]
    assert tail(warp_n=32) == ["false", "32"]
    assert tail(blocks_per_sm=2) == ["false", "0", "2"]
    assert tail(parallel_reduce=True, warp_n=16, blocks_per_sm=2) == ["true", "16", "2"]
    assert kernels.template_args(KernelConfig(**base), has_zp=True).split(", ")[6] == "true"


# The experiment switches that benchmarks/NOTES.md measured and kept (default off): each must
# still compile, so that an A/B of it can be re-run (scripts/ab_probe.py --define ...). A wgmma
# instance for every switch, an mma.sync one for those that change its loop too; sm_90 (sm_90a
# for wgmma). The shipped build of the same configs is checked by scripts/check_compile.py.
WGMMA_CFG = "t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32"
MMA_CFG = "t256_m1_n16_k8_s4_g8_fp32_sw1_b2"
SWITCH_CASES = [(sw, WGMMA_CFG) for sw in (
    "MARLIN_BULK=1", "MARLIN_BULK=2", "MARLIN_BULK=3", "MARLIN_NO_PROXY_FENCE=1",
    "MARLIN_REFILL_LATE=1", "MARLIN_WG_DEPTH=1", "MARLIN_WG_DEPTH=2")] + \
    [(sw, MMA_CFG) for sw in ("MARLIN_BULK=1", "MARLIN_BULK=2", "MARLIN_BULK=3",
                              "MARLIN_PDL=1", "MARLIN_X_PAIRS=0", "MARLIN_A_OFF=0",
                              "MARLIN_B_OFF=0")] + \
    [("MARLIN_B_OFF=0", WGMMA_CFG + "_ws"), ("MARLIN_B_OFF=0", "t256_m1_n16_k8_s4_g8_fp32_sw2")] + \
    [("MARLIN_WS_RELEASE=0", WGMMA_CFG + "_ws"),
     ("MARLIN_WS_PRODUCER_REGS=40", "t256_m8_n16_k8_s4_g8_fp32_sw16_wg_ws"),
     ("MARLIN_WS_ROLE_BY_WARP=0", "t128_m8_n8_k8_s4_g8_fp32_sw16_wg_ws"),
     ("MARLIN_WS_BULK=1", WGMMA_CFG + "_ws"), ("MARLIN_WS_BULK=2", WGMMA_CFG + "_ws"),
     ("MARLIN_WS_BULK=1", "t256_m1_n16_k16_s4_g8_fp32par_sw1_ws"),
     ("MARLIN_WG_DEPTH=4", "t256_m2_n32_k8_s4_g8_fp32_sw4_wg_ws"),
     ("MARLIN_WG_DEFER=2", "t256_m8_n16_k8_s4_g8_fp32par_sw16_wg_ws"),
     ("MARLIN_DESC_ADD=4", "t256_m1_n32_k8_s4_g8_fp32_sw2_wg_ws"),
     # the end's rules of entry 64: the old one (48 rows, acq_rel count-out), every tile
     ("MARLIN_PAR_COOP=3", "t256_m2_n16_k8_s6_g8_fp32par_sw4_wg_w32_ws"),
     ("MARLIN_COOP_REARM_RELAXED=0", "t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws"),
     ("MARLIN_PAR_COOP=2", "t128_m1_n16_k8_s3_g8_fp32par_sw2_wg_ws_b2"),
     ("MARLIN_PAR_COOP=2", "t256_m1_n16_k8_s4_g8_fp32par_sw1"),
     # the early bottom's partial through the locks workspace (entry 69)
     ("MARLIN_PAR_EARLY_BOTTOM=1", "t256_m1_n16_k8_s3_g8_fp32par_sw1_b2"),
     ("MARLIN_PAR_EARLY_BOTTOM=1", "t128_m1_n16_k8_s3_g8_fp32par_sw2_wg_b2"),
     ("MARLIN_PAR_EARLY_BOTTOM=1", "t256_m1_n16_k16_s4_g8_fp32_sw1"),
     ("MARLIN_PAR_EARLY_BOTTOM=1", "t256_m1_n16_k8_s4_g8_fp32_sw1_b2"),
     # the measurement builds of entry 80: A copied once, the ring filled once, both with no math
     ("MARLIN_PROBE=14", WGMMA_CFG + "_ws"), ("MARLIN_PROBE=15", WGMMA_CFG + "_ws"),
     ("MARLIN_PROBE=16", WGMMA_CFG + "_ws"), ("MARLIN_PROBE=16", MMA_CFG),
     ("MARLIN_PROBE=16", "t256_m1_n16_k16_s4_g8_fp32par_sw1"),
     ("MARLIN_PROBE=17", WGMMA_CFG + "_ws"), ("MARLIN_PROBE=17", MMA_CFG),
     ("MARLIN_PROBE=18", WGMMA_CFG + "_ws"), ("MARLIN_PROBE=18", MMA_CFG),
     # FP16 partials in the shared sum (entry 80; a measurement, it rounds)
     ("MARLIN_COOP_HALF=1", WGMMA_CFG + "_ws"), ("MARLIN_COOP_HALF=1", WGMMA_CFG),
     # no proxy fence after the producer's `full` wait either (entry 96; a measurement)
     ("MARLIN_NO_PROXY_FENCE=1", WGMMA_CFG + "_ws"),
     # the ring's hand-off every other unit (entry 97), with two and three A buffers
     ("MARLIN_WS_PAIRS=1", WGMMA_CFG + "_ws"), ("MARLIN_WS_PAIRS=1", "t256_m4_n32_k8_s3_g8_fp32_sw8_wg_ws"),
     ("MARLIN_WS_PAIRS=1", "t128_m1_n16_k8_s3_g8_fp32par_sw2_wg_ws_b2"),
     # the hand-off through counters in shared memory (entry 98), with two and three A buffers
     ("MARLIN_WS_FLAGS=1", WGMMA_CFG + "_ws"), ("MARLIN_WS_FLAGS=1", "t256_m4_n32_k8_s3_g8_fp32_sw8_wg_ws"),
     ("MARLIN_WS_FLAGS=1", "t128_m1_n16_k8_s3_g8_fp32par_sw2_wg_ws_b2"),
     ("MARLIN_WS_FLAGS=2", WGMMA_CFG + "_ws"), ("MARLIN_WS_FLAGS=3", WGMMA_CFG + "_ws"),
     ("MARLIN_WS_FLAGS=3", "t128_m4_n16_k8_s3_g8_fp32par_sw8_wg_ws_b2"),
     ("MARLIN_WS_FLAGS=4", WGMMA_CFG + "_ws"),
     ("MARLIN_WS_EARLY_TEST=1", WGMMA_CFG + "_ws"),
     ("MARLIN_WS_FLAGS=1,MARLIN_WS_PUB_RELAXED=1", WGMMA_CFG + "_ws"),
     ("MARLIN_WS_FLAGS=3,MARLIN_WS_POLL_SLEEP=64,MARLIN_WS_COMPUTE_SLEEP=32", WGMMA_CFG + "_ws"),
     # the activations as tensor copies (entry 101), one and two boxes per fill, with bulk
     # copies of the weights too
     ("MARLIN_WS_TMA_A=1", WGMMA_CFG + "_ws"), ("MARLIN_WS_TMA_A=1", "t256_m8_n16_k4_s6_g8_fp32_sw16_wg_ws"),
     ("MARLIN_WS_TMA_A=1,MARLIN_WS_BULK=1", WGMMA_CFG + "_ws")]


@pytest.mark.parametrize("switch,name", SWITCH_CASES)
def test_experiment_switches_compile(monkeypatch, switch, name):
    cfg = KernelConfig.from_name(name)
    monkeypatch.setenv("MARLIN_CUPY_DEFINES", switch)
    src = kernels.marlin_source(cfg)
    assert src.startswith("".join(f"#define {d.replace('=', ' ')}\n" for d in switch.split(",")))
    _, reports = jit.compile_offline(src, "sm_90" + cfg.arch_suffix)
    assert kernels.marlin_entry(cfg) in {r.kernel for r in reports}


def test_producer_register_split_follows_the_kernel(monkeypatch):
    """config.PRODUCER_REGS mirrors the kernel's default MARLIN_WS_PRODUCER_REGS, and a build
    switch changes both (ops checks the launch count from the same arithmetic)."""
    import re

    from marlin_cupy import config
    monkeypatch.delenv("MARLIN_CUPY_DEFINES", raising=False)
    default = re.search(r"#define MARLIN_WS_PRODUCER_REGS (\d+)", kernels._base_source())
    assert default and int(default.group(1)) == config.PRODUCER_REGS
    ws = KernelConfig.from_name("t256_m8_n16_k8_s4_g8_fp32_sw16_wg_ws")
    assert ws.producer_registers[1] == config.PRODUCER_REGS
    monkeypatch.setenv("MARLIN_CUPY_DEFINES", "MARLIN_WS_PRODUCER_REGS=40")
    assert ws.producer_registers == (168, 40, 232)


def _pdl_cases():
    """Every kind of instance a pdl=True launch can run: the shipped H200 table's configs, the
    compute capability 9.0 heuristic's (group 128) and the examples of each path (producer,
    run-time hand-out, per-channel...)."""
    import json

    from marlin_cupy import config, tune
    entries = json.loads(tune.shipped_path("NVIDIA H200").read_text())["entries"]
    names = {e["config"] for e in entries}
    names |= {c.name for c in config.WGMMA_EXAMPLES + config.PARALLEL_REDUCE_EXAMPLES +
              config.MMA_PRODUCER_EXAMPLES + config.DYN_EXAMPLES}
    names |= {c.name for c in config.SM90_INSTANTIATED if c.group_blocks == 8}
    return sorted(names)


_STATE_SPACES = {"global", "shared", "shared::cta", "shared::cluster", "param", "local", "const"}
_DEPENDENT_PARAMS = (0, 4, 5, 6)     # the kernel's A, C, scratch and locks (kernels._wrapper)


def _memory_ops_before_the_wait(ptx: str):
    """The PTX's instructions before ``griddepcontrol.wait`` (in text order) that may access
    global memory (global or generic state space; ``ld.param`` and shared memory left out), as
    ``(opcode, address derived from A, C, the scratch or the locks)``, and which of those four
    pointers are loaded (``ld.param``) in that code. "Derived" is followed through every
    instruction of that code, in any order (an over-approximation: no branch or loop can hide
    a use)."""
    insts = []
    for line in ptx[:ptx.index("griddepcontrol.wait")].splitlines():
        line = re.sub(r"//.*", "", line).strip().rstrip(";")
        line = re.sub(r"^@!?%\w+\s+", "", line)                   # the guard predicate
        if not line or line.startswith((".", "{", "}")) or line.endswith(":"):
            continue                                             # directives, braces, labels
        op, args = (re.split(r"\s+", line, maxsplit=1) + [""])[:2]
        insts.append((op, args))
    seeds = {}                                                   # register -> parameter
    for op, args in insts:
        m = re.fullmatch(r"(%\w+),\s*\[\w+_param_(\d+)\]", args)
        if op.startswith("ld.param") and m and int(m.group(2)) in _DEPENDENT_PARAMS:
            seeds[m.group(1)] = int(m.group(2))
    derived, grown = set(seeds), True
    while grown:
        grown = False
        for op, args in insts:
            if op.startswith(("st.", "cp.", "red.", "bra", "prefetch", "mbarrier", "bar")):
                continue                                         # no register written
            dst, _, srcs = args.partition(",") if not args.startswith("{") else \
                args.partition("},")
            if set(re.findall(r"%\w+", srcs)) & derived:
                new = set(re.findall(r"%\w+", dst)) - derived
                grown = grown or bool(new)
                derived |= new
    accesses = []
    for op, args in insts:
        spaces = set(op.split(".")) & _STATE_SPACES
        if "[" not in args or op.startswith("ld.param") or (spaces and "global" not in spaces):
            continue
        addresses = set(re.findall(r"%\w+", " ".join(re.findall(r"\[[^\]]*\]", args))))
        accesses.append((op, bool(addresses & derived)))
    return accesses, set(seeds.values())


@pytest.mark.parametrize("name", _pdl_cases())
def test_every_pdl_build_waits_for_the_grid_before(monkeypatch, name):
    """The pdl=True build (ops.PDL_PREFIX) lets the next grid start early
    (launch_dependents), so it must itself wait (griddepcontrol.wait) before it reads A or
    touches C, the locks or the scratch. The producer builds once had no wait at all
    (NOTES.md entry 56): a dependent chain could read its input before it was written.
    Checked in the PTX, in text order: one wait; before it, no access of global memory through
    an address derived from A, C, the scratch or the locks, and none at all but copies
    (cp.async: the first unit's weights, scales and zero points, cuda/marlin.cuh MARLIN_PDL 4);
    the producer builds, whose producer waits first, none."""
    from marlin_cupy import ops
    monkeypatch.delenv("MARLIN_CUPY_DEFINES", raising=False)
    cfg = KernelConfig.from_name(name)
    ptx = jit.compile_ptx(ops.PDL_PREFIX + kernels.marlin_source(cfg),
                          "compute_90" + cfg.arch_suffix)
    assert ptx.count("griddepcontrol.launch_dependents") == 1
    assert ptx.count("griddepcontrol.wait") == 1
    accesses, loaded = _memory_ops_before_the_wait(ptx)
    # (a pointer loaded after the wait has no use before it; A's is loaded first thing)
    assert 0 in loaded, "A's ld.param not found before the wait: the check would see nothing"
    assert [op for op, dependent in accesses if dependent] == []
    assert [op for op, _ in accesses if not op.startswith("cp.async.")] == []
    if cfg.producer:
        assert accesses == []


@pytest.mark.parametrize("name", ["t256_m1_n16_k8_s3_g8_fp32par_sw1_b2",
                                  "t256_m2_n32_k8_s4_g8_fp32_sw4_wg_ws"])
def test_plain_build_has_no_pdl_instructions(monkeypatch, name):
    monkeypatch.delenv("MARLIN_CUPY_DEFINES", raising=False)
    cfg = KernelConfig.from_name(name)
    assert "griddepcontrol" not in jit.compile_ptx(kernels.marlin_source(cfg),
                                                   "compute_90" + cfg.arch_suffix)


@pytest.mark.parametrize("name,deferred", [
    ("t256_m1_n32_k8_s4_g8_fp32_sw2_wg_ws", True),
    ("t256_m2_n32_k8_s4_g8_fp32_sw4_wg_ws", True),
    ("t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws", True),
    ("t256_m4_n32_k8_s3_g8_fp32_sw8_wg_ws", False),       # 64-column warps: would spill
    ("t256_m8_n16_k8_s4_g8_fp32par_sw16_wg_ws", False),
    ("t256_m1_n16_k4_s4_g8_fp32par_sw2_wg_ws", False),  # units of half a group
    ("t128_m1_n16_k8_s3_g8_fp32par_sw2_wg_ws_b2", True),  # 200 compute registers
    ("t256_m4_n16_k8_s3_g8_fp32_sw8_wg_w32_b2", False),   # 128 registers: would spill
    ("t512_m4_n32_k8_s3_g8_fp32_sw8_wg_w32_ws", False),   # 104 compute registers
])
def test_wgmma_group_scale_on_fp32_sums_where_it_applies(monkeypatch, name, deferred):
    """MARLIN_WG_DEFER 1 (NOTES.md entry 60; the default) takes the FP16 scale multiplies out
    of the wgmma loop of the instances it names, and only of those: their PTX has fewer than
    half the f16x2 multiplies of the MARLIN_WG_DEFER 0 build's; the others' is the same."""
    cfg = KernelConfig.from_name(name)
    monkeypatch.delenv("MARLIN_CUPY_DEFINES", raising=False)
    assert cfg.wg_defer == deferred       # the host's mirror (KernelConfig.scale_fma_applies)
    arch = "compute_90" + cfg.arch_suffix
    plain = jit.compile_ptx("#define MARLIN_WG_DEFER 0\n" + kernels.marlin_source(cfg), arch)
    default = jit.compile_ptx(kernels.marlin_source(cfg), arch)
    explicit = jit.compile_ptx("#define MARLIN_WG_DEFER 1\n" + kernels.marlin_source(cfg), arch)
    muls = lambda ptx: len(re.findall(r"\bmul(?:\.rn)?\.f16x2\b", ptx))  # noqa: E731
    assert default == explicit
    assert muls(plain) > 0
    if deferred:
        assert muls(default) < muls(plain) // 2
    else:
        assert default == plain


@pytest.mark.parametrize("name,changed", [
    ("t256_m1_n32_k8_s4_g8_fp32_sw2_wg_ws", True),     # a 16-row loop of the table
    ("t128_m1_n16_k8_s4_g8_fp32_sw2_wg", True),        # without a producer
    ("t256_m1_n16_k8_s3_gc_fp32_sw1_wg", False),       # swap_ab = 1: keeps rebuilding them
])
def test_descriptor_by_addition_reaches_the_16_row_loops(monkeypatch, name, changed):
    """MARLIN_DESC_ADD 5 (NOTES.md entry 62; the default) is value 4 plus the swap_ab = 2
    wgmma loops: their PTX differs from value 4's, the swap_ab = 1 instances' does not, and
    the default is an explicit 5."""
    cfg = KernelConfig.from_name(name)
    monkeypatch.delenv("MARLIN_CUPY_DEFINES", raising=False)
    arch = "compute_90" + cfg.arch_suffix
    default = jit.compile_ptx(kernels.marlin_source(cfg), arch)
    build = lambda value: jit.compile_ptx(  # noqa: E731
        f"#define MARLIN_DESC_ADD {value}\n" + kernels.marlin_source(cfg), arch)
    assert default == build(5)
    four = build(4)
    assert (default != four) == changed


@pytest.mark.parametrize("has_zp", [False, True], ids=["sym", "zp"])
@pytest.mark.parametrize("name", [
    "t256_m1_n32_k8_s4_g8_fp32_sw2_wg_ws",
    "t256_m2_n32_k8_s4_g8_fp32par_sw4_wg_ws",      # spilled 4 bytes in a first version
    "t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws",
    "t128_m1_n16_k8_s3_g8_fp32par_sw2_wg_ws_b2",
])
def test_wgmma_group_scale_builds_do_not_spill(monkeypatch, name, has_zp):
    """The MARLIN_WG_DEFER 1 builds (the default) of the table's configs most at risk keep
    their second accumulator set in registers (NVRTC; scripts/check_compile.py checks every
    table config's default build)."""
    cfg = KernelConfig.from_name(name)
    monkeypatch.delenv("MARLIN_CUPY_DEFINES", raising=False)
    src = "#define MARLIN_WG_DEFER 1\n" + kernels.marlin_source(cfg, has_zp)
    _, reports = jit.compile_offline(src, "sm_90" + cfg.arch_suffix)
    assert reports and all(r.spill_store_bytes == 0 and r.spill_load_bytes == 0 for r in reports)


@pytest.mark.parametrize("name,shares", [
    ("t128_m1_n16_k8_s3_g8_fp32par_sw2_wg_ws_b2", False),   # 16 rows: the last arriver sums
    ("t256_m1_n16_k8_s4_g8_fp32par_sw1", False),
    ("t256_m2_n16_k8_s6_g8_fp32par_sw4_wg_w32_ws", True),   # 32 rows: the shared sum
    ("t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws", True)])
def test_shared_sum_from_32_rows(monkeypatch, name, shares):
    """MARLIN_PAR_COOP 1 (entry 64): the CTAs of a split column share its sum on tiles from 32
    rows; their count-in is a `red.release` (the last arriver's is an `atom.acq_rel`), and
    their count-out after the sum a relaxed atom. scripts/wave_probe.py's never_waits must
    draw the same line (tests/test_scripts.py checks it on these configs)."""
    monkeypatch.delenv("MARLIN_CUPY_DEFINES", raising=False)
    cfg = KernelConfig.from_name(name)
    ptx = jit.compile_ptx(kernels.marlin_source(cfg), "sm_90" + cfg.arch_suffix)
    assert ("red.release.gpu.global.add" in ptx) == shares
    assert ("atom.acq_rel.gpu.global.add" in ptx) == (not shares)
    # The old rule (48 rows) keeps the 32-row tile on the last arriver's sum.
    if cfg.tile_m == 32:
        monkeypatch.setenv("MARLIN_CUPY_DEFINES", "MARLIN_PAR_COOP=3")
        old = jit.compile_ptx(kernels.marlin_source(cfg), "sm_90" + cfg.arch_suffix)
        assert "red.release.gpu.global.add" not in old


@pytest.mark.parametrize("name,applies", [
    ("t256_m1_n16_k8_s3_g8_fp32par_sw1_b2", True),
    ("t128_m1_n16_k8_s3_g8_fp32par_sw2_wg_b2", True),
    ("t128_m1_n16_k8_s3_g8_fp32par_sw2_wg_ws_b2", False),   # producer: no copies to wait for
    ("t256_m2_n16_k8_s6_g8_fp32par_sw4_wg_w32_ws", False),  # 32 rows: the shared sum
    ("t256_m1_n16_k16_s4_g8_fp32_sw1", True),               # the serial chain, FP32
    ("t256_m1_n16_k16_s4_g8_fp16_sw1", False),              # the serial chain, FP16 in C
    ("t256_m1_n32_k8_s4_g8_fp32_sw2_wg_ws", False)])        # the serial chain, producer
def test_early_bottom_where_it_applies(monkeypatch, name, applies):
    """MARLIN_PAR_EARLY_BOTTOM 1 (entry 69) changes only the cross-CTA reduction of tiles
    below 32 rows without a producer: the parallel reduction's last arriver path and the
    serial chain with FP32 partials. Its relaxed 16-byte stores and loads of the locks
    workspace appear there and nowhere else; the default build has none."""
    cfg = KernelConfig.from_name(name)
    monkeypatch.setenv("MARLIN_CUPY_DEFINES", "MARLIN_PAR_EARLY_BOTTOM=1")
    ptx = jit.compile_ptx(kernels.marlin_source(cfg), "sm_90" + cfg.arch_suffix)
    assert ("st.relaxed.gpu.global.v4.u32" in ptx) == applies
    assert ("ld.relaxed.gpu.global.v4.u32" in ptx) == applies
    monkeypatch.delenv("MARLIN_CUPY_DEFINES")
    ptx = jit.compile_ptx(kernels.marlin_source(cfg), "sm_90" + cfg.arch_suffix)
    assert "relaxed.gpu.global.v4" not in ptx


def test_early_bottom_config_variant_builds_the_switch(monkeypatch):
    """The _eb config (template argument EARLY) builds the same early path as the global
    switch: the relaxed 16-byte accesses of the locks workspace, absent from its twin."""
    from marlin_cupy.config import EARLY_BOTTOM_EXAMPLES
    monkeypatch.delenv("MARLIN_CUPY_DEFINES", raising=False)
    for cfg in EARLY_BOTTOM_EXAMPLES[:2] + EARLY_BOTTOM_EXAMPLES[4:5]:
        ptx = jit.compile_ptx(kernels.marlin_source(cfg), "sm_90" + cfg.arch_suffix)
        twin = cfg.with_(early_bottom=False)
        plain = jit.compile_ptx(kernels.marlin_source(twin), "sm_90" + twin.arch_suffix)
        assert "st.relaxed.gpu.global.v4.u32" in ptx and "ld.relaxed.gpu.global.v4.u32" in ptx
        assert "relaxed.gpu.global.v4" not in plain


def test_top_sum_builds_have_no_count_in(monkeypatch):
    """The _ts config (template argument TOP_SUM, NOTES.md entry 73): no CTA counts in at a
    split column (no acq_rel atomic, whose MEMBAR.ALL.GPU waited for the CTA's copies in
    flight, and no other atomic); the partials go through relaxed 16-byte stores and loads of
    the locks workspace. Its twin has the count-in and none of those accesses."""
    from marlin_cupy.config import TOP_SUM_EXAMPLES
    monkeypatch.delenv("MARLIN_CUPY_DEFINES", raising=False)
    for cfg in TOP_SUM_EXAMPLES[:3]:
        ptx = jit.compile_ptx(kernels.marlin_source(cfg), "sm_90" + cfg.arch_suffix)
        twin = cfg.with_(top_sum=False)
        plain = jit.compile_ptx(kernels.marlin_source(twin), "sm_90" + twin.arch_suffix)
        assert "atom.acq_rel.gpu" not in ptx and "atom.acq_rel.gpu" in plain
        assert not re.search(r"\b(red|atom)\.[a-z.]*gpu", ptx)
        assert "st.relaxed.gpu.global.v4.u32" in ptx and "ld.relaxed.gpu.global.v4.u32" in ptx
        assert "relaxed.gpu.global.v4" not in plain


def test_top_sum_early_only_keeps_the_count_in_for_the_other_columns(monkeypatch):
    """MARLIN_TOP_SUM_EARLY_ONLY 1 (prepared, NOTES.md entry 73): a _ts build sums by its top
    only where the column's bottom goes on past it, and keeps the last arriver's count-in
    (the acq_rel atomic) for the other columns; builds without _ts do not change."""
    from marlin_cupy.config import TOP_SUM_EXAMPLES
    cfg = TOP_SUM_EXAMPLES[0]
    monkeypatch.setenv("MARLIN_CUPY_DEFINES", "MARLIN_TOP_SUM_EARLY_ONLY=1")
    ptx = jit.compile_ptx(kernels.marlin_source(cfg), "sm_90")
    twin = jit.compile_ptx(kernels.marlin_source(cfg.with_(top_sum=False)), "sm_90")
    assert "atom.acq_rel.gpu" in ptx and "ld.relaxed.gpu.global.v4.u32" in ptx
    monkeypatch.delenv("MARLIN_CUPY_DEFINES")
    plain_twin = jit.compile_ptx(kernels.marlin_source(cfg.with_(top_sum=False)), "sm_90")
    def code(ptx):   # line info moves with the source's lines
        return [x for x in ptx.splitlines() if ".loc" not in x and "info_string" not in x]
    assert code(twin) == code(plain_twin)


def test_early_runtime_switch_is_one_device_word(monkeypatch):
    """MARLIN_EARLY_RUNTIME 1 (scripts/early_split_probe.py): the _eb build reads the device
    word marlin_early_off once and still holds the early path; builds without the switch have
    no such word."""
    cfg = KernelConfig.from_name("t256_m1_n16_k8_s6_g8_fp32par_sw1_eb")
    monkeypatch.setenv("MARLIN_CUPY_DEFINES", "MARLIN_EARLY_RUNTIME=1")
    ptx = jit.compile_ptx(kernels.marlin_source(cfg), "sm_90")
    assert ".global .align 4 .u32 marlin_early_off" in ptx
    assert ptx.count("[marlin_early_off]") == 1 and "st.relaxed.gpu.global.v4.u32" in ptx
    monkeypatch.delenv("MARLIN_CUPY_DEFINES")
    assert "marlin_early_off" not in jit.compile_ptx(kernels.marlin_source(cfg), "sm_90")


def test_early_sum_loop_makes_the_sum_once(monkeypatch):
    """MARLIN_EARLY_SUM_LOOP 1 (prepared, NOTES.md entry 70): the summing CTA's early words are
    read at one site (the loop's volatile reads) instead of two (the first sum's and the
    re-sum's), and the re-sum's spin is gone; builds without the early bottom do not change."""
    cfg = KernelConfig.from_name("t256_m1_n16_k8_s6_g8_fp32par_sw1_eb")
    monkeypatch.delenv("MARLIN_CUPY_DEFINES", raising=False)
    plain = jit.compile_ptx(kernels.marlin_source(cfg), "sm_90")
    twin = jit.compile_ptx(kernels.marlin_source(cfg.with_(early_bottom=False)), "sm_90")
    monkeypatch.setenv("MARLIN_CUPY_DEFINES", "MARLIN_EARLY_SUM_LOOP=1")
    loop = jit.compile_ptx(kernels.marlin_source(cfg), "sm_90")
    twin_loop = jit.compile_ptx(kernels.marlin_source(cfg.with_(early_bottom=False)), "sm_90")
    reads = "ld.relaxed.gpu.global.v4.u32"
    assert 0 < loop.count(reads) < plain.count(reads)
    assert loop.count("add.f32") < plain.count("add.f32")
    def code(ptx):   # line info moves with the source's lines
        return [x for x in ptx.splitlines() if ".loc" not in x and "info_string" not in x]
    assert code(twin_loop) == code(twin)


@pytest.mark.parametrize("value, hi", [(1, 0xe480e480), (2, 0xd480d480)])
def test_fold_offset_drops_the_half_offset_ops_and_adds_one_mma_per_batch_block(monkeypatch,
                                                                              value, hi):
    """MARLIN_FOLD_OFFSET 1 and 2 (measured, NOTES.md entry 74): the swapped mma.sync loop's
    symmetric weights reach the MMAs without the f16x2 subtraction and FMA of the offset, and
    the offsets' MMAs (the constants -1032 and -1152, or -72 against the activations as they
    are, as f16x2 words) are there; zero-point and unswapped builds do not change."""
    cfg = KernelConfig.from_name("t256_m1_n16_k8_s4_g8_fp32_sw1_b2")
    def code(ptx):   # line info moves with the source's lines
        return [x for x in ptx.splitlines() if ".loc" not in x and "info_string" not in x]
    plain = jit.compile_ptx(kernels.marlin_source(cfg), "sm_90")
    plain_zp = jit.compile_ptx(kernels.marlin_source(cfg, True), "sm_90")
    unswapped = cfg.with_(swap_ab=0)
    plain_un = jit.compile_ptx(kernels.marlin_source(unswapped), "sm_90")
    monkeypatch.setenv("MARLIN_CUPY_DEFINES", f"MARLIN_FOLD_OFFSET={value}")
    fold = jit.compile_ptx(kernels.marlin_source(cfg), "sm_90")
    mma = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
    assert fold.count(mma) > plain.count(mma)
    assert "fma.rn.f16x2" in plain and "fma.rn.f16x2" not in fold
    # the constants' f16x2 words, as PTX writes them (signed 32-bit immediates)
    assert str(0xe408e408 - (1 << 32)) in fold and str(hi - (1 << 32)) in fold
    assert str(0xe408e408 - (1 << 32)) not in plain
    assert code(jit.compile_ptx(kernels.marlin_source(cfg, True), "sm_90")) == code(plain_zp)
    assert code(jit.compile_ptx(kernels.marlin_source(unswapped), "sm_90")) == code(plain_un)


def test_refill_early_moves_only_the_refill(monkeypatch):
    """MARLIN_REFILL_EARLY 1 (measured slower, NOTES.md entry 74): the mma.sync loop issues
    the same copies (as many cp.async and commits); wgmma builds do not change."""
    cfg = KernelConfig.from_name("t256_m1_n16_k16_s4_g8_fp32par_sw1")
    wg = KernelConfig.from_name("t256_m1_n32_k8_s4_g8_fp32_sw2_wg_ws")
    def code(ptx):
        return [x for x in ptx.splitlines() if ".loc" not in x and "info_string" not in x]
    plain = jit.compile_ptx(kernels.marlin_source(cfg), "sm_90")
    plain_wg = jit.compile_ptx(kernels.marlin_source(wg), "sm_90a")
    monkeypatch.setenv("MARLIN_CUPY_DEFINES", "MARLIN_REFILL_EARLY=1")
    early = jit.compile_ptx(kernels.marlin_source(cfg), "sm_90")
    assert code(early) != code(plain)
    for op in ("cp.async.cg.shared.global", "cp.async.commit_group", "cp.async.wait_group"):
        assert early.count(op) == plain.count(op), op
    assert code(jit.compile_ptx(kernels.marlin_source(wg), "sm_90a")) == code(plain_wg)


def test_activation_reads_of_the_swapped_mma_loops(monkeypatch):
    """MARLIN_X_PAIRS and MARLIN_A_OFF (NOTES.md entry 75, both on by default): a swapped
    mma.sync loop with one batch block reads its activations with ldmatrix.x2 only, two batch
    blocks with .x4; the wgmma builds do not change with either switch, and the unswapped
    mma.sync builds do not change with MARLIN_X_PAIRS."""
    def code(ptx):
        return [x for x in ptx.splitlines() if ".loc" not in x and "info_string" not in x]
    def ptx(name, switches):
        cfg = KernelConfig.from_name(name)
        monkeypatch.setenv("MARLIN_CUPY_DEFINES", switches)
        return jit.compile_ptx(kernels.marlin_source(cfg), "sm_90" + cfg.arch_suffix)
    x2, x4 = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
    sw1 = ptx("t256_m1_n16_k16_s4_g8_fp32par_sw1", "MARLIN_X_PAIRS=1")
    sw1_old = ptx("t256_m1_n16_k16_s4_g8_fp32par_sw1", "MARLIN_X_PAIRS=0")
    assert x2 in sw1 and x4 not in sw1
    assert x4 in sw1_old and x2 not in sw1_old
    sw2 = ptx("t256_m1_n16_k8_s4_g8_fp32_sw2", "MARLIN_X_PAIRS=1")
    assert x4 in sw2 and x2 not in sw2
    wg = "t256_m1_n32_k8_s4_g8_fp32_sw2_wg_ws"
    assert code(ptx(wg, "MARLIN_X_PAIRS=1,MARLIN_A_OFF=1")) == \
        code(ptx(wg, "MARLIN_X_PAIRS=0,MARLIN_A_OFF=0"))
    un = "t256_m2_n16_k4_s6_g8_fp32"
    assert code(ptx(un, "MARLIN_X_PAIRS=1")) == code(ptx(un, "MARLIN_X_PAIRS=0"))


def _halves(words):
    """uint32 words as their (low, high) fp16 halves."""
    words = np.asarray(words, dtype=np.uint32)
    return (words & 0xFFFF).astype(np.uint16).view(np.float16), \
        (words >> 16).astype(np.uint16).view(np.float16)


def _biased_unpack(q, s):
    """The shipped symmetric unpacking of weight words q (cuda/marlin.cuh dequant_sym then
    scale_frag): f0 = (lo0, hi0), f1 = (lo1, hi1), each half2 as (low, high) fp16 halves, the
    bias removed exactly and the scale s applied in one rounding (fp16 products are exact in
    fp32, so NumPy's fp16 arithmetic rounds once)."""
    f16 = np.float16
    out = []
    for shift in (0, 8):
        w = q >> shift
        lo = _halves((w & 0x000F000F) | 0x64006400)
        hi = _halves((w & 0x00F000F0) | 0x64006400)
        out.append([(h - f16(1032)) * s for h in lo])
        out.append([(h * f16(1 / 16) + f16(-72)) * s for h in hi])
    return out


def _fma_unpack(q, s):
    """The kernel's dequant_sym_fma (its FMA builds): each nibble masked into bits 4-7 of its half (the
    subnormal x 2^-20), then one fma with m = s 2^20 (two exact products by 1024) and c = -8 s,
    the fma exact in float64 and rounded once to fp16."""
    f16 = np.float16
    m = (s * f16(1024)) * f16(1024)
    c = s * f16(-8)
    out = []
    for w in ((q << 4), q, (q >> 4), (q >> 8)):
        v = _halves(w & 0x00F000F0)
        out.append([(h.astype(np.float64) * np.float64(m) + np.float64(c)).astype(f16)
                    for h in v])
    return out


def test_scale_fma_unpacking_gives_the_shipped_bits_for_every_scale_below_one_sixteenth():
    """The arithmetic the kernel's FMA builds rest on (NOTES.md entry 87): for every nibble and every
    positive fp16 scale s with s 2^20 <= 65504, i.e. below 2^-4 (subnormal scales included), fma(x 2^-20,
    s 2^20, -8 s) rounds to the same fp16 bits as the shipped (x - 8) then times s, in each of
    the four half2 of a word, in the same order (f0 = nibbles 0 and 1 of each half, f1 = 2 and
    3). From 2^-4 on s 2^20 overflows: the switch is a measurement build, not for such weights."""
    q = np.arange(16, dtype=np.uint32)
    # Every nibble value at every position: word i holds nibble (i + p) % 16 at position p.
    words = np.zeros(16, dtype=np.uint32)
    for p in range(8):
        words |= ((q + p) % 16) << (4 * p)
    scales = np.arange(1, 0x2C00, dtype=np.uint16).view(np.float16)   # below 2^-4
    assert float(scales[-1]) * 2 ** 20 == 65504
    for s in scales[::7].tolist() + [scales[0], scales[-1]]:
        s = np.float16(s)
        a, b = _biased_unpack(words, s), _fma_unpack(words, s)
        for fa, fb in zip(a, b):
            for ha, hb in zip(fa, fb):
                np.testing.assert_array_equal(ha.view(np.uint16), hb.view(np.uint16))


# The group scale inside the unpacking (template parameter FMA; NOTES.md entry 87): the host
# asks for it only where KernelConfig.scale_fma_applies, and the kernel's static_assert holds
# the same condition. scripts/check_compile.py compiles every dispatchable config that has it.
@pytest.mark.parametrize("name,applies", [
    ("t256_m8_n16_k8_s4_g8_fp32_sw16_wg_ws", True),
    ("t128_m8_n8_k4_s4_g8_fp32par_sw16_wg_ws_b2", True),     # units of half a group
    ("t256_m4_n32_k8_s3_g8_fp32_sw8_wg_ws", True),           # 64-column warps: no WG_DEFER
    ("t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws", True),    # WG_DEFER's: fused, no fold
    ("t256_m1_n32_k8_s4_g8_fp32_sw2_wg_ws", True),           # (16-row tiles)
    ("t256_m8_n16_k8_s3_gc_fp32_sw16_wg", False),            # per-channel: no group scale
    ("t256_m8_n16_k16_s3_g8_fp32_sw16_wg", False),           # two groups per unit
    ("t256_m1_n16_k8_s4_g8_fp32_sw1_b2", False),             # mma.sync
])
def test_fma_builds_exactly_where_the_kernel_takes_them(monkeypatch, name, applies):
    monkeypatch.delenv("MARLIN_CUPY_DEFINES", raising=False)
    cfg = KernelConfig.from_name(name)
    assert cfg.scale_fma_applies == applies
    assert kernels.marlin_entry(cfg, fma=True).endswith("_symf")
    assert kernels.template_args(cfg, fma=True).endswith(", true")
    if applies:     # (scripts/check_compile.py compiles the fused builds to cubin)
        # Against the build that scales the weights in two steps (MARLIN_WG_DEFER 0 where the
        # default build scales FP32 sums instead): the loop's scale multiplies (4 per weight
        # word: tiles x k16 steps words per unit) are gone, 3 per scale word and unit left
        # (s 2^20 and -8 s), and the bias subtractions.
        arch = "compute_90" + cfg.arch_suffix
        two_step = "#define MARLIN_WG_DEFER 0\n" if cfg.wg_defer else ""
        ptx = {f: jit.compile_ptx((two_step if not f else "") + kernels.marlin_source(cfg, fma=f),
                                  arch) for f in (False, True)}
        count = lambda op, f: len(re.findall(rf"\b{op}\b", ptx[f]))  # noqa: E731
        assert count(r"sub\.f16x2", True) == 0 < count(r"sub\.f16x2", False)
        assert count(r"mul\.f16x2", True) == 3 * (cfg.warp_cols // 16)
        k_sub = cfg.thread_k_blocks // cfg.k_warps
        assert count(r"mul\.f16x2", False) == 4 * (cfg.warp_cols // 16) * k_sub
        if cfg.wg_defer:
            # and the fused build has no fold either: no FP32 multiply-adds of the default
            # build's FP32 group sums are left
            default = jit.compile_ptx(kernels.marlin_source(cfg), arch)
            fmas = lambda ptx: len(re.findall(r"\bfma\.rn\.f32\b", ptx))  # noqa: E731
            assert fmas(ptx[True]) < fmas(default)
        with pytest.raises(ValueError, match="fma"):
            kernels.marlin_source(cfg, has_zp=True, fma=True)     # zero points: never
        return
    with pytest.raises(ValueError, match="scale_fma_applies"):
        kernels.marlin_source(cfg, fma=True)
    if cfg.wgmma:
        # The kernel refuses it too (its static_assert), unchecked source or not.
        with pytest.raises(Exception, match="FMA"):
            jit.compile_offline(kernels.marlin_source(cfg, check=False, fma=True),
                                "sm_90" + cfg.arch_suffix)


def test_the_dispatch_takes_the_fused_scale_only_for_weights_and_configs_that_allow_it():
    from marlin_cupy import ops
    fused = KernelConfig.from_name("t256_m8_n16_k8_s4_g8_fp32_sw16_wg_ws")
    deferred = KernelConfig.from_name("t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws")
    assert ops.use_scale_fma(fused, False, True)
    assert not ops.use_scale_fma(fused, True, True)       # zero points
    assert not ops.use_scale_fma(fused, False, False)     # a scale at or above 2^-4
    # WG_DEFER's instances: the fused build (no fold) on 64-row tiles, the fold on narrower
    assert deferred.wg_defer and ops.use_scale_fma(deferred, False, True)
    assert not ops.use_scale_fma(deferred, False, False)  # its two-step build: FP32 sums
    for name in ("t256_m2_n16_k8_s6_g8_fp32par_sw4_wg_w32_ws",
                 "t256_m1_n32_k8_s4_g8_fp32_sw2_wg_ws"):
        narrow = KernelConfig.from_name(name)
        assert narrow.wg_defer and narrow.scale_fma_applies and not narrow.scale_fma_preferred
        assert not ops.use_scale_fma(narrow, False, True)
    assert not ops.use_scale_fma(KernelConfig.from_name("t256_m1_n16_k8_s4_g8_fp32_sw1_b2"),
                                 False, True)             # mma.sync
    assert ops.use_scale_fma(fused.with_(column_ctas=1), False, True)   # a grid cap: the same


@pytest.mark.parametrize("name,boxes", [(WGMMA_CFG + "_ws", 2),
                                        ("t256_m8_n16_k4_s6_g8_fp32_sw16_wg_ws", 1)])
def test_the_tensor_copy_switch_is_live(monkeypatch, name, boxes):
    """``MARLIN_WS_TMA_A`` (entry 101): the build issues a fill's activations as ``boxes`` tensor
    copies of the module's map and drops the compute threads' proxy fences (first wait and
    loop); the shipped build has neither change. So tests/test_tma_gpu.py cannot pass on a
    dead switch."""
    cfg = KernelConfig.from_name(name)
    monkeypatch.delenv("MARLIN_CUPY_DEFINES", raising=False)
    src = kernels.marlin_source(cfg)
    plain = jit.compile_ptx(src, "compute_90a")
    tma = jit.compile_ptx("#define MARLIN_WS_TMA_A 1\n" + src, "compute_90a")
    copy = re.compile(r"cp\.async\.bulk\.tensor\.2d\S*\s+\[%r\d+\], \[%rd\d+, \{")
    fence = "fence.proxy.async.shared::cta"
    assert not copy.search(plain) and "marlin_tmap_a" not in plain
    assert "marlin_tmap_a" in tma
    # one copy per box in the fill's code (unrolled loops may repeat the fill)
    assert len(copy.findall(tma)) % boxes == 0 and copy.findall(tma)
    assert tma.count(fence) < plain.count(fence)


def test_a_builds_switches_come_from_the_environment_then_its_prefix(monkeypatch):
    """``ops._switch``: what ``build_kernel`` marks a build by (stamping probes, tensor-copied
    activations) is the value the build's source gives the switch: ``$MARLIN_CUPY_DEFINES``'s
    (its line comes after the prefix's, and the later ``#define`` holds), else the prefix's,
    else 0."""
    from marlin_cupy import ops
    monkeypatch.delenv("MARLIN_CUPY_DEFINES", raising=False)
    assert ops._switch("", "MARLIN_PROBE") == 0
    assert ops._switch("#define MARLIN_PROBE 5\n", "MARLIN_PROBE") == 5
    assert ops._switch("#define MARLIN_PROBE_X 5\n", "MARLIN_PROBE") == 0
    monkeypatch.setenv("MARLIN_CUPY_DEFINES", "MARLIN_WS_TMA_A=1,MARLIN_PROBE=4")
    assert ops._switch("", "MARLIN_WS_TMA_A") == 1
    assert ops._switch("", "MARLIN_PROBE") == 4
    assert ops._switch("#define MARLIN_WS_TMA_A 0\n", "MARLIN_WS_TMA_A") == 1
    assert ops._switch("#define MARLIN_COOP_HALF 1\n", "MARLIN_COOP_HALF") == 1


def test_switch_defaults_come_from_the_kernel_source(monkeypatch):
    """ops reads a switch that neither $MARLIN_CUPY_DEFINES nor a build's prefix sets at the
    kernel source's own default: were a switch that ops acts on (``MARLIN_WS_TMA_A``: its
    builds get their tensor maps) made 1 by default, every build would still get what it
    needs; a misspelt name is an error, not a silent 0."""
    from marlin_cupy import ops
    monkeypatch.delenv("MARLIN_CUPY_DEFINES", raising=False)
    assert kernels.switch_default("MARLIN_PROBE") == 0
    assert kernels.switch_default("MARLIN_EPI_TAIL") == 2
    assert kernels.switch_default("MARLIN_COOP_REARM_RELAXED") == 1
    assert ops._switch("", "MARLIN_EPI_TAIL") == 2
    assert ops._switch("#define MARLIN_EPI_TAIL 1\n", "MARLIN_EPI_TAIL") == 1
    with pytest.raises(ValueError, match="MARLIN_WS_TMA_AA is not a compile-time switch"):
        ops._switch("", "MARLIN_WS_TMA_AA")
    real = kernels._base_source()
    assert kernels.switch_default("MARLIN_WS_TMA_A") == 0
    flipped = real.replace("#ifndef MARLIN_WS_TMA_A\n#define MARLIN_WS_TMA_A 0\n",
                           "#ifndef MARLIN_WS_TMA_A\n#define MARLIN_WS_TMA_A 1\n")
    assert flipped != real
    monkeypatch.setattr(kernels, "_base_source", lambda: flipped)
    assert ops._switch("", "MARLIN_WS_TMA_A") == 1

