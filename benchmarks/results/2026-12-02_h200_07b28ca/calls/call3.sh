#!/bin/bash
# Session 40, call 3: the other GPU test files and compute-sanitizer on the re-tuned table
# (h200_records.sh check-rest), then, time allowing, the benchmark sweep.
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s40/sha.txt)
S=$(date +%s)
SHA=$(cat dev_s40/sha.txt)
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
