#!/bin/bash
# Session 34, call 4: the sanitizer alone (call 3's budget cut its racecheck).
SKIP_PYTEST=1 DEVICE_CHECK_BUDGET=230 SANITIZER_TIMEOUT=200 bash scripts/h200_records.sh $OUT/s $(cat dev_s34/sha.txt) check
