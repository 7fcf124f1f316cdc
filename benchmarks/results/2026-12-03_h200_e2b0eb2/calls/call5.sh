#!/bin/bash
# Session 48, call 5, at the commit in dev_s48/sha.txt: the pytest-benchmark suites of
# benchmarks/ (benchmarks/README.md's second way to measure; testpaths keeps them out of the
# device checks' `pytest -m gpu`), with their JSON report.
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s48/sha.txt); mkdir -p $OUT/s48c5
start=$(date +%s)
timeout 500 python3 -m pytest benchmarks/ -p no:cacheprovider -rs --benchmark-group-by=group --benchmark-columns=median,iqr,rounds --benchmark-json $OUT/s48c5/pytest_benchmarks.json > $OUT/s48c5/pytest_benchmarks.log 2>&1; echo "pytest benchmarks/ rc $? $(( $(date +%s) - start )) s"; grep -E "passed|failed|error" $OUT/s48c5/pytest_benchmarks.log | tail -3
cd $OUT && tar czf r.tgz s48c5 && rm -rf s48c5
