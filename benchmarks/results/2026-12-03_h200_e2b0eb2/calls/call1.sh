#!/bin/bash
# Session 48, call 1, at the commit in dev_s48/sha.txt: the README's main job as written
# (bash scripts/demo.sh, M = 16 by default, then --m 1), the GPU test files but the kernel's
# (h200_records.sh check-rest without the sanitizer: the demo's new GPU test, the notebooks',
# the fast path's, interop, graphs, PDL, ...), all on the H200.
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s48/sha.txt); mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/r/gpu.txt 2>&1
( time timeout 240 bash scripts/demo.sh ) > $OUT/r/demo_m16.log 2>&1; echo "demo.sh rc $?"; tail -4 $OUT/r/demo_m16.log
( time timeout 120 bash scripts/demo.sh --m 1 ) > $OUT/r/demo_m1.log 2>&1; echo "demo.sh --m 1 rc $?"; tail -4 $OUT/r/demo_m1.log
SKIP_SANITIZER=1 GPU_TESTS_TIMEOUT=400 DEVICE_CHECK_BUDGET=420 timeout 450 bash scripts/h200_records.sh $OUT/r/rest $(cat dev_s48/sha.txt) check-rest; echo "check-rest rc $?"
cd $OUT && tar czf r.tgz r && rm -rf r
