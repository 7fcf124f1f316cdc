"""Where does a wgmma instance spill, and does its loop keep the uniform datapath? Classifies every
local-memory access (STL/LDL) in its SASS, and counts the K steps' register moves into uniform
registers (R2UR) and constant loads (LDC/ULDC).

    python3 scripts/sass_spill_sites.py CONFIG [CONFIG ...]

Each instance is built sym and zero-point with nvcc (``$NVCC``) for sm_90a and disassembled with
nvdisasm (``$NVDISASM``); no GPU needed. In the SASS of the wgmma main loop (``run_wgmma``):

* the *unit loop* is the backward branch whose body holds the HGMMA instructions;
* the *K steps* run from its first HGMMA to its last one;
* after the last HGMMA, a forward branch skips the *column epilogue* (taken when the unit does
  not end a column); from its target to the loop's back branch, plus the loop head before the
  first HGMMA, is the *unit tail*, run every unit. (Since NOTES.md entry 11 the ring refill and
  its barrier sit inside the last K step; before, they were in the unit tail.)

Each spill is counted as prologue (before the loop), K steps, epilogue, unit tail, or after the
loop, and every instruction by the same regions (static counts: how long each part's code is).
Record of the spills that the sw8 instances had before entry 11 removed them:
benchmarks/results/2026-11-29_sass_spill_sites.txt.

An R2UR in the K steps means the loop computes something in vector registers that wgmma needs
in uniform ones (the descriptors): NOTES.md entry 36 found code that the loop runs once (a
store in its epilogue) moving all of the loop's descriptor arithmetic there, 5-15 % more
instructions per unit. At cd90763 the table's wgmma configs had none, except the zero-point
builds of its three sw16 parallel-reduction configs (7 each;
benchmarks/results/2026-11-30_sass_spill_sites_cd90763.txt); at 3efefde none has any
(benchmarks/results/2026-11-30_sass_spill_sites_3efefde.txt, NOTES.md entry 38).

Exit status 1 if any instance spills in its K steps (HOT) or has an R2UR there (R2U).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_BRA = re.compile(r"BRA\s+(?:!?U?PT?\d*,\s*)?`\((\.L_x_\d+)\)")


def sass(name: str, zp: bool, work: Path) -> list:
    from marlin_cupy import kernels
    from marlin_cupy.config import KernelConfig
    cu, cubin = work / "k.cu", work / "k.cubin"
    cu.write_text(kernels.marlin_source(KernelConfig.from_name(name), zp))
    subprocess.run([os.environ.get("NVCC", "nvcc"), "-cubin", "-std=c++17", "-gencode",
                    "arch=compute_90a,code=sm_90a", "-o", str(cubin), str(cu)],
                   check=True, capture_output=True)
    return subprocess.run([os.environ.get("NVDISASM", "nvdisasm"), "-c", str(cubin)],
                          capture_output=True, text=True, check=True).stdout.splitlines()


def classify(lines: list) -> dict:
    labels = {m.group(1): i for i, l in enumerate(lines) if (m := _LABEL.match(l))}
    insns = [(i, m.group(1)) for i, l in enumerate(lines) if (m := _INSN.search(l))]
    hgmma = [i for i, t in insns if t.startswith("HGMMA")]
    if not hgmma:
        raise ValueError("no HGMMA in this instance")
    loop = None
    for i, t in insns:
        m = _BRA.search(t)
        if m and labels.get(m.group(1), i) < hgmma[0] < i:
            loop = (labels[m.group(1)], i)   # the outermost such branch: the unit loop
            break
    k_first, k_last = hgmma[0], hgmma[-1]
    epi_end = None
    for i, t in insns:
        m = _BRA.search(t)
        if i > k_last and m and labels.get(m.group(1), -1) > i:
            epi_end = labels[m.group(1)]
            break
    counts = {"prologue": 0, "k_steps": 0, "epilogue": 0, "unit_tail": 0, "after_loop": 0}
    sizes = dict(counts)
    moves = {"R2UR": 0, "LDC": 0}   # in the K steps
    for i, t in insns:
        if i < loop[0]:
            region = "prologue"
        elif i > loop[1]:
            region = "after_loop"
        elif k_first <= i <= k_last:
            region = "k_steps"
        elif k_last < i and (epi_end is None or i < epi_end):
            region = "epilogue"
        else:
            region = "unit_tail"   # the loop head before the first HGMMA counts here too
        sizes[region] += 1
        if re.match(r"(STL|LDL)\b", t):
            counts[region] += 1
        if region == "k_steps":
            if re.match(r"R2UR\b", t):
                moves["R2UR"] += 1
            elif re.match(r"U?LDC\b", t):
                moves["LDC"] += 1
    return counts, sizes, moves


def main(argv) -> int:
    import argparse
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("configs", nargs="+", help="config names (wgmma instances)")
    argv = p.parse_args(argv).configs
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in argv:
            for zp in (False, True):
                c, sizes, moves = classify(sass(name, zp, Path(tmp)))
                hot = c["k_steps"]
                tag = "HOT" if hot else ("R2U" if moves["R2UR"] else "ok ")
                bad += tag != "ok "
                print(f"{tag} {name}{'_zp' if zp else ''}: "
                      + ", ".join(f"{k} {v}" for k, v in c.items())
                      + "; instructions: " + ", ".join(f"{k} {v}" for k, v in sizes.items())
                      + "; K steps: " + ", ".join(f"{k} {v}" for k, v in moves.items()))
    print(f"{bad} instance(s) spill or move into uniform registers in the K steps")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
