set -u
export PYTHONPATH=. MARLIN_GIT_COMMIT=$1
R=/tmp/r5; mkdir -p $R
python3 scripts/ab_probe.py $R/ab_tilemajor.json --define MARLIN_B_TILE_MAJOR=1 --m 1,16,64 > $R/ab_tilemajor.log 2>&1
python3 scripts/ab_sets.py $R/ab_tilemajor.json --out $R/ab_sets_tilemajor.md >> $R/ab_tilemajor.log 2>&1
cat $R/ab_sets_tilemajor.md
MARLIN_CUPY_DEFINES=MARLIN_B_TILE_MAJOR=1 timeout 90 python3 scripts/timeline_probe.py $R/tl_tilemajor.json --m 1 --sets llama2-7b --raw > $R/tl_tilemajor.log 2>&1
timeout 90 python3 scripts/timeline_probe.py $R/tl_base_raw.json --m 1 --sets llama2-7b --raw > $R/tl_base_raw.log 2>&1
cd /tmp && tar czf $OUT/r5.tgz r5
grep -h "M=1 " $R/tl_tilemajor.log $R/tl_base_raw.log | cut -c1-230
