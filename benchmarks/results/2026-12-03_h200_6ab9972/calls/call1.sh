#!/bin/bash
# Session 49, call 1, at the commit in dev_s49/sha.txt: the harness at every M from 1 to 128
# (not only the sweep's powers of two) on llama2-7b and llama2-13b, ours against both FP16
# GEMMs, to see whether the targets' ranges and the issue's "ahead of FP16 through batch 128"
# hold between the measured points. One process per set, each with its own time limit.
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s49/sha.txt) PYTHONUNBUFFERED=1
mkdir -p $OUT/s49c1
for s in llama2-7b llama2-13b; do
  start=$(date +%s)
  timeout 285 python3 -m marlin_cupy.bench --sets $s --batches $(seq -s, 1 128) \
    --providers marlin,cublas-fp16,torch-fp16 --cooldown 0.05 --no-plot --no-progress \
    --out $OUT/s49c1 --name dense_$s > $OUT/s49c1/dense_$s.log 2>&1
  echo "$s rc $? $(( $(date +%s) - start )) s"
done
ls -la $OUT/s49c1
cd $OUT && tar czf r.tgz s49c1 && rm -rf s49c1
