#!/bin/bash
# Session 36, call 4: the GPU tests at the commit that ships the fused group scale (the
# sanitizer in the next call), then its A/B against the two-step unpacking (ab_probe
# --scale-fma) on the dispatched configs of the llama2 sets at M = 128..2048.
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s36/sha.txt)
S=$(date +%s)
C=$(cut -c1-7 dev_s36/sha.txt)
mkdir -p $OUT/r
SKIP_SANITIZER=1 DEVICE_CHECK_BUDGET=470 GPU_TESTS_TIMEOUT=460 bash scripts/h200_records.sh $OUT/r/check $(cat dev_s36/sha.txt) check > $OUT/r/check.log 2>&1
echo "check rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
timeout $(( 585 - ($(date +%s) - S) )) python3 scripts/ab_probe.py $OUT/r/ab_scale_fma_$C.json --scale-fma \
  --m 128,256,512,1024,2048 > $OUT/r/ab_scale_fma.log 2>&1
echo "ab rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
