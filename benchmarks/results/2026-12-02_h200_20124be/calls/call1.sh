#!/bin/bash
# Session 42, call 1: dequant_rate.py (the wgmma step with its unpacking, alone) and
# wgmma_rate.py (the form alone) on the same machine.
set -x
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s42/sha.txt)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
start=$(date +%s)
python3 scripts/dequant_rate.py $OUT/dequant_rate.json --iters 2000 2>&1 | tee $OUT/dequant_rate.log
python3 scripts/wgmma_rate.py $OUT/wgmma_rate.json 2>&1 | tee $OUT/wgmma_rate.log
python3 scripts/dequant_rate.py $OUT/dequant_rate2.json --iters 2000 2>&1 | tee $OUT/dequant_rate2.log
echo "elapsed $(( $(date +%s) - start )) s"
