#!/bin/bash
# Session 35, call 2: the two buckets above 192 rows re-tuned on every layer of the nine sets
# (193..512 at M = 256 + 512, the open one at 1024), candidates ranked by the shipped table's
# rows there; then the result against the table of 698d728 (A/B at M = 200..2048).
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s35/sha.txt)
S=$(date +%s)
mkdir -p $OUT/r
SETS=llama2-7b,llama2-13b,llama2-70b,llama3-8b,qwen2.5-7b,phi3-mini,qwen2.5-0.5b,qwen2.5-1.5b,llama3.2-1b
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $OUT/r/nvsmi.txt 2>&1
( time timeout 420 python3 -m marlin_cupy.tune --sets $SETS --merge marlin_cupy/tuned/NVIDIA_H200.json \
   --buckets 512,rest --narrow 16 --keep-within 1 --out $OUT/r/t3.json --no-progress ) > $OUT/r/tune.log 2>&1
echo "tune rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
if [ -f $OUT/r/t3.json ] && [ $(( $(date +%s) - S )) -lt 450 ]; then
  cp $OUT/r/t3.json marlin_cupy/tuned/NVIDIA_H200.json
  timeout $(( 585 - ($(date +%s) - S) )) python3 scripts/ab_probe.py $OUT/r/ab_split.json \
    --table-a dev_s35/table_old.json --sets $SETS --m 200,256,384,512,640,768,1024,2048 > $OUT/r/ab_split.log 2>&1
  echo "ab rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
fi
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
