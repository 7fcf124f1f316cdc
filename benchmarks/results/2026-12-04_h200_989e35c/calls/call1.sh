#!/bin/bash
# Session 52, call 1, at the commit in dev_s52/sha.txt: a narrow re-tune of the M buckets 97..112
# and 113..128 (the 31 pairs session 51 withdrew: 28 whose served config was never measured at the
# bucket's M, 3 stalled), on the llama2 sets and then the other six models' 23 layers, merged onto
# the shipped table by the fixed tuner (served configs measured, suspect pairs withdrawn); then the
# harness at every M from 97 to 128 on the three llama2 sets with the shipped table (before) and
# the new one (after); then the GPU tests and compute-sanitizer over the configs the new table
# dispatches that no earlier table did (dev_s52/fresh.py).
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s52/sha.txt) PYTHONUNBUFFERED=1
mkdir -p $OUT/s52c1
T=marlin_cupy/tuned/NVIDIA_H200.json
cp $T dev_s52/table_before.json
start=$(date +%s)
timeout 150 python3 -m marlin_cupy.tune --buckets 112,128 --merge $T \
  --narrow 3 --keep-within 1 --no-progress --out $OUT/s52c1/table_llama2.json > $OUT/s52c1/tune_llama2.log 2>&1
echo "llama2 rc $? $(( $(date +%s) - start )) s" | tee -a $OUT/s52c1/tune_llama2.log; tail -n 4 $OUT/s52c1/tune_llama2.log
start=$(date +%s)
timeout 150 python3 -m marlin_cupy.tune --buckets 112,128 --merge $OUT/s52c1/table_llama2.json \
  --sets "" --shapes "4096,6144;4096,28672;14336,4096;3584,4608;3584,3584;3584,37888;18944,3584;3072,9216;3072,3072;3072,16384;8192,3072;896,1152;896,896;896,9728;4864,896;1536,2048;1536,1536;1536,17920;8960,1536;2048,3072;2048,2048;2048,16384;8192,2048" \
  --narrow 3 --keep-within 1 --no-progress --out $OUT/s52c1/table.json > $OUT/s52c1/tune_others.log 2>&1
echo "others rc $? $(( $(date +%s) - start )) s" | tee -a $OUT/s52c1/tune_others.log; tail -n 4 $OUT/s52c1/tune_others.log
[ -s $OUT/s52c1/table.json ] || { cd $OUT && tar czf r.tgz s52c1; exit 1; }
cp $OUT/s52c1/table.json dev_s52/table_after.json
for s in llama2-7b llama2-13b llama2-70b; do
  cp dev_s52/table_before.json $T
  start=$(date +%s)
  timeout 60 python3 -m marlin_cupy.bench --sets $s --batches $(seq -s, 97 128) \
    --providers marlin --cooldown 0.05 --no-plot --no-progress \
    --out $OUT/s52c1 --name dense_before_$s > $OUT/s52c1/dense_before_$s.log 2>&1
  echo "before $s rc $? $(( $(date +%s) - start )) s"
  cp dev_s52/table_after.json $T
  start=$(date +%s)
  timeout 90 python3 -m marlin_cupy.bench --sets $s --batches $(seq -s, 97 128) \
    --providers marlin,cublas-fp16,torch-fp16 --cooldown 0.05 --no-plot --no-progress \
    --out $OUT/s52c1 --name dense_after_$s > $OUT/s52c1/dense_after_$s.log 2>&1
  echo "after $s rc $? $(( $(date +%s) - start )) s"
done
cmp $T dev_s52/table_after.json && echo "new table in place"
FRESH=$(python3 dev_s52/fresh.py dev_s52/table_before.json $T)
echo "$FRESH" > $OUT/s52c1/fresh_configs.txt; echo "fresh configs: $FRESH"
if [ -n "$FRESH" ]; then
  start=$(date +%s)
  K="default_dispatch or odd_m or $(echo $FRESH | sed 's/,/ or /g')"
  PYTEST_ARGS="tests/test_kernel_gpu.py -k '$K'" SANITIZE_ARGS="--names $FRESH" SKIP_BENCH=1 \
    timeout 240 bash scripts/device_check.sh $OUT/s52c1/check > $OUT/s52c1/check.log 2>&1
  echo "check rc $? $(( $(date +%s) - start )) s"; grep -E "pytest -m gpu|compute-sanitizer" $OUT/s52c1/check/device_check.md
fi
cd $OUT && tar czf r.tgz s52c1 && rm -rf s52c1
