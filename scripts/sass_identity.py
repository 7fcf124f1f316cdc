"""Is a kernel edit a no-op for the machine code? Compares the SASS of kernel instances built from
the working tree with those built from another commit (no GPU needed).

    python3 scripts/sass_identity.py REV [--loop | --hot] [--define NAME=VALUE[,...]]
                                     [--base-define NAME=VALUE[,...]]
                                     CONFIG[@ARCH] [CONFIG[@ARCH] ...]

ARCH defaults to sm_90 (sm_90a for wgmma configs). Each instance is built sym and zero-point with
nvcc (``$NVCC``, default ``nvcc``) and disassembled with nvdisasm (``$NVDISASM``, default
``nvdisasm``); addresses are dropped before comparing. Line info is not generated, so moving
code between lines does not count as a change. Exit status 1 if any instance differs.

``--loop`` compares only the main loop's schedule: the instructions from the first to the last
tensor-core instruction (HMMA or HGMMA), registers ignored, and prints how many of them differ.
A change to the column's end is also a change to the loop when the loop's schedule moves
(NOTES.md entry 65): check this before an A/B of the end. ``--define`` builds the working
tree's side with those compile-time switches (``$MARLIN_CUPY_DEFINES``); with REV = HEAD it
compares a switch against the shipped build of the same commit; ``--base-define`` builds REV's
side with its own switches (two variants against each other).

``--hot`` compares only the innermost loops that hold tensor-core instructions: the code from
a label to the backward branch that jumps to it (nvdisasm's ``.L_x_N`` labels), registers,
predicates and labels ignored, loop by loop from the smallest. The main loop's own body, even
where the compiler lays the column's end out between its MMAs (what ``--loop`` then counts).
NOTES.md entry 69: ptxas reschedules that body too when code outside it changes.

``CONFIG~BASE`` builds CONFIG from the working tree against BASE from REV: a config variant
against its twin (``t256_m1_n16_k8_s6_g8_fp32par_sw1_ts~t256_m1_n16_k8_s6_g8_fp32par_sw1`` with
REV = HEAD: what the variant does to the loop's schedule).
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_ADDR = re.compile(r"/\*[0-9a-f]+\*/")
_INSN = re.compile(r"/\*[0-9a-f]{4}\*/")
_REG = re.compile(r"\bU?R\d+\b")


def loop_region(insns: list) -> list:
    """The instructions from the first to the last HMMA/HGMMA, registers replaced by ``R`` (the
    schedule, not the allocation); empty if there is none."""
    mma = [i for i, t in enumerate(insns) if "HMMA" in t or "HGMMA" in t]
    if not mma:
        return []
    return [_REG.sub("R", t) for t in insns[mma[0]:mma[-1] + 1]]


_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_TARGET = re.compile(r"\((\.L_x_\d+)\)")
_REG_PRED = re.compile(r"\bU?R\d+\b|\bU?P\d\b")


def hot_loops(lines: list) -> list:
    """The loops of a listing (``sass_lines(..., labels=True)``: labels as ``.L_x_N:``, then
    instructions) whose body holds an HMMA or HGMMA, smallest first: each body from its label to
    the backward branch to it, registers, predicates and branch targets replaced."""
    where = {}
    for i, t in enumerate(lines):
        m = _LABEL.match(t)
        if m:
            where[m.group(1)] = i
    loops = []
    for i, t in enumerate(lines):
        m = _TARGET.search(t) if "BRA" in t else None
        if m and where.get(m.group(1), i) < i:
            body = [x for x in lines[where[m.group(1)]:i + 1] if not _LABEL.match(x)]
            if any("HMMA" in x or "HGMMA" in x for x in body):
                loops.append([_REG_PRED.sub("R", _TARGET.sub("(L)", x)) for x in body])
    return sorted(loops, key=len)


def differing(a: list, b: list) -> int:
    """Lines of a unified diff between two instruction lists (removed plus added)."""
    import difflib
    return sum(1 for line in difflib.unified_diff(a, b, lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---")))


def source_at(tree: Path, name: str, zp: bool, defines: str = "") -> str:
    code = ("import sys; sys.path.insert(0, sys.argv[1]);"
            "from marlin_cupy import kernels; from marlin_cupy.config import KernelConfig;"
            "print(kernels.marlin_source(KernelConfig.from_name(sys.argv[2]), sys.argv[3] == '1'))")
    env = {k: v for k, v in os.environ.items() if k != "MARLIN_CUPY_DEFINES"}
    if defines:
        env["MARLIN_CUPY_DEFINES"] = defines
    return subprocess.run([sys.executable, "-c", code, str(tree), name, "1" if zp else "0"],
                          capture_output=True, text=True, check=True, env=env).stdout


def sass_lines(source: str, arch: str, work: Path, labels: bool = False) -> list:
    cu, cubin = work / "k.cu", work / "k.cubin"
    cu.write_text(source)
    subprocess.run([os.environ.get("NVCC", "nvcc"), "-cubin", "-std=c++17", "-gencode",
                    f"arch=compute_{arch[3:]},code={arch}", "-o", str(cubin), str(cu)],
                   check=True, capture_output=True)
    out = subprocess.run([os.environ.get("NVDISASM", "nvdisasm"), "-c", str(cubin)],
                         capture_output=True, text=True, check=True).stdout
    return [_ADDR.sub("", line).strip() for line in out.splitlines()
            if _INSN.search(line) or (labels and _LABEL.match(line))]


def digest(insns: list) -> str:
    return hashlib.sha256("\n".join(insns).encode()).hexdigest()[:16]


def main(argv) -> int:
    import argparse
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rev", help="the commit to compare with")
    p.add_argument("specs", nargs="+", metavar="CONFIG[~BASE][@ARCH]")
    p.add_argument("--loop", action="store_true",
                   help="compare only the main loop's schedule (first to last MMA)")
    p.add_argument("--hot", action="store_true",
                   help="compare only the innermost loops holding MMAs (label to back branch)")
    p.add_argument("--define", default="",
                   help="compile-time switches for the working tree's build, NAME=VALUE,...")
    p.add_argument("--base-define", default="",
                   help="compile-time switches for REV's build, NAME=VALUE,...")
    a = p.parse_args(argv)
    if a.loop and a.hot:
        p.error("--loop and --hot are two views: pick one")
    rev, specs = a.rev, a.specs
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        old.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "cuda", "marlin_cupy"],
                                 capture_output=True, check=True).stdout
        tarfile.open(fileobj=BytesIO(archive)).extractall(old)
        differ = 0
        for spec in specs:
            name, _, arch = spec.partition("@")
            name, _, base = name.partition("~")
            base = base or name
            arch = arch or ("sm_90a" if "_wg" in name else "sm_90")
            for zp in (False, True):
                x = sass_lines(source_at(old, base, zp, a.base_define), arch, Path(tmp), a.hot)
                y = sass_lines(source_at(ROOT, name, zp, a.define), arch, Path(tmp), a.hot)
                what = ""
                if a.loop:
                    x, y = loop_region(x), loop_region(y)
                    what = (f" (loop: {len(x)} -> {len(y)} instructions, {differing(x, y)} "
                            f"lines differ)")
                elif a.hot:
                    hx, hy = hot_loops(x), hot_loops(y)
                    pairs = "; ".join(f"{len(u)} -> {len(v)} instructions, {differing(u, v)} "
                                      f"lines differ" for u, v in zip(hx, hy))
                    what = f" (MMA loops {len(hx)} -> {len(hy)}: {pairs})"
                    x, y = [t for lp in hx for t in lp], [t for lp in hy for t in lp]
                    if len(hx) != len(hy):
                        y = y + ["(another loop)"]
                same = digest(x) == digest(y)
                differ += not same
                vs = f" (against {base})" if base != name else ""
                print(f"{'same' if same else 'DIFFERENT'}  {name}{'_zp' if zp else ''}{vs} "
                      f"{arch}{what}")
    view = " in the loop" if a.loop else " in the MMA loops" if a.hot else ""
    print(f"{differ} instance(s) differ from {rev}{view}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
