#!/bin/bash
# Session 49, call 3, at the commit in dev_s49/sha.txt: a narrow re-tune of the M buckets 33..48
# and 65..96 with the 48- and 96-row wgmma twins (python -m marlin_cupy.tune --narrow), on the
# llama2 sets, then merged on the six other models of the shipped table.
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s49/sha.txt) PYTHONUNBUFFERED=1
mkdir -p $OUT/s49c3
start=$(date +%s)
timeout 330 python3 -m marlin_cupy.tune --buckets 48,96 --merge marlin_cupy/tuned/NVIDIA_H200.json \
  --narrow 3 --no-progress --out $OUT/s49c3/table_llama2.json > $OUT/s49c3/tune_llama2.log 2>&1
echo "llama2 rc $? $(( $(date +%s) - start )) s"; tail -2 $OUT/s49c3/tune_llama2.log
start=$(date +%s)
timeout 230 python3 -m marlin_cupy.tune --buckets 48,96 --merge $OUT/s49c3/table_llama2.json \
  --sets llama3-8b,qwen2.5-7b,phi3-mini,qwen2.5-0.5b,qwen2.5-1.5b,llama3.2-1b \
  --narrow 3 --no-progress --out $OUT/s49c3/table_all.json > $OUT/s49c3/tune_others.log 2>&1
echo "others rc $? $(( $(date +%s) - start )) s"; tail -2 $OUT/s49c3/tune_others.log
cd $OUT && tar czf r.tgz s49c3 && rm -rf s49c3
