#!/bin/bash
# Session 49, call 2, at the commit in dev_s49/sha.txt plus the working tree's 48- and 96-row
# wgmma tiles (swap_ab 6 and 12; not yet committed): dev_s49/tall_probe.py on the llama2 layers
# at M = 33..48 and 65..96, then the harness at every M for llama2-70b (call 1's method).
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s49/sha.txt) PYTHONUNBUFFERED=1
mkdir -p $OUT/s49c2
start=$(date +%s)
timeout 330 python3 dev_s49/tall_probe.py $OUT/s49c2/tall_probe.json > $OUT/s49c2/tall_probe.log 2>&1
echo "tall_probe rc $? $(( $(date +%s) - start )) s"; tail -3 $OUT/s49c2/tall_probe.log
start=$(date +%s)
timeout 200 python3 -m marlin_cupy.bench --sets llama2-70b --batches $(seq -s, 1 128) \
  --providers marlin,cublas-fp16,torch-fp16 --cooldown 0.05 --no-plot --no-progress \
  --out $OUT/s49c2 --name dense_llama2-70b > $OUT/s49c2/dense_llama2-70b.log 2>&1
echo "70b rc $? $(( $(date +%s) - start )) s"
cd $OUT && tar czf r.tgz s49c2 && rm -rf s49c2
