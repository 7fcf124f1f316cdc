"""jit: the arch-specific (sm_90a) build path, checked without a GPU by standing in for CuPy."""
import os
import sys
import threading
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
    monkeypatch.setattr(jit, "cuda_include_dir", lambda: "/cuda/include")
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


def test_a_change_of_any_nvrtc_option_builds_another_cubin(fake_cupy, monkeypatch):
    """The cubin cache's key holds every option NVRTC gets, ``BASE_OPTIONS`` and the CUDA
    headers' folder included: a cubin built with other options is never loaded."""
    built, compiled, _ = fake_cupy
    src = "extern \"C\" __global__ void k() {}"
    paths = []

    def build():
        jit._modules.clear()                  # a new process
        jit.load_module(src, arch_suffix="a")
        paths.append(built[-1]["path"])
    build()
    monkeypatch.setattr(jit, "BASE_OPTIONS", ("-std=c++20", "--generate-line-info"))
    build()
    monkeypatch.setattr(jit, "cuda_include_dir", lambda: "/other/cuda/include")
    build()
    build()                                   # nothing changed: the cache answers
    assert len(set(paths)) == 3 and paths[2] == paths[3]
    assert compiled == ["sm_90a"] * 3


def test_threads_compiling_one_kernel_write_the_cubin_each_through_its_own_file(fake_cupy,
                                                                               monkeypatch):
    """Two threads that miss the cache at once both compile and write the cubin. Each renames a
    temporary file of its own into place: with one name per process, the second rename found
    no file (FileNotFoundError), and the second writer could still be writing the file the
    first had renamed into place. The renames wait until both files are written."""
    built, compiled, cache = fake_cupy
    both_written = threading.Barrier(2)
    real_replace = os.replace

    def replace(src, dst):
        try:
            both_written.wait(timeout=5)
        except threading.BrokenBarrierError:
            pass
        real_replace(src, dst)
    monkeypatch.setattr(os, "replace", replace)
    errors, paths = [], []

    def compile_kernel():
        try:
            paths.append(jit._arch_cubin("extern \"C\" __global__ void k() {}", (), "a"))
        except Exception as e:                # noqa: BLE001  (reported below)
            errors.append(repr(e))
    threads = [threading.Thread(target=compile_kernel) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert compiled == ["sm_90a"] * 2         # both missed the cache
    assert len(set(paths)) == 1 and paths[0].read_bytes() == b"\x7fELF cubin for sm_90a"
    assert sorted(f.name for f in paths[0].parent.iterdir()) == [paths[0].name]


def test_line_directives_name_the_lines_of_the_expanded_source():
    """Every line of the expanded kernel source is, by the ``#line`` directives before it, the
    line of the file it came from: NVRTC errors and compute-sanitizer reports point at the
    right line (the include pattern once took the newline after an include, and every line
    after it was reported one early)."""
    import re
    files, current, line = {}, "marlin.cu", 1
    for text in jit.expand_source("marlin.cu").split("\n"):
        directive = re.match(r'#line (\d+) "([^"]+)"$', text)
        if directive:
            line, current = int(directive.group(1)), directive.group(2)
            continue
        lines = files.setdefault(current, (jit.cuda_dir() / current).read_text().split("\n"))
        assert lines[line - 1] == text, (current, line, text)
        line += 1
    assert set(files) >= {"marlin.cu", "marlin.cuh", "common.cuh"}


def test_an_installed_package_finds_its_sources_beside_another_cuda_package(tmp_path):
    """Installed (not editable), the kernel sources are the package data of marlin_cupy._cuda,
    and site-packages/cuda is another distribution's (CuPy 14's cuda-pathfinder installs a
    ``cuda`` package): the sources must come from the former. The layout is made as
    pyproject.toml's package-dir and package-data make it (``pip install .``)."""
    import shutil
    import subprocess
    import sys
    site = tmp_path / "site"
    shutil.copytree(jit.Path(jit.__file__).resolve().parent, site / "marlin_cupy",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for source in jit.cuda_dir().glob("*.cu*"):
        shutil.copy(source, site / "marlin_cupy" / "_cuda" / source.name)
    (site / "cuda").mkdir()
    (site / "cuda" / "__init__.py").write_text("")          # cuda-pathfinder's package
    code = ("from marlin_cupy import jit; d = jit.cuda_dir(); "
            "print(d); assert (d / 'marlin.cu').is_file(); jit.expand_source('marlin.cu')")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={"PYTHONPATH": str(site),
                                                      "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == str(site / "marlin_cupy" / "_cuda"), out.stdout
