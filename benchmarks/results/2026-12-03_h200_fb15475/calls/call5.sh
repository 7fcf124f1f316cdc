#!/bin/bash
# Session 45, call 5 (as run, machine still warm): compute-sanitizer memcheck and racecheck over
# scripts/sanitize_case.py's cases at fb15475 (device_check.py's sanitizer stage alone).
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s45/sha.txt); mkdir -p $OUT/r; SKIP_PYTEST=1 SANITIZER_TIMEOUT=200 DEVICE_CHECK_BUDGET=270 timeout 285 bash scripts/h200_records.sh $OUT/r/sanitizer $MARLIN_GIT_COMMIT check-rest > $OUT/r/sanitizer.log 2>&1; echo "rc $?"; tail -3 $OUT/r/sanitizer.log
