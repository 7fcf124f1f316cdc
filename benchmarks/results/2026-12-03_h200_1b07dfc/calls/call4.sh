#!/bin/bash
# Session 43, call 4 (entry 98): MARLIN_WS_FLAGS 4 (the publisher a whole warp: no lane spins
# in a warp whose other lanes copy) against the shipped build at M = 64, alone and with the
# three-buffer ring, and its timeline beside the shipped build's (7b, 13b).
set -x
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s43/sha.txt)
R=$OUT/r; mkdir -p $R
start=$(date +%s)
S=llama2-7b,llama2-13b,llama2-70b
for d in MARLIN_WS_FLAGS=4 MARLIN_WS_FLAGS=4,MARLIN_WG_DEPTH=2; do
  n=ab_${d//[=,]/_}_m64
  timeout 100 python3 scripts/ab_probe.py $R/$n.json --define $d --sets $S --m 64 2>&1 | tail -16 > $R/$n.log
  echo "elapsed $(( $(date +%s) - start )) s"
done
MARLIN_CUPY_DEFINES=MARLIN_WS_FLAGS=4 timeout 100 python3 scripts/timeline_probe.py $R/timeline_flags4_m64.json \
    --m 64 --sets llama2-7b,llama2-13b 2>&1 | tail -12 > $R/timeline_flags4_m64.log
echo "elapsed $(( $(date +%s) - start )) s"
timeout 100 python3 scripts/timeline_probe.py $R/timeline_m64.json --m 64 --sets llama2-7b,llama2-13b \
    2>&1 | tail -12 > $R/timeline_m64.log
echo "elapsed $(( $(date +%s) - start )) s"
tar czf $OUT/r.tgz -C $OUT r
tail -n 2 $R/ab_*.log
