#!/bin/bash
# Session 36, call 3: MARLIN_SCALE_FMA=1 against the shipped build, the dispatched configs of
# the llama2 sets at M = 128..2048 (bitwise equal expected: the harness's scales lie in
# [1e-3, 1e-2), below 2^-4), twice; then qwen2.5-7b and llama3-8b at 128, 512, 1024.
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s36/sha.txt)
S=$(date +%s)
C=$(cut -c1-7 dev_s36/sha.txt)
mkdir -p $OUT/r
timeout 200 python3 scripts/ab_probe.py $OUT/r/ab_scale_fma_$C.json --define MARLIN_SCALE_FMA=1 \
  --m 128,192,256,512,1024,2048 > $OUT/r/ab_scale_fma.log 2>&1
echo "ab1 rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
timeout 200 python3 scripts/ab_probe.py $OUT/r/ab_scale_fma_run2_$C.json --define MARLIN_SCALE_FMA=1 \
  --m 128,256,1024 > $OUT/r/ab_scale_fma_run2.log 2>&1
echo "ab2 rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
timeout 150 python3 scripts/ab_probe.py $OUT/r/ab_scale_fma_other_$C.json --define MARLIN_SCALE_FMA=1 \
  --sets qwen2.5-7b,llama3-8b --m 128,512,1024 > $OUT/r/ab_scale_fma_other.log 2>&1
echo "ab3 rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
