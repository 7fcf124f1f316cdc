#!/usr/bin/env python3
"""Compile every kernel through NVRTC for sm_80 and sm_90 and fail on errors or spills.

No GPU is needed. The targets are
- every standalone ``.cu`` file in ``cuda/`` (one that defines an ``extern "C" __global__``), and
- every configuration in ``marlin_cupy.config.INSTANTIATED``, through
  ``marlin_cupy.kernels.marlin_source(cfg)``, once those modules exist.

Any compile error, any spill store or load, a target that yields no kernel, or a configuration
whose ``marlin_entry(cfg)`` kernel is missing from the cubin fails the check (exit 1).
``--out DIR`` writes ``compile_check.json`` and ``compile_check.md`` (registers, spills, stack and
shared memory per kernel and architecture).

Results are cached on disk by a hash of (source, options, architecture, NVRTC version), so a
second run over unchanged sources (``scripts/test.sh`` runs this script and then pytest, which
runs the same check) costs nothing.

    python scripts/check_compile.py [--arch sm_80 --arch sm_90] [--out DIR] [--jobs 2] [--no-cache]

After an edit to the kernel, ``--config NAME`` (repeatable) compiles one configuration in every
build the full check makes of it (symmetric, zero points, the fused group scale, ``pdl=True``),
or, for a configuration no list holds, its symmetric and zero-point builds (and the fused one
where it applies) for the architectures it runs on: registers and spills in seconds.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_ARCHS = ("sm_80", "sm_90")
DEFAULT_CACHE = ROOT / "build" / "compile_cache"
_ENTRY = re.compile(r'extern\s+"C"\s+__global__')
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


@dataclass
class Target:
    """One thing to compile: a standalone file or one instantiated kernel configuration."""
    label: str                    # "smoke.cu" or "config:<cfg.name>"
    source: str                   # self-contained source (includes inlined)
    entry: str | None = None      # kernel that must be in the cubin, when known
    options: tuple = ()
    archs: tuple = ()        # compile only for these (empty: every requested architecture)


@dataclass
class Result:
    label: str
    arch: str
    ok: bool
    kernels: list = field(default_factory=list)   # CompileReport fields as dicts
    problems: list = field(default_factory=list)  # what failed, one sentence each
    seconds: float = 0.0
    cached: bool = False


# ---------------------------------------------------------------------------------------------
# Discovering targets
# ---------------------------------------------------------------------------------------------

def standalone_files(cuda_dir: Path | None = None) -> list:
    """The ``.cu`` files in ``cuda/`` that define at least one ``extern "C" __global__``."""
    from marlin_cupy import jit
    folder = cuda_dir or jit.cuda_dir()
    return sorted(p.name for p in folder.glob("*.cu")
                  if _ENTRY.search(_COMMENT.sub("", p.read_text())))


def config_target(cfg, zp: bool, archs=(), prefix: str = "", tag: str = "",
                  fma: bool = False) -> Target:
    """One build of ``cfg``, labelled ``config:<name>[_zp]<tag>``, its entry point checked."""
    from marlin_cupy.kernels import marlin_entry, marlin_source
    return Target(label=f"config:{cfg.name}{'_zp' if zp else ''}{tag}",
                  source=prefix + marlin_source(cfg, zp, fma=fma),
                  entry=marlin_entry(cfg, zp, fma), archs=archs)


def config_targets():
    """``(targets, note)``: every build of every configuration the project compiles."""
    from marlin_cupy.config import INSTANTIATED
    from marlin_cupy.config import (DYN_EXAMPLES, EARLY_BOTTOM_EXAMPLES, MMA_PRODUCER_EXAMPLES,
                                    MMA_WIDE_EXAMPLES, PARALLEL_REDUCE_EXAMPLES,
                                    SM90_INSTANTIATED, TOP_SUM_EXAMPLES, WGMMA_EXAMPLES,
                                    tuned_instances)

    targets = [config_target(cfg, zp) for cfg in INSTANTIATED for zp in (False, True)]
    # A table's capped twins (``column_ctas``, a host-side grid cap) are the same kernel as
    # their ``compiled`` config: compiled once.
    tables = {arch: tuple(dict.fromkeys(c.compiled for c in cfgs))
              for arch, cfgs in tuned_instances().items()}
    tuned = [config_target(cfg, zp, (arch + cfg.arch_suffix,))
             for arch, cfgs in tables.items() for cfg in cfgs for zp in (False, True)]
    wg = [config_target(cfg, zp, ("sm_90a",)) for cfg in WGMMA_EXAMPLES for zp in (False, True)]
    # What the compute capability 9.0 heuristic dispatches (sm_90, sm_90a for wgmma) beyond
    # the tuned tables (compiled above).
    in_tables = {c for cs in tables.values() for c in cs}
    sm90 = [config_target(cfg, zp, ("sm_90" + cfg.arch_suffix,)) for cfg in SM90_INSTANTIATED
            if cfg not in in_tables for zp in (False, True)]
    par = [config_target(cfg, zp, ("sm_90a",) if cfg.wgmma else ())
           for cfg in PARALLEL_REDUCE_EXAMPLES for zp in (False, True)]
    # The producer warpgroup waits with mbarrier.try_wait: sm_90 only.
    par += [config_target(cfg, zp, ("sm_90",)) for cfg in MMA_PRODUCER_EXAMPLES
            for zp in (False, True)]
    # Units handed out at run time (mma.sync, sm_80 and sm_90).
    par += [config_target(cfg, zp) for cfg in DYN_EXAMPLES for zp in (False, True)]
    # The early bottom (both reductions; its wgmma example on sm_90a only).
    par += [config_target(cfg, zp, ("sm_90a",) if cfg.wgmma else ())
            for cfg in EARLY_BOTTOM_EXAMPLES for zp in (False, True)]
    # The column's top summing (the parallel reduction; its wgmma example on sm_90a only).
    par += [config_target(cfg, zp, ("sm_90a",) if cfg.wgmma else ())
            for cfg in TOP_SUM_EXAMPLES for zp in (False, True)]
    # More warps in the swapped mma.sync loop (512 threads, narrow warps; sm_80 and sm_90).
    par += [config_target(cfg, zp) for cfg in MMA_WIDE_EXAMPLES for zp in (False, True)]
    # The build that matmul(..., pdl=True) launches (compute capability 9.0+), for the configs
    # the tuned tables of such devices dispatch. It differs from the plain build in the
    # prologue only; the heuristic's configs are not compiled in it here.
    try:
        from marlin_cupy.ops import PDL_PREFIX
    except ImportError:
        PDL_PREFIX = None
    pdl = [] if PDL_PREFIX is None else [
        config_target(cfg, zp, (arch + cfg.arch_suffix,), PDL_PREFIX, "_pdl")
        for arch, cfgs in tables.items() if int(arch[3:]) >= 90
        for cfg in cfgs for zp in (False, True)]
    # The build with the group scale inside the unpacking (symmetric weights whose scales lie
    # below 2^-4; NOTES.md entries 87-88) of every dispatchable wgmma config whose fused build
    # the dispatch takes (scale_fma_preferred), and of the tables' configs in the pdl=True build.
    dispatchable = dict.fromkeys(list(INSTANTIATED) + list(SM90_INSTANTIATED)
                                 + [c for cs in tables.values() for c in cs])
    fma = [config_target(cfg, False, ("sm_90a",), tag="_fma", fma=True) for cfg in dispatchable
           if cfg.scale_fma_preferred]
    if PDL_PREFIX is not None:
        fma += [config_target(cfg, False, (arch + cfg.arch_suffix,), PDL_PREFIX, "_fma_pdl",
                              fma=True)
                for arch, cfgs in tables.items() if int(arch[3:]) >= 90
                for cfg in cfgs if cfg.scale_fma_preferred]
    return targets + tuned + sm90 + wg + par + pdl + fma, (
        f"{len(INSTANTIATED)} instantiated configuration(s), {len(tuned) // 2} from tuned tables, "
        f"{len(sm90) // 2} more of the sm_90 heuristic, "
        f"{len(wg) // 2} wgmma examples (sm_90a), {len(par) // 2} parallel-reduction, "
        f"mma.sync producer, run-time hand-out and early-bottom examples "
        f"and {len(pdl) // 2} tuned configs in the pdl=True build, sym and zero-point each; "
        f"{len(fma)} builds with the group scale inside the unpacking (sym, plain and pdl=True)")


_BUILD_TAGS = ("", "_zp", "_pdl", "_zp_pdl", "_fma", "_fma_pdl")


def named_targets(names) -> tuple:
    """``(targets, notes)`` for the configurations ``names``: every target of the full check
    that builds one of them, or, for a valid configuration no list holds, its own builds (sm_90a
    for wgmma, sm_90 for a producer warpgroup, else every requested architecture). An invalid
    name raises ValueError (``KernelConfig.from_name`` and ``validate`` say why)."""
    from marlin_cupy.config import KernelConfig
    listed, _ = config_targets()
    targets, notes = [], []
    for name in names:
        cfg = KernelConfig.from_name(name)
        cfg.validate()
        labels = {f"config:{cfg.compiled.name}{tag}" for tag in _BUILD_TAGS}
        found = [t for t in listed if t.label in labels]
        if found:
            notes.append(f"{name}: the full check's {len(found)} build(s) of it")
        else:
            archs = ("sm_90a",) if cfg.wgmma else ("sm_90",) if cfg.producer else ()
            builds = [(False, False), (True, False)] + ([(False, True)]
                                                        if cfg.scale_fma_applies else [])
            found = [config_target(cfg.compiled, zp, archs, tag="_fma" if fma else "", fma=fma)
                     for zp, fma in builds]
            notes.append(f"{name}: in no list of the full check; its {len(found)} build(s) "
                         f"compiled for {', '.join(archs) or 'every requested architecture'}")
        targets += [t for t in found if t not in targets]
    return targets, notes


def all_targets():
    """``(targets, notes)`` for every standalone file and every instantiated configuration."""
    from marlin_cupy import jit
    targets = [Target(label=name, source=jit.expand_source(name)) for name in standalone_files()]
    configs, note = config_targets()
    return targets + configs, [f"{len(targets)} standalone .cu file(s)", note]


# ---------------------------------------------------------------------------------------------
# Compiling and judging
# ---------------------------------------------------------------------------------------------

def nvrtc_version() -> str:
    from cupy.cuda import nvrtc
    return "%d.%d" % nvrtc.getVersion()


def judge(target: Target, arch: str, reports) -> list:
    """What is wrong with a successful compile: spills, no kernel, a missing entry point."""
    problems = []
    if not reports:
        problems.append(f"{target.label} [{arch}]: ptxas reported no kernel; is the entry "
                        f"declared extern \"C\" __global__?")
    for r in reports:
        if r.spill_store_bytes or r.spill_load_bytes:
            problems.append(
                f"{target.label} [{arch}] kernel {r.kernel}: spills to local memory "
                f"({r.spill_store_bytes} bytes stored, {r.spill_load_bytes} bytes loaded, "
                f"{r.registers} registers); reduce register "
                f"pressure or change the tile config.")
    if target.entry and target.entry not in {r.kernel for r in reports}:
        problems.append(f"{target.label} [{arch}]: entry {target.entry!r} is not in the cubin "
                        f"(kernels: {[r.kernel for r in reports]})")
    return problems


def cache_key(target: Target, arch: str, nvrtc: str) -> str:
    from marlin_cupy import jit
    text = "\0".join([target.source, arch, nvrtc, *jit.BASE_OPTIONS, *target.options])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def compile_one(target: Target, arch: str, cache_dir: str | None = None) -> Result:
    """Compile one target for one architecture (runs in a worker process)."""
    from marlin_cupy import jit
    start = time.perf_counter()
    cache_file = None
    if cache_dir:
        cache_file = Path(cache_dir) / f"{cache_key(target, arch, nvrtc_version())}.json"
        if cache_file.is_file():
            kernels = json.loads(cache_file.read_text())
            reports = [jit.CompileReport(**k) for k in kernels]
            problems = judge(target, arch, reports)
            return Result(target.label, arch, not problems, kernels, problems,
                          time.perf_counter() - start, cached=True)
    try:
        _, reports = jit.compile_offline(target.source, arch, target.options,
                                         name=target.label.replace(":", "_") + ".cu")
    except RuntimeError as e:
        return Result(target.label, arch, False, [],
                      [f"{target.label} [{arch}]: compile error\n{e}"],
                      time.perf_counter() - start)
    kernels = [asdict(r) for r in reports]
    if cache_file is not None:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_name(f"{cache_file.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(kernels))
        tmp.replace(cache_file)
    problems = judge(target, arch, reports)
    return Result(target.label, arch, not problems, kernels, problems,
                  time.perf_counter() - start)


def _compile_job(args):
    return compile_one(*args)


def _archs_for(target: Target, archs) -> list:
    """The architectures to compile a target for: the requested ones it allows; an
    arch-specific target (sm_90a) whenever its base architecture (sm_90) is requested."""
    if not target.archs:
        return list(archs)
    return [a for a in target.archs if a in archs or a.rstrip("a") in archs]


def run_checks(targets, archs=DEFAULT_ARCHS, jobs: int = 2, cache_dir=DEFAULT_CACHE) -> list:
    """Compile every (target, arch) pair with a pool of ``jobs`` processes (NVRTC is CPU-bound)."""
    work = [(t, a, str(cache_dir) if cache_dir else None) for t in targets
            for a in _archs_for(t, archs)]
    if jobs <= 1 or len(work) <= 1:
        return [_compile_job(w) for w in work]
    # fork keeps start-up cheap and works when this file was imported under any module name.
    ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else None)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        return list(pool.map(_compile_job, work))


# ---------------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------------

def table_rows(results) -> list:
    rows = []
    for res in results:
        if not res.kernels:
            rows.append({"target": res.label, "arch": res.arch, "kernel": None, "ok": res.ok})
        for k in res.kernels:
            rows.append({"target": res.label, "arch": res.arch, "kernel": k["kernel"],
                         "registers": k["registers"], "spill_store_bytes": k["spill_store_bytes"],
                         "spill_load_bytes": k["spill_load_bytes"], "stack_bytes": k["stack_bytes"],
                         "shared_bytes": k["shared_bytes"], "ok": res.ok})
    return rows


def markdown(rows, notes, problems) -> str:
    lines = ["# NVRTC compile check", ""] + [f"- {n}" for n in notes] + [
        "", "| target | arch | kernel | registers | spill st | spill ld | stack | smem | ok |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        lines.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            r["target"], r["arch"], r["kernel"] or "-", r.get("registers", "-"),
            r.get("spill_store_bytes", "-"), r.get("spill_load_bytes", "-"),
            r.get("stack_bytes", "-"), r.get("shared_bytes", "-"), "yes" if r["ok"] else "NO"))
    if problems:
        lines += ["", "## Problems", ""] + [f"- {p.splitlines()[0]}" for p in problems]
    return "\n".join(lines) + "\n"


def write_report(out_dir: Path, results, notes) -> None:
    from marlin_cupy import records
    rows = table_rows(results)
    problems = [p for res in results for p in res.problems]
    record = {"kind": "compile_check", "date": records.utc_now(),
              "git_commit": records.git_commit(), "git_dirty": records.git_dirty(),
              "nvrtc": nvrtc_version(), "notes": notes, "ok": not problems, "rows": rows,
              "problems": problems}
    from marlin_cupy.kernels import defines
    if defines():
        # $MARLIN_CUPY_DEFINES: every kernel was built with these switches, not as shipped.
        record["kernel_defines"] = defines()
    out_dir.mkdir(parents=True, exist_ok=True)
    records.write_json(out_dir / "compile_check.json", record)
    (out_dir / "compile_check.md").write_text(markdown(rows, notes, problems))


def main(argv=None) -> int:
    from marlin_cupy._cli import positive_int
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", action="append", help="architecture(s); default sm_80 and sm_90")
    ap.add_argument("--out", type=Path, help="folder for compile_check.json and .md")
    ap.add_argument("--jobs", type=positive_int, default=2, help="compile processes (default 2)")
    ap.add_argument("--no-cache", action="store_true", help="recompile even if cached")
    ap.add_argument("--config", action="append", metavar="NAME",
                    help="only this kernel configuration (repeatable), every build of it")
    args = ap.parse_args(argv)
    archs = tuple(args.arch) if args.arch else DEFAULT_ARCHS

    start = time.perf_counter()
    if args.config:
        try:
            targets, notes = named_targets(args.config)
        except ValueError as e:
            print(f"FAILED: {e}")
            return 2
    else:
        targets, notes = all_targets()
    extra = sorted({a for t in targets for a in _archs_for(t, archs)} - set(archs))
    notes.append(f"NVRTC {nvrtc_version()}, architectures {', '.join(archs)}"
                 + (f" (and {', '.join(extra)} for arch-specific targets)" if extra else ""))
    from marlin_cupy.kernels import defines
    if defines():
        notes.append("built with $MARLIN_CUPY_DEFINES: " + ", ".join(
            f"{k}={v}" for k, v in defines().items()) + " (not the shipped kernels)")
    results = run_checks(targets, archs, args.jobs, None if args.no_cache else DEFAULT_CACHE)

    for res in results:
        status = "ok  " if res.ok else "FAIL"
        regs = ", ".join(f"{k['kernel']}: {k['registers']} regs, {k['spill_store_bytes']}/"
                         f"{k['spill_load_bytes']} B spill st/ld, {k['stack_bytes']} B stack"
                         for k in res.kernels)
        print(f"{status} {res.label:<40} {res.arch:<6} {res.seconds:6.2f} s"
              f"{' (cached)' if res.cached else ''}  {regs}")
    for note in notes:
        print(f"note: {note}")
    if args.out:
        write_report(args.out, results, notes)
        print(f"wrote {args.out / 'compile_check.json'} and compile_check.md")

    problems = [p for res in results for p in res.problems]
    elapsed = time.perf_counter() - start
    if not targets:
        print("FAILED: nothing to compile (no standalone .cu in cuda/ and no configurations)")
        return 1
    if problems:
        print(f"\nFAILED: {len(problems)} problem(s) in {len(results)} compile(s):")
        for p in problems:
            print(f"- {p}")
        return 1
    print(f"compile check passed: {len(results)} compile(s), no spills "
          f"({elapsed:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
