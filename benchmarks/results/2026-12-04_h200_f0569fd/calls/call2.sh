#!/bin/bash
# Session 53, call 2, at the commit in dev_s53/sha.txt: MARLIN_WG_OFFSET 3 (the constant in
# registers) against the shipped build, and MARLIN_PROBE 7 (the offsets left in, nothing taking
# them off: wrong sums, the bound of what form 3 can gain) at M = 16 and 32.
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s53/sha.txt) PYTHONUNBUFFERED=1
O=$OUT/s53c2; mkdir -p $O
run() { local name=$1 limit=$2; shift 2; local start=$(date +%s)
  timeout $limit "$@" > $O/$name.log 2>&1; echo "$name rc $? $(( $(date +%s) - start )) s" | tee -a $O/$name.log; }
run ab3 120 python3 scripts/ab_probe.py $O/ab_offset3.json --define MARLIN_WG_OFFSET=3 --rel-tol 2e-3 --m 16,32
tail -n 4 $O/ab3.log
run probe7 120 python3 scripts/ab_probe.py $O/ab_probe7.json --define MARLIN_PROBE=7 --rel-tol 2e-3 --m 16,32
tail -n 4 $O/probe7.log
cd $OUT && tar czf r.tgz s53c2 && rm -rf s53c2
