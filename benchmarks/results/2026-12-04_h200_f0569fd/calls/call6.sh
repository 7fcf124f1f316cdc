#!/bin/bash
# Session 53, call 6, at the commit in dev_s53/sha.txt (the second review: launch side, tuner,
# bench; the kernel source as at 989e35c), on the machine call 5 left warm (its kernel cache):
# the part of tests/test_kernel_gpu.py that exercises the launch path's checks and streams
# (interop, streams and workspaces, bad inputs, default dispatch, odd M, scale_fma, the
# parallel reduction), within what the session's device time allowed (the whole file took
# 338.7 s at 218cc0d, call 3).
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s53/sha.txt) PYTHONUNBUFFERED=1
mkdir -p $OUT/s53c6
start=$(date +%s)
timeout 250 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_kernel_gpu.py \
  -k "Interop or Determinism or BadInputs or default_dispatch or odd_m or ScaleFma or ParallelReduction" \
  --junitxml=$OUT/s53c6/pytest_kernel_subset.xml > $OUT/s53c6/pytest_kernel_subset.log 2>&1
echo "rc $? $(( $(date +%s) - start )) s" | tee -a $OUT/s53c6/pytest_kernel_subset.log
tail -n 3 $OUT/s53c6/pytest_kernel_subset.log
cd $OUT && tar czf r.tgz s53c6 && rm -rf s53c6
