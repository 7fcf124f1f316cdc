#!/usr/bin/env bash
# Every record a session owes from the H200, in calls of the device tool (one call of at most
# 10 minutes no longer holds them: the GPU suite alone took 5 minutes at 92ed3c7, and at
# fa60c51 it outgrew one call by itself, 430 s for 1060 of its 1090 tests):
#   check:        device check (all GPU tests, compute-sanitizer), now more than 10 minutes;
#   check-kernel: the GPU tests of tests/test_kernel_gpu.py alone (about 5.5 minutes);
#   check-rest:   the other GPU test files, then compute-sanitizer (about 5-6 minutes);
#   bench:        full benchmark sweep and compile times, about 2-3 minutes.
# check-kernel and check-rest together are `check`, one device call each.
#
#   bash scripts/h200_records.sh OUTDIR COMMIT [check | check-kernel | check-rest | bench | all]
#                                                                                (default all)
#
# OUTDIR receives device_check.json/.md (the check stages), the bench JSON/markdown/plots and
# compile_times.json (bench), and one tarball of every log (logs_<stage>.tgz); copy them into
# benchmarks/results/<date>_h200/ and commit. That is at most 8 files, the most the device tool
# brings back: give it an OUTDIR of its own under $OUT and write nothing else there (a ninth
# file, e.g. a log of this script, costs a tarball). device_check.sh's own variables
# (DEVICE_CHECK_BUDGET, GPU_TESTS_TIMEOUT, SKIP_SANITIZER, ...) pass through.
# COMMIT is the commit the tree came from (the GPU machine has no .git).
set -uo pipefail
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: bash scripts/h200_records.sh OUTDIR COMMIT [check | check-kernel | check-rest | bench | all]" >&2
    exit 2
fi
WHAT="${3:-all}"
case "$WHAT" in check|check-kernel|check-rest|bench|all) ;; *) echo "h200_records: unknown stage '$WHAT'" >&2; exit 2 ;; esac
OUT="$(mkdir -p "$1" && cd "$1" && pwd)"
export MARLIN_GIT_COMMIT="$2" PYTHONPATH=. PYTHONUNBUFFERED=1
cd "$(dirname "${BASH_SOURCE[0]}")/.."
WORK="$(mktemp -d)"
status=0
# The split stages put their file selection in front of the caller's own PYTEST_ARGS.
if [ "$WHAT" = check-kernel ]; then
    # The kernel tests only; the sanitizer goes with check-rest.
    export PYTEST_ARGS="tests/test_kernel_gpu.py ${PYTEST_ARGS:-}" SKIP_SANITIZER=1
elif [ "$WHAT" = check-rest ]; then
    export PYTEST_ARGS="--ignore=tests/test_kernel_gpu.py ${PYTEST_ARGS:-}"
fi
if [ "$WHAT" != bench ]; then
    SKIP_BENCH=1 bash scripts/device_check.sh "$WORK/device_check" > "$WORK/device_check.log" 2>&1 || status=1
    cp "$WORK/device_check/device_check.json" "$WORK/device_check/device_check.md" "$OUT/" 2>/dev/null
    grep -E "pytest -m gpu|compute-sanitizer" "$OUT/device_check.md"
fi
if [ "$WHAT" = bench ] || [ "$WHAT" = all ]; then
    python3 -m marlin_cupy.bench --out "$OUT" --no-progress > "$WORK/bench.log" 2>&1 || status=1
    python3 scripts/compile_times.py "$OUT/compile_times.json" > "$WORK/compile_times.log" 2>&1 || status=1
    tail -1 "$WORK/compile_times.log"
fi
tar czf "$OUT/logs_$WHAT.tgz" -C "$WORK" .
echo "h200_records: exit $status"
exit $status
