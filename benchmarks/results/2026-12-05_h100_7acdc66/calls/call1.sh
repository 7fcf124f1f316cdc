# Device time was short (twelve starts refused first; this one got an H100): the launch path
# first. The GPU test files other than tests/test_kernel_gpu.py at 7acdc66 (the fast path,
# graphs, PDL, the README's usage, the demo on a checkpoint, GPTQ through the kernel, ...), the
# sanitizer left for a later call; then, on the kernel cache that warmed, the kernel file's
# launch-path classes (TestInterop, TestBadInputs, TestContextSms, TestDeterminismAndWorkspace);
# then the tutorial notebook re-executed.
S=7acdc66; D=$OUT/c1; mkdir -p $D/check_rest $D/kernel_launch
SKIP_SANITIZER=1 bash scripts/h200_records.sh $D/check_rest $S check-rest
export MARLIN_GIT_COMMIT=$S PYTHONPATH=. MARLIN_CUPY_REQUIRE_GPU=1; start=$(date +%s)
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider --junitxml=$D/kernel_launch/pytest.xml tests/test_kernel_gpu.py -k "TestInterop or TestBadInputs or TestContextSms or TestDeterminismAndWorkspace" > $D/kernel_launch/pytest.log 2>&1
echo "kernel launch pytest rc $? $(( $(date +%s) - start )) s"; tail -n 2 $D/kernel_launch/pytest.log
start=$(date +%s)
timeout 120 python3 scripts/execute_notebook.py notebooks/01_quantize_pack_matmul.ipynb --out $D/01_quantize_pack_matmul.ipynb > $D/execute_notebook.log 2>&1
echo "notebook rc $? $(( $(date +%s) - start )) s"; tail -n 3 $D/execute_notebook.log
tar czf $OUT/r.tgz -C $OUT c1
