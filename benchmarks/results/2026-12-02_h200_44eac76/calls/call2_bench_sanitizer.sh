#!/bin/bash
# Session 37, call 2: the harness's full sweep (all three llama2 sets and the ideal shape,
# M = 1..1024) and compile times, then compute-sanitizer (memcheck, racecheck), then a second
# sweep with the time that is left (two sweeps give each figure a range, as NOTES.md reports).
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s37/sha.txt)
S=$(date +%s)
SHA=$(cat dev_s37/sha.txt)
mkdir -p $OUT/r
timeout 240 bash scripts/h200_records.sh $OUT/r/bench $SHA bench > $OUT/r/bench.log 2>&1
echo "bench rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
SKIP_PYTEST=1 DEVICE_CHECK_BUDGET=230 SANITIZER_TIMEOUT=200 timeout 240 bash scripts/h200_records.sh $OUT/r/s $SHA check > $OUT/r/sanitizer.log 2>&1
echo "sanitizer rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
if [ $(( $(date +%s) - S )) -lt 380 ]; then
  timeout $(( 590 - ($(date +%s) - S) )) python3 -m marlin_cupy.bench --out $OUT/r/sweep2 --no-progress > $OUT/r/sweep2.log 2>&1
  echo "sweep2 rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
fi
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
