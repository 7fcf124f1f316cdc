# The tutorial notebook executed on the H200 at this commit, so that its stored outputs name the
# newest sweep (call 3's) and come from one run.
S=$(cat dev_s54/sha.txt); D=$OUT/s54c4; mkdir -p $D
export MARLIN_GIT_COMMIT=$S PYTHONPATH=.
start=$(date +%s)
timeout 150 python3 scripts/execute_notebook.py notebooks/01_quantize_pack_matmul.ipynb \
  --out $D/01_quantize_pack_matmul.ipynb > $D/execute_notebook.log 2>&1
echo "notebook rc $? $(( $(date +%s) - start )) s"; tail -n 3 $D/execute_notebook.log
