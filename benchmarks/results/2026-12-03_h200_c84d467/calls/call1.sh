#!/bin/bash
# Session 44, call 1: the host cost per call and eager blocks at f4b20a8 (host_probe.py, new),
# with cProfile of matmul's calls.
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s44/sha.txt)
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv
lscpu | grep -i "model name\|^CPU(s)\|MHz" | head -5
python3 -c "import cupy, torch, sys; print(sys.version, cupy.__version__, torch.__version__)"
start=$(date +%s)
mkdir -p $OUT/r
timeout 400 python3 scripts/host_probe.py $OUT/r/host_probe_base.json --profile > $OUT/r/host_probe_base.log 2>&1
echo "rc $? elapsed $(( $(date +%s) - start )) s"
cd $OUT && tar czf r.tgz r && cat r/host_probe_base.log | head -80
