#!/usr/bin/env bash
# The one command to run on a GPU machine (the H200), from the working tree, no installs:
#
#   bash scripts/device_check.sh OUTDIR        e.g. benchmarks/results/2026-11-29_h200
#
# Records the environment (GPU, driver, CuPy/CUDA versions, nvidia-smi), runs the GPU tests
# (pytest -m gpu, JUnit XML), compute-sanitizer memcheck and racecheck over
# scripts/sanitize_case.py, and a short benchmark when marlin_cupy.bench exists, and writes
# OUTDIR/device_check.json (schema DESIGN.md s.8) and OUTDIR/device_check.md; logs go to
# OUTDIR/logs/. Exit status 1 when anything failed. Knobs (SKIP_SANITIZER=1, timeouts, ...)
# are listed in scripts/device_check.py.
set -uo pipefail
if [ $# -ne 1 ]; then
    echo "usage: bash scripts/device_check.sh OUTDIR" >&2
    exit 2
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUTDIR="$(mkdir -p "$1" && cd "$1" && pwd)"
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# compute-sanitizer often lives outside PATH.
for d in /usr/local/cuda/bin "${CUDA_HOME:-}/bin"; do
    [ -d "$d" ] && case ":$PATH:" in *":$d:"*) ;; *) PATH="$PATH:$d" ;; esac
done
export PATH
exec "${PYTHON:-python3}" scripts/device_check.py "$OUTDIR"
