#!/bin/bash
# Session 43, call 1 (entries 97-98): the isolated step with kinds 0, 3, 11-15 twice, then
# MARLIN_WS_FLAGS (alone and with the three-buffer ring) and MARLIN_WS_PAIRS with that ring
# in the kernel at M = 64 against the shipped build.
set -x
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s43/sha.txt)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
start=$(date +%s)
O=""
for v in n64_j2_d1_u2 n64_j2_d2_u2 n64_j4_d1_u2; do
  O="$O,dequant_rate_$v,dequant_rate_${v}_f3,dequant_rate_${v}_f11,dequant_rate_${v}_f12,dequant_rate_${v}_f13,dequant_rate_${v}_f14,dequant_rate_${v}_f15"
done
for r in 1 2; do
  timeout 150 python3 scripts/dequant_rate.py $OUT/dequant_rate_pairs$r.json --wgs 2 --iters 2000 --only ${O#,} \
      2>&1 | grep -v "^+" | tail -20 > $OUT/dequant_rate_pairs$r.log
  echo "elapsed $(( $(date +%s) - start )) s"
done
S=llama2-7b,llama2-13b,llama2-70b
for d in MARLIN_WS_FLAGS=1 MARLIN_WS_FLAGS=1,MARLIN_WG_DEPTH=2 MARLIN_WS_PAIRS=1,MARLIN_WG_DEPTH=2; do
  n=ab_${d//[=,]/_}_m64
  timeout 120 python3 scripts/ab_probe.py $OUT/$n.json --define $d --sets $S --m 64 2>&1 | tail -16 > $OUT/$n.log
  echo "elapsed $(( $(date +%s) - start )) s"
done
cat $OUT/*.log
