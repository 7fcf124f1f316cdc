#!/bin/bash
# Session 44, call 4: the PDL failures of call 3 (t128 m1 n4 b2 family). Do overlapping PDL
# launches give wrong results through the checked path too (queued behind a spin)? Which
# configs of the H200 table?
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s44/sha.txt)
mkdir -p $OUT/r
timeout 120 python3 dev_s44/pdl_overlap.py > $OUT/r/pdl_overlap.log 2>&1
echo "overlap rc $?"; cat $OUT/r/pdl_overlap.log | tail -16
timeout 200 python3 dev_s44/pdl_scan.py > $OUT/r/pdl_scan.log 2>&1
echo "scan rc $?"; grep -v "wrong 0/20" $OUT/r/pdl_scan.log | tail -30
