#!/bin/bash
# Session 51, call 3, at the commit in dev_s51/sha.txt: the GPU tests of tests/test_kernel_gpu.py
# (every config the dispatcher can pick, the table's and the sm_90 heuristic's 80- and 112-row
# configs among them).
mkdir -p $OUT/s51c3
timeout 580 bash scripts/h200_records.sh $OUT/s51c3 $(cat dev_s51/sha.txt) check-kernel
echo "rc $?"
cd $OUT && tar czf r.tgz s51c3 && rm -rf s51c3
