"""Energy per call from ``power_probe.py`` records (no GPU): which part of a launch draws the
board's power (benchmarks/NOTES.md entries 92-93).

    python3 scripts/power_table.py REC.json [REC2.json ...] [--out TABLE.md]

Per layer, M and run (ours, its measurement builds, cuBLAS FP16): the time per call, the SM
clock and board power (medians of the probe's ``nvidia-smi`` samples), whether the software
power cap was an active clock reason (bit 0x4: in every sample, or at times), the energy per
call (power x time) and its part above the idle board (the record's own idle sample, taken
before its first run). With ``MARLIN_PROBE`` 1 (no math: the stream alone) and 16 (no stream:
the math alone) in the record, a second table sets those two builds' energies above idle, and
their sum, against ours. Several records (e.g. both orders, ``--reverse``) give each figure's
range over them.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

CAP_BIT = 0x4   # clocks_event_reasons: SW power cap


def _median(row, field):
    v = row.get(field)
    return v.get("median") if isinstance(v, dict) else None


def _cap(reasons):
    """'always', 'at times' or None: the SW power cap among the samples' active reasons."""
    flags = []
    for r in reasons or []:
        try:
            flags.append(bool(int(str(r), 16) & CAP_BIT))
        except ValueError:
            continue
    if not flags or not any(flags):
        return None
    return "always" if all(flags) else "at times"


def energy_rows(rec):
    """One dict per run of the record, in its order: k, n, m, run, us, mhz, w, cap (``_cap``:
    'always', 'at times' or None), mj (per call) and mj_above_idle."""
    if rec.get("kind") != "power_probe":
        raise ValueError(f"not a power_probe record (kind {rec.get('kind')!r})")
    idle = _median(rec.get("idle", {}), "power.draw")
    out = []
    for r in rec["rows"]:
        us, w = r["us_per_call"], _median(r, "power.draw")
        cap = _cap(r.get("reasons"))
        out.append({"k": r["k"], "n": r["n"], "m": r["m"], "run": r["run"], "us": us,
                    "mhz": _median(r, "clocks.sm"), "w": w, "cap": cap,
                    "mj": None if w is None else us * w / 1e3,
                    "mj_above_idle": None if w is None or idle is None else us * (w - idle) / 1e3})
    return out


def parts(rec):
    """{(k, n, m): {ours, stream, math, sum}}: energies above idle per call (mJ) of ours, the
    stream-only build (probe 1) and the math-only build (probe 16), for the cases that ran
    all three."""
    by = {(r["k"], r["n"], r["m"], r["run"]): r for r in energy_rows(rec)}
    out = {}
    for (k, n, m, run), r in by.items():
        if run != "marlin":
            continue
        s, c = by.get((k, n, m, "marlin-probe1")), by.get((k, n, m, "marlin-probe16"))
        if s is None or c is None or None in (r["mj_above_idle"], s["mj_above_idle"],
                                                c["mj_above_idle"]):
            continue
        out[(k, n, m)] = {"ours": r["mj_above_idle"], "stream": s["mj_above_idle"],
                          "math": c["mj_above_idle"],
                          "sum": s["mj_above_idle"] + c["mj_above_idle"]}
    return out


def fmt_range(vals, f):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    lo, hi = f.format(min(vals)), f.format(max(vals))
    return lo if lo == hi else f"{lo}-{hi}"


def markdown(recs):
    lines = []
    for rec in recs:
        env = rec.get("environment", {})
        lines.append(f"- `{env.get('git_commit', '?')}` {env.get('date', '?')}, order: "
                     f"{rec.get('order', '?')}, idle {_median(rec.get('idle', {}), 'power.draw')} W")
    lines += ["", "| layer, M | run | µs per call | SM MHz | board W | power cap | mJ per call "
              "| mJ above idle |", "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: |"]
    cases = {}
    for rec in recs:
        for r in energy_rows(rec):
            cases.setdefault((r["k"], r["n"], r["m"], r["run"]), []).append(r)
    for (k, n, m, run), rs in cases.items():
        kinds = {r["cap"] for r in rs}
        cap = ("cap" if kinds == {"always"} else "" if kinds == {None} else "cap at times")
        lines.append(
            f"| {k}x{n}, {m} | {run} | {fmt_range([r['us'] for r in rs], '{:.1f}')} | "
            f"{fmt_range([r['mhz'] for r in rs], '{:.0f}')} | "
            f"{fmt_range([r['w'] for r in rs], '{:.0f}')} | {cap} | "
            f"{fmt_range([r['mj'] for r in rs], '{:.1f}')} | "
            f"{fmt_range([r['mj_above_idle'] for r in rs], '{:.1f}')} |")
    split = {}
    for rec in recs:
        for key, p in parts(rec).items():
            split.setdefault(key, []).append(p)
    if split:
        lines += ["", "Energy above idle per call (mJ): ours against the stream alone (probe 1) "
                  "and the math alone (probe 16).", "",
                  "| layer, M | ours | stream only | math only | stream + math | ours / (stream + math) |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for (k, n, m), ps in split.items():
            lines.append(
                f"| {k}x{n}, {m} | {fmt_range([p['ours'] for p in ps], '{:.1f}')} | "
                f"{fmt_range([p['stream'] for p in ps], '{:.1f}')} | "
                f"{fmt_range([p['math'] for p in ps], '{:.1f}')} | "
                f"{fmt_range([p['sum'] for p in ps], '{:.1f}')} | "
                f"{fmt_range([p['ours'] / p['sum'] for p in ps], '{:.2f}')} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("records", nargs="+", help="power_probe.py JSON records")
    p.add_argument("--out", help="write the markdown here (default: print it)")
    a = p.parse_args(argv)
    recs = [json.loads(Path(r).read_text()) for r in a.records]
    md = markdown(recs)
    if a.out:
        Path(a.out).write_text(md)
    else:
        sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
