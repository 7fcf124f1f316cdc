#!/bin/bash
# Session 34, call 2: the tuned table (six other models' layers added) against the dispatch
# before it (A: the old table, i.e. the sm_90 heuristic on those layers), and benchmark records.
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s34/sha.txt)
S=$(date +%s)
SETS=qwen2.5-0.5b,qwen2.5-1.5b,llama3.2-1b,phi3-mini,llama3-8b,qwen2.5-7b
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $OUT/r/nvsmi.txt 2>&1
timeout 240 python3 scripts/ab_probe.py $OUT/r/ab_table_$(cut -c1-7 dev_s34/sha.txt).json \
  --table-a dev_s34/table_old.json --sets $SETS --m 1,8,16,32,48,64,128,192,256,512,1024 \
  > $OUT/r/ab_table.log 2>&1
echo "ab rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
for s in ${SETS//,/ }; do
  [ $(( $(date +%s) - S )) -gt 520 ] && { echo "skipped bench $s" >> $OUT/r/times.txt; continue; }
  timeout 120 python3 -m marlin_cupy.bench --shapes $s --no-plot --no-progress --out $OUT/r > $OUT/r/bench_$s.log 2>&1
  echo "bench $s rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
done
# The --prior method checked: a full tune (every candidate) of two of the new layers, apart.
if [ $(( $(date +%s) - S )) -lt 420 ]; then
  timeout $(( 570 - ($(date +%s) - S) )) python3 -m marlin_cupy.tune --sets "" --shapes "896,1152;3584,3584" \
    --out $OUT/r/full_tune_2layers.json --no-progress > $OUT/r/full_tune.log 2>&1
  echo "full tune rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
fi
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
