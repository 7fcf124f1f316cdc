"""Do ``pdl=True`` launches give wrong sums when they are enqueued fast (needs an sm_90 GPU)?

    python3 scripts/pdl_race_probe.py OUT.json [--configs NAME,NAME | --table] [--launches 20]

NOTES.md entry 99: while ``matmul``'s fast path launched ``pdl=True`` calls about 12 µs apart,
six GPU tests on the ``t128_m1_n4_k8_s4_g8_fp32par*_b2`` family gave wrong sums. Entry 100 found
the cause outside PDL (a test had left a probe build's timeline stamps in the locks, counters
of that family's 264-CTA grids), with this probe's first run: no wrong output in any form. It
stays as the check that PDL launches enqueued fast give the plain bits. It launches each
config's PDL build (``MARLIN_PDL`` 4, the padded shared memory ``matmul`` gives it)
``--launches`` times in four forms, each against the plain launch's bits:

- ``fresh``: ``pdl.launch`` back to back, fresh ctypes arguments each time (the checked path's
  launch, at the rate this host enqueues it);
- ``prepared``: one prepared launch configuration and argument array, the output's address
  rewritten before each ``cuLaunchKernelEx`` (the fast path's form, ``ops.FAST_PATH``);
- ``spin``: ``pdl.launch`` queued behind a 3 ms spin, so that every launch is enqueued before
  the first one starts;
- ``plain``: the plain build without the attribute (the control).

Every launch writes a fresh output; the workspace is the stream's. The config's problem is
``tests/test_pdl_gpu.py``'s (K = 16 tile_k, N = 2 tile_n, M = min(max_m, 200) - 3).
``--table`` takes every config of the device's tuned table. Writes OUT.json and OUT.md; exit
status 1 if any PDL form gave a wrong output.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FORMS = ("fresh", "prepared", "spin", "plain")
SPIN_NS = 3_000_000


def problem(cfg) -> tuple:
    """(m, k, n) of tests/test_pdl_gpu.py's test_same_as_plain_launch for ``cfg``."""
    return min(cfg.max_m or 200, 200) - 3, 16 * cfg.tile_k, 2 * cfg.tile_n


def pdl_build(ops, cfg, plan):
    """The config's ``pdl=True`` build and the padded shared memory ``matmul`` launches it
    with."""
    ker = ops._kernel(cfg, False, pdl=True, fma=plan.scale_fma)
    per_sm = min(cfg.blocks_per_sm, ops._resident(ker, cfg, False))
    return ker, ops.pad_for_pdl(ker, plan.smem, per_sm, ops.device_facts())


def run_config(name: str, launches: int, spin) -> dict:
    import cupy as cp

    import marlin_cupy as mc
    from marlin_cupy import ops
    from marlin_cupy import pdl as _pdl
    from marlin_cupy.config import KernelConfig
    cfg = KernelConfig.from_name(name)
    m, k, n = problem(cfg)
    group = 16 * cfg.group_blocks if cfg.group_blocks > 0 else -1
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    w = rng.standard_normal((k, n)).astype(np.float32) * 0.02
    mw = mc.pack(mc.quantize(w, bits=4, group_size=group, sym=True)).to_device()
    x = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
    row = {"config": name, "m": m, "k": k, "n": n}
    try:
        plan = ops.plan(m, n, k, group, False, config=cfg, fma_scales=bool(mw.fma_scales))
    except ValueError as e:
        row["skipped"] = str(e)
        return row
    want = mc.matmul(x, mw, config=cfg)
    ker, smem = pdl_build(ops, cfg, plan)
    locks, scratch = ops.workspace().get(plan.locks, plan.scratch_floats)
    stream = cp.cuda.get_current_stream()
    row.update(grid=plan.grid, threads=plan.threads, smem_pdl=smem)

    def args(y):
        return (x, mw.qweight, mw.scales, mw.scales, y, scratch, locks, np.int32(m),
                np.int32(n), np.int32(k), np.int32(plan.parallel))

    y0 = cp.empty((m, n), dtype=cp.float16)
    prepared = _pdl.PreparedLaunch(ker.kernel.ptr, plan.grid, plan.threads, args(y0), smem,
                                   stream.ptr)
    _pdl.launch(ker, plan.grid, plan.threads, args(y0), smem, stream)     # load, warm
    stream.synchronize()
    for form in FORMS:
        outs = []
        if form == "spin":
            spin((1,), (1,), (np.uint64(SPIN_NS),))
        t0 = time.perf_counter()
        for _ in range(launches):
            y = cp.empty((m, n), dtype=cp.float16)
            if form in ("fresh", "spin"):
                _pdl.launch(ker, plan.grid, plan.threads, args(y), smem, stream)
            elif form == "prepared":
                prepared.holders[4].value = y.data.ptr
                prepared.send()
            else:
                plan.kernel((plan.grid,), (plan.threads,), args(y), shared_mem=plan.smem)
            outs.append(y)
        host_us = (time.perf_counter() - t0) * 1e6 / launches
        stream.synchronize()
        wrong = sum(0 if bool(cp.array_equal(o.view(cp.uint16), want.view(cp.uint16))) else 1
                    for o in outs)
        row[form] = {"wrong": wrong, "host_us_per_launch": host_us}
    row["locks_zero"] = not bool(locks.any())
    return row


