#!/bin/bash
# Session 52, call 4, at the commit in dev_s52/sha.txt: the tuner's GPU tests after its
# candidates are computed once per job (tests/test_bench_gpu.py -k tuner).
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s52/sha.txt) PYTHONUNBUFFERED=1
mkdir -p $OUT/s52c4
timeout 400 python3 -m pytest -m gpu tests/test_bench_gpu.py -k tuner -q -p no:cacheprovider > $OUT/s52c4/pytest_tuner.log 2>&1
echo "rc $?"; tail -n 3 $OUT/s52c4/pytest_tuner.log
