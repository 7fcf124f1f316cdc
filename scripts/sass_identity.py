"""Is a kernel edit a no-op for the machine code? Compares the SASS of kernel instances built from
the working tree with those built from another commit (no GPU needed).

    python3 scripts/sass_identity.py REV CONFIG[@ARCH] [CONFIG[@ARCH] ...]

ARCH defaults to sm_90 (sm_90a for wgmma configs). Each instance is built sym and zero-point with
nvcc (``$NVCC``, default ``nvcc``) and disassembled with nvdisasm (``$NVDISASM``, default
``nvdisasm``); addresses are dropped before comparing. Line info is not generated, so moving
code between lines does not count as a change. Exit status 1 if any instance differs.
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


def source_at(tree: Path, name: str, zp: bool) -> str:
    code = ("import sys; sys.path.insert(0, sys.argv[1]);"
            "from marlin_cupy import kernels; from marlin_cupy.config import KernelConfig;"
            "print(kernels.marlin_source(KernelConfig.from_name(sys.argv[2]), sys.argv[3] == '1'))")
    return subprocess.run([sys.executable, "-c", code, str(tree), name, "1" if zp else "0"],
                          capture_output=True, text=True, check=True).stdout


def sass_digest(source: str, arch: str, work: Path) -> str:
    cu, cubin = work / "k.cu", work / "k.cubin"
    cu.write_text(source)
    subprocess.run([os.environ.get("NVCC", "nvcc"), "-cubin", "-std=c++17", "-gencode",
                    f"arch=compute_{arch[3:]},code={arch}", "-o", str(cubin), str(cu)],
                   check=True, capture_output=True)
    out = subprocess.run([os.environ.get("NVDISASM", "nvdisasm"), "-c", str(cubin)],
                         capture_output=True, text=True, check=True).stdout
    insns = [_ADDR.sub("", line).strip() for line in out.splitlines() if _INSN.search(line)]
    return hashlib.sha256("\n".join(insns).encode()).hexdigest()[:16]


def main(argv) -> int:
    import argparse
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rev", help="the commit to compare with")
    p.add_argument("specs", nargs="+", metavar="CONFIG[@ARCH]")
    a = p.parse_args(argv)
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
            arch = arch or ("sm_90a" if "_wg" in name else "sm_90")
            for zp in (False, True):
                a = sass_digest(source_at(old, name, zp), arch, Path(tmp))
                b = sass_digest(source_at(ROOT, name, zp), arch, Path(tmp))
                differ += a != b
                print(f"{'same' if a == b else 'DIFFERENT'}  {name}{'_zp' if zp else ''} {arch}")
    print(f"{differ} instance(s) differ from {rev}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
