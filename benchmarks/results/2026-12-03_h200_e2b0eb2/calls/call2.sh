#!/bin/bash
# Session 48, call 2, at the commit in dev_s48/sha.txt: the launch floor by shape
# (scripts/launch_floor.py), then the kernel GPU tests (h200_records.sh check-kernel), so that
# with call 1's check-rest the whole GPU suite has run at this session's code.
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s48/sha.txt); mkdir -p $OUT/r
start=$(date +%s)
timeout 120 python3 scripts/launch_floor.py $OUT/r/launch_floor > $OUT/r/launch_floor.log 2>&1; echo "launch_floor rc $? $(( $(date +%s) - start )) s"
GPU_TESTS_TIMEOUT=400 DEVICE_CHECK_BUDGET=420 timeout 430 bash scripts/h200_records.sh $OUT/r/check_kernel $MARLIN_GIT_COMMIT check-kernel > $OUT/r/check_kernel.log 2>&1
echo "check-kernel rc $? elapsed $(( $(date +%s) - start )) s"; tail -3 $OUT/r/check_kernel.log
cd $OUT && tar czf r.tgz r && rm -rf r
