#!/bin/bash
# Session 46, call 3: MARLIN_WS_TMA_A (NOTES.md entry 101, lever A). Its GPU tests, the A/B
# against the shipped build on the dispatched configs of the three llama2 sets at M = 48, 64
# (the M = 33..64 bucket) and 32, 128, and compute-sanitizer memcheck on the switch's builds.
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s46/sha.txt)
start=$(date +%s)
mkdir -p $OUT/r
t() { echo "[$(( $(date +%s) - start )) s] $*"; }
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider --junitxml=$OUT/r/pytest_tma.xml \
  tests/test_tma_gpu.py > $OUT/r/pytest_tma.log 2>&1; t "pytest rc $?"; tail -2 $OUT/r/pytest_tma.log
timeout 200 python3 scripts/ab_probe.py $OUT/r/ab_tma_m48_64.json --define MARLIN_WS_TMA_A=1 \
  --sets llama2-7b,llama2-13b,llama2-70b --m 48,64 > $OUT/r/ab_tma_m48_64.log 2>&1
t "ab 48,64 rc $?"; tail -4 $OUT/r/ab_tma_m48_64.log
timeout 170 python3 scripts/ab_probe.py $OUT/r/ab_tma_m32_128.json --define MARLIN_WS_TMA_A=1 \
  --sets llama2-7b,llama2-13b,llama2-70b --m 32,128 > $OUT/r/ab_tma_m32_128.log 2>&1
t "ab 32,128 rc $?"; tail -4 $OUT/r/ab_tma_m32_128.log
NAMES=t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws,t256_m8_n16_k4_s6_g8_fp32_sw16_wg_ws,t128_m8_n8_k4_s4_g8_fp32par_sw16_wg_ws_b2
left=$(( 560 - ($(date +%s) - start) ))
if [ $left -gt 60 ]; then
  python3 scripts/sanitize_case.py --names $NAMES --fp16-errors $OUT/r/fp16_errors.json > $OUT/r/san_plain.log 2>&1
  MARLIN_CUPY_DEFINES=MARLIN_WS_TMA_A=1 timeout $(( left - 20 )) compute-sanitizer --tool memcheck \
    python3 scripts/sanitize_case.py --names $NAMES --fp16-errors $OUT/r/fp16_errors.json > $OUT/r/san_tma_memcheck.log 2>&1
  t "memcheck rc $?"; tail -3 $OUT/r/san_tma_memcheck.log
fi
t done
cd $OUT && tar czf r.tgz r
