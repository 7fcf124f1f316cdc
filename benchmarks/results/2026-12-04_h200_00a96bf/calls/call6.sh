#!/bin/bash
# Session 50, call 6, at the commit in dev_s50/sha.txt: the tutorial notebook executed on the
# H200 (scripts/execute_notebook.py), so that its stored outputs name the newest sweep.
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s50/sha.txt) PYTHONUNBUFFERED=1
mkdir -p $OUT/s50c6
timeout 300 python3 scripts/execute_notebook.py notebooks/01_quantize_pack_matmul.ipynb --out $OUT/s50c6/01_quantize_pack_matmul.ipynb > $OUT/s50c6/execute_notebook.log 2>&1; echo "rc $?"; tail -5 $OUT/s50c6/execute_notebook.log
cd $OUT && tar czf r.tgz s50c6 && rm -rf s50c6
