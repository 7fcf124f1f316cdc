#!/bin/bash
# Session 44, call 3: host_probe.py again after the torch key fix, the fast path's GPU tests,
# then the other GPU test files and compute-sanitizer (h200_records.sh check-rest).
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s44/sha.txt)
start=$(date +%s)
mkdir -p $OUT/r
timeout 150 python3 scripts/host_probe.py $OUT/r/host_probe_fast2.json --profile > $OUT/r/host_probe_fast2.log 2>&1
echo "probe rc $? elapsed $(( $(date +%s) - start )) s"
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_fast_path_gpu.py > $OUT/r/fast_path_gpu2.log 2>&1
echo "fast-path tests rc $? elapsed $(( $(date +%s) - start )) s"; tail -3 $OUT/r/fast_path_gpu2.log
timeout 400 bash scripts/h200_records.sh $OUT/r/check_rest $MARLIN_GIT_COMMIT check-rest > $OUT/r/check_rest.log 2>&1
echo "check-rest rc $? elapsed $(( $(date +%s) - start )) s"; tail -4 $OUT/r/check_rest.log
rm -f $OUT/r/check_rest/logs_check-rest.tgz.unused
cd $OUT && tar czf r.tgz r && head -10 r/host_probe_fast2.log
