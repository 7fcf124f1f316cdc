"""Where a launch's time goes, CTA by CTA: the MARLIN_PROBE 4 build of the dispatched config
records when each CTA reached seven points of its timeline (needs a GPU; see ``stamp()`` in
cuda/marlin.cuh).

    python3 scripts/timeline_probe.py OUT.json [--m 1,16,64] [--sets llama2-7b,llama2-70b]
                                      [--layers "K,N;..."] [--launches 7]
                                      [--variant top_sum|early_bottom]

For every layer and M: the median CUDA-event time of the real kernel (the tuner's method,
weights rotated past the L2), then ``--launches`` single launches of the probe build, each
queued behind a spin kernel like a timed call, whose per-CTA timestamps are read back. Per
launch, in ns (``%globaltimer``; the median over launches is kept), each part as the median
over the CTAs that had work, and its maximum (``_max``):

- ``setup``: kernel entry to the first prologue copy (geometry, offsets, cursor);
- ``issue``: issuing the prologue's STAGES - 1 units;
- ``first_wait``: from then until the first unit has landed;
- ``stream``: first unit landed to the last column's epilogue;
- ``cta_reduce``: the last column's reduction inside the CTA;
- ``cross``: from then to exit (scales, the cross-CTA reduction, the output). Over the CTAs
  whose last column is split with others (``split_ctas`` of them) it is cut in three:
  ``cross_wait`` (to the end of the wait for the column's other CTAs: its turn in the serial
  chain, or every partial in when the CTAs share the sum; for the last arriver without
  sharing, its own partial's store and count-in), ``cross_sum`` (its adds and stores for the
  column) and ``cross_end`` (the release and exit);
- ``start_skew``: the last CTA's start after the first's;
- ``span``: first CTA start to last CTA exit, against ``event_us`` of the same launch: the
  difference is launch and teardown outside any CTA; ``imbalance`` is the span beyond the
  median CTA's parts;
- ``crit_*``: the same parts of the CTA that exits last, the launch's critical path
  (``critical()``): which of them the launch waits for;
- ``slow_sm_consistency``: whether the same SMs stream slowest in every launch (the mean rank
  correlation of per-SM stream times between launches; ``slow_sm_consistency()``). With
  ``--raw`` every launch's per-CTA points and SM ids are kept as well.

With ``--no-store`` the probe build also skips every store of the output C (``MARLIN_PROBE 5``;
its output is garbage; each value is still computed and stored only if it equals a pattern
no output takes, so the loads and adds that feed it stay): against a run without it, what
writing C costs in each part. (Until 2026-11-30, 497a70e, the build simply returned before
the stores, and the compiler then dropped the last column's loads and adds as well; from
then until NOTES.md entry 74 an empty asm took each value, which leaves ptxas no
instruction, and it dropped them all the same: 48 instead of 76 LDG in the SASS of
``t256_m1_n16_k16_s4_g8_fp32par_sw1``, 16 instead of 128 FADD.)

With ``--stream-only`` the probe build is ``MARLIN_PROBE 10``: the timeline of 1's loop,
without shared-to-register reads or math (its output is garbage): against a run without it,
where in the launch the math's time falls (NOTES.md entry 74). With ``--skeleton`` it is
``MARLIN_PROBE 18``: 17's build (no math, no copies into the ring, no waits for it) with the
stamps: what is left of a launch without its stream and its math, part by part (entry 80).

``--variant top_sum`` runs each dispatched config that can take it with the column's top
summing (``top_sum``, NOTES.md entry 73; in place of an ``early_bottom``), both for the event
time and the probe build: the same layers' timeline under the variant, to set beside a run
without it. ``--variant early_bottom`` does the same with the early bottom (``early_bottom``,
entries 69 and 77; not in place of a ``top_sum``).

All three llama2 sets at three M take over 4.5 minutes on the H200, most of it packing the
large layers' random weights; OUT.json is rewritten after every row.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import cupy as cp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from marlin_cupy import jit, kernels, ops  # noqa: E402
from marlin_cupy.bench.harness import Timer, bench_stream, layer_cases  # noqa: E402
from marlin_cupy.bench.shapes import parse_shapes, set_shapes  # noqa: E402
from marlin_cupy.records import environment  # noqa: E402

PROBE = "#define MARLIN_PROBE 4\n"
PROBE_NO_STORE = "#define MARLIN_PROBE 5\n"
PROBE_STREAM_ONLY = "#define MARLIN_PROBE 10\n"
PROBE_SKELETON = "#define MARLIN_PROBE 18\n"


PARTS = ("setup", "issue", "first_wait", "stream", "cta_reduce", "cross")
#: ``cross`` of the CTAs whose last column is split, cut at points 7 and 8 (see stamp()).
CROSS_PARTS = ("cross_wait", "cross_sum", "cross_end")
#: Ints per CTA that the probe build writes past the locks: points 0..8, the SM id at 15.
STRIDE = 16
POINTS = 9


def decode(stamps: np.ndarray) -> tuple:
    """``stamps``: int32 [grid, STRIDE] as the probe build writes them (points 0..8, the SM id
    at 15; a point never reached is 0). Returns ``rel`` (every CTA's points in ns after the
    first CTA's entry), ``busy`` (the CTAs that had work) and ``split`` (per busy CTA: its last
    column is split, points 7 and 8 written)."""
    raw = stamps[:, :POINTS].astype(np.int64) & 0xFFFFFFFF
    busy = raw[:, 3] != 0
    rel = (raw - raw[:, 0].min()) % (1 << 32)          # globaltimer_lo wraps every 4.3 s
    split = (raw[busy][:, 7] != 0) & (raw[busy][:, 8] != 0)
    return rel, busy, split


def summarize(stamps: np.ndarray, event_us: float) -> dict:
    """The launch's parts from its ``stamps`` (see ``decode``)."""
    rel, busy, split = decode(stamps)
    b = rel[busy]
    out = {"ctas": int(len(rel)), "busy_ctas": int(busy.sum()),
           "start_skew": float(rel[:, 0].max()), "span": float(b[:, 6].max()),
           "event_us": event_us}
    for i, name in enumerate(PARTS):
        d = b[:, i + 1] - b[:, i]
        out[name], out[name + "_max"] = float(np.median(d)), float(d.max())
    out["imbalance"] = out["span"] - sum(out[name] for name in PARTS)
    out["split_ctas"] = int(split.sum())
    sp = b[split]
    for name, (lo, hi) in zip(CROSS_PARTS, ((5, 7), (7, 8), (8, 6))):
        d = sp[:, hi] - sp[:, lo]
        out[name], out[name + "_max"] = ((float(np.median(d)), float(d.max())) if len(d)
                                         else (0.0, 0.0))
    return out


