#!/bin/bash
# Session 42, call 6: timelines at M = 64 of today's table (7b, 13b, 70b): the first wait,
# the loop and the end of each launch, for entry 94's decomposition.
set -x
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s42/sha.txt)
start=$(date +%s)
python3 scripts/timeline_probe.py $OUT/timeline_m64.json --m 64 \
    --sets llama2-7b,llama2-13b,llama2-70b 2>&1 | tail -60 > $OUT/timeline_m64.log
echo "elapsed $(( $(date +%s) - start )) s"
cat $OUT/timeline_m64.log
