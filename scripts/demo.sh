#!/usr/bin/env bash
# The main job in one command, set-up included: install marlin-cupy, then quantize a
# llama2-7b-shaped layer, pack it and, where a GPU exists, run and time the kernel against
# FP16 (python -m marlin_cupy.demo). Extra arguments go to the demo (--k, --n, --m, ...).
#
#   bash scripts/demo.sh [--m 16]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_setup.sh"
cd "$ROOT"

marlin_setup "" "cupy"
exec "$PYTHON" -m marlin_cupy.demo "$@"
