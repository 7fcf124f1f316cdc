#!/bin/bash
# Session 46, call 8: the GPU test files other than test_kernel_gpu.py (h200_records.sh
# check-rest, without the sanitizer) at d151683: matmul's checked path gained the
# MARLIN_WS_TMA_A branch in 8cc7f05 (one lookup per call), and test_tma_gpu.py joined the suite.
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s46/sha.txt)
start=$(date +%s)
mkdir -p $OUT/r
SKIP_SANITIZER=1 GPU_TESTS_TIMEOUT=300 DEVICE_CHECK_BUDGET=330 timeout 340 bash scripts/h200_records.sh $OUT/r/check_rest $MARLIN_GIT_COMMIT check-rest > $OUT/r/check_rest.log 2>&1
echo "check-rest rc $? elapsed $(( $(date +%s) - start )) s"; tail -3 $OUT/r/check_rest.log
cd $OUT && tar czf r.tgz r
