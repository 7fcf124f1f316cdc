#!/bin/bash
# Session 36, call 2: the power probe again in the opposite order (cuBLAS first), with M = 512
# and 70b's 28672x8192 added.
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s36/sha.txt)
S=$(date +%s)
C=$(cut -c1-7 dev_s36/sha.txt)
mkdir -p $OUT/r
timeout 300 python3 scripts/power_probe.py $OUT/r/power_rev_$C.json \
  --layers 8192x57344,4096x22016,8192x8192,28672x8192 --m 512,1024,2048 --seconds 3 --probe 8 \
  --reverse > $OUT/r/power_rev.log 2>&1
echo "power_rev rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
