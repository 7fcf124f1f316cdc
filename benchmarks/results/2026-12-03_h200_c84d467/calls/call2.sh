#!/bin/bash
# Session 44, call 2: host_probe.py with the fast path (and the checked path in the same run),
# then the GPU tests of tests/test_kernel_gpu.py (h200_records.sh check-kernel), and the fast
# path's own GPU tests.
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s44/sha.txt)
start=$(date +%s)
mkdir -p $OUT/r
timeout 150 python3 scripts/host_probe.py $OUT/r/host_probe_fast.json --profile > $OUT/r/host_probe_fast.log 2>&1
echo "probe rc $? elapsed $(( $(date +%s) - start )) s"
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_fast_path_gpu.py > $OUT/r/fast_path_gpu.log 2>&1
echo "fast-path tests rc $? elapsed $(( $(date +%s) - start )) s"; tail -3 $OUT/r/fast_path_gpu.log
timeout 380 bash scripts/h200_records.sh $OUT/r/check_kernel $MARLIN_GIT_COMMIT check-kernel > $OUT/r/check_kernel.log 2>&1
echo "check-kernel rc $? elapsed $(( $(date +%s) - start )) s"; tail -3 $OUT/r/check_kernel.log
cd $OUT && tar czf r.tgz r && head -12 r/host_probe_fast.log
