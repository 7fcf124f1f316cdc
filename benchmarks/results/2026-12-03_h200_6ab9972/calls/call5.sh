#!/bin/bash
# Session 49, call 5, at the commit in dev_s49/sha.txt (the table reselected after the bucket
# split: three entries of 97..128 changed): the harness at M = 97..128 on llama2-7b and
# llama2-13b (call 1's method), where two of those entries are, and the dispatch tests.
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s49/sha.txt) PYTHONUNBUFFERED=1
mkdir -p $OUT/s49c5
start=$(date +%s)
timeout 150 python3 -m pytest -p no:cacheprovider -q -m gpu tests/test_kernel_gpu.py -k "default_dispatch or odd_m" > $OUT/s49c5/gpu_tests.log 2>&1
echo "gpu tests rc $? $(( $(date +%s) - start )) s"; tail -1 $OUT/s49c5/gpu_tests.log
for s in llama2-7b llama2-13b; do
  start=$(date +%s)
  timeout 120 python3 -m marlin_cupy.bench --sets $s --batches $(seq -s, 97 128) \
    --providers marlin,cublas-fp16,torch-fp16 --cooldown 0.05 --no-plot --no-progress \
    --out $OUT/s49c5 --name dense_reselected_$s > $OUT/s49c5/dense_reselected_$s.log 2>&1
  echo "$s rc $? $(( $(date +%s) - start )) s"
done
cd $OUT && tar czf r.tgz s49c5 && rm -rf s49c5
