#!/bin/bash
# Session 49, call 4, at the commit in dev_s49/sha.txt (the re-tuned table): the GPU tests of
# every 48- and 96-row config the table now dispatches, and of the dispatch at every M, then the
# harness at every M from 33 to 128 on the three llama2 sets (call 1's method).
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s49/sha.txt) PYTHONUNBUFFERED=1
mkdir -p $OUT/s49c4
start=$(date +%s)
timeout 200 python3 -m pytest -p no:cacheprovider -q -m gpu tests/test_kernel_gpu.py tests/test_config.py tests/test_tune.py \
  -k "sw6 or sw12 or default_dispatch or odd_m" > $OUT/s49c4/gpu_tests.log 2>&1
echo "gpu tests rc $? $(( $(date +%s) - start )) s"; tail -2 $OUT/s49c4/gpu_tests.log
for s in llama2-7b llama2-13b llama2-70b; do
  start=$(date +%s)
  timeout 130 python3 -m marlin_cupy.bench --sets $s --batches $(seq -s, 33 128) \
    --providers marlin,cublas-fp16,torch-fp16 --cooldown 0.05 --no-plot --no-progress \
    --out $OUT/s49c4 --name dense_after_$s > $OUT/s49c4/dense_after_$s.log 2>&1
  echo "$s rc $? $(( $(date +%s) - start )) s"
done
cd $OUT && tar czf r.tgz s49c4 && rm -rf s49c4
