#!/bin/bash
# Session 34, call 3: the device check (GPU tests, compute-sanitizer) on the new table.
export DEVICE_CHECK_BUDGET=585 GPU_TESTS_TIMEOUT=500
bash scripts/h200_records.sh $OUT/c $(cat dev_s34/sha.txt) check
