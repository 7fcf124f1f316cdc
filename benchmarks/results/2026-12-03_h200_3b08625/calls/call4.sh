#!/bin/bash
# Session 46, call 4: MARLIN_WS_TMA_A measured slower in call 3 (+5.0 % summed at M = 64, up to
# +9.5 % on the 256-wide 32-column-warp configs). A repeat of the M = 64 A/B; the same with the
# weights as bulk copies too (MARLIN_WS_BULK=1: every copy of a fill issued by one lane), against
# MARLIN_WS_BULK=1 alone; and ncu on 4096x22016 at M = 64 (its +9.5 % config), shipped and switched.
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s46/sha.txt)
start=$(date +%s)
mkdir -p $OUT/r
t() { echo "[$(( $(date +%s) - start )) s] $*"; }
timeout 120 python3 scripts/ab_probe.py $OUT/r/ab_tma_m64_repeat.json --define MARLIN_WS_TMA_A=1 \
  --sets llama2-7b,llama2-13b,llama2-70b --m 64 > $OUT/r/ab_tma_m64_repeat.log 2>&1
t "ab repeat rc $?"; tail -3 $OUT/r/ab_tma_m64_repeat.log
timeout 120 python3 scripts/ab_probe.py $OUT/r/ab_tma_bulk_m64.json --define MARLIN_WS_TMA_A=1,MARLIN_WS_BULK=1 \
  --base-define MARLIN_WS_BULK=1 --sets llama2-7b,llama2-13b,llama2-70b --m 64 > $OUT/r/ab_tma_bulk_m64.log 2>&1
t "ab tma+bulk vs bulk rc $?"; tail -3 $OUT/r/ab_tma_bulk_m64.log
CFG=t256_m4_n16_k8_s6_g8_fp32_sw8_wg_w32_ws
SECS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section SourceCounters"
SHAPE=4096,22016 timeout 120 ncu --clock-control none --kernel-name regex:marlin $SECS \
  python3 scripts/profile_case.py 64 $CFG > $OUT/r/ncu_shipped_m64.txt 2>&1; t "ncu shipped rc $?"
SHAPE=4096,22016 MARLIN_CUPY_DEFINES=MARLIN_WS_TMA_A=1 timeout 120 ncu --clock-control none --kernel-name regex:marlin $SECS \
  python3 scripts/profile_case.py 64 $CFG > $OUT/r/ncu_tma_m64.txt 2>&1; t "ncu tma rc $?"
t done
cd $OUT && tar czf r.tgz r
