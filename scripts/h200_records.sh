#!/usr/bin/env bash
# Every record a session owes from the H200, in calls of the device tool (one call of at most
# 10 minutes no longer holds them: the GPU suite alone took 5 minutes at 92ed3c7, and at
# fa60c51 it outgrew one call by itself, 430 s for 1060 of its 1090 tests):
#   check-kernel: the GPU tests of tests/test_kernel_gpu.py alone, about 5 minutes (pytest
#                 297.4 s at 989e35c, benchmarks/results/2026-12-04_h200_989e35c/call3/; on a
#                 slower host 425 s, so this stage raises GPU_TESTS_TIMEOUT to 560 s);
#   check-rest:   the other GPU test files, then compute-sanitizer: pytest 197.3 s at 989e35c
#                 (call2/check_rest/ there), then 29.1 s of sanitizer over the 10 configs its
#                 SANITIZE_ARGS="--names ..." named; the sanitizer's default cases take longer
#                 (187.1 s at 00a96bf, 2026-12-04_h200_00a96bf/call3/; at 30348b1 a check-rest
#                 with them ran past the 390 s its call gave it, that folder's README.md);
#   bench:        full benchmark sweep and compile times, about 2-3 minutes;
#   check:        check-kernel and check-rest in one device_check.sh run. With the default limits
#                 of scripts/device_check.py it cannot finish: after a kernel-cache warm-up (up to
#                 240 s) pytest is stopped at GPU_TESTS_TIMEOUT (420 s) and the run at
#                 DEVICE_CHECK_BUDGET (580 s), while the suite's pytest took 494.7 s at 989e35c
#                 (297.4 + 197.3 s above); with raised limits the suite and the default sanitizer
#                 (494.7 + 187.1 s) outgrow one 10-minute device call. On the device tool run
#                 check-kernel and check-rest instead, one call each;
#   all:          check, then bench (the same limits).
#
#   bash scripts/h200_records.sh OUTDIR COMMIT [check | check-kernel | check-rest | bench | all]
#                      (default all; in calls of the 10-minute device tool use check-kernel,
#                       check-rest and bench, one call each, never check or all)
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
    echo "(check and all outgrow a 10-minute device call: run check-kernel, check-rest, bench)" >&2
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
    # Its pytest may take what the run's budget leaves (DEVICE_CHECK_BUDGET, 580 s, still bounds
    # the whole run): on one host it needed 425 s where others took 270-300 (NOTES.md entry 116).
    export PYTEST_ARGS="tests/test_kernel_gpu.py ${PYTEST_ARGS:-}" SKIP_SANITIZER=1 \
        GPU_TESTS_TIMEOUT="${GPU_TESTS_TIMEOUT:-560}"
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
