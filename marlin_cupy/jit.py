"""Source -> compiled module. The one place that talks to NVRTC.

Kernel sources live in ``cuda/`` as ``.cu`` files that include ``.cuh`` headers with quoted
``#include "..."``. CuPy's kernel cache hashes only the source string it is given, not headers
found through ``-I`` (see shared/research/user_reports.md s.4.1), and it compiles from a
temporary directory. We therefore inline every quoted include ourselves: the string handed to
NVRTC is self-contained, so editing any ``.cu`` or ``.cuh`` changes the cache key and
recompiles, and nothing else does.

Two paths:
- ``load_module`` (needs a GPU): ``cupy.RawModule`` compiled for the current device, kept
  alive per (source hash, options, device) so each module is loaded once per process.
- ``compile_offline`` (no GPU): NVRTC straight to a cubin for a named architecture, with the
  ptxas resource report parsed (registers, spills, stack), for CI's compile check.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

# One include line, no more: \s would also take the newlines around it, and every "#line" after
# an include would then be a line early (NVRTC's and compute-sanitizer's line numbers).
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"[ \t]*$', re.M)

# Options shared by every kernel build. Line info costs nothing at run time and lets
# compute-sanitizer name source lines. CuPy adds -arch itself; adding one here would fail.
BASE_OPTIONS = ("-std=c++17", "--generate-line-info")
# What ``compile_offline`` adds for its resource report (ptxas's registers, spills, stack).
_CUBIN_OPTIONS = ["--ptxas-options=-v"]


def cuda_dir() -> Path:
    """Folder holding the kernel sources: ``cuda/`` in a source tree, package data when installed."""
    tree = Path(__file__).resolve().parent.parent / "cuda"
    if (tree / "marlin.cu").is_file():
        # A source tree. Installed, the folder beside the package is site-packages/cuda, which
        # is another distribution's (CuPy's cuda-pathfinder installs a `cuda` package there).
        return tree
    # Installed: cuda/'s files are the package data of marlin_cupy._cuda (pyproject.toml's
    # package-dir), whose __path__ names their folder.
    import importlib
    return Path(list(importlib.import_module("marlin_cupy._cuda").__path__)[0])


def expand_source(filename: str, _seen=None) -> str:
    """The text of ``cuda/filename`` with every quoted include inlined (each header once)."""
    seen = set() if _seen is None else _seen
    path = cuda_dir() / filename
    if not path.is_file():
        raise FileNotFoundError(f"kernel source {filename!r} not found in {cuda_dir()}")
    text = path.read_text()

    def inline(match):
        name = match.group(1)
        if name in seen:
            return f"// {name} already included"
        seen.add(name)
        return (f'#line 1 "{name}"\n{expand_source(name, seen)}\n'
                f'#line {text.count(chr(10), 0, match.start()) + 2} "{filename}"')

    return _INCLUDE.sub(inline, text)


def source_hash(source: str, options=()) -> str:
    return hashlib.sha256((source + "\0" + "\0".join(options)).encode()).hexdigest()[:16]


_modules: dict = {}


def load_module(source: str, options=(), arch_suffix: str = ""):
    """A ``cupy.RawModule`` for ``source`` on the current device, compiled once per process.

    CuPy's own on-disk cache (``~/.cupy/kernel_cache``, or ``CUPY_CACHE_DIR``) makes the
    compile a file read in later processes. ``arch_suffix="a"`` builds for the device's
    arch-specific target (``sm_90a``: wgmma), which CuPy's compile path cannot name (it adds
    ``-arch=sm_90`` itself): NVRTC then compiles to a cubin in our own cache, keyed like
    CuPy's (source, options, target, NVRTC version), and ``RawModule(path=...)`` loads it.
    """
    import cupy as cp
    opts = BASE_OPTIONS + tuple(options)
    key = (source_hash(source, opts + (arch_suffix,)), cp.cuda.Device().id)
    mod = _modules.get(key)
    if mod is None:
        if arch_suffix:
            mod = cp.RawModule(path=str(_arch_cubin(source, tuple(options), arch_suffix)))
        else:
            mod = cp.RawModule(code=source, options=opts)
        _modules[key] = mod
    return mod


def cubin_cache_dir() -> Path:
    import os
    root = os.environ.get("MARLIN_CUPY_CACHE") or Path.home() / ".cache" / "marlin_cupy"
    return Path(root) / "cubin"


def _arch_cubin(source: str, options: tuple, arch_suffix: str) -> Path:
    """Path of the cubin of ``source`` for the current device's ``sm_XX<arch_suffix>``, keyed
    by the source, every option NVRTC gets (``compile_offline``'s) and NVRTC's version."""
    import cupy as cp
    from cupy.cuda import nvrtc
    arch = f"sm_{cp.cuda.Device().compute_capability}{arch_suffix}"
    version = "%d.%d" % nvrtc.getVersion()
    key = source_hash(source, tuple(_nvrtc_options(arch, list(options) + _CUBIN_OPTIONS))
                      + (version,))
    path = cubin_cache_dir() / f"{key}_{arch}.cubin"
    if not path.is_file():
        cubin, _ = compile_offline(source, arch, options)
        path.parent.mkdir(parents=True, exist_ok=True)
        # A temporary file of this writer's own (threads and processes may compile the same
        # kernel at once), renamed into place: a reader never sees half a cubin.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(cubin)
            os.chmod(tmp, 0o644)       # mkstemp's 0600 would keep a shared cache private
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
    return path


@dataclass(frozen=True)
class CompileReport:
    """What ptxas said about one kernel (``--ptxas-options=-v``)."""
    kernel: str
    arch: str
    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int
    shared_bytes: int

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0


_PTXAS_FUNC = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
_PTXAS_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_log(log: str) -> list:
    """Split a ptxas ``-v`` log into one ``CompileReport`` per entry function."""
    reports = []
    blocks = _PTXAS_FUNC.split(log)
    # split() yields [preamble, name, arch, body, name, arch, body, ...]
    for i in range(1, len(blocks) - 2, 3):
        name, arch, body = blocks[i], blocks[i + 1], blocks[i + 2]
        stack = _PTXAS_STACK.search(body)
        regs = _PTXAS_REGS.search(body)
        smem = _PTXAS_SMEM.search(body)
        reports.append(CompileReport(
            kernel=name, arch=arch,
            registers=int(regs.group(1)) if regs else -1,
            stack_bytes=int(stack.group(1)) if stack else 0,
            spill_store_bytes=int(stack.group(2)) if stack else 0,
            spill_load_bytes=int(stack.group(3)) if stack else 0,
            shared_bytes=int(smem.group(1)) if smem else 0))
    return reports


def cuda_include_dir() -> str:
    """The CUDA toolkit headers (cuda_fp16.h) that NVRTC needs, as CuPy itself finds them."""
    try:
        import cuda.pathfinder as pf
        found = pf.find_nvidia_header_directory("cudart")
        if found:
            return str(found)
    except Exception:  # older CuPy without cuda.pathfinder: fall back to CUDA_PATH
        pass
    import cupy._environment as env
    path = env.get_cuda_path()
    if path:
        return str(Path(path) / "include")
    raise RuntimeError("CUDA headers not found: install cupy-cuda12x[ctk] (or cupy-cuda13x[ctk]) "
                       "or set CUDA_PATH.")


def compile_offline(source: str, arch: str, options=(), name: str = "kernel.cu"):
    """Compile ``source`` to a cubin for ``arch`` (e.g. ``"sm_90"``) with NVRTC, no GPU needed.

    Returns ``(cubin_bytes, [CompileReport, ...])``. Raises ``RuntimeError`` with NVRTC's log
    on a compile error.
    """
    log, cubin = _nvrtc(source, arch, list(options) + _CUBIN_OPTIONS, name, "cubin")
    return cubin, parse_ptxas_log(log)


def compile_ptx(source: str, arch: str, options=(), name: str = "kernel.cu") -> str:
    """``source`` as PTX for a virtual ``arch`` (e.g. ``"compute_90a"``) with NVRTC, no GPU
    needed (no ptxas: quicker than ``compile_offline``, for checks on the instructions
    emitted)."""
    ptx = _nvrtc(source, arch, list(options), name, "ptx")[1]
    return ptx.decode() if isinstance(ptx, bytes) else ptx


def _nvrtc(source: str, arch: str, options: list, name: str, output: str):
    """(NVRTC's log, its cubin or PTX); RuntimeError with the log on a compile error."""
    from cupy.cuda import nvrtc
    prog = nvrtc.createProgram(source, name, [], [])
    try:
        try:
            nvrtc.compileProgram(prog, _nvrtc_options(arch, options))
        except nvrtc.NVRTCError as e:
            raise RuntimeError(f"NVRTC failed for {arch}:\n{nvrtc.getProgramLog(prog)}") from e
        return nvrtc.getProgramLog(prog), (nvrtc.getCUBIN(prog) if output == "cubin"
                                           else nvrtc.getPTX(prog))
    finally:
        nvrtc.destroyProgram(prog)


def _nvrtc_options(arch: str, options: list) -> list:
    """Every option NVRTC gets for ``options`` and ``arch``: ``BASE_OPTIONS``, ``options``, the
    target, the CUDA headers and the execution space (``_arch_cubin`` keys its cache by them)."""
    return list(BASE_OPTIONS) + list(options) + [
        f"-arch={arch}", f"-I{cuda_include_dir()}", "--device-as-default-execution-space"]


def _compile_one(item) -> str:
    """Compile one source (or ``(source, arch_suffix)``) into the on-disk caches."""
    import cupy as cp
    source, suffix = item if isinstance(item, tuple) else (item, "")
    if suffix:
        _arch_cubin(source, (), suffix)
    else:
        cp.RawModule(code=source, options=BASE_OPTIONS).compile()
    return source_hash(source)


def warm_cache(sources, workers: int = 8) -> int:
    """Compile ``sources`` (strings, or ``(source, arch_suffix)`` pairs for arch-specific
    targets such as sm_90a) in parallel worker processes into the on-disk caches.

    NVRTC is single-threaded and a Marlin instance takes about a second, so a test session
    that touches every instantiated configuration compiles them all up front, in parallel;
    later ``load_module`` calls then only read the cache. Returns how many were compiled.
    """
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    sources = list(dict.fromkeys(sources))
    if not sources:
        return 0
    ctx = mp.get_context("spawn")  # never fork a process that may hold a CUDA context
    with ProcessPoolExecutor(max_workers=max(1, workers), mp_context=ctx) as pool:
        return len(list(pool.map(_compile_one, sources)))
