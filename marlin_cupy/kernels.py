"""Kernel source for one configuration: the templated body plus a plain extern "C" entry."""
from __future__ import annotations

import difflib
import os
import re
from functools import lru_cache

from . import jit
from .config import KernelConfig

KERNEL_FILE = "marlin.cu"


def marlin_entry(cfg: KernelConfig, has_zp: bool = False, fma: bool = False) -> str:
    """The kernel's symbol; a config and its ``compiled`` form share it (and the source).
    ``fma``: the build with the group scale inside the unpacking (suffix ``_symf``)."""
    kind = "zp" if has_zp else "symf" if fma else "sym"
    return f"marlin_{cfg.compiled.name}_{kind}"


def template_args(cfg: KernelConfig, has_zp: bool = False, fma: bool = False) -> str:
    """The template arguments of ``mc::Marlin`` / ``mc::marlin_kernel`` for ``cfg``; the trailing
    ones (PAR_REDUCE, WARP_N, MIN_BLOCKS, PRODUCER, DYN_Q, EARLY, TOP_SUM, FMA) only up to the
    last that differs from its default, so that instances which do not use them keep their
    source text (and kernel cache key)."""
    b = lambda v: "true" if v else "false"  # noqa: E731
    args = [cfg.threads, cfg.thread_m_blocks, cfg.thread_n_blocks, cfg.thread_k_blocks,
            cfg.stages, cfg.group_blocks, b(has_zp), b(cfg.fp32_reduce), cfg.swap_ab,
            b(cfg.wgmma)]
    optional = [(b(cfg.parallel_reduce), "false"), (cfg.warp_n, 0), (cfg.blocks_per_sm, 1),
                (b(cfg.producer), "false"), (cfg.dyn_chunk, 0), (b(cfg.early_bottom), "false"),
                (b(cfg.top_sum), "false"), (b(fma), "false")]
    while optional and optional[-1][0] == optional[-1][1]:
        optional.pop()
    return ", ".join(str(v) for v in args + [v for v, _ in optional])


def _wrapper(cfg: KernelConfig, has_zp: bool, fma: bool = False) -> str:
    targs = template_args(cfg, has_zp, fma)
    return (
        f'extern "C" __global__ void __launch_bounds__({cfg.launch_threads}, {cfg.blocks_per_sm})\n'
        f"{marlin_entry(cfg, has_zp, fma)}(const int4* A, const int4* B, const int4* S, const int4* Z,\n"
        f"    int4* C, float4* scratch, int* locks, int prob_m, int prob_n, int prob_k,\n"
        f"    int parallel) {{\n"
        f"  mc::marlin_kernel<{targs}>(A, B, S, Z, C, scratch, locks, prob_m, prob_n, prob_k,\n"
        f"                             parallel);\n"
        f"}}\n")


@lru_cache(maxsize=None)
def _base_source() -> str:
    return jit.expand_source(KERNEL_FILE)


_DEFINE = re.compile(r"^([A-Z_][A-Z0-9_]*)=(-?[0-9]+)$")


def switch_default(name: str) -> int:
    """The value the kernel source gives its compile-time switch ``name`` when nothing defines
    it: its ``#ifndef NAME`` / ``#define NAME <integer>`` block. A name the source has no such
    block for is an error (a misspelt switch would otherwise read as 0)."""
    found = re.search(rf"^#ifndef {re.escape(name)}\n#define {re.escape(name)} (-?\d+)\n",
                      _base_source(), re.MULTILINE)
    if not found:
        raise ValueError(f"{name} is not a compile-time switch of the kernel source "
                         f"(cuda/{KERNEL_FILE} and its headers have no '#ifndef {name}' block "
                         f"defining it to an integer)")
    return int(found.group(1))


def defines() -> dict:
    """The compile-time switches of ``$MARLIN_CUPY_DEFINES`` ("NAME=INT,NAME=INT") as
    ``{NAME: value}``, empty when unset: switches of cuda/marlin.cuh (its experiments and A/B
    macros) for every kernel built in this process, e.g. to run the GPU tests on an
    experimental build. It is read when a kernel is built: after changing it in a running
    process, call ``ops.reload_kernels()``."""
    return parse_defines(os.environ.get("MARLIN_CUPY_DEFINES", ""), "MARLIN_CUPY_DEFINES")


