#!/bin/bash
# Session 53, call 3, at the commit in dev_s53/sha.txt (the review's API checks and test fixes;
# the kernel source as at 989e35c): the GPU tests of tests/test_kernel_gpu.py.
mkdir -p $OUT/s53c3
timeout 580 bash scripts/h200_records.sh $OUT/s53c3 $(cat dev_s53/sha.txt) check-kernel
echo "rc $?"
cd $OUT && tar czf r.tgz s53c3 && rm -rf s53c3
