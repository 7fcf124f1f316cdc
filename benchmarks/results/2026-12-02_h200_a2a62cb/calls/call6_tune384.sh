#!/bin/bash
# Session 35, call 6: the bucket of 257..512 rows re-tuned at M = 384 + 512 on every layer of the
# nine sets (candidates ranked by the shipped table's M = 512 rows), its entries chosen among the
# kernels that passed call 4's GPU tests (dev_s35/restrict.py), then against the table of 698d728.
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s35/sha.txt)
S=$(date +%s)
mkdir -p $OUT/r
SETS=llama2-7b,llama2-13b,llama2-70b,llama3-8b,qwen2.5-7b,phi3-mini,qwen2.5-0.5b,qwen2.5-1.5b,llama3.2-1b
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $OUT/r/nvsmi.txt 2>&1
( time timeout 200 python3 -m marlin_cupy.tune --sets $SETS --merge marlin_cupy/tuned/NVIDIA_H200.json \
   --buckets 512 --narrow 12 --keep-within 1 --out $OUT/r/t5.json --no-progress ) > $OUT/r/tune.log 2>&1
echo "tune rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
if [ -f $OUT/r/t5.json ]; then
  python3 dev_s35/restrict.py $OUT/r/t5.json dev_s35/tested_a5f5ba7.json > $OUT/r/restrict.log 2>&1
  cp $OUT/r/t5.json marlin_cupy/tuned/NVIDIA_H200.json
  timeout 100 python3 scripts/ab_probe.py $OUT/r/ab_384.json \
    --table-a dev_s35/table_old.json --sets $SETS --m 256,300,384,448,512 > $OUT/r/ab_384.log 2>&1
  echo "ab rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
fi
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
