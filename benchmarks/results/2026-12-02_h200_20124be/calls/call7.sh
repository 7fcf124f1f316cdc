#!/bin/bash
# Session 42, call 7: MARLIN_WS_STEP_FIRST=1 (the first unit awaited step by step) against the
# shipped build (bitwise equal expected), its timeline at M = 64, and the producer configs'
# GPU tests built with it.
set -x
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s42/sha.txt)
start=$(date +%s)
python3 scripts/ab_probe.py $OUT/ab_stepfirst.json --define MARLIN_WS_STEP_FIRST=1 \
    --sets llama2-7b,llama2-13b,llama2-70b --m 16,32,64,128 2>&1 | tail -60 > $OUT/ab_stepfirst.log
echo "part 1 $(( $(date +%s) - start )) s"
MARLIN_CUPY_DEFINES=MARLIN_WS_STEP_FIRST=1 python3 scripts/timeline_probe.py $OUT/timeline_stepfirst_m64.json \
    --m 64 --sets llama2-7b,llama2-13b 2>&1 | tail -12 > $OUT/timeline_stepfirst_m64.log
echo "part 2 $(( $(date +%s) - start )) s"
MARLIN_CUPY_DEFINES=MARLIN_WS_STEP_FIRST=1 timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider \
    tests/test_kernel_gpu.py -k "TestProducer or TestScaleFma or (TestEveryInstantiatedConfig and _ws)" \
    > $OUT/gpu_tests_stepfirst.log 2>&1
echo "pytest rc $?" >> $OUT/gpu_tests_stepfirst.log
echo "part 3 $(( $(date +%s) - start )) s"
tail -3 $OUT/gpu_tests_stepfirst.log
cat $OUT/ab_stepfirst.log | tail -20
grep -h "first_wait" $OUT/timeline_stepfirst_m64.log | cut -c1-220
