#!/bin/bash
# Session 46, call 1: the whole GPU suite at 3b08625 (HEAD after session 45: the bool guard,
# ops.locks_left and pdl.PreparedLaunch, none of them run on the GPU before), without the
# sanitizer (kernel unchanged since fb15475, whose sanitizer run was clean).
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s46/sha.txt)
start=$(date +%s)
mkdir -p $OUT/r
SKIP_SANITIZER=1 GPU_TESTS_TIMEOUT=470 DEVICE_CHECK_BUDGET=530 timeout 550 bash scripts/h200_records.sh $OUT/r/check $MARLIN_GIT_COMMIT check > $OUT/r/check.log 2>&1
echo "check rc $? elapsed $(( $(date +%s) - start )) s"; tail -3 $OUT/r/check.log
cd $OUT && tar czf r.tgz r
