#!/bin/bash
# Session 41, call 2: call 1's power attribution again in the opposite order (cuBLAS first,
# then the measurement builds, ours last), so the warm board's place in the sequence is
# separated from the builds.
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s41/sha.txt)
mkdir -p $OUT/r
t0=$(date +%s)
timeout 330 python3 scripts/power_probe.py $OUT/r/power_probe_rev.json --layers 8192x57344,28672x8192 \
  --m 1,16,64 --seconds 2 --probe 1,8,16 --reverse > $OUT/r/power_probe_rev.log 2>&1
echo "power reverse rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/r/times.txt
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
