#!/bin/bash
# Session 38, call 1: the GPU tests at fa60c51 (first GPU run of the shipped fused-scale rule's
# builds, the pdl=True ones of the 64-row defer configs included), then the harness's full sweep
# with the time left (a second sweep of the dispatch 7a0ea32's sweep ran).
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s38/sha.txt)
S=$(date +%s)
SHA=$(cat dev_s38/sha.txt)
mkdir -p $OUT/r
SKIP_SANITIZER=1 DEVICE_CHECK_BUDGET=470 GPU_TESTS_TIMEOUT=460 bash scripts/h200_records.sh $OUT/r/check $SHA check > $OUT/r/check.log 2>&1
echo "check rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
LEFT=$(( 590 - ($(date +%s) - S) ))
if [ $LEFT -gt 140 ]; then
  timeout $LEFT bash scripts/h200_records.sh $OUT/r/bench $SHA bench > $OUT/r/bench.log 2>&1
  echo "bench rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
fi
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
