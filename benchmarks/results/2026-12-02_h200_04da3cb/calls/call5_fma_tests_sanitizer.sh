#!/bin/bash
# Session 36, call 5: the fused-scale GPU tests again after the fix to their row counts (call 4
# ran every other GPU test), then compute-sanitizer (memcheck, racecheck) over sanitize_case.py,
# whose wgmma configs of the shipped table take the fused build on its weights.
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s36/sha.txt)
S=$(date +%s)
mkdir -p $OUT/r
timeout 120 python3 -m pytest -q -m gpu tests/test_kernel_gpu.py -k "ScaleFma" -p no:cacheprovider \
  --junitxml=$OUT/r/pytest_scale_fma.xml > $OUT/r/pytest_scale_fma.log 2>&1
echo "pytest rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
SKIP_PYTEST=1 DEVICE_CHECK_BUDGET=230 SANITIZER_TIMEOUT=200 bash scripts/h200_records.sh $OUT/r/s $(cat dev_s36/sha.txt) check > $OUT/r/sanitizer.log 2>&1
echo "sanitizer rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
