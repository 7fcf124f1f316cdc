#!/bin/bash
# Session 35, call 5: the shipped table (a5f5ba7) against the table of 698d728 at M = 200..2048
# on the nine sets; compute-sanitizer (call 4 ran the GPU tests); then, time allowing, the
# default benchmark sweep (llama2 sets, M = 1..1024).
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s35/sha.txt)
S=$(date +%s)
mkdir -p $OUT/r
SETS=llama2-7b,llama2-13b,llama2-70b,llama3-8b,qwen2.5-7b,phi3-mini,qwen2.5-0.5b,qwen2.5-1.5b,llama3.2-1b
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $OUT/r/nvsmi.txt 2>&1
timeout 150 python3 scripts/ab_probe.py $OUT/r/ab_final_$(cut -c1-7 dev_s35/sha.txt).json \
  --table-a dev_s35/table_old.json --sets $SETS --m 200,256,384,512,640,768,1024,2048 > $OUT/r/ab_final.log 2>&1
echo "ab rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
SKIP_PYTEST=1 DEVICE_CHECK_BUDGET=230 SANITIZER_TIMEOUT=200 bash scripts/h200_records.sh $OUT/r/s $(cat dev_s35/sha.txt) check > $OUT/r/sanitizer.log 2>&1
echo "sanitizer rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
if [ $(( $(date +%s) - S )) -lt 380 ]; then
  timeout $(( 585 - ($(date +%s) - S) )) python3 -m marlin_cupy.bench --out $OUT/r/bench --no-progress --no-plot > $OUT/r/bench.log 2>&1
  echo "bench rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
fi
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
