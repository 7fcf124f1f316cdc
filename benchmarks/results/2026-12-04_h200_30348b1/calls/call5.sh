#!/bin/bash
# Session 51, call 5, at the commit in dev_s51/sha.txt: call 4's check-rest again (it ran past its
# 390 s limit there and brought nothing back): the GPU test files other than
# tests/test_kernel_gpu.py, then compute-sanitizer (memcheck, racecheck) over the 32 kernels this
# commit made dispatchable (the table's and the sm_90 heuristic's 80- and 112-row configs, every
# group size the heuristic builds; dev_s51/sanitize_names.txt), symmetric and zero points.
mkdir -p $OUT/s51c5
start=$(date +%s)
SANITIZE_ARGS="--names $(cat dev_s51/sanitize_names.txt)" timeout 420 bash scripts/h200_records.sh $OUT/s51c5 $(cat dev_s51/sha.txt) check-rest
echo "check-rest rc $? $(( $(date +%s) - start )) s"
cd $OUT && tar czf r.tgz s51c5 && rm -rf s51c5
