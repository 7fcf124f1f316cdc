#!/bin/bash
# Session 48, call 7, at the commit in dev_s48/sha.txt: the notebooks' GPU test after the review
# made it run the cells through scripts/execute_notebook.py (and the stored-output check beside it).
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s48/sha.txt); mkdir -p $OUT/s48c7
timeout 200 python3 -m pytest -v -p no:cacheprovider tests/test_notebooks.py tests/test_scripts.py -k "notebook" > $OUT/s48c7/pytest_notebooks.log 2>&1; echo "rc $?"; tail -4 $OUT/s48c7/pytest_notebooks.log
cd $OUT && tar czf r.tgz s48c7 && rm -rf s48c7
