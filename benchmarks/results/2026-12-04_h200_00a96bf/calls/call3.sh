#!/bin/bash
# Session 50, call 3, at the commit in dev_s50/sha.txt: the other GPU test files and
# compute-sanitizer (memcheck, racecheck; every wgmma config of the shipped table, the 48- and
# 96-row ones among them, and the sm_90 heuristic's), then the full benchmark sweep.
mkdir -p $OUT/s50c3
start=$(date +%s)
timeout 390 bash scripts/h200_records.sh $OUT/s50c3 $(cat dev_s50/sha.txt) check-rest
echo "check-rest rc $? $(( $(date +%s) - start )) s"
start=$(date +%s)
timeout 195 bash scripts/h200_records.sh $OUT/s50c3 $(cat dev_s50/sha.txt) bench
echo "bench rc $? $(( $(date +%s) - start )) s"
cd $OUT && tar czf r.tgz s50c3 && rm -rf s50c3
