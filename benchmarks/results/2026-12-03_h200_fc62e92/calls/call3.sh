#!/bin/bash
# Session 47, call 3: compute-sanitizer alone (memcheck and racecheck over sanitize_case.py's
# cases) at the commit in dev_s47/sha.txt: call 1's racecheck ran out of its 120 s.
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s47/sha.txt); mkdir -p $OUT/r
SKIP_PYTEST=1 SANITIZER_TIMEOUT=200 DEVICE_CHECK_BUDGET=300 timeout 315 bash scripts/h200_records.sh $OUT/r/sanitizer $MARLIN_GIT_COMMIT check-rest > $OUT/r/sanitizer.log 2>&1; echo "rc $?"; tail -3 $OUT/r/sanitizer.log
cd $OUT && tar czf r.tgz r
