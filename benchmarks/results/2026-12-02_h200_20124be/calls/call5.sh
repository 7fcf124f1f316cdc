#!/bin/bash
# Session 42, call 5: at M = 64, the stream alone (probe 1), the math alone (probe 16) and the
# math without the activations' copies (probe 15), each against the shipped build in one run.
set -x
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s42/sha.txt)
start=$(date +%s)
for p in 1 16 15; do
  python3 scripts/ab_probe.py $OUT/ab_probe${p}_m64.json --define MARLIN_PROBE=$p \
      --sets llama2-7b,llama2-13b,llama2-70b --m 64 2>&1 | tail -16 > $OUT/ab_probe${p}_m64.log
done
echo "elapsed $(( $(date +%s) - start )) s"
cat $OUT/*.log
