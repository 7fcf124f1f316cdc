#!/bin/bash
# Session 40, call 6: the SM clock and board power while ours and cuBLAS FP16 run back to back
# at M = 1, 16 and 64 on the two llama2-70b layers larger than the L2 (entry 75 left open
# whether the timed runs see the lower clock that ncu reported for every build with math).
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s40/sha.txt)
mkdir -p $OUT/r
timeout 200 python3 scripts/power_probe.py $OUT/r/power_m1_64.json --layers 8192x57344,28672x8192 \
  --m 1,16,64 --seconds 2 --probe 0 > $OUT/r/power_m1_64.log 2>&1
echo "power rc=$?" >> $OUT/r/times.txt
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
