#!/bin/bash
# Session 37, call 4: at the commit that ships the rule (fused build on the swap_ab = 8 WG_DEFER
# instances only): the harness's full sweep and compile times, then the A/B of the fused build
# against the two-step/fold form again on the llama2 sets at M = 48, 64, 192.
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s37/sha.txt)
S=$(date +%s)
C=$(cut -c1-7 dev_s37/sha.txt)
mkdir -p $OUT/r
timeout 150 bash scripts/h200_records.sh $OUT/r/bench $(cat dev_s37/sha.txt) bench > $OUT/r/bench.log 2>&1
echo "bench rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
timeout 90 python3 scripts/ab_probe.py $OUT/r/ab_defer_fma_run2_$C.json --scale-fma --rel-tol 2e-3 \
  --m 48,64,192 > $OUT/r/ab_defer_fma_run2.log 2>&1
echo "ab rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
