#!/bin/bash
# Session 50, call 2, at the commit in dev_s50/sha.txt: the GPU tests of tests/test_kernel_gpu.py
# (every config the dispatcher can pick, the new sm_90 heuristic's 48- and 96-row configs among them).
mkdir -p $OUT/s50c2
timeout 580 bash scripts/h200_records.sh $OUT/s50c2 $(cat dev_s50/sha.txt) check-kernel
echo "rc $?"
cd $OUT && tar czf r.tgz s50c2 && rm -rf s50c2
