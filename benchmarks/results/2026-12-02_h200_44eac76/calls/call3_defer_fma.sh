#!/bin/bash
# Session 37, call 3: the fused group scale on the instances whose two-step build scales FP32
# sums (WG_DEFER): A = matmul(..., scale_fma=True) (fused, weights scaled, no fold), B =
# scale_fma=False (WG_DEFER's FP32 fold for those, two-step elsewhere), the dispatched configs
# of all nine sets at M = 16..192 (--rel-tol: the fold rounds differently); then the fused-scale
# GPU tests (every dispatchable config with a fused build, bit for bit against the form that
# scales the weights in two steps), the default dispatch's random and odd-shape tests, and
# compute-sanitizer with the time left.
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s37/sha.txt)
S=$(date +%s)
C=$(cut -c1-7 dev_s37/sha.txt)
mkdir -p $OUT/r
timeout 220 python3 scripts/ab_probe.py $OUT/r/ab_defer_fma_$C.json --scale-fma --rel-tol 2e-3 \
  --sets llama2-7b,llama2-13b,llama2-70b,llama3-8b,qwen2.5-7b,phi3-mini,qwen2.5-0.5b,qwen2.5-1.5b,llama3.2-1b \
  --m 16,32,48,64,128,192 > $OUT/r/ab_defer_fma.log 2>&1
echo "ab rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
timeout 260 python3 -m pytest -q -m gpu tests/test_kernel_gpu.py -k "ScaleFma or RandomProblems or OddShapes" \
  -p no:cacheprovider --junitxml=$OUT/r/pytest_fma.xml > $OUT/r/pytest_fma.log 2>&1
echo "pytest rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
LEFT=$(( 590 - ($(date +%s) - S) ))
if [ $LEFT -gt 190 ]; then
  SKIP_PYTEST=1 DEVICE_CHECK_BUDGET=$(( LEFT - 10 )) SANITIZER_TIMEOUT=$(( LEFT - 25 )) timeout $LEFT \
    bash scripts/h200_records.sh $OUT/r/s $(cat dev_s37/sha.txt) check > $OUT/r/sanitizer.log 2>&1
  echo "sanitizer rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
fi
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
