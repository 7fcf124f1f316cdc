#!/usr/bin/env bash
# Every record a session owes from the H200, in one call of 4-4.5 minutes:
#   device check (GPU tests, compute-sanitizer), full benchmark sweep, compile times.
#
#   bash scripts/h200_records.sh OUTDIR COMMIT
#
# OUTDIR receives device_check.json/.md, the bench JSON/markdown/plots, compile_times.json and
# one tarball of every log; copy them into benchmarks/results/<date>_h200/ and commit. That is
# 8 files, the most the device tool brings back: give it an OUTDIR of its own under $OUT and
# write nothing else there (a ninth file, e.g. a log of this script, costs the tarball).
# COMMIT is the commit the tree came from (the GPU machine has no .git).
set -uo pipefail
if [ $# -ne 2 ]; then
    echo "usage: bash scripts/h200_records.sh OUTDIR COMMIT" >&2
    exit 2
fi
OUT="$(mkdir -p "$1" && cd "$1" && pwd)"
export MARLIN_GIT_COMMIT="$2" PYTHONPATH=. PYTHONUNBUFFERED=1
cd "$(dirname "${BASH_SOURCE[0]}")/.."
WORK="$(mktemp -d)"
status=0
SKIP_BENCH=1 bash scripts/device_check.sh "$WORK/device_check" > "$WORK/device_check.log" 2>&1 || status=1
cp "$WORK/device_check/device_check.json" "$WORK/device_check/device_check.md" "$OUT/" 2>/dev/null
python3 -m marlin_cupy.bench --out "$OUT" --no-progress > "$WORK/bench.log" 2>&1 || status=1
python3 scripts/compile_times.py "$OUT/compile_times.json" > "$WORK/compile_times.log" 2>&1 || status=1
tar czf "$OUT/logs.tgz" -C "$WORK" .
grep -E "pytest -m gpu|compute-sanitizer" "$OUT/device_check.md"
tail -1 "$WORK/compile_times.log"
echo "h200_records: exit $status"
exit $status
