#!/bin/bash
# Session 34, call 1: the tuner's --prior path tested, then the six other models' layers tuned.
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s34/sha.txt)
S=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $OUT/nvsmi.txt 2>&1
timeout 120 python3 -m pytest -q -m gpu tests/test_bench_gpu.py -k "tuner" > $OUT/gpu_tuner.log 2>&1
echo "pytest rc=$? at $(( $(date +%s) - S )) s" >> $OUT/times.txt
cp marlin_cupy/tuned/NVIDIA_H200.json $OUT/table_before.json
( time timeout 400 python3 -m marlin_cupy.tune --sets qwen2.5-0.5b,qwen2.5-1.5b,llama3.2-1b,phi3-mini \
   --merge marlin_cupy/tuned/NVIDIA_H200.json --prior 2 --out $OUT/t1.json --no-progress ) > $OUT/tune1.log 2>&1
echo "tune1 rc=$? at $(( $(date +%s) - S )) s" >> $OUT/times.txt
if [ -f $OUT/t1.json ]; then
( time timeout $(( 585 - ($(date +%s) - S) )) python3 -m marlin_cupy.tune --sets llama3-8b,qwen2.5-7b \
   --merge $OUT/t1.json --prior 2 --out $OUT/t2.json --no-progress ) > $OUT/tune2.log 2>&1
echo "tune2 rc=$? at $(( $(date +%s) - S )) s" >> $OUT/times.txt
fi
rm -f $OUT/table_before.json
cd $OUT && for f in t1.json t2.json; do [ -f $f ] && gzip -k $f && rm $f; done; ls -la
