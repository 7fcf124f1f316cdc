#!/bin/bash
# Session 46, call 7: the full sweep at fb2ccf6 (kernels of f028f3a, the table of 9fdaef4;
# since 43b3a85's sweep only host code and measurement switches changed), on the machine
# call 6 left warm.
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s46/sha.txt)
mkdir -p $OUT/r
t0=$(date +%s)
timeout 400 bash scripts/h200_records.sh $OUT/r/bench $MARLIN_GIT_COMMIT bench > $OUT/r/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/r/bench.log
cd $OUT && tar czf r.tgz r && ls -la r/bench
