#!/usr/bin/env python3
"""Two kernel instances' main loops side by side, by the mix and order of the instructions
that do the work (no GPU; NOTES.md entry 71).

    python3 scripts/sass_loop_mix.py CONFIG_A CONFIG_B [--arch sm_90]

For each instance (symmetric build, the working tree's source, nvcc and nvdisasm as in
``sass_identity.py``), the smallest loop holding MMAs (``sass_identity.hot_loops``). Prints
every opcode whose count differs between the two loops, then the count of each working
opcode (MMAs, copies, shared loads, the dequantization's FP16 arithmetic, barriers) in both and
how much of their order the two share (``difflib`` ratio over that subsequence): equal counts
with a low ratio mean the same work scheduled differently.
"""
from __future__ import annotations

import argparse
import difflib
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]
import sass_identity as si  # noqa: E402
from marlin_cupy.config import KernelConfig  # noqa: E402
from sass_loop_size import opcode  # noqa: E402

WORK = ("HMMA", "HGMMA", "LDGSTS", "LDSM", "LDS", "HFMA2", "HADD2", "HMUL2", "PRMT", "DEPBAR",
        "BAR", "FFMA", "F2FP")


def main_loop(name: str, arch: str) -> list:
    src = si.source_at(ROOT, name, False)
    with tempfile.TemporaryDirectory() as d:     # sm_90a for the wgmma configs
        lines = si.sass_lines(src, arch + KernelConfig.from_name(name).arch_suffix, Path(d),
                              labels=True)
    loops = si.hot_loops(lines)
    if not loops:
        raise SystemExit(f"{name}: no loop holds an MMA")
    return loops[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--arch", default="sm_90")
    args = ap.parse_args(argv)
    la, lb = main_loop(args.a, args.arch), main_loop(args.b, args.arch)
    print(f"A {args.a}: loop of {len(la)} instructions")
    print(f"B {args.b}: loop of {len(lb)} instructions")
    ca, cb = Counter(map(opcode, la)), Counter(map(opcode, lb))
    print("\nopcodes whose counts differ (A, B):")
    for k in sorted(set(ca) | set(cb)):
        if ca[k] != cb[k]:
            print(f"  {k:28s} {ca[k]:5d} {cb[k]:5d}")
    wa = [o for o in map(opcode, la) if o.split(".")[0] in WORK]
    wb = [o for o in map(opcode, lb) if o.split(".")[0] in WORK]
    print("\nworking opcodes (A, B):")
    for k in sorted(set(wa) | set(wb)):
        print(f"  {k:28s} {wa.count(k):5d} {wb.count(k):5d}")
    ratio = difflib.SequenceMatcher(a=wa, b=wb, autojunk=False).ratio()
    print(f"\norder of the working opcodes shared: {ratio:.2f} (1.00: the same order)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
