#!/bin/bash
# Session 40, call 5: a third A/B of the table re-tuned at 96 + 128 and 160 + 192 against
# f028f3a's, in another call than the tune.
set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s40/sha.txt)
mkdir -p $OUT/r
SETS=llama2-7b,llama2-13b,llama2-70b,llama3-8b,qwen2.5-7b,phi3-mini,qwen2.5-0.5b,qwen2.5-1.5b,llama3.2-1b
timeout 200 python3 scripts/ab_probe.py $OUT/r/ab_retune5.json \
  --table-a dev_s40/table_f028f3a.json --sets $SETS --m 80,96,128,144,160,192 > $OUT/r/ab_retune5.log 2>&1
echo "ab rc=$?" >> $OUT/r/times.txt
cd $OUT && tar czf r.tgz r && rm -rf r && ls -la
