#!/bin/bash
# Session 48, call 3, at the commit in dev_s48/sha.txt: after call 2's launch floor (132 CTAs:
# 3.5 us, 2112 CTAs: 4.7 us), do persistent-grid rings read llama2-7b's layer sizes faster than
# the many-CTA plain read that entry 78's ceiling rests on? path_probe.py's plain grid reads
# (ldg_grid) against its rings of our units (cpa_units), at about 7b's four layers' bytes.
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s48/sha.txt); mkdir -p $OUT/r
start=$(date +%s)
timeout 400 python3 scripts/path_probe.py $OUT/r/path_probe_7b.json --mib 8,22,25,44 --n 4096 --only ldg_grid,cpa_units > $OUT/r/path_probe_7b.log 2>&1; echo "path_probe rc $? $(( $(date +%s) - start )) s"
grep best $OUT/r/path_probe_7b.log
cd $OUT && tar czf r.tgz r && rm -rf r
