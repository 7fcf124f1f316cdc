#!/bin/bash
# Session 40, call 1: buckets M <= 8, 9..16, 17..32 and 65..128 re-tuned narrowly on every
# layer of the nine sets (their llama2 entries predate entries 75-76's M <= 8 loop changes and
# entries 87-88's fused group scale), with the early-bottom and top-sum twins; then the result
# against the table before (A/B at M = 1..128).
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s40/sha.txt)
S=$(date +%s)
mkdir -p $OUT/r
SETS=llama2-7b,llama2-13b,llama2-70b,llama3-8b,qwen2.5-7b,phi3-mini,qwen2.5-0.5b,qwen2.5-1.5b,llama3.2-1b
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv > $OUT/r/nvsmi.txt 2>&1
( time timeout 430 python3 -m marlin_cupy.tune --sets $SETS --merge marlin_cupy/tuned/NVIDIA_H200.json \
   --buckets 8,16,32,128 --narrow 16 --early-bottom --top-sum --keep-within 1 --out $OUT/r/t1.json --no-progress ) > $OUT/r/tune.log 2>&1
echo "tune rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
if [ -f $OUT/r/t1.json ] && [ $(( $(date +%s) - S )) -lt 500 ]; then
  cp $OUT/r/t1.json marlin_cupy/tuned/NVIDIA_H200.json
  timeout $(( 585 - ($(date +%s) - S) )) python3 scripts/ab_probe.py $OUT/r/ab_retune1.json \
    --table-a dev_s40/table_old.json --sets $SETS --m 1,8,16,32,96,128 > $OUT/r/ab_retune1.log 2>&1
  echo "ab rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
fi
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
