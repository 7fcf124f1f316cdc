#!/bin/bash
# Session 50, call 1, at the commit in dev_s50/sha.txt: a narrow re-tune of the M buckets 33..48
# and 65..96 on the llama2 sets that also measures the sm_90 heuristic's tall twins on every
# layer (tune.narrow_job_candidates), merged onto the shipped table keeping incumbents within 1 %.
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s50/sha.txt) PYTHONUNBUFFERED=1
mkdir -p $OUT/s50c1
start=$(date +%s)
timeout 480 python3 -m marlin_cupy.tune --buckets 48,96 --merge marlin_cupy/tuned/NVIDIA_H200.json \
  --narrow 3 --keep-within 1 --no-progress --out $OUT/s50c1/table.json > $OUT/s50c1/tune_llama2.log 2>&1
echo "llama2 rc $? $(( $(date +%s) - start )) s" | tee -a $OUT/s50c1/tune_llama2.log; tail -2 $OUT/s50c1/tune_llama2.log
cd $OUT && tar czf r.tgz s50c1 && rm -rf s50c1
