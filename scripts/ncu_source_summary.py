"""Sum an ncu source page (SASS) by stall reason and by opcode, and list the hottest instructions.

    ncu --import REPORT.ncu-rep --page source --csv --print-source sass | gzip > SRC.csv.gz
    python3 scripts/ncu_source_summary.py SRC.csv.gz [--top 25] [--regions] > SUMMARY.md

The report must come from ``--set full --import-source yes`` (warp-stall sampling per
instruction). Works offline: no GPU and no ncu needed.

``--regions`` adds a table of the samples by part of the code, in address order: the
*prologue* (up to the main loop), the *main loop* (from the target of the backward branch
that closes the loop holding the tensor-core instructions, HGMMA or HMMA, to that branch),
*after the loop* (to the first unconditional EXIT) and the *rest* (code placed after it: the
producer warp's loop, spin loops the compiler moved out of line).
"""
import argparse
import csv
import gzip
import io
import re
from collections import Counter


def read_rows(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        text = f.read()
    lines = text.splitlines()
    kernel = lines[0].split(",")[1].strip('"') if lines and lines[0].startswith('"Kernel Name"') else "?"
    start = 1 if kernel != "?" else 0
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    return kernel, list(reader)


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return 0.0


def opcode(src):
    s = src.strip()
    s = re.sub(r"^@!?U?P\w+\s+", "", s)  # predicate guard
    return s.split(" ")[0].split(".")[0] if s else "?"


_TARGET = re.compile(r"BRA\s+(?:`\()?(0x[0-9a-fA-F]+)")


def regions(rows):
    """[(name, first row, end row)] in address order (see --regions)."""
    addr = [int(r["Address"], 16) for r in rows]
    ops = [opcode(r["Source"]) for r in rows]
    mma = [i for i, op in enumerate(ops) if op in ("HGMMA", "HMMA")]
    if not mma:
        return [("all", 0, len(rows))]
    head, back = None, None
    for i in range(mma[-1] + 1, len(rows)):
        m = _TARGET.search(rows[i]["Source"]) if ops[i] == "BRA" else None
        target = int(m.group(1), 16) if m else None
        if target is not None and target <= addr[mma[0]]:
            head = addr.index(target) if target in addr else mma[0]
            back = i
            break
    if back is None:
        head, back = mma[0], mma[-1]
    end = next((i for i in range(back + 1, len(rows))
                if rows[i]["Source"].strip().startswith("EXIT")), len(rows) - 1)
    return [("prologue", 0, head), ("main loop", head, back + 1),
            ("after the loop", back + 1, end + 1), ("rest", end + 1, len(rows))]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--regions", action="store_true", help="samples by part of the code")
    a = p.parse_args(argv)
    kernel, rows = read_rows(a.csv)
    stall_cols = [c for c in rows[0] if c.startswith("stall_") and "Not Issued" not in c]
    total_samples = sum(num(r["Warp Stall Sampling (All Samples)"]) for r in rows)
    total_exec = sum(num(r["Instructions Executed"]) for r in rows)
    by_reason = Counter()
    for r in rows:
        for c in stall_cols:
            by_reason[c[len("stall_"):]] += num(r[c])
    print(f"# Source-level profile: {kernel}\n")
    print(f"Source: `{a.csv}`; {int(total_exec)} warp instructions executed, "
          f"{int(total_samples)} warp-stall samples.\n")
    print("| stall reason | share of samples |\n| --- | ---: |")
    for reason, v in by_reason.most_common():
        if v:
            print(f"| {reason} | {100 * v / total_samples:.1f} % |")
    if a.regions:
        print("\n| region | instructions | executed (warp instr.) | stall samples | share | top reasons |")
        print("| --- | ---: | ---: | ---: | ---: | --- |")
        for name, lo, hi in regions(rows):
            part = rows[lo:hi]
            s = sum(num(r["Warp Stall Sampling (All Samples)"]) for r in part)
            reasons = Counter()
            for r in part:
                for c in stall_cols:
                    reasons[c[len("stall_"):]] += num(r[c])
            top = ", ".join(f"{k} {100 * v / max(s, 1):.0f} %" for k, v in reasons.most_common(3) if v)
            print(f"| {name} | {hi - lo} | {int(sum(num(r['Instructions Executed']) for r in part))} | "
                  f"{int(s)} | {100 * s / max(total_samples, 1):.1f} % | {top} |")
    ops_exec, ops_samp = Counter(), Counter()
    ops_reason = {}
    for r in rows:
        op = opcode(r["Source"])
        ops_exec[op] += num(r["Instructions Executed"])
        ops_samp[op] += num(r["Warp Stall Sampling (All Samples)"])
        d = ops_reason.setdefault(op, Counter())
        for c in stall_cols:
            d[c[len("stall_"):]] += num(r[c])
    print("\n| opcode | executed (warp instr.) | share | share of stall samples | top reasons |")
    print("| --- | ---: | ---: | ---: | --- |")
    for op, s in ops_samp.most_common(a.top):
        top = ", ".join(f"{k} {100 * v / max(s, 1):.0f} %" for k, v in ops_reason[op].most_common(3) if v)
        print(f"| {op} | {int(ops_exec[op])} | {100 * ops_exec[op] / total_exec:.1f} % | "
              f"{100 * s / total_samples:.1f} % | {top} |")
    print(f"\n## Hottest {a.top} instructions (stall samples at the instruction)\n")
    print("| # | address | instruction | samples | top reasons |\n| ---: | --- | --- | ---: | --- |")
    index = {id(r): i for i, r in enumerate(rows)}
    for r in sorted(rows, key=lambda r: -num(r["Warp Stall Sampling (All Samples)"]))[:a.top]:
        s = num(r["Warp Stall Sampling (All Samples)"])
        reasons = Counter({c[len("stall_"):]: num(r[c]) for c in stall_cols})
        top = ", ".join(f"{k} {100 * v / max(s, 1):.0f} %" for k, v in reasons.most_common(2) if v)
        src = r["Source"].strip().replace("|", "\\|")
        print(f"| {index[id(r)]} | {r['Address'][-5:]} | `{src}` | {100 * s / total_samples:.2f} % | {top} |")


if __name__ == "__main__":
    main()
