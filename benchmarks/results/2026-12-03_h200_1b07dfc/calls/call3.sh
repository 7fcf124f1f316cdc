#!/bin/bash
# Session 43, call 3 (entry 98): where MARLIN_WS_FLAGS 3 loses at M = 64: with the compute
# threads' poll sleeping between loads (A/B), and timelines of it and of the shipped build
# (7b, 13b) in the same call.
set -x
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s43/sha.txt)
R=$OUT/r; mkdir -p $R
start=$(date +%s)
S=llama2-7b,llama2-13b,llama2-70b
d=MARLIN_WS_FLAGS=3,MARLIN_WS_COMPUTE_SLEEP=32
timeout 100 python3 scripts/ab_probe.py $R/ab_MARLIN_WS_FLAGS_3_MARLIN_WS_COMPUTE_SLEEP_32_m64.json --define $d \
    --sets $S --m 64 2>&1 | tail -16 > $R/ab_MARLIN_WS_FLAGS_3_MARLIN_WS_COMPUTE_SLEEP_32_m64.log
echo "elapsed $(( $(date +%s) - start )) s"
timeout 100 python3 scripts/timeline_probe.py $R/timeline_m64.json --m 64 --sets llama2-7b,llama2-13b \
    2>&1 | tail -12 > $R/timeline_m64.log
echo "elapsed $(( $(date +%s) - start )) s"
MARLIN_CUPY_DEFINES=MARLIN_WS_FLAGS=3 timeout 100 python3 scripts/timeline_probe.py $R/timeline_flags3_m64.json \
    --m 64 --sets llama2-7b,llama2-13b 2>&1 | tail -12 > $R/timeline_flags3_m64.log
echo "elapsed $(( $(date +%s) - start )) s"
tar czf $OUT/r.tgz -C $OUT r
tail -n 2 $R/ab_*.log
cat $R/timeline*.log
