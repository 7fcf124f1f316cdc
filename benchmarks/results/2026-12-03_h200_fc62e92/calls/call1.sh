#!/bin/bash
# Session 47, call 1: the GPU test files other than test_kernel_gpu.py (h200_records.sh
# check-rest, with compute-sanitizer) at the commit in dev_s47/sha.txt, fc62e92: cffd862's review
# changed how ops reads a build's switches (ops._switch: the stamping probes' and
# MARLIN_WS_TMA_A's marking) without a GPU run; fc62e92 added records.newest_sweep only.
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s47/sha.txt)
start=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/r/gpu.txt 2>&1
GPU_TESTS_TIMEOUT=300 DEVICE_CHECK_BUDGET=540 timeout 560 bash scripts/h200_records.sh $OUT/r/check_rest $MARLIN_GIT_COMMIT check-rest > $OUT/r/check_rest.log 2>&1
echo "check-rest rc $? elapsed $(( $(date +%s) - start )) s"; tail -4 $OUT/r/check_rest.log
cd $OUT && tar czf r.tgz r
