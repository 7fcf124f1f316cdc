#!/bin/bash
# Session 53, call 5, at the commit in dev_s53/sha.txt: the other GPU test files
# (h200_records.sh check-rest), without compute-sanitizer (SKIP_SANITIZER=1: cuda/ is as at
# 989e35c, whose sanitizer run is in 2026-12-04_h200_989e35c/call2/check_rest/).
mkdir -p $OUT/s53c5
SKIP_SANITIZER=1 timeout 580 bash scripts/h200_records.sh $OUT/s53c5 $(cat dev_s53/sha.txt) check-rest
echo "rc $?"
cd $OUT && tar czf r.tgz s53c5 && rm -rf s53c5
