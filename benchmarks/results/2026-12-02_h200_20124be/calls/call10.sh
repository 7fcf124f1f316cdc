#!/bin/bash
# Session 42, call 10: the isolated step with the loop's per-unit synchronisation by kind, twice.
set -x
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s42/sha.txt)
O=""
for v in n64_j2_d2_u2 n64_j4_d1_u2; do
  O="$O,dequant_rate_$v,dequant_rate_${v}_f2,dequant_rate_${v}_f3,dequant_rate_${v}_f4,dequant_rate_${v}_f5,dequant_rate_${v}_f6,dequant_rate_${v}_f7"
done
for r in 1 2; do
  python3 scripts/dequant_rate.py $OUT/dequant_rate_sync_b$r.json --wgs 2 --iters 2000 --only ${O#,} \
      2>&1 | grep TFLOP > $OUT/dequant_rate_sync_b$r.log
done
cat $OUT/*.log
