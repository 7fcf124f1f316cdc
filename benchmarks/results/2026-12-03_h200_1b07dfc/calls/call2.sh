#!/bin/bash
# Session 43, call 2 (entry 98): the isolated step with the early load/test kinds 16-19 (and
# 0, 3, 11 again), twice; in the kernel at M = 64 against the shipped build: MARLIN_WS_FLAGS 3
# (early count load, a publisher with no copies; also with the producer's poll sleeping 64 ns,
# and with the three-buffer ring), 2, the publisher without its fence (PUB_RELAXED, a
# measurement), the mbarrier hand-off with an early test_wait (EARLY_TEST, also with the
# three-buffer ring); two of them at M = 32 and 128 too.
set -x
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s43/sha.txt)
R=$OUT/r; mkdir -p $R
start=$(date +%s)
O=""
for v in n64_j2_d1_u2 n64_j2_d2_u2 n64_j4_d1_u2; do
  for k in "" _f3 _f11 _f16 _f17 _f18 _f19; do O="$O,dequant_rate_$v$k"; done
done
for r in 1 2; do
  timeout 150 python3 scripts/dequant_rate.py $R/dequant_rate_early$r.json --wgs 2 --iters 2000 --only ${O#,} \
      2>&1 | grep -v "^+" | tail -24 > $R/dequant_rate_early$r.log
  echo "elapsed $(( $(date +%s) - start )) s"
done
S=llama2-7b,llama2-13b,llama2-70b
for d in MARLIN_WS_FLAGS=3 MARLIN_WS_FLAGS=3,MARLIN_WS_POLL_SLEEP=64 MARLIN_WS_FLAGS=3,MARLIN_WS_POLL_SLEEP=64,MARLIN_WG_DEPTH=2 \
         MARLIN_WS_FLAGS=3,MARLIN_WG_DEPTH=2 MARLIN_WS_FLAGS=2 MARLIN_WS_FLAGS=1,MARLIN_WS_PUB_RELAXED=1 \
         MARLIN_WS_FLAGS=2,MARLIN_WS_PUB_RELAXED=1 MARLIN_WS_EARLY_TEST=1 MARLIN_WS_EARLY_TEST=1,MARLIN_WG_DEPTH=2; do
  n=ab_${d//[=,]/_}_m64
  timeout 120 python3 scripts/ab_probe.py $R/$n.json --define $d --sets $S --m 64 2>&1 | tail -16 > $R/$n.log
  echo "elapsed $(( $(date +%s) - start )) s"
done
for d in MARLIN_WS_FLAGS=3,MARLIN_WS_POLL_SLEEP=64 MARLIN_WS_EARLY_TEST=1; do
  n=ab_${d//[=,]/_}_m32_128
  timeout 150 python3 scripts/ab_probe.py $R/$n.json --define $d --sets $S --m 32,128 2>&1 | tail -30 > $R/$n.log
  echo "elapsed $(( $(date +%s) - start )) s"
done
tar czf $OUT/r.tgz -C $OUT r
tail -n 3 $R/ab_*.log
cat $R/dequant_rate_early*.log
