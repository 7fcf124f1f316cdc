"""jit: the arch-specific (sm_90a) build path, checked without a GPU by standing in for CuPy."""
import sys
import types

import pytest

from marlin_cupy import jit


@pytest.fixture
def fake_cupy(monkeypatch, tmp_path):
    """A cupy stand-in: device cc 9.0, RawModule recording how it was built, NVRTC 12.9."""
    built = []

    class RawModule:
        def __init__(self, code=None, options=(), path=None):
            built.append({"code": code, "options": options, "path": path})

    cp = types.SimpleNamespace(
        RawModule=RawModule,
        cuda=types.SimpleNamespace(Device=lambda: types.SimpleNamespace(id=0,
                                                                         compute_capability="90")))
    nvrtc = types.SimpleNamespace(getVersion=lambda: (12, 9))
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setitem(sys.modules, "cupy.cuda", types.SimpleNamespace(nvrtc=nvrtc))
    monkeypatch.setitem(sys.modules, "cupy.cuda.nvrtc", nvrtc)
    monkeypatch.setenv("MARLIN_CUPY_CACHE", str(tmp_path))
    monkeypatch.setattr(jit, "_modules", {})
    compiled = []

    def compile_offline(source, arch, options=(), name="kernel.cu"):
        compiled.append(arch)
        return b"\x7fELF cubin for " + arch.encode(), []

    monkeypatch.setattr(jit, "compile_offline", compile_offline)
    return built, compiled, tmp_path


def test_arch_suffix_builds_a_cubin_for_sm_90a_and_loads_it_by_path(fake_cupy):
    built, compiled, cache = fake_cupy
    jit.load_module("extern \"C\" __global__ void k() {}", arch_suffix="a")
    assert compiled == ["sm_90a"]
    path = built[-1]["path"]
    assert path and path.startswith(str(cache / "cubin")) and path.endswith("_sm_90a.cubin")
    assert open(path, "rb").read() == b"\x7fELF cubin for sm_90a"


def test_the_cubin_cache_is_reused_across_processes(fake_cupy):
    built, compiled, _ = fake_cupy
    src = "extern \"C\" __global__ void k() {}"
    jit.load_module(src, arch_suffix="a")
    jit._modules.clear()                      # a new process: only the disk cache is left
    jit.load_module(src, arch_suffix="a")
    assert compiled == ["sm_90a"] and len(built) == 2


def test_without_suffix_cupy_compiles_from_source(fake_cupy):
    built, compiled, _ = fake_cupy
    jit.load_module("extern \"C\" __global__ void k() {}")
    assert compiled == [] and built[-1]["code"] and built[-1]["path"] is None
    assert built[-1]["options"][: len(jit.BASE_OPTIONS)] == jit.BASE_OPTIONS
