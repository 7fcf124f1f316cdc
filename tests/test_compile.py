"""Every kernel compiles through NVRTC for sm_80 and sm_90 (sm_90a for the wgmma instances) with no
spill to local memory.

No GPU is needed: this is the check of ``scripts/check_compile.py``, one test per standalone
``.cu`` file or instantiated configuration and architecture, so CI names the one that broke.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("cupy", reason="NVRTC comes with CuPy; install the cuda12 or cuda13 extra")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import check_compile  # noqa: E402  (scripts/ is not a package)

TARGETS, NOTES = check_compile.all_targets()
ARCHS = check_compile.DEFAULT_ARCHS


@pytest.fixture(scope="session")
def compile_results():
    """Compile everything once, two processes at a time; tests look their pair up."""
    results = check_compile.run_checks(TARGETS, ARCHS, jobs=2)
    return {(r.label, r.arch): r for r in results}


def test_there_is_something_to_compile():
    assert check_compile.standalone_files(), "no standalone .cu file found in cuda/"


# The pairs the fixture compiles: arch-specific targets (the wgmma configs, sm_90a) included.
# (A filter `a in t.archs` never matched "sm_90a": until 2026-11-30 those targets were
# compiled but no test asserted on them.)
@pytest.mark.parametrize("label, arch", [(t.label, a) for t in TARGETS
                                         for a in check_compile._archs_for(t, ARCHS)])
def test_compiles_without_spills(compile_results, label, arch):
    result = compile_results[(label, arch)]
    assert result.ok, "\n".join(result.problems)
    assert result.kernels, f"{label} [{arch}] produced no kernel"


# --- the check itself catches what it must -------------------------------------------------

SPILLING = r'''
extern "C" __global__ void spills(float* x, int n) {
  float a[64];
#pragma unroll
  for (int i = 0; i < 64; i++) a[i] = x[i * n + threadIdx.x];
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 64; j++)
#pragma unroll
    for (int i = 0; i < 64; i++) s += a[i] * a[(i + j) & 63];
  x[threadIdx.x] = s;
}
'''


def test_spills_fail_the_check():
    # Capping registers at 16 forces this kernel's 64 live floats into local memory.
    target = check_compile.Target("spilling.cu", SPILLING, options=("-maxrregcount=16",))
    result = check_compile.compile_one(target, "sm_90")
    assert not result.ok
    assert any("spills to local memory" in p for p in result.problems), result.problems


def test_compile_errors_fail_the_check():
    target = check_compile.Target("broken.cu", 'extern "C" __global__ void k() { undeclared(); }')
    result = check_compile.compile_one(target, "sm_80")
    assert not result.ok
    assert "compile error" in result.problems[0] and "undeclared" in result.problems[0]


def test_missing_entry_fails_the_check():
    target = check_compile.Target("config:x", 'extern "C" __global__ void other() {}',
                                  entry="marlin_x")
    result = check_compile.compile_one(target, "sm_80")
    assert not result.ok
    assert "'marlin_x' is not in the cubin" in result.problems[0]


def test_main_writes_the_table(tmp_path, monkeypatch):
    from marlin_cupy import jit
    smoke = check_compile.Target("smoke.cu", jit.expand_source("smoke.cu"))
    monkeypatch.setattr(check_compile, "all_targets", lambda: ([smoke], ["only smoke.cu"]))
    assert check_compile.main(["--out", str(tmp_path), "--jobs", "1"]) == 0
    text = (tmp_path / "compile_check.md").read_text()
    assert "| smoke.cu | sm_90 | smoke_scale |" in text
    assert (tmp_path / "compile_check.json").is_file()


def test_report_names_the_switches_it_was_built_with(tmp_path, monkeypatch):
    import json
    from marlin_cupy import jit
    smoke = check_compile.Target("smoke.cu", jit.expand_source("smoke.cu"))
    monkeypatch.setattr(check_compile, "all_targets", lambda: ([smoke], ["only smoke.cu"]))
    monkeypatch.setenv("MARLIN_CUPY_DEFINES", "MARLIN_PAR_EARLY_BOTTOM=1")
    assert check_compile.main(["--out", str(tmp_path), "--jobs", "1", "--no-cache"]) == 0
    record = json.loads((tmp_path / "compile_check.json").read_text())
    assert record["kernel_defines"] == {"MARLIN_PAR_EARLY_BOTTOM": 1}
    assert "MARLIN_PAR_EARLY_BOTTOM=1" in (tmp_path / "compile_check.md").read_text()
    monkeypatch.delenv("MARLIN_CUPY_DEFINES")
    assert check_compile.main(["--out", str(tmp_path), "--jobs", "1", "--no-cache"]) == 0
    assert "kernel_defines" not in json.loads((tmp_path / "compile_check.json").read_text())


# --config NAME: one configuration after an edit, in seconds

def test_a_listed_config_gets_every_build_the_full_check_makes_of_it():
    from marlin_cupy.config import tuned_instances
    cfg = next(c for c in tuned_instances()["sm_90"] if c.scale_fma_preferred)
    targets, notes = check_compile.named_targets([cfg.name])
    full = [t for t in TARGETS if t.label.startswith(f"config:{cfg.compiled.name}")
            and t.label[len(f"config:{cfg.compiled.name}"):] in check_compile._BUILD_TAGS]
    assert sorted(t.label for t in targets) == sorted(t.label for t in full)
    assert {t.label.removeprefix(f"config:{cfg.compiled.name}") for t in targets} == {
        "", "_zp", "_pdl", "_zp_pdl", "_fma", "_fma_pdl"}
    assert "the full check's 6 build(s)" in notes[0]


@pytest.mark.parametrize("name,archs,builds", [
    ("t256_m4_n16_k8_s5_g8_fp32par_sw8_wg_w32_ws", ("sm_90a",), 3),   # wgmma: sym, zp, fused
    ("t256_m1_n8_k8_s7_g8_fp32", (), 2),                               # mma.sync: sm_80 and sm_90
])
def test_a_config_in_no_list_gets_its_own_builds(name, archs, builds):
    assert not any(t.label == f"config:{name}" for t in TARGETS)
    targets, notes = check_compile.named_targets([name])
    assert len(targets) == builds and all(t.archs == archs for t in targets)
    assert "in no list of the full check" in notes[0]


def test_main_compiles_a_named_config(capsys):
    assert check_compile.main(["--config", "t256_m1_n8_k8_s7_g8_fp32", "--arch", "sm_90",
                               "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "config:t256_m1_n8_k8_s7_g8_fp32_zp" in out and "compile check passed: 2" in out


@pytest.mark.parametrize("name", ["t256_bogus", "t256_m1_n8_k8_s4_g8_fp32_sw1_wg"])
def test_main_refuses_a_bad_config_name(name, capsys):
    assert check_compile.main(["--config", name]) == 2
    assert capsys.readouterr().out.startswith("FAILED: ")
