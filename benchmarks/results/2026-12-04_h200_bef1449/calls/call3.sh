# Is cuBLAS's 207-vs-230 us on 8192x57344 at M = 1 (call 2) the weights' allocation?
# scripts/alloc_probe.py on four layer/M points, then the full sweep at this commit.
S=$(cat dev_s54/sha.txt); D=$OUT/s54c3; mkdir -p $D/alloc $D/sweep
export MARLIN_GIT_COMMIT=$S PYTHONPATH=.
for c in "8192,57344 1" "8192,57344 16" "28672,8192 1" "8192,10240 1"; do
  set -- $c; n=$(echo $1 | tr , x)_m$2
  python3 scripts/alloc_probe.py --shape $1 --m $2 --allocs 8 --rounds 3 --out $D/alloc/$n.json > $D/alloc/$n.log 2>&1
  tail -14 $D/alloc/$n.log
done
bash scripts/h200_records.sh $D/sweep $S bench
tar czf $OUT/r.tgz -C $OUT s54c3
