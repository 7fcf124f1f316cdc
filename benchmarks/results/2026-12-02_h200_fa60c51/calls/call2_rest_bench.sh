#!/bin/bash
# Session 38, call 2 (call 1's pytest ran out of time inside tests/test_pdl_gpu.py at fa60c51:
# 1060 passed, none failed). This commit differs from fa60c51 only in scripts/h200_records.sh.
# check-rest: every GPU test file but tests/test_kernel_gpu.py (which call 1 ran whole), then
# compute-sanitizer; then the harness's full sweep and compile times with the time left.
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s38/sha.txt)
S=$(date +%s)
SHA=$(cat dev_s38/sha.txt)
mkdir -p $OUT/r
DEVICE_CHECK_BUDGET=450 GPU_TESTS_TIMEOUT=240 SANITIZER_TIMEOUT=180 timeout 460 \
  bash scripts/h200_records.sh $OUT/r/rest $SHA check-rest > $OUT/r/rest.log 2>&1
echo "check-rest rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
LEFT=$(( 592 - ($(date +%s) - S) ))
if [ $LEFT -gt 120 ]; then
  timeout $LEFT bash scripts/h200_records.sh $OUT/r/bench $SHA bench > $OUT/r/bench.log 2>&1
  echo "bench rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
fi
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
