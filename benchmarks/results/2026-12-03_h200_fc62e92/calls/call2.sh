#!/bin/bash
# Session 47, call 2: the kernel GPU tests (h200_records.sh check-kernel) at the commit in
# dev_s47/sha.txt, so that with call 1's check-rest the whole GPU suite has run on it.
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s47/sha.txt)
start=$(date +%s)
mkdir -p $OUT/r
GPU_TESTS_TIMEOUT=420 DEVICE_CHECK_BUDGET=440 timeout 450 bash scripts/h200_records.sh $OUT/r/check_kernel $MARLIN_GIT_COMMIT check-kernel > $OUT/r/check_kernel.log 2>&1
echo "check-kernel rc $? elapsed $(( $(date +%s) - start )) s"; tail -3 $OUT/r/check_kernel.log
cd $OUT && tar czf r.tgz r
