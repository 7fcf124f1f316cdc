#!/bin/bash
# Session 46, call 6: tests/test_tma_gpu.py after it took the fast-path tests' helpers (fb2ccf6),
# and compute-sanitizer racecheck on MARLIN_WS_TMA_A builds (call 3 ran memcheck).
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s46/sha.txt)
start=$(date +%s)
mkdir -p $OUT/r
t() { echo "[$(( $(date +%s) - start )) s] $*"; }
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider --junitxml=$OUT/r/pytest_tma.xml \
  tests/test_tma_gpu.py > $OUT/r/pytest_tma.log 2>&1; t "pytest rc $?"; tail -2 $OUT/r/pytest_tma.log
NAMES=t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws,t256_m8_n16_k4_s6_g8_fp32_sw16_wg_ws,t128_m8_n8_k4_s4_g8_fp32par_sw16_wg_ws_b2
python3 scripts/sanitize_case.py --names $NAMES --fp16-errors $OUT/r/fp16_errors.json > $OUT/r/san_plain.log 2>&1
t "plain rc $?"
MARLIN_CUPY_DEFINES=MARLIN_WS_TMA_A=1 timeout 300 compute-sanitizer --tool racecheck \
  python3 scripts/sanitize_case.py --names $NAMES --fp16-errors $OUT/r/fp16_errors.json > $OUT/r/san_tma_racecheck.log 2>&1
t "racecheck rc $?"; tail -3 $OUT/r/san_tma_racecheck.log
