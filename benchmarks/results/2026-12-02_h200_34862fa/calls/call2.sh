#!/bin/bash
# Session 39, call 2: buckets 33..48, 49..64 and 129..192 (the swap_ab = 8 tiles, whose group
# scale entry 88 fused into the unpacking after the table was tuned) re-tuned narrowly on every
# layer of the nine sets, candidates ranked by the table's own (pre-entry-88) rows; then the
# result against the table before (A/B at M = 40..192).
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s39/sha.txt)
S=$(date +%s)
mkdir -p $OUT/r
SETS=llama2-7b,llama2-13b,llama2-70b,llama3-8b,qwen2.5-7b,phi3-mini,qwen2.5-0.5b,qwen2.5-1.5b,llama3.2-1b
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $OUT/r/nvsmi.txt 2>&1
( time timeout 400 python3 -m marlin_cupy.tune --sets $SETS --merge marlin_cupy/tuned/NVIDIA_H200.json \
   --buckets 48,64,192 --narrow 16 --keep-within 1 --out $OUT/r/t1.json --no-progress ) > $OUT/r/tune.log 2>&1
echo "tune rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
if [ -f $OUT/r/t1.json ] && [ $(( $(date +%s) - S )) -lt 470 ]; then
  cp $OUT/r/t1.json marlin_cupy/tuned/NVIDIA_H200.json
  timeout $(( 585 - ($(date +%s) - S) )) python3 scripts/ab_probe.py $OUT/r/ab_retune1.json \
    --table-a dev_s39/table_old.json --sets $SETS --m 40,48,56,64,160,192 > $OUT/r/ab_retune1.log 2>&1
  echo "ab rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
fi
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
