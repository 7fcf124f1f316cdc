#!/bin/bash
# Session 47, call 4: the notebooks' GPU test (tests/test_notebooks.py -m gpu) at the commit in
# dev_s47/sha.txt, and the 01 notebook executed top to bottom on the H200 (nbclient, where the
# machine has it) so that its stored outputs can show the GPU step's result.
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s47/sha.txt); mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/r/gpu.txt 2>&1
timeout 120 python3 -m pytest -m gpu -v -p no:cacheprovider tests/test_notebooks.py > $OUT/r/pytest_notebooks.log 2>&1; echo "pytest rc $?"; tail -3 $OUT/r/pytest_notebooks.log
python3 -c "import nbclient, nbformat, ipykernel; print('nbclient', nbclient.__version__, 'ipykernel', ipykernel.__version__)" > $OUT/r/nb_env.txt 2>&1; cat $OUT/r/nb_env.txt | tail -1
cd notebooks && timeout 90 python3 - > $OUT/r/nb_exec.log 2>&1 <<'PY'
import os, nbformat, nbclient
nb = nbformat.read('01_quantize_pack_matmul.ipynb', as_version=4)
nbclient.NotebookClient(nb, timeout=80, kernel_name='python3', resources={'metadata': {'path': '.'}}).execute()
nbformat.write(nb, os.path.join(os.environ['OUT'], 'r', '01_quantize_pack_matmul.ipynb'))
print('executed')
PY
echo "nb rc $?"; tail -2 $OUT/r/nb_exec.log
