#!/bin/bash
# Session 35, call 4: the GPU tests on the re-bucketed table (the sanitizer in call 5).
SKIP_SANITIZER=1 DEVICE_CHECK_BUDGET=590 GPU_TESTS_TIMEOUT=580 bash scripts/h200_records.sh $OUT/c $(cat dev_s35/sha.txt) check
