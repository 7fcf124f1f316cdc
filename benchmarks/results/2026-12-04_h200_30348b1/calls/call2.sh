#!/bin/bash
# Session 51, call 2, at the commit in dev_s51/sha.txt (the table re-tuned in call 1, the sm_90
# heuristic's 80- and 112-row lists): the harness at every M from 65 to 128 on the three llama2
# sets, with the table of aeb7d21 (the shipped one before the re-tune: 65..80 served by the
# 65..96 entry, 97..112 by the 97..128 one) and with the new one, in turn per set; then the
# heuristic's dispatch before and after on all 35 layers (dev_s51/heur_probe.py).
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s51/sha.txt) PYTHONUNBUFFERED=1
mkdir -p $OUT/s51c2
T=marlin_cupy/tuned/NVIDIA_H200.json
cp $T dev_s51/table_after.json
for s in llama2-7b llama2-13b llama2-70b; do
  cp dev_s51/table_before.json $T
  start=$(date +%s)
  timeout 100 python3 -m marlin_cupy.bench --sets $s --batches $(seq -s, 65 128) \
    --providers marlin --cooldown 0.05 --no-plot --no-progress \
    --out $OUT/s51c2 --name dense_before_$s > $OUT/s51c2/dense_before_$s.log 2>&1
  echo "before $s rc $? $(( $(date +%s) - start )) s"
  cp dev_s51/table_after.json $T
  start=$(date +%s)
  timeout 150 python3 -m marlin_cupy.bench --sets $s --batches $(seq -s, 65 128) \
    --providers marlin,cublas-fp16,torch-fp16 --cooldown 0.05 --no-plot --no-progress \
    --out $OUT/s51c2 --name dense_after_$s > $OUT/s51c2/dense_after_$s.log 2>&1
  echo "after $s rc $? $(( $(date +%s) - start )) s"
done
cmp $T dev_s51/table_after.json && echo "table restored"
start=$(date +%s)
timeout 150 python3 dev_s51/heur_probe.py $OUT/s51c2/heuristic_probe.json > $OUT/s51c2/heuristic_probe.log 2>&1
echo "heuristic probe rc $? $(( $(date +%s) - start )) s"; tail -1 $OUT/s51c2/heuristic_probe.log
cd $OUT && tar czf r.tgz s51c2 && rm -rf s51c2
