#!/bin/bash
# Session 51, call 1, at the commit in dev_s51/sha.txt: a narrow re-tune of the M buckets 65..80,
# 81..96, 97..112 and 113..128 (tune.narrow_job_candidates: each pair's 3 best stored configs,
# the sm_90 heuristic's, and their 80- and 112-row twins) on the llama2 sets, merged onto the
# shipped table keeping incumbents within 1 %; then the same on the six other models' 23 layers
# that the llama2 sets do not hold.
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s51/sha.txt) PYTHONUNBUFFERED=1
mkdir -p $OUT/s51c1
start=$(date +%s)
timeout 300 python3 -m marlin_cupy.tune --buckets 80,96,112,128 --merge marlin_cupy/tuned/NVIDIA_H200.json \
  --narrow 3 --keep-within 1 --no-progress --out $OUT/s51c1/table_llama2.json > $OUT/s51c1/tune_llama2.log 2>&1
echo "llama2 rc $? $(( $(date +%s) - start )) s" | tee -a $OUT/s51c1/tune_llama2.log; tail -2 $OUT/s51c1/tune_llama2.log
start=$(date +%s)
timeout 280 python3 -m marlin_cupy.tune --buckets 80,96,112,128 --merge $OUT/s51c1/table_llama2.json \
  --sets "" --shapes "4096,6144;4096,28672;14336,4096;3584,4608;3584,3584;3584,37888;18944,3584;3072,9216;3072,3072;3072,16384;8192,3072;896,1152;896,896;896,9728;4864,896;1536,2048;1536,1536;1536,17920;8960,1536;2048,3072;2048,2048;2048,16384;8192,2048" \
  --narrow 3 --keep-within 1 --no-progress --out $OUT/s51c1/table.json > $OUT/s51c1/tune_others.log 2>&1
echo "others rc $? $(( $(date +%s) - start )) s" | tee -a $OUT/s51c1/tune_others.log; tail -2 $OUT/s51c1/tune_others.log
cd $OUT && tar czf r.tgz s51c1 && rm -rf s51c1
