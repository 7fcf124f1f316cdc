"""A/B of a compile-time switch of cuda/marlin.cuh, of a config variant, or of two tuned
tables, on real layers (needs a GPU).

    python3 scripts/ab_probe.py OUT.json (--define NAME=VALUE[,NAME=VALUE] | --variant FIELD
                                          | --table-a TABLE.json)
                                [--only-par]
                                [--sets llama2-7b,llama2-13b,llama2-70b]
                                [--m 1,8,16,32,48,64,128,256] [--top 0] [--zp]

For every layer and M: the default dispatch's config (and the ``--top`` fastest others that
the shipped table measured for that layer and M bucket; ``--only-par`` keeps the
parallel-reduction ones), built twice from the same source: "A" with ``#define NAME VALUE``
in front (the variant under test, or the old code path kept behind a macro), "B" as shipped.
A switch that only reorders work without changing any sum must leave the outputs bitwise
equal; a mismatch is recorded and counted (exit status 1). Timing is the tuner's method
(``bench.harness.Timer``, weights rotated past the L2), in the order A B B A, each build's time
the mean of its two medians. ``--base-define NAME=VALUE`` builds B with its own switches (two
variants against each other; both options take a comma-separated list);
``$MARLIN_CUPY_DEFINES`` must be unset. ``--zp`` times the zero-point kernels on weights with
random zero points (default: symmetric weights, as the tuner and the benchmark). The A build is swapped in with
``ops.use_kernel`` and the script checks that the launch plan really holds it: the versions
used for NOTES.md entries 14 (as ring_probe.py, 888a31a) and 17 (1c9f832) swapped only the
kernel dict, so both of their columns timed one build and those A/Bs are void.

``--rel-tol R`` compares the outputs by their relative difference (at most R of B's norm)
instead of bit for bit, for a switch that rounds differently (``MARLIN_WG_DEFER``: the group
scale on FP32 sums).

``--variant producer`` compares configs instead of builds: A is each config with that boolean
field of ``KernelConfig`` set (``producer``: the warp-specialized build, NOTES.md entry 45;
``early_bottom``: the early bottom, entry 69, bitwise equal to B; ``top_sum``: the column's top
sums, entry 73, bitwise equal to B, and it replaces an ``early_bottom`` of B's), B
the config itself; configs whose variant is not valid are skipped. With ``--define`` as well,
the A config is built with those switches (a variant of the variant against the base).
``--table-a TABLE``: A is what the tuned table file TABLE dispatches for each layer and M
(its entry as ``matmul`` would run it; the heuristic's config where it has none), B the
shipped table's, both plain builds: two tables in one run, the same data and order, so a
re-tune's small entries can be told from the drift between machines (NOTES.md entry 70).
``--table-a generic``: A is the generic heuristic everywhere (no table, and not the compute
capability 9.0 heuristic that ``matmul`` falls back to on H100/H200 since entry 81), B what
``matmul`` dispatches: on layers the shipped table lacks (``--sets llama3-8b``, other group
sizes), the two heuristics against each other. ``--table-a uncapped``: A is the shipped
table, else the compute capability 9.0 heuristic without the rules that NOTES.md entry 84
added (``choose_config`` without the SM count: no narrow-layer order, no whole-column grids),
B what ``matmul`` dispatches.
Layers where both tables pick the same config are timed too, a control for the noise. The
outputs are compared by their relative difference (at most 2e-3 of B's norm) unless the two
configs are the same.
``--variant threads=T[,warp_n=W]``: A is each config with T threads per CTA, and W columns
per warp (entry 74: with one CTA of 256 threads per SM the M <= 8 loop is bound by its math).
512 threads with the default warps double the warps that split K, so the in-CTA sums come in
another order and the outputs are compared by their relative difference (at most 2e-3 of B's
norm); ``threads=512,warp_n=32`` keeps the split (narrower warps side by side) and must give
the same bits. The A build may spill where T leaves too few registers per thread: check with
``check_compile.py`` or ``tune.spills`` first.
``--scale-fma``: A is ``matmul(..., scale_fma=True)`` (the group scale inside the unpacking,
NOTES.md entry 87), B ``scale_fma=False`` (the two-step unpacking), the same config and plain
builds; the outputs must be the same bits, except where B scales FP32 sums instead
(``KernelConfig.wg_defer``, entry 88: relative difference at most 2e-3 of B's norm). Configs
without that build run the same kernel twice (a control for the noise). Other A/Bs build A
in the form the weights take by default (``ops.use_scale_fma``: the harness's scales lie below
2^-4, so the sym wgmma configs that have the fused form take it), so that A and B differ only
by the switch.
``--variant dyn=Q``: A is each config with units handed out at run time in chunks of Q units
(``dyn_chunk=Q``, and ``parallel_reduce``, which it needs; NOTES.md entry 53). Its partials are
cut and summed differently from B's, so the outputs are compared by their relative difference
(at most 2e-3 of B's norm, FP16 rounding of sums in another order) instead of bit for bit.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

import cupy as cp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from marlin_cupy import config, jit, kernels, ops, tune  # noqa: E402
from marlin_cupy.bench.harness import Timer, bench_stream, layer_cases  # noqa: E402
from marlin_cupy.bench.shapes import set_shapes  # noqa: E402
from marlin_cupy.records import environment  # noqa: E402
from marlin_cupy.tune import probe_configs, shipped_path  # noqa: E402

def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--define", default="",
                   help="NAME=VALUE[,NAME=VALUE...] for the A build")
    p.add_argument("--variant", default="",
                   help="A: each config with this field set, 'producer', 'dyn=Q' or "
                        "'threads=T' (with --define: built with those switches too)")
    p.add_argument("--only-par", action="store_true")
    p.add_argument("--sets", default="llama2-7b,llama2-13b,llama2-70b")
    p.add_argument("--m", default="1,8,16,32,48,64,128,256")
    p.add_argument("--top", type=int, default=0)
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--zp", action="store_true",
                   help="zero-point weights and kernels (default: symmetric)")
    p.add_argument("--rel-tol", type=float, default=0.0,
                   help="compare outputs by their relative difference (at most this fraction "
                        "of B's norm) instead of bit for bit: for switches that change "
                        "roundings (MARLIN_WG_DEFER)")
    p.add_argument("--table-a", default="",
                   help="A: the config this tuned table file dispatches (B: the shipped "
                        "table's), plain builds; 'generic': the generic heuristic's; "
                        "'uncapped': the dispatch without entry 84's rules (SM count)")
    p.add_argument("--scale-fma", action="store_true",
                   help="A: matmul(..., scale_fma=True), B: scale_fma=False (plain builds)")
    p.add_argument("--base-define", default="",
                   help="NAME=VALUE[,...] for the B build (two variants against each other; "
                        "default: B is the shipped build)")
    a = p.parse_args(argv)
    if os.environ.get("MARLIN_CUPY_DEFINES", "").strip():
        p.error("unset MARLIN_CUPY_DEFINES: it would go into both builds; use --base-define")
    ms = [int(v) for v in a.m.split(",")]
    dyn_q = 0
    threads = warp_n = 0
    if a.variant.startswith("threads="):
        spec, _, wspec = a.variant[8:].partition(",warp_n=")
        try:
            threads, warp_n = int(spec), int(wspec or 0)
        except ValueError:
            threads = 0
        if threads not in (128, 256, 512) or warp_n not in (0, 16, 32, 64):
            p.error(f"--variant {a.variant!r}: threads=T wants 128, 256 or 512, optionally "
                    f"',warp_n=W' with W 16, 32 or 64")
    elif a.variant.startswith("dyn="):
        try:
            dyn_q = int(a.variant[4:])
        except ValueError:
            dyn_q = 0
        if dyn_q < 1:
            p.error(f"--variant {a.variant!r}: dyn=Q wants a positive number of units per chunk")
    elif a.variant not in ("", "producer", "early_bottom", "top_sum"):
        p.error(f"--variant {a.variant!r}: 'producer', 'early_bottom', 'top_sum', 'dyn=Q' or "
                f"'threads=T'")

    def define_line(spec, what):
        """``#define`` lines for "NAME=VALUE[,NAME=VALUE...]" (as $MARLIN_CUPY_DEFINES reads)."""
        try:
            return kernels.define_lines(kernels.parse_defines(spec, what))
        except ValueError as e:
            p.error(str(e))

    prefix = define_line(a.define, "--define") if a.define else ""
    if a.table_a and (prefix or a.variant or a.base_define or a.top or a.only_par):
        p.error("--table-a compares two tables' dispatch on plain builds: no --define, "
                "--variant, --base-define, --top or --only-par with it")
    if a.scale_fma and (prefix or a.variant or a.table_a or a.base_define or a.zp):
        p.error("--scale-fma compares the two unpackings of symmetric weights on plain builds: "
                "no --define, --variant, --table-a, --base-define or --zp with it")
    if not prefix and not a.variant and not a.table_a and not a.scale_fma:
        p.error("give --define (naming a switch), --variant, or both; or --table-a or "
                "--scale-fma")
    generic = a.table_a == "generic"
    uncapped = a.table_a == "uncapped"
    table_a = tune.load_table(ops.device_facts()["name"]) if uncapped else {} if generic \
        else tune.table_entries(a.table_a) if a.table_a else None
    b_prefix = define_line(a.base_define, "--base-define") if a.base_define else ""
    facts = ops.device_facts()
    table_commit = json.loads(shipped_path(facts["name"]).read_text()).get("git_commit")
    shapes = set_shapes(a.sets)

    def variant(c):
        """The A config of --variant (None where that variant is not a valid config)."""
        if threads:
            v = c.with_(threads=threads, warp_n=warp_n)
        elif dyn_q:
            v = c.with_(parallel_reduce=True, dyn_chunk=dyn_q)
        elif a.variant == "top_sum":   # it includes the early bottom
            v = c.with_(top_sum=True, early_bottom=False)
        else:
            v = c.with_(**{a.variant: True})
        return None if v == c or v.problems() else v

    plan = {(k, n, m): [c for c in probe_configs(facts["name"], m, n, k, a.group_size, a.top)
                        if (c.parallel_reduce or not a.only_par)
                        and (not a.variant or variant(c) is not None)]
            for (k, n) in shapes for m in ms}
    zp = a.zp

    def table_a_config(k, n, m):
        """What --table-a's table dispatches here (choose_config's rule, on that table; the
        generic heuristic alone with --table-a generic)."""
        return (config.fit_tuned(tune.lookup_in(table_a, m, n, k, a.group_size), m, n, k, zp,
                                 facts["smem_optin"])
                or config.choose_config(m, n, k, a.group_size, zp, facts["smem_optin"],
                                        cc=None if generic else facts["cc"],
                                        sms=None if uncapped else facts["sms"]))

    # A runs config a_cfgs[key, c] (c itself without --variant or --table-a), built with the
    # --define switches.
    a_cfgs = {(key, c): (table_a_config(*key) if table_a is not None
                         else variant(c) if a.variant else c)
              for key, cs in plan.items() for c in cs}
    cfgs = {c for cs in plan.values() for c in cs}
    a_set = set(a_cfgs.values())
    # The weights below (random_weight_rotation: scales in [1e-3, 1e-2)) allow the group scale
    # inside the unpacking, so every build is made in the form the default dispatch takes.
    fma_of = lambda c: ops.use_scale_fma(c, zp, True)  # noqa: E731
    jit.warm_cache([(b_prefix + kernels.marlin_source(c, zp, fma=fma_of(c)), c.arch_suffix)
                    for c in cfgs]
                   + [(prefix + kernels.marlin_source(c, zp, fma=fma_of(c)), c.arch_suffix)
                      for c in a_set]
                   + [(kernels.marlin_source(c, zp), c.arch_suffix)
                      for c in cfgs if a.scale_fma and fma_of(c)],
                   os.cpu_count() or 4)
    # Without switches the A build of a config the shipped table also runs is that same
    # kernel (--table-a), so the check below that the launch holds the A build is moot there.
    a_kernels = {c: ops.build_kernel(c, zp, prefix=prefix, fma=fma_of(c)) for c in a_set}
    b_kernels = {c: ops.build_kernel(c, zp, prefix=b_prefix, fma=fma_of(c))
                 for c in cfgs} if b_prefix else {}

    def build_b(cfg):
        """The B build's launch context: its own kernel with --base-define, else the shipped."""
        return (ops.use_kernel(cfg, b_kernels[cfg], has_zp=zp, fma=fma_of(cfg)) if b_prefix
                else contextlib.nullcontext())

    rng = np.random.default_rng(0)
    rows, mismatches = [], 0
    with bench_stream() as stream:
        timer = Timer(stream, budget_ms=15.0, min_reps=10, max_reps=60)
        for k, n, m, x, mws in layer_cases(shapes, ms, a.group_size, rng, zero_points=zp):
            copies = len(mws)
            assert zp or mws[0].fma_scales, "the probe's weights allow the fused scale"
            for cfg in plan[(k, n, m)]:
                acfg = a_cfgs[(k, n, m), cfg]
                row = {"k": k, "n": n, "m": m, "config": cfg.name}
                if a.variant or table_a is not None:
                    row["a_config"] = acfg.name
                try:
                    # --scale-fma: A the fused unpacking, B the two-step one (else the default).
                    fa, fb = (True, False) if a.scale_fma else (None, None)
                    run_b = lambda i: ops.matmul(x, mws[i], config=cfg, scale_fma=fb)  # noqa: E731
                    run_a = lambda i: ops.matmul(x, mws[i], config=acfg, scale_fma=fa)  # noqa: E731
                    t_old, t_new = [], []
                    # A B B A: a drift of the clock or the memory over the four
                    # measurements falls on both builds alike.
                    for build in "ABBA":
                        if build == "A" and a.scale_fma:
                            y_old = run_a(0)
                            t_old.append(timer.measure(run_a, copies).stats.median_us)
                        elif build == "A":
                            with ops.use_kernel(acfg, a_kernels[acfg], has_zp=zp,
                                                fma=fma_of(acfg)):
                                # The launch path must really take the A build.
                                assert ops.plan(m, n, k, a.group_size, has_zp=zp,
                                                config=acfg).kernel is a_kernels[acfg]
                                y_old = ops.matmul(x, mws[0], config=acfg)
                                t_old.append(timer.measure(run_a, copies).stats.median_us)
                        else:
                            with build_b(cfg):
                                held = ops.plan(m, n, k, a.group_size, has_zp=zp, config=cfg,
                                                fma_scales=fb is not False).kernel
                                assert table_a is not None or a.scale_fma or \
                                    held is not a_kernels[acfg]
                                assert not b_prefix or held is b_kernels[cfg]
                                y_new = run_b(0)
                                t_new.append(timer.measure(run_b, copies).stats.median_us)
                    t_old, t_new = sum(t_old) / 2, sum(t_new) / 2
                    equal = bool(cp.all(y_old == y_new))
                    d = y_old.astype(cp.float64) - y_new.astype(cp.float64)
                    rel = float(cp.linalg.norm(d) / cp.linalg.norm(y_new.astype(cp.float64)))
                    # dyn, threads: other partial sums, so other roundings; else the same bits
                    # (unless --rel-tol says the switch rounds differently).
                    # threads: another split of K rounds differently; narrow warps that keep
                    # the split give the same bits (entry 74); --scale-fma where B is the FP32
                    # fold (wg_defer, entry 88) rounds differently too
                    same = (rel <= 2e-3 if dyn_q or (threads and acfg.k_warps != cfg.k_warps)
                            or (table_a is not None and acfg != cfg)
                            or (a.scale_fma and cfg.wg_defer and fma_of(cfg))
                            else rel <= a.rel_tol if a.rel_tol > 0 else equal)
                except Exception as e:  # noqa: BLE001 - recorded, the probe goes on
                    rows.append(dict(row, error=repr(e)))
                    print(f"{k}x{n} m={m} {cfg.name}: ERROR {e!r}", flush=True)
                    mismatches += 1
                    continue
                mismatches += not same
                rows.append(dict(row, a_us=t_old, b_us=t_new, equal=equal, rel_diff=rel,
                                 dispatch=cfg == ops.plan(m, n, k, a.group_size,
                                                          has_zp=zp).config))
                print(f"{k}x{n} m={m} {cfg.name}: A {t_old:.1f} us, B "
                      f"{t_new:.1f} us ({t_old / t_new - 1:+.1%}){'' if same else '  MISMATCH'}",
                      flush=True)
    summ = {}
    for r in rows:
        if "error" in r or not r["dispatch"]:
            continue
        s = summ.setdefault(r["m"], [0.0, 0.0])
        s[0] += r["a_us"]
        s[1] += r["b_us"]
    for m, (b, nb) in sorted(summ.items()):
        print(f"M={m}: dispatched configs summed, A {b:.1f} us, B {nb:.1f} us "
              f"({b / nb - 1:+.1%})")
    with open(a.out, "w") as f:
        json.dump({"kind": "ab_probe", "define": a.define or None, "variant": a.variant or None,
                   "scale_fma": a.scale_fma or None,
                   "table_a": a.table_a or None,
                   "base_define": a.base_define or None,
                   "rel_tol": a.rel_tol or None,
                   "sets": a.sets, "group_size": a.group_size, "zero_points": zp,
                   "environment": environment(),
                   "table_commit": table_commit, "mismatches": mismatches,
                   "summed_dispatch": {str(m): {"a_us": b, "b_us": nb}
                                       for m, (b, nb) in sorted(summ.items())},
                   "rows": rows}, f, indent=1)
    print(f"ab_probe: {len(rows)} rows, {mismatches} mismatches or errors")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
