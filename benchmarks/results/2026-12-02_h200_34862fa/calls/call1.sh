#!/bin/bash
# Session 39, call 1: 128-wide tiles of one compute warpgroup with 32-column warps, two CTAs
# per SM (t128 n8 w32 _b2), which the tuner never measures, against the dispatch at M = 32..64.
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s39/sha.txt)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $OUT/gpu.txt
SW8=t128_m4_n8_k8_s3_g8_fp32par_sw8_wg_w32_ws_b2,t128_m4_n8_k8_s4_g8_fp32par_sw8_wg_w32_ws_b2,t128_m4_n8_k8_s4_g8_fp32_sw8_wg_w32_ws_b2,t128_m4_n8_k4_s6_g8_fp32par_sw8_wg_w32_ws_b2
SW4=t128_m2_n8_k8_s4_g8_fp32par_sw4_wg_w32_ws_b2,t128_m2_n8_k8_s6_g8_fp32par_sw4_wg_w32_ws_b2,t128_m2_n8_k4_s8_g8_fp32par_sw4_wg_w32_ws_b2
timeout 520 python3 scripts/grid_probe.py $OUT/width_probe.json --sets llama2-7b,llama2-13b,llama2-70b \
  --m 32,48,64 --configs $SW8,$SW4 --only-default --grids full 2>&1 | tee $OUT/width_probe.log
echo rc=$?
