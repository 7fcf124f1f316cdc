#!/bin/bash
# Session 39, call 3: grids capped at N = 2..8 CTAs per column (the tuner tries 1 and 2) on the
# llama2 layers at M = 32..64, for the dispatch's config and the bucket's usual tiles.
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s39/sha.txt)
SW8=t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws,t256_m4_n16_k8_s6_g8_fp32_sw8_wg_w32_ws,t256_m4_n8_k8_s6_g8_fp32par_sw8_wg_w16_ws
SW4=t256_m2_n16_k8_s6_g8_fp32par_sw4_wg_w32_ws,t256_m2_n8_k8_s8_g8_fp32par_sw4_wg_w16_ws
timeout 560 python3 scripts/grid_probe.py $OUT/cap_probe.json --sets llama2-7b,llama2-13b,llama2-70b \
  --m 32,48,64 --configs $SW8,$SW4 --only-default --grids full,c1,c2,c3,c4,c5,c6,c7,c8 2>&1 | tee $OUT/cap_probe.log
echo rc=$?
