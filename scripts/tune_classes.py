"""How one class of configs fared in a tune: per layer and M bucket, the fastest config of each
named class against the fastest of all other configs, from a tuned table's stored measurements
(no GPU needed).

    python3 scripts/tune_classes.py TABLE.json[.gz] --class NAME=REGEX [--class NAME=REGEX ...]
                                    [--m 64,128] [--out SUMMARY.md]

A config belongs to the first class whose regular expression matches its name (``re.search``);
the rest is "others". Prints (and with ``--out`` writes) a markdown table: the others' best time
and config, and for each class its best config and how much slower (+) or faster (-) than the
others' best it ran, then each class's count of wins and its median difference.
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def classify(name, classes):
    for label, rx in classes:
        if rx.search(name):
            return label
    return "others"


def best_by_class(measurements, classes, ms):
    """{(n, k, m): {class: (config, median_us)}} over the measurements with m in ``ms``."""
    best = {}
    for r in measurements:
        if ms and r["m"] not in ms:
            continue
        key = (r["n"], r["k"], r["m"])
        label = classify(r["config"], classes)
        cur = best.setdefault(key, {})
        if label not in cur or r["median_us"] < cur[label][1]:
            cur[label] = (r["config"], r["median_us"])
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("table")
    p.add_argument("--class", dest="classes", action="append", required=True,
                   metavar="NAME=REGEX")
    p.add_argument("--m", default="", help="comma-separated M values (default: all)")
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    classes = []
    for spec in a.classes:
        label, sep, rx = spec.partition("=")
        if not sep or not label or label == "others":
            p.error(f"--class wants NAME=REGEX with a NAME other than 'others', got {spec!r}")
        try:
            classes.append((label, re.compile(rx)))
        except re.error as e:
            p.error(f"--class {spec!r}: {e}")
    ms = {int(v) for v in a.m.split(",") if v.strip()}
    t = load(a.table)
    best = best_by_class(t["measurements"], classes, ms)
    labels = [c for c, _ in classes]
    lines = [f"# Classes of configs in `{a.table}`",
             "",
             f"Table of {t.get('device_name')} at commit {t.get('git_commit')}, "
             f"{t.get('date')}; {len(t['measurements'])} measurements.",
             "Classes: " + ", ".join(f"{c} = `{rx.pattern}`" for c, rx in classes) + ".",
             "",
             "| N | K | M | others' best (µs) | config | "
             + " | ".join(f"{c}: best config | {c} vs others" for c in labels) + " |",
             "| --- | --- | --- | --- | --- | " + " | ".join("--- | ---" for _ in labels) + " |"]
    diffs = {c: [] for c in labels}
    wins = {c: 0 for c in labels}
    for key in sorted(best):
        cur = best[key]
        if "others" not in cur:
            continue
        ocfg, ous = cur["others"]
        cells = []
        for c in labels:
            if c in cur:
                d = 100.0 * (cur[c][1] / ous - 1.0)
                diffs[c].append(d)
                wins[c] += d < 0
                cells += [f"`{cur[c][0]}`", f"{d:+.1f} %"]
            else:
                cells += ["-", "-"]
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {ous:.2f} | `{ocfg}` | "
                     + " | ".join(cells) + " |")
    lines.append("")
    for c in labels:
        if diffs[c]:
            lines.append(f"- {c}: faster than the others' best on {wins[c]} of {len(diffs[c])} "
                         f"layer-buckets; median {statistics.median(diffs[c]):+.1f} %, "
                         f"range {min(diffs[c]):+.1f}..{max(diffs[c]):+.1f} %.")
        else:
            lines.append(f"- {c}: no measurement.")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