def critical(stamps: np.ndarray) -> dict:
    """The parts of the CTA that exits last (the launch's critical path), in ns: ``crit_``
    and the names of ``PARTS`` (``cross`` cut into ``CROSS_PARTS`` when its last column is
    split, else those are 0), ``crit_start`` (its entry after the first CTA's),
    ``crit_stream_lag`` (how much later than the median CTA its stream ended: what the
    imbalance put on the path) and ``crit_split`` (1 when its last column is split)."""
    rel, busy, split = decode(stamps)
    b = rel[busy]
    last = int(np.argmax(b[:, 6]))
    c = b[last]
    out = {"crit_start": float(c[0])}
    for i, name in enumerate(PARTS):
        out["crit_" + name] = float(c[i + 1] - c[i])
    is_split = bool(split[last])
    for name, (lo, hi) in zip(CROSS_PARTS, ((5, 7), (7, 8), (8, 6))):
        out["crit_" + name] = float(c[hi] - c[lo]) if is_split else 0.0
    out["crit_split"] = float(is_split)
    out["crit_stream_lag"] = float(c[4] - np.median(b[:, 4]))
    return out


def relative(stamps: np.ndarray) -> tuple:
    """Per busy CTA: its points 0..6 in ns after the launch's first CTA entry, and its SM."""
    rel, busy, _ = decode(stamps)
    return rel[busy][:, :7], stamps[busy, STRIDE - 1].astype(np.int64)


