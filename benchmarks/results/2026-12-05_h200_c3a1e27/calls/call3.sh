# A full sweep at c3a1e27 and, in the same call, the plain read of every llama2 layer's weights
# with FP16 at M = 1, 16, 32, 64, 128 (scripts/read_ceiling.py), for a ceiling table of today.
S=c3a1e27; D=$OUT/c3; mkdir -p $D/sweep
export MARLIN_GIT_COMMIT=$S PYTHONPATH=.
bash scripts/h200_records.sh $D/sweep $S bench
python3 scripts/read_ceiling.py $D/read_ceiling.json --m 1,16,32,64,128 > $D/read_ceiling.log 2>&1; echo "read_ceiling rc $?"; tail -16 $D/read_ceiling.log
tar czf $OUT/r.tgz -C $OUT c3
