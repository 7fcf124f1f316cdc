#!/bin/bash
# Session 41, call 1: (1) which part of the loop draws the power at the cap (entry 92's next
# step): the SM clock and board power while ours, its measurement builds 1 (no math), 8 (no
# FP16 arithmetic in the unpacking) and 16 (no stream), and cuBLAS FP16 run back to back at
# M = 1, 16 and 64 on 70b's two layers larger than the L2; (2) the full sweep at HEAD (the
# table of 9fdaef4, restricted to kernels tested at f028f3a, had no sweep).
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s41/sha.txt)
mkdir -p $OUT/r
t0=$(date +%s)
timeout 330 python3 scripts/power_probe.py $OUT/r/power_probe.json --layers 8192x57344,28672x8192 \
  --m 1,16,64 --seconds 2 --probe 1,8,16 > $OUT/r/power_probe.log 2>&1
echo "power rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/r/times.txt
t0=$(date +%s)
timeout 240 bash scripts/h200_records.sh $OUT/r/bench $MARLIN_GIT_COMMIT bench > $OUT/r/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/r/times.txt
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
