# NOT RUN: prepared in session 61, when the device time was spent (twelve machine starts were
# refused, the thirteenth, an H100, ran call 1); a later session runs it with S set to its own commit.
# The one failure of call 1 (tests/test_readme_usage.py: from_linear on a CUDA parameter that
# requires grad), fixed at fd2b5e5, run again on the same warm H100 with the layer tests.
S=fd2b5e5; D=$OUT/c2; mkdir -p $D; export MARLIN_GIT_COMMIT=$S PYTHONPATH=. MARLIN_CUPY_REQUIRE_GPU=1
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider --junitxml=$D/pytest.xml tests/test_readme_usage.py tests/test_gptq.py tests/test_demo.py > $D/pytest.log 2>&1; echo "pytest rc $?"; tail -n 3 $D/pytest.log
