set -x
export PYTHONPATH=. MARLIN_GIT_COMMIT=e5b5fe3782ffcad144cd32ff9403ae466eb916bd
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
python3 scripts/l2_read_probe.py $OUT/l2_bulk_e5b5fe3.json --bulk --reps 20 > $OUT/l2_bulk_e5b5fe3.log 2>&1
tail -5 $OUT/l2_bulk_e5b5fe3.log
python3 scripts/timeline_probe.py $OUT/timeline_m8_16_e5b5fe3 --sets llama2-7b,llama2-70b --m 8,16 --launches 7 > $OUT/timeline_m8_16_e5b5fe3.log 2>&1
tail -30 $OUT/timeline_m8_16_e5b5fe3.log
ls $OUT
