"""An A/B record per shape set: the summed times of the dispatched configs of
``scripts/ab_probe.py``'s rows, per set and M, A against B (no GPU needed).

    python3 scripts/ab_sets.py AB.json [AB.json ...] [--bench BENCH.json] [--out SUMMARY.md]

ab_probe prints one sum per M over every layer it ran; the targets of issue 5 are per set
(llama2-7b, -13b, -70b), so this splits that sum by the sets of ``marlin_cupy.bench.shapes``.
Only rows with ``dispatch`` true count (``--top`` adds others that the sum must not see). A set
whose layers are not all in the record at some M is left out at that M rather than summed short.
Prints (and with ``--out`` writes) one markdown table per record: set, M, B's sum, A's sum and
A's change against B.

``--bench BENCH.json`` (a benchmark record) adds what issue 5's target asks of B: the change
of the set's summed time that would turn the record's own summed speedup at that M into the
target (``ours / target - 1``: -10 % means B would have to take 10 % less time), so that an
A/B of a measurement build (no math, no memory waits: ``MARLIN_PROBE`` 1 and 16) says at once
whether removing that part alone would reach the target (NOTES.md entry 80). The record is
another run than the A/B; the column compares changes, not times.

``--forms`` (records of ``ab_probe.py --scale-fma``): also each M's dispatched rows summed by
the form of their config's two-step build: the group scale on FP32 sums (``wg_defer``, split by
``swap_ab``), on the weights with a fused build, or no fused build (A runs B's kernel: noise);
and each set's sums with A counted only where today's dispatch takes the fused build
(``ops.use_scale_fma``, B elsewhere) against A counted where entry 87's dispatch took it (the
instances whose two-step build scales the weights): what the rule of entry 88 gains.

``--fp16 BENCH.json [BENCH.json ...]`` (benchmark records, custom shapes included) adds each
side's summed speedup over the best FP16 GEMM of those records (the rows' ``baseline_us``,
summed over the set's layers where every layer has one at that M): what A and B would show in
the benchmark's headline (NOTES.md entry 81: the two heuristics on other models' blocks). The
FP16 times come from another run than the A/B's.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT, ROOT / "scripts"):   # the package, and ceiling_table.py beside this script
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from marlin_cupy.records import read_json  # noqa: E402


def set_sums(rows, sets):
    """{(set, m): (a_us, b_us)} over the dispatched rows, for the sets whose every layer has a
    dispatched row at that M."""
    by_key = {}
    for r in rows:
        if r.get("dispatch"):
            by_key[(r["k"], r["n"], r["m"])] = r
    out = {}
    for m in sorted({m for (_, _, m) in by_key}):
        for name, layers in sets.items():
            hit = [by_key.get((k, n, m)) for k, n in layers]
            if all(hit):
                out[(name, m)] = (sum(r["a_us"] for r in hit), sum(r["b_us"] for r in hit))
    return out


def form(cfg) -> str:
    """The class of a config's two-step build for ``--forms``."""
    if cfg.wg_defer:
        return f"FP32 fold, swap_ab = {cfg.swap_ab}"
    return "weights scaled, fused build" if cfg.scale_fma_applies else "no fused build"


def form_sums(rows) -> dict:
    """{(m, form): (a_us, b_us, rows)} over the dispatched rows, each layer once."""
    from marlin_cupy.config import KernelConfig
    out, seen = {}, set()
    for r in rows:
        key = (r["k"], r["n"], r["m"])
        if not r.get("dispatch") or "error" in r or key in seen:
            continue
        seen.add(key)
        s = out.setdefault((r["m"], form(KernelConfig.from_name(r["config"]))), [0.0, 0.0, 0])
        s[0] += r["a_us"]
        s[1] += r["b_us"]
        s[2] += 1
    return out


def rule_rows(rows) -> list:
    """The rows as today's dispatch against entry 87's: A's time where today's dispatch takes
    the fused build (``ops.use_scale_fma``), else B's; against A's time where entry 87 took it
    (instances whose two-step build scales the weights, not ``wg_defer``), else B's."""
    from marlin_cupy import ops
    from marlin_cupy.config import KernelConfig
    out = []
    for r in rows:
        if "error" in r:
            continue
        cfg = KernelConfig.from_name(r["config"])
        now = ops.use_scale_fma(cfg, False, True)
        before = cfg.scale_fma_applies and not cfg.wg_defer
        out.append(dict(r, a_us=r["a_us"] if now else r["b_us"],
                        b_us=r["a_us"] if before else r["b_us"]))
    return out


def render_forms(path, sums) -> str:
    lines = [f"### `{path}`: by the form of the two-step build", "",
             "| M | form | layers | B (µs) | A (µs) | A against B |",
             "| ---: | --- | ---: | ---: | ---: | ---: |"]
    for (m, f), (a, b, n) in sorted(sums.items()):
        lines.append(f"| {m} | {f} | {n} | {b:.1f} | {a:.1f} | {100 * (a / b - 1):+.1f} % |")
    return "\n".join(lines) + "\n"


