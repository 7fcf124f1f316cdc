#!/bin/bash
# Session 52, call 2, at the commit in dev_s52/sha.txt (the table re-tuned in call 1): the full
# sweep (h200_records.sh bench), then the tutorial notebook executed with that sweep placed where
# the commit will hold it (so its stored outputs name it), then h200_records.sh check-rest with
# compute-sanitizer over the 10 configs call 1's table made dispatchable (dev_s52/fresh_names.txt).
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s52/sha.txt) PYTHONUNBUFFERED=1
T0=$(date +%s)
S=$(cut -c1-7 dev_s52/sha.txt); R=benchmarks/results/2026-12-04_h200_$S
mkdir -p $OUT/s52c2
timeout 200 bash scripts/h200_records.sh $OUT/s52c2/sweep $(cat dev_s52/sha.txt) bench
echo "bench rc $? $(( $(date +%s) - T0 )) s"
mkdir -p $R/call2 && cp $OUT/s52c2/sweep/*_bench.json $R/call2/ && ls $R/call2
start=$(date +%s)
timeout 120 python3 scripts/execute_notebook.py notebooks/01_quantize_pack_matmul.ipynb \
  --out $OUT/s52c2/01_quantize_pack_matmul.ipynb > $OUT/s52c2/execute_notebook.log 2>&1
echo "notebook rc $? $(( $(date +%s) - start )) s"; tail -n 3 $OUT/s52c2/execute_notebook.log
left=$(( 575 - ($(date +%s) - T0) ))
echo "check-rest gets $left s"
start=$(date +%s)
SANITIZE_ARGS="--names $(cat dev_s52/fresh_names.txt)" timeout $left bash scripts/h200_records.sh $OUT/s52c2/check_rest $(cat dev_s52/sha.txt) check-rest
echo "check-rest rc $? $(( $(date +%s) - start )) s"
cd $OUT && tar czf r.tgz s52c2 && rm -rf s52c2
