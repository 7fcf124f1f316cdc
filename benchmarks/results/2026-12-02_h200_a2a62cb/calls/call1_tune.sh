#!/bin/bash
# Session 35, call 1: the tuner's GPU tests (--prior without --merge among them), the open M
# bucket (M > 192) re-tuned on every layer of the nine sets, now scored at M = 256 + 1024,
# then the result against the table before (A/B at M = 256..1024).
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s35/sha.txt)
S=$(date +%s)
mkdir -p $OUT/r
SETS=llama2-7b,llama2-13b,llama2-70b,llama3-8b,qwen2.5-7b,phi3-mini,qwen2.5-0.5b,qwen2.5-1.5b,llama3.2-1b
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $OUT/r/nvsmi.txt 2>&1
timeout 150 python3 -m pytest -q -m gpu tests/test_bench_gpu.py -k "tuner" > $OUT/r/gpu_tuner.log 2>&1
echo "pytest rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
( time timeout $(( 560 - ($(date +%s) - S) )) python3 -m marlin_cupy.tune --sets $SETS \
   --merge dev_s35/t1.json --buckets rest --narrow 16 --keep-within 1 --out $OUT/r/t2.json --no-progress ) > $OUT/r/tune.log 2>&1
echo "tune rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
if [ -f $OUT/r/t2.json ] && [ $(( $(date +%s) - S )) -lt 470 ]; then
  cp $OUT/r/t2.json marlin_cupy/tuned/NVIDIA_H200.json
  timeout $(( 585 - ($(date +%s) - S) )) python3 scripts/ab_probe.py $OUT/r/ab_rest.json \
    --table-a dev_s35/table_old.json --sets $SETS --m 256,384,512,768,1024 > $OUT/r/ab_rest.log 2>&1
  echo "ab rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
fi
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