def slow_sm_consistency(launches) -> float:
    """Are the same SMs slow in every launch? ``launches``: per launch, (rel, sm) of its busy
    CTAs as ``relative`` gives them. Each SM's stream time (first unit landed to the last
    column's epilogue, summed over its CTAs) is ranked within the launch; the result is the
    mean Spearman correlation of those ranks over pairs of launches, on the SMs every launch
    used (1: the same order every time, about 0: no SM is consistently slow or fast; NaN with
    fewer than two launches or SMs)."""
    per = []
    for rel, sm in launches:
        stream = rel[:, 4] - rel[:, 3]
        per.append({int(k): float(stream[sm == k].sum()) for k in np.unique(sm)})
    common = sorted(set.intersection(*(set(d) for d in per))) if per else []
    if len(per) < 2 or len(common) < 2:
        return float("nan")
    ranks = [np.argsort(np.argsort([d[k] for k in common])).astype(float) for d in per]
    cors = [float(np.corrcoef(ranks[i], ranks[j])[0, 1])
            for i in range(len(ranks)) for j in range(i + 1, len(ranks))]
    return float(np.mean(cors))


def select_layers(shapes: list, layers: str) -> list:
    """``shapes`` ((K, N) pairs) restricted to ``layers`` (``"K,N;K,N"``, the harness's
    ``--shapes`` form; empty: all), in their order; a layer not among them is an error."""
    if not layers.strip():
        return list(shapes)
    want = set(parse_shapes(layers))
    missing = sorted(want - set(shapes))
    if missing:
        raise ValueError(f"{'; '.join(f'{k},{n}' for k, n in missing)} not among the sets' "
                         f"layers")
    return [s for s in shapes if s in want]


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--sets", default="llama2-7b,llama2-70b")
    p.add_argument("--m", default="1,16,64")
    p.add_argument("--layers", default="",
                   help='only these layers of the sets, as "K,N;K,N" (e.g. "8192,57344"): the '
                        "large ones alone fit one device call")
    p.add_argument("--launches", type=int, default=7)
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--no-store", action="store_true",
                   help="probe build without the stores of C (MARLIN_PROBE 5)")
    p.add_argument("--stream-only", action="store_true",
                   help="probe build without the loop's math (MARLIN_PROBE 10: 1's loop)")
    p.add_argument("--skeleton", action="store_true",
                   help="probe build without math, ring fills or waits (MARLIN_PROBE 18)")
    p.add_argument("--variant", default="", choices=("", "top_sum", "early_bottom"),
                   help="run each dispatched config with this variant where it is valid")
    p.add_argument("--raw", action="store_true",
                   help="also keep every launch's per-CTA points (ns after the first entry) "
                        "and SM ids in the JSON")
    a = p.parse_args(argv)
    if a.no_store + a.stream_only + a.skeleton > 1:
        p.error("--no-store, --stream-only and --skeleton are three builds; give one")
    probe = (PROBE_NO_STORE if a.no_store else PROBE_STREAM_ONLY if a.stream_only
             else PROBE_SKELETON if a.skeleton else PROBE)
    ms = [int(v) for v in a.m.split(",")]
    try:
        shapes = select_layers(set_shapes(a.sets), a.layers)
    except ValueError as e:
        p.error(f"--layers: {e}")
    def chosen(m, n, k):
        """The dispatched config, or its --variant twin where that is a valid config."""
        cfg = ops.plan(m, n, k, a.group_size).config
        if a.variant == "top_sum":
            v = cfg.with_(top_sum=True, early_bottom=False)
            return cfg if v.problems() else v
        if a.variant == "early_bottom" and not cfg.top_sum:
            v = cfg.with_(early_bottom=True)
            return cfg if v.problems() else v
        return cfg

    cfgs = {chosen(m, n, k) for (k, n) in shapes for m in ms}
    dyn = sorted(c.name for c in cfgs if c.dyn_chunk)
    if dyn:
        # The probe's stamps lie where run-time hand-out keeps its counters (cuda/marlin.cuh
        # refuses that build with a static_assert): say so before compiling anything.
        p.error(f"the dispatch picks run-time hand-out ({', '.join(dyn)}), which the timeline "
                f"probe cannot stamp; time those layers with a table without dyn_chunk")
    jit.warm_cache([(probe + kernels.marlin_source(c, False), c.arch_suffix) for c in cfgs], 16)
    rng = np.random.default_rng(0)
    rows = []
    with bench_stream() as stream:
        timer = Timer(stream, budget_ms=15.0, min_reps=10, max_reps=60)
        ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()
        for k, n, m, x, mws in layer_cases(shapes, ms, a.group_size, rng):
            copies = len(mws)
            cfg = chosen(m, n, k)
            plan = ops.plan(m, n, k, a.group_size, config=cfg)
            t_real = timer.measure(lambda i: ops.matmul(x, mws[i], config=cfg),
                                   copies).stats.median_us
            # The build in the form the default dispatch takes for these weights (the group
            # scale inside the unpacking where the config has it).
            fma = ops.use_scale_fma(cfg, False, mws[0].fma_scales)
            with ops.use_kernel(cfg, ops.build_kernel(cfg, prefix=probe, fma=fma), fma=fma):
                locks, _ = ops.workspace(stream).get((STRIDE + 1) * plan.grid,
                                                     plan.scratch_floats)
                per, raw = [], []
                for i in range(a.launches):
                    locks[plan.grid:].fill(0)
                    timer.spin(200.0)
                    ev0.record(stream)
                    ops.matmul(x, mws[i % copies], config=cfg)
                    ev1.record(stream)
                    ev1.synchronize()
                    st = cp.asnumpy(locks[plan.grid:(STRIDE + 1) * plan.grid]).reshape(
                        plan.grid, STRIDE)
                    per.append({**summarize(st, cp.cuda.get_elapsed_time(ev0, ev1) * 1e3),
                                **critical(st)})
                    raw.append(relative(st))
                # The stamps are not counters: leave the workspace zero, as every call does.
                locks.fill(0)
            row = {"k": k, "n": n, "m": m, "config": cfg.name, "grid": plan.grid,
                   "real_median_us": t_real}
            for key in per[0]:
                row[key] = float(np.median([q[key] for q in per]))
            row["slow_sm_consistency"] = slow_sm_consistency(raw)
            if a.raw:
                row["raw"] = [{"points_ns": r.tolist(), "sm": sm.tolist()} for r, sm in raw]
            rows.append(row)
            write(a.out, rows, a.no_store, a.variant or None, a.stream_only, a.skeleton)      # after every row: a run cut short keeps what it measured
            print(f"{k}x{n} M={m} {cfg.name}: real {t_real:.1f} us, event "
                  f"{row['event_us']:.1f}, span {row['span'] / 1e3:.1f}, "
                  + ", ".join(f"{p} {row[p] / 1e3:.2f} (max {row[p + '_max'] / 1e3:.2f})"
                              for p in PARTS)
                  + f", imbalance {row['imbalance'] / 1e3:.2f}; {row['split_ctas']:.0f} CTAs "
                  f"end in a split column: "
                  + ", ".join(f"{p} {row[p] / 1e3:.2f} (max {row[p + '_max'] / 1e3:.2f})"
                              for p in CROSS_PARTS)
                  + f"; slow-SM rank correlation {row['slow_sm_consistency']:.2f}; the "
                  f"last CTA: stream lag {row['crit_stream_lag'] / 1e3:.2f}, "
                  + ", ".join(f"{p} {row['crit_' + p] / 1e3:.2f}"
                              for p in PARTS + CROSS_PARTS), flush=True)
    write(a.out, rows, a.no_store, a.variant or None, a.stream_only, a.skeleton)
    return 0


def write(path, rows, no_store=False, variant=None, stream_only=False, skeleton=False):
    with open(path, "w") as f:
        json.dump({"kind": "timeline_probe", "environment": environment(), "variant": variant,
                   "stores_c": not no_store, "stream_only": stream_only, "skeleton": skeleton,
                   "rows": rows}, f,
                  indent=1)


if __name__ == "__main__":
    sys.exit(main())
