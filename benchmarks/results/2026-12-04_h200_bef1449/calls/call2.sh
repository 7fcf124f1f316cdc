# check-rest at the session's code, then the provider-order check: four reduced sweeps,
# ours first / last alternately (scripts/order_check.py reads them).
S=$(cat dev_s54/sha.txt); D=$OUT/s54c2; mkdir -p $D/check_rest
SKIP_SANITIZER=1 bash scripts/h200_records.sh $D/check_rest $S check-rest
export MARLIN_GIT_COMMIT=$S PYTHONPATH=.
B="--sets llama2-7b,llama2-13b,llama2-70b --batches 1,8,16,32,64,128 --no-plot --no-progress"
for i in 1 2; do
  python3 -m marlin_cupy.bench $B --providers marlin,cublas-fp16,torch-fp16 --out $D/order --name first$i > $D/first$i.log 2>&1
  python3 -m marlin_cupy.bench $B --providers cublas-fp16,torch-fp16,marlin --out $D/order --name last$i > $D/last$i.log 2>&1
done
python3 scripts/order_check.py $D/order/first1_bench.json $D/order/last1_bench.json $D/order/first2_bench.json $D/order/last2_bench.json --out $D/order_check.md
ls $D/order; tar czf $OUT/r.tgz -C $OUT s54c2
