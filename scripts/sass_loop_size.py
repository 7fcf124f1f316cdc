#!/usr/bin/env python3
"""The size of kernel instances' machine code and of their main loop, side by side (no GPU).

    python3 scripts/sass_loop_size.py CONFIG[@DEFINES] [CONFIG[@DEFINES] ...] [--arch sm_90]

Each CONFIG is built from the working tree (sym; ``@NAME=VALUE[,NAME=VALUE]`` adds those
compile-time switches, as ``$MARLIN_CUPY_DEFINES``) with nvcc and disassembled with nvdisasm
(``$NVCC``, ``$NVDISASM``), as ``scripts/sass_identity.py`` does. Prints, per instance, the
instructions in all, those of the smallest loop that holds tensor-core instructions (ptxas
lays a column's end inside the main loop's body: what it adds there is what that body
carries), and there the FADDs and the 16-byte global loads; then the unified-diff lines of
each instance's loop against the first one's (registers, predicates and labels ignored).
NOTES.md entry 70: the early bottom's second copy of the sum in the main loop's body.
"""
from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import sass_identity as si  # noqa: E402
from marlin_cupy.config import KernelConfig  # noqa: E402


def opcode(line: str) -> str:
    """The instruction's name, after its predicate if any (a ";" stuck to it dropped)."""
    parts = line.split()
    return (parts[1] if parts[0].startswith("@") and len(parts) > 1 else parts[0]).rstrip(";")


def sizes(lines: list) -> dict:
    """Counts of one listing (``sass_identity.sass_lines(..., labels=True)``)."""
    loops = si.hot_loops(lines)
    loop = loops[0] if loops else []
    ops = collections.Counter(opcode(x) for x in loop)
    return {"total": sum(1 for x in lines if not si._LABEL.match(x)), "loop": len(loop),
            "fadd": ops.get("FADD", 0),
            "ldg128": sum(v for k, v in ops.items() if k.startswith("LDG.E.128")),
            "body": loop}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("instances", nargs="+", metavar="CONFIG[@DEFINES]")
    p.add_argument("--arch", default="sm_90")
    a = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for item in a.instances:
            name, _, defines = item.partition("@")
            arch = a.arch + KernelConfig.from_name(name).arch_suffix
            lines = si.sass_lines(si.source_at(ROOT, name, False, defines), arch, Path(d),
                                  labels=True)
            rows.append((item, sizes(lines)))
    print(f"{'instance':60s} {'total':>6s} {'loop':>6s} {'FADD':>5s} {'LDG.128':>7s} "
          f"{'loop diff':>9s}")
    first = rows[0][1]["body"]
    for item, s in rows:
        print(f"{item:60s} {s['total']:6d} {s['loop']:6d} {s['fadd']:5d} {s['ldg128']:7d} "
              f"{si.differing(first, s['body']):9d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