def describe_defines() -> str:
    """``defines()`` for a log: "NAME=INT,..." or "none (shipped build)", so that a run on an
    experimental build says so in what it leaves."""
    switches = defines()
    return ",".join(f"{k}={v}" for k, v in switches.items()) or "none (shipped build)"


@lru_cache(maxsize=None)
def source_macros() -> frozenset:
    """Every ``MARLIN_*`` name the kernel source mentions: the switches a build may set."""
    return frozenset(re.findall(r"\bMARLIN_[A-Z0-9_]+\b", _base_source()))


def parse_defines(raw: str, what: str) -> dict:
    """``"NAME=INT,NAME=INT"`` as ``{NAME: value}`` (empty items skipped); ``what`` names the
    source in the error for a malformed item, or for a name the kernel source never mentions
    (a misspelt switch would build, and be reported as, the experiment while the shipped
    build ran)."""
    out = {}
    for item in filter(None, (v.strip() for v in raw.split(","))):
        m = _DEFINE.match(item)
        if not m:
            raise ValueError(f"{what}: {item!r} is not NAME=INTEGER "
                             f"(upper-case macro name, integer value)")
        if m.group(1) not in source_macros():
            close = difflib.get_close_matches(m.group(1), sorted(source_macros()), n=3)
            raise ValueError(f"{what}: {m.group(1)} is not a switch of the kernel source "
                             f"(cuda/{KERNEL_FILE} and its headers never mention it)"
                             f"{f'; similar: {close}' if close else ''}.")
        out[m.group(1)] = int(m.group(2))
    return out


def define_lines(switches: dict) -> str:
    """``#define`` lines for ``{NAME: value}``, in its order."""
    return "".join(f"#define {name} {value}\n" for name, value in switches.items())


def extra_defines() -> str:
    """``#define`` lines for the switches of ``defines()``, in their order."""
    return define_lines(defines())


def marlin_source(cfg: KernelConfig, has_zp: bool = False, check: bool = True,
                  fma: bool = False) -> str:
    """Self-contained source (headers inlined) defining ``marlin_entry(cfg, has_zp, fma)``, with
    the switches of ``$MARLIN_CUPY_DEFINES`` in front (see ``extra_defines``).

    ``fma``: the instance with the group scale inside the unpacking (symmetric weights whose
    scales are all below ``config.FMA_SCALE_LIMIT``; only where ``cfg.scale_fma_applies``).
    ``check=False`` skips ``cfg.validate()`` and that condition; tests use it to confirm that
    the kernel's own static_asserts reject the same configurations.
    """
    if check:
        cfg.validate()
        if fma and (has_zp or not cfg.scale_fma_applies):
            raise ValueError(f"{cfg.name}: the group scale inside the unpacking (fma) needs a "
                             f"symmetric wgmma instance whose units hold one scale group "
                             f"(KernelConfig.scale_fma_applies)")
    cfg = cfg.compiled      # host-side fields (the grid's cap) do not reach the source
    return extra_defines() + _base_source() + "\n" + _wrapper(cfg, has_zp, fma)


def reload_sources():
    """Forget cached source text (after editing cuda/ in a running notebook)."""
    _base_source.cache_clear()
    source_macros.cache_clear()


def warm_instantiated(workers: int = 8, configs=None) -> int:
    """Fill the kernel caches with ``configs`` (default: every dispatchable configuration, the
    instantiated table, the sm_90 heuristic's and the shipped tuned tables), sym and zero-point,
    and the sym build with the group scale inside the unpacking where the dispatch takes it
    (``scale_fma_preferred``), each for its own target (sm_90a for wgmma configs)."""
    from .config import INSTANTIATED, SM90_INSTANTIATED, tuned_instances
    if configs is None:
        cfgs = list(dict.fromkeys(list(INSTANTIATED) + list(SM90_INSTANTIATED)
                                  + [c for cs in tuned_instances().values() for c in cs]))
    else:
        cfgs = configs
    return jit.warm_cache([(marlin_source(c, zp), c.arch_suffix)
                           for c in cfgs for zp in (False, True)]
                          + [(marlin_source(c, fma=True), c.arch_suffix)
                             for c in cfgs if c.scale_fma_preferred], workers)
