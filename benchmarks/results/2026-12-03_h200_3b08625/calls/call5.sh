#!/bin/bash
# Session 46, call 5: every copy of a fill by one lane (MARLIN_WS_TMA_A=1 with MARLIN_WS_BULK=1)
# against the shipped build directly, M = 48 and 64 (call 4 measured it only against
# MARLIN_WS_BULK=1 alone).
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s46/sha.txt)
start=$(date +%s)
mkdir -p $OUT/r
timeout 200 python3 scripts/ab_probe.py $OUT/r/ab_tma_bulk_vs_shipped_m48_64.json \
  --define MARLIN_WS_TMA_A=1,MARLIN_WS_BULK=1 --sets llama2-7b,llama2-13b,llama2-70b --m 48,64 \
  > $OUT/r/ab_tma_bulk_vs_shipped_m48_64.log 2>&1
echo "[$(( $(date +%s) - start )) s] ab rc $?"; tail -4 $OUT/r/ab_tma_bulk_vs_shipped_m48_64.log
