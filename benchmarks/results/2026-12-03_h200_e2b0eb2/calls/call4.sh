#!/bin/bash
# Session 48, call 4, at the commit in dev_s48/sha.txt: the tutorial executed on the H200 by
# scripts/execute_notebook.py (no Jupyter there), so that its stored outputs show the GPU step.
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s48/sha.txt); mkdir -p $OUT/r
timeout 300 python3 scripts/execute_notebook.py notebooks/01_quantize_pack_matmul.ipynb --out $OUT/r/01_quantize_pack_matmul.ipynb > $OUT/r/execute_notebook.log 2>&1; echo "rc $?"; cat $OUT/r/execute_notebook.log | tail -5
cd $OUT && tar czf r.tgz r && rm -rf r
