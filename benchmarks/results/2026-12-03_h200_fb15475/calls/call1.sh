#!/bin/bash
# Session 45, call 1: scripts/pdl_race_probe.py on its default configs (the left-out family and
# two controls), then the GPU tests of tests/test_kernel_gpu.py (h200_records.sh check-kernel).
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s45/sha.txt)
start=$(date +%s)
mkdir -p $OUT/r
timeout 170 python3 scripts/pdl_race_probe.py $OUT/r/pdl_race.json > $OUT/r/pdl_race.log 2>&1
echo "probe rc $? elapsed $(( $(date +%s) - start )) s"; tail -2 $OUT/r/pdl_race.log
timeout 390 bash scripts/h200_records.sh $OUT/r/check_kernel $MARLIN_GIT_COMMIT check-kernel > $OUT/r/check_kernel.log 2>&1
echo "check-kernel rc $? elapsed $(( $(date +%s) - start )) s"; tail -3 $OUT/r/check_kernel.log
cd $OUT && tar czf r.tgz r && cat r/pdl_race.md 2>/dev/null | head -20
