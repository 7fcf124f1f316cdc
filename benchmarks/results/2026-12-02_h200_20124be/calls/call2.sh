#!/bin/bash
# Session 42, call 2: the three-buffer wgmma ring (MARLIN_WG_DEPTH 2, entry 94's step +17-19 %
# alone) in the kernel, with the stream (shipped) and without it (probe 16, math only).
set -x
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s42/sha.txt)
start=$(date +%s)
python3 scripts/ab_probe.py $OUT/ab_wgdepth2_m48_64.json --define MARLIN_WG_DEPTH=2 \
    --sets llama2-7b,llama2-13b --m 48,64 2>&1 | tail -40 > $OUT/ab_wgdepth2_m48_64.log
echo "call2 part 1 $(( $(date +%s) - start )) s"
python3 scripts/ab_probe.py $OUT/ab_wgdepth2_probe16_m48_64.json \
    --define MARLIN_PROBE=16,MARLIN_WG_DEPTH=2 --base-define MARLIN_PROBE=16 \
    --sets llama2-7b,llama2-13b --m 48,64 2>&1 | tail -40 > $OUT/ab_wgdepth2_probe16_m48_64.log
echo "call2 part 2 $(( $(date +%s) - start )) s"
cat $OUT/*.log | tail -60
