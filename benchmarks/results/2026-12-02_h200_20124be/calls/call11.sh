#!/bin/bash
# Session 42, call 11: the isolated step (three A buffers; 64-column warps) with per-unit sync
# kinds 5 (the mbarrier wait), 8 (by lane 0), 9 (one test_wait), 10 (a named barrier), twice.
set -x
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s42/sha.txt)
O=""
for v in n64_j2_d2_u2 n64_j4_d1_u2; do
  O="$O,dequant_rate_$v,dequant_rate_${v}_f5,dequant_rate_${v}_f8,dequant_rate_${v}_f9,dequant_rate_${v}_f10"
done
for r in 1 2; do
  python3 scripts/dequant_rate.py $OUT/dequant_rate_sync_c$r.json --wgs 2 --iters 2000 --only ${O#,} \
      2>&1 | grep TFLOP > $OUT/dequant_rate_sync_c$r.log
done
cat $OUT/*.log
