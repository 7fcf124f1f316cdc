#!/bin/bash
# Session 50, call 4, at the commit in dev_s50/sha.txt: the sm_90 heuristic's dispatch before and
# after its 48- and 96-row slabs, on all 36 layers of the nine sets at M = 40, 48, 72, 80, 96.
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s50/sha.txt) PYTHONUNBUFFERED=1
mkdir -p $OUT/s50c4
start=$(date +%s)
timeout 400 python3 dev_s50/heur_probe.py $OUT/s50c4/heuristic_probe.json > $OUT/s50c4/heuristic_probe.log 2>&1
echo "rc $? $(( $(date +%s) - start )) s"; tail -3 $OUT/s50c4/heuristic_probe.log
cd $OUT && tar czf r.tgz s50c4 && rm -rf s50c4
