#!/bin/bash
# Session 42, call 8: the per-unit proxy fence, in the isolated step and in the kernel (with
# and without the three-buffer ring), M = 64.
set -x
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s42/sha.txt)
start=$(date +%s)
python3 scripts/dequant_rate.py $OUT/dequant_rate_fence.json --wgs 2 --iters 2000 \
    --only dequant_rate_n64_j2_d1_u2,dequant_rate_n64_j2_d2_u2,dequant_rate_n64_j4_d1_u2,dequant_rate_n64_j2_d1_u2_f,dequant_rate_n64_j2_d2_u2_f,dequant_rate_n64_j4_d1_u2_f \
    2>&1 | tail -8 > $OUT/dequant_rate_fence.log
python3 scripts/ab_probe.py $OUT/ab_nofence_m64.json --define MARLIN_NO_PROXY_FENCE=1 \
    --sets llama2-7b,llama2-13b,llama2-70b --m 64 2>&1 | tail -16 > $OUT/ab_nofence_m64.log
python3 scripts/ab_probe.py $OUT/ab_nofence_wgdepth2_m64.json \
    --define MARLIN_NO_PROXY_FENCE=1,MARLIN_WG_DEPTH=2 --base-define MARLIN_NO_PROXY_FENCE=1 \
    --sets llama2-7b,llama2-13b,llama2-70b --m 64 2>&1 | tail -16 > $OUT/ab_nofence_wgdepth2_m64.log
echo "elapsed $(( $(date +%s) - start )) s"
cat $OUT/*.log
