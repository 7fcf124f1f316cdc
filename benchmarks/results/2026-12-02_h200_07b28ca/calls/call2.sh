#!/bin/bash
# Session 40, call 2: the GPU tests of tests/test_kernel_gpu.py on the re-tuned table, then a
# second A/B of it against the table before (M = 1..128, nine sets).
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s40/sha.txt)
S=$(date +%s)
SHA=$(cat dev_s40/sha.txt)
mkdir -p $OUT/r
SKIP_SANITIZER=1 DEVICE_CHECK_BUDGET=500 GPU_TESTS_TIMEOUT=490 timeout 510 \
  bash scripts/h200_records.sh $OUT/r/check_kernel $SHA check-kernel > $OUT/r/check_kernel.log 2>&1
echo "check-kernel rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
SETS=llama2-7b,llama2-13b,llama2-70b,llama3-8b,qwen2.5-7b,phi3-mini,qwen2.5-0.5b,qwen2.5-1.5b,llama3.2-1b
LEFT=$(( 590 - ($(date +%s) - S) ))
if [ $LEFT -gt 50 ]; then
  timeout $LEFT python3 scripts/ab_probe.py $OUT/r/ab_retune2.json \
    --table-a dev_s40/table_old.json --sets $SETS --m 1,8,16,32,96,128 > $OUT/r/ab_retune2.log 2>&1
  echo "ab rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
fi
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
