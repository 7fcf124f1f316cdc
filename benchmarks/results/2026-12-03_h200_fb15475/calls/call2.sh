#!/bin/bash
# Session 45, call 2: were entry 99's six wrong PDL sums dirty locks left by an earlier test?
# (a) b2533f4's tree (call 3's code: fast path with pdl=True), its GPU test files up to and
#     including test_pdl_gpu.py, with a plugin reporting non-zero workspace locks after each test;
# (b) the same files at HEAD with the same plugin.
export PYTHONUNBUFFERED=1
start=$(date +%s)
mkdir -p $OUT/r
FILES="tests/test_bench_gpu.py tests/test_epilogue_gpu.py tests/test_fast_path_gpu.py tests/test_gpu_smoke.py tests/test_graph_gpu.py tests/test_pdl_gpu.py"
( cd dev_s45/old && LOCKCHECK_OUT=$OUT/r/locks_old.jsonl PYTHONPATH=.:.. timeout 250 python3 -m pytest -q -m gpu -p no:cacheprovider -p lockcheck $FILES > $OUT/r/pytest_old.log 2>&1 )
echo "old rc $? elapsed $(( $(date +%s) - start )) s"; tail -12 $OUT/r/pytest_old.log
head -c 1500 $OUT/r/locks_old.jsonl 2>/dev/null; echo
LOCKCHECK_OUT=$OUT/r/locks_head.jsonl PYTHONPATH=.:dev_s45 timeout 250 python3 -m pytest -q -m gpu -p no:cacheprovider -p lockcheck $FILES > $OUT/r/pytest_head.log 2>&1
echo "head rc $? elapsed $(( $(date +%s) - start )) s"; tail -5 $OUT/r/pytest_head.log
head -c 1500 $OUT/r/locks_head.jsonl 2>/dev/null; echo
cd $OUT && tar czf r.tgz r
