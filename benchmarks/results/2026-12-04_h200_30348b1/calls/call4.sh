#!/bin/bash
# Session 51, call 4, at the commit in dev_s51/sha.txt: the other GPU test files and
# compute-sanitizer (memcheck, racecheck; every wgmma config of the shipped table, the 80- and
# 112-row ones among them, and the sm_90 heuristic's), then the full benchmark sweep.
mkdir -p $OUT/s51c4
start=$(date +%s)
timeout 390 bash scripts/h200_records.sh $OUT/s51c4 $(cat dev_s51/sha.txt) check-rest
echo "check-rest rc $? $(( $(date +%s) - start )) s"
start=$(date +%s)
timeout 195 bash scripts/h200_records.sh $OUT/s51c4 $(cat dev_s51/sha.txt) bench
echo "bench rc $? $(( $(date +%s) - start )) s"
cd $OUT && tar czf r.tgz s51c4 && rm -rf s51c4
