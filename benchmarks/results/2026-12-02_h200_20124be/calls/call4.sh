#!/bin/bash
# Session 42, call 4: the three-buffer ring on 70b's long stripes at M = 64 (with and without
# the stream), the table's two next-fastest configs too.
set -x
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s42/sha.txt)
start=$(date +%s)
python3 scripts/ab_probe.py $OUT/ab_wgdepth2_70b_m64.json --define MARLIN_WG_DEPTH=2 \
    --sets llama2-70b --m 64 --top 2 2>&1 | tail -20 > $OUT/ab_wgdepth2_70b_m64.log
python3 scripts/ab_probe.py $OUT/ab_wgdepth2_probe16_70b_m64.json \
    --define MARLIN_PROBE=16,MARLIN_WG_DEPTH=2 --base-define MARLIN_PROBE=16 \
    --sets llama2-70b --m 64 --top 2 2>&1 | tail -20 > $OUT/ab_wgdepth2_probe16_70b_m64.log
echo "elapsed $(( $(date +%s) - start )) s"
cat $OUT/*.log
