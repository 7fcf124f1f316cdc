#!/bin/bash
# Session 52, call 3, at the commit in dev_s52/sha.txt: the GPU tests of tests/test_kernel_gpu.py
# (every config the dispatcher can pick, call 1's table's among them).
mkdir -p $OUT/s52c3
timeout 580 bash scripts/h200_records.sh $OUT/s52c3 $(cat dev_s52/sha.txt) check-kernel
echo "rc $?"
cd $OUT && tar czf r.tgz s52c3 && rm -rf s52c3
