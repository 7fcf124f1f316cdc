#!/bin/bash
# Session 46, call 2: call 1 (the whole GPU suite at 3b08625) failed one test,
# test_fast_path_gpu.py::test_a_swapped_kernel_or_cleared_plans_apply_at_once, on an attribute
# that 3b08625's review renamed (_Launch.function is now _Launch.launch.function). The fixed test
# and the GPU test files that exercise the fast path, PDL and graphs, at the fixed tree.
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s46/sha.txt)
mkdir -p $OUT/r
python3 -m pytest -m gpu -q -p no:cacheprovider --junitxml=$OUT/r/pytest_fix.xml \
  tests/test_fast_path_gpu.py tests/test_pdl_gpu.py tests/test_graph_gpu.py > $OUT/r/pytest_fix.log 2>&1
echo "pytest rc $?"; tail -3 $OUT/r/pytest_fix.log
