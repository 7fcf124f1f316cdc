# The whole tests/test_kernel_gpu.py at c3a1e27 (the code session 57 left, not yet run whole).
S=c3a1e27; D=$OUT/c1; mkdir -p $D; bash scripts/h200_records.sh $D $S check-kernel; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv; tar czf $OUT/r.tgz -C $OUT c1
