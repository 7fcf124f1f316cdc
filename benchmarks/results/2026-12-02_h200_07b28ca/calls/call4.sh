#!/bin/bash
# Session 40, call 4: the buckets 65..128 and 129..192 re-tuned narrowly on the nine sets,
# each now measured at two M (96 + 128, 160 + 192) and scored over both; the entries chosen
# among the kernels that passed the GPU tests at f028f3a (dev_s40/restrict.py); then the
# result against the table of f028f3a (A/B at M = 80..192).
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s40/sha.txt)
S=$(date +%s)
mkdir -p $OUT/r
SETS=llama2-7b,llama2-13b,llama2-70b,llama3-8b,qwen2.5-7b,phi3-mini,qwen2.5-0.5b,qwen2.5-1.5b,llama3.2-1b
# dev_s40/table_f028f3a.json: the table of f028f3a (the tested one), copied before the call
( time timeout 380 python3 -m marlin_cupy.tune --sets $SETS --merge marlin_cupy/tuned/NVIDIA_H200.json \
   --buckets 128,192 --narrow 16 --keep-within 1 --out $OUT/r/t2.json --no-progress ) > $OUT/r/tune.log 2>&1
echo "tune rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
if [ -f $OUT/r/t2.json ] && [ $(( $(date +%s) - S )) -lt 470 ]; then
  python3 dev_s40/restrict.py $OUT/r/t2.json dev_s40/table_f028f3a.json > $OUT/r/restrict.log 2>&1
  cp $OUT/r/t2.json marlin_cupy/tuned/NVIDIA_H200.json
  timeout $(( 585 - ($(date +%s) - S) )) python3 scripts/ab_probe.py $OUT/r/ab_retune3.json \
    --table-a dev_s40/table_f028f3a.json --sets $SETS --m 80,96,128,144,160,192 > $OUT/r/ab_retune3.log 2>&1
  echo "ab rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
  LEFT=$(( 585 - ($(date +%s) - S) ))
  if [ $LEFT -gt 70 ]; then   # a second A/B in the same call, time allowing
    timeout $LEFT python3 scripts/ab_probe.py $OUT/r/ab_retune4.json \
      --table-a dev_s40/table_f028f3a.json --sets $SETS --m 80,96,128,144,160,192 > $OUT/r/ab_retune4.log 2>&1
    echo "ab2 rc=$? at $(( $(date +%s) - S )) s" >> $OUT/r/times.txt
  fi
fi
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
