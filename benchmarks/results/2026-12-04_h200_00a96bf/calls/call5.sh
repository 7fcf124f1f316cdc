#!/bin/bash
# Session 50, call 5, at the commit in dev_s50/sha.txt: the 80- and 112-row slabs (swap_ab 10
# and 14) against the dispatched configs at M = 65..80 and 97..112 on every layer of the nine
# sets (dev_s50/slab_probe.py), then the GPU tests of the six 80/112-row examples.
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s50/sha.txt) PYTHONUNBUFFERED=1
mkdir -p $OUT/s50c5
start=$(date +%s)
timeout 300 python3 dev_s50/slab_probe.py $OUT/s50c5/slab_probe.json > $OUT/s50c5/slab_probe.log 2>&1
echo "probe rc $? $(( $(date +%s) - start )) s"; tail -2 $OUT/s50c5/slab_probe.log
start=$(date +%s)
timeout 170 python3 -m pytest -m gpu -q tests/test_kernel_gpu.py -k "sw10 or sw14" -p no:cacheprovider \
  --junitxml=$OUT/s50c5/pytest_sw10_sw14.xml > $OUT/s50c5/pytest_sw10_sw14.log 2>&1
echo "tests rc $? $(( $(date +%s) - start )) s"; tail -2 $OUT/s50c5/pytest_sw10_sw14.log
cd $OUT && tar czf r.tgz s50c5 && rm -rf s50c5
