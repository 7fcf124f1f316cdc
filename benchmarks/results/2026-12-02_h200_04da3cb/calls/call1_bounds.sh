#!/bin/bash
# Session 36, call 1: what bounds the sw16 loop at M >= 256. The clock and the board power
# while ours, its MARLIN_PROBE 8 build and FP16 cuBLAS run back to back (power_probe.py); then
# the dequantization's FP16 arithmetic (probe 8) and the group scale's HMUL2 (probe 6)
# knocked out, A/B on the dispatched configs at M = 256..2048 (ab_probe.py).
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s36/sha.txt)
S=$(date +%s)
C=$(cut -c1-7 dev_s36/sha.txt)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit,power.max_limit --format=csv > $OUT/r/nvsmi.txt 2>&1
nvidia-smi -q -d POWER,CLOCK,PERFORMANCE >> $OUT/r/nvsmi.txt 2>&1
timeout 200 python3 scripts/power_probe.py $OUT/r/power_$C.json --layers 8192x57344,4096x22016,8192x8192 \
  --m 1024,2048 --seconds 3 --probe 8 > $OUT/r/power.log 2>&1
echo "power rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
timeout 150 python3 scripts/ab_probe.py $OUT/r/ab_probe8_$C.json --define MARLIN_PROBE=8 \
  --m 256,512,1024,2048 > $OUT/r/ab_probe8.log 2>&1
echo "probe8 rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
timeout 150 python3 scripts/ab_probe.py $OUT/r/ab_probe6_$C.json --define MARLIN_PROBE=6 \
  --m 256,512,1024,2048 > $OUT/r/ab_probe6.log 2>&1
echo "probe6 rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