def needs(bench: dict) -> dict:
    """{(set, m): ours / target - 1} for every set and M where ``bench`` (a benchmark record)
    has a complete summed speedup and issue 5 sets a target (``ceiling_table.py``'s)."""
    import ceiling_table as ct
    out = {}
    for (name, m), speedup in ct.ours(bench).items():
        t = ct.target(name, m)
        if t:
            out[(name, m)] = speedup / t - 1
    return out


def _b_label(record) -> str:
    if record.get("scale_fma"):
        return "matmul(..., scale_fma=False): the two-step unpacking"
    t = record.get("table_a")
    return ("what matmul dispatches (the table, else the sm_90 heuristic)" if t == "generic"
            else "the shipped table" if t else "the shipped build")


def _a_label(record) -> str:
    if record.get("scale_fma"):
        return "matmul(..., scale_fma=True): the group scale inside the unpacking"
    return record.get("define") or record.get("variant") or record.get("table_a")


def _group(record) -> str:
    g = record.get("group_size")
    return "" if g in (None, 128) else ", per-channel scales" if g == -1 else f", group size {g}"


def fp16_times(benches) -> dict:
    """{(k, n, m): the best FP16 GEMM's median_us} from the ``marlin`` rows of benchmark
    records (their ``baseline_us``), the first record that has the layer winning."""
    out = {}
    for rec in benches:
        for r in rec["rows"]:
            if r.get("label", r.get("provider")) == "marlin" and r.get("baseline_us"):
                out.setdefault((r["k"], r["n"], r["m"]), r["baseline_us"])
    return out


def fp16_sums(sets, fp16) -> dict:
    """{(set, m): summed FP16 time} where every layer of the set has one at that M."""
    ms = {m for (_, _, m) in fp16}
    return {(name, m): sum(fp16[(k, n, m)] for k, n in layers)
            for name, layers in sets.items() for m in ms
            if all((k, n, m) in fp16 for k, n in layers)}


def render(path, record, sums, need=None, fp16=None):
    lines = [f"## `{path}`", "",
             f"A: `{_a_label(record)}`, "
             f"B: `{record.get('base_define') or _b_label(record)}`; kernel "
             f"{str(record.get('environment', {}).get('git_commit', '?'))[:12]}, "
             f"table {str(record.get('table_commit', '?'))[:12]}"
             f"{', zero points' if record.get('zero_points') else ''}"
             f"{_group(record)}.", "",
             "| set | M | B (µs) | A (µs) | A against B |" + (" the target needs |" if need else "")
             + (" B over FP16 | A over FP16 |" if fp16 is not None else ""),
             "| --- | ---: | ---: | ---: | ---: |" + (" ---: |" if need else "")
             + (" ---: | ---: |" if fp16 is not None else "")]
    for (name, m), (a, b) in sorted(sums.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        cell = ""
        if need is not None:
            t = need.get((name, m))
            cell = (" met |" if t is not None and t >= 0 else
                    f" {100 * t:+.1f} % |" if t is not None else " - |")
        if fp16 is not None:
            f = fp16.get((name, m))
            cell += (f" {f / b:.2f}x | {f / a:.2f}x |" if f is not None else " - | - |")
        lines.append(f"| {name} | {m} | {b:.1f} | {a:.1f} | {100 * (a / b - 1):+.1f} % |{cell}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("records", nargs="+")
    p.add_argument("--out")
    p.add_argument("--bench", help="a benchmark record: add what issue 5's target asks of B")
    p.add_argument("--forms", action="store_true",
                   help="scale_fma records: sums by the two-step build's form, and the "
                        "shipped rule's sums per set")
    p.add_argument("--fp16", nargs="+", default=[], metavar="BENCH",
                   help="benchmark records: add A's and B's summed speedup over their FP16")
    a = p.parse_args(argv)
    need = needs(read_json(a.bench)) if a.bench else None
    from marlin_cupy.bench.shapes import ALL_SETS
    fp16 = fp16_sums(ALL_SETS, fp16_times([read_json(b) for b in a.fp16])) if a.fp16 else None
    parts = []
    for path in a.records:
        record = read_json(path)        # a .json.gz too
        sums = set_sums(record["rows"], ALL_SETS)
        if not sums:
            p.error(f"{path}: no set has a dispatched row for each of its layers")
        parts.append(render(path, record, sums, need, fp16))
        if a.forms:
            if not record.get("scale_fma"):
                p.error(f"{path}: --forms reads records of ab_probe.py --scale-fma")
            parts.append(render_forms(path, form_sums(record["rows"])))
            rule = set_sums(rule_rows(record["rows"]), ALL_SETS)
            parts.append(render(path, dict(record, scale_fma=None,
                                           define="the fused build where today's dispatch "
                                                  "takes it (ops.use_scale_fma)",
                                           base_define="the fused build where entry 87's "
                                                       "took it (not wg_defer)"),
                                rule, need, fp16))
    text = "\n".join(parts)
    print(text, end="")
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
