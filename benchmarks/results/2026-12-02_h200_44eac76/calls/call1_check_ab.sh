#!/bin/bash
# Session 37, call 1: the GPU tests at the commit that made MarlinWeight.fma_scales a computed
# field (first GPU run of it), then the fused group scale against the two-step unpacking
# (ab_probe --scale-fma) at M = 32, 48, 64 on all nine sets' dispatched configs.
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s37/sha.txt)
S=$(date +%s)
C=$(cut -c1-7 dev_s37/sha.txt)
mkdir -p $OUT/r
SKIP_SANITIZER=1 DEVICE_CHECK_BUDGET=470 GPU_TESTS_TIMEOUT=460 bash scripts/h200_records.sh $OUT/r/check $(cat dev_s37/sha.txt) check > $OUT/r/check.log 2>&1
echo "check rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
timeout $(( 585 - ($(date +%s) - S) )) python3 scripts/ab_probe.py $OUT/r/ab_scale_fma_m32_64_$C.json --scale-fma \
  --sets llama2-7b,llama2-13b,llama2-70b,llama3-8b,qwen2.5-7b,phi3-mini,qwen2.5-0.5b,qwen2.5-1.5b,llama3.2-1b \
  --m 32,48,64 > $OUT/r/ab_scale_fma_m32_64.log 2>&1
echo "ab rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