def table_configs() -> list:
    """Every config name of the current device's tuned table (``tune.load_table``)."""
    from marlin_cupy import ops, tune
    return sorted(set(tune.load_table(ops.device_facts()["name"]).values()))


def markdown(rec) -> str:
    env = rec["environment"]
    dev = env.get("device") or {}
    dev = dev.get("name", dev) if isinstance(dev, dict) else dev
    lines = [f"# PDL launches enqueued fast ({dev}, commit {str(env.get('git_commit', '?'))[:12]}, "
             f"{env.get('date', '?')})", "",
             f"Wrong outputs of {rec['launches']} launches per form against the plain launch's "
             "bits, and the host µs per launch (`scripts/pdl_race_probe.py`; NOTES.md entries 99 "
             "and 100).", "",
             "| config | M | K | N | " + " | ".join(FORMS) + " | locks zero |",
             "| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in FORMS) + " | --- |"]
    for r in rec["rows"]:
        if "skipped" in r:
            lines.append(f"| {r['config']} | {r['m']} | {r['k']} | {r['n']} | skipped: "
                         f"{r['skipped']} |")
            continue
        cells = [f"{r[f]['wrong']} ({r[f]['host_us_per_launch']:.1f} µs)" for f in FORMS]
        lines.append(f"| {r['config']} | {r['m']} | {r['k']} | {r['n']} | "
                     + " | ".join(cells) + f" | {r['locks_zero']} |")
    lines += ["", f"Configs with a wrong PDL output: {rec['configs_wrong']}."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--configs", default="t128_m1_n4_k8_s4_g8_fp32par_b2,"
                   "t128_m1_n4_k8_s4_g8_fp32par_sw1_b2,t128_m1_n4_k8_s4_g8_fp32par_sw2_b2,"
                   "t256_m1_n16_k8_s3_g8_fp32par_sw1_b2,t256_m4_n8_k16_s4_g8_fp32par")
    p.add_argument("--table", action="store_true", help="every config of the device's table")
    p.add_argument("--launches", type=int, default=20)
    a = p.parse_args(argv)
    from marlin_cupy import jit, kernels, ops
    from marlin_cupy.config import KernelConfig
    from marlin_cupy.records import environment
    names = table_configs() if a.table else [s for s in a.configs.split(",") if s]
    cfgs = [KernelConfig.from_name(nm) for nm in names]
    sources = []
    for c in cfgs:     # both builds of each, compiled in parallel first
        for fma in {False, c.scale_fma_preferred}:
            src = kernels.marlin_source(c, False, fma=fma)
            sources += [(src, c.arch_suffix), (ops.PDL_PREFIX + src, c.arch_suffix)]
    jit.warm_cache(sources, workers=16)
    spin = jit.load_module(jit.expand_source("timing.cu")).get_function("spin_ns")
    rows = []
    for nm in names:
        row = run_config(nm, a.launches, spin)
        rows.append(row)
        print(json.dumps(row), flush=True)
    wrong = [r["config"] for r in rows
             if any(r.get(f, {}).get("wrong", 0) for f in ("fresh", "prepared", "spin"))]
    rec = {"kind": "pdl_race_probe", "environment": environment(), "launches": a.launches,
           "forms": list(FORMS), "rows": rows, "configs_wrong": wrong}
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)
    Path(a.out).with_suffix(".md").write_text(markdown(rec))
    print(f"configs with a wrong PDL output: {wrong}", flush=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
