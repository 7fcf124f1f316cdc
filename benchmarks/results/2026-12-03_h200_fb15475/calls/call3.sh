#!/bin/bash
# Session 45, call 3: the whole GPU suite at the commit of entry 100 (use_kernel clears stamping
# builds' stamps, the locks checked zero after every GPU test, pdl_allowed removed, the fast
# path with pdl=True): h200_records.sh check, without the sanitizer (kernel unchanged).
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s45/sha.txt)
start=$(date +%s)
mkdir -p $OUT/r
SKIP_SANITIZER=1 GPU_TESTS_TIMEOUT=470 DEVICE_CHECK_BUDGET=530 timeout 550 bash scripts/h200_records.sh $OUT/r/check $MARLIN_GIT_COMMIT check > $OUT/r/check.log 2>&1
echo "check rc $? elapsed $(( $(date +%s) - start )) s"; tail -3 $OUT/r/check.log
cd $OUT && tar czf r.tgz r
