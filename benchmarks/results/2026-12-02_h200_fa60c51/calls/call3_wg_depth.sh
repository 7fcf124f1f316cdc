#!/bin/bash
# Session 38, call 3: the three-buffer wgmma ring (MARLIN_WG_DEPTH 2: also on swap_ab = 8, whose
# fused-scale builds no longer hold WG_DEFER's second accumulator set) against the shipped
# depth 3 (the ring on swap_ab = 2 and 16 only): ab_probe at M = 48, 64, 192 on all nine sets,
# sym twice and zero-point once (same sums, so bitwise equal outputs); then the swap_ab = 8 GPU
# tests built with the switch (the dispatchable kernels warmed with it first).
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s38/sha.txt)
S=$(date +%s)
C=$(cut -c1-7 dev_s38/sha.txt)
SETS=llama2-7b,llama2-13b,llama2-70b,llama3-8b,qwen2.5-7b,phi3-mini,qwen2.5-0.5b,qwen2.5-1.5b,llama3.2-1b
mkdir -p $OUT/r
timeout 120 python3 scripts/ab_probe.py $OUT/r/ab_wgdepth2_run1_$C.json --define MARLIN_WG_DEPTH=2 \
  --sets $SETS --m 48,64,192 > $OUT/r/ab_wgdepth2_run1.log 2>&1
echo "run1 rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
timeout 100 python3 scripts/ab_probe.py $OUT/r/ab_wgdepth2_zp_$C.json --define MARLIN_WG_DEPTH=2 --zp \
  --sets $SETS --m 64 > $OUT/r/ab_wgdepth2_zp.log 2>&1
echo "zp rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
timeout 120 python3 scripts/ab_probe.py $OUT/r/ab_wgdepth2_run2_$C.json --define MARLIN_WG_DEPTH=2 \
  --sets $SETS --m 48,64,192 > $OUT/r/ab_wgdepth2_run2.log 2>&1
echo "run2 rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
LEFT=$(( 420 - ($(date +%s) - S) ))
if [ $LEFT -gt 90 ]; then
  export MARLIN_CUPY_DEFINES=MARLIN_WG_DEPTH=2
  timeout 80 python3 -c "import os; from marlin_cupy import kernels; print('warmed', kernels.warm_instantiated(os.cpu_count() or 4))" > $OUT/r/warm.log 2>&1
  LEFT=$(( 425 - ($(date +%s) - S) ))
  timeout $LEFT python3 -m pytest -q -m gpu tests/test_kernel_gpu.py -k sw8 -p no:cacheprovider \
    --junitxml=$OUT/r/pytest_sw8_wgdepth2.xml > $OUT/r/pytest_sw8_wgdepth2.log 2>&1
  echo "pytest rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
fi
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
