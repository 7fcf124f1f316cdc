# NOT RUN: prepared in session 61, when the device time was spent (twelve machine starts were
# refused, the thirteenth, an H100, ran call 1); a later session runs it with S set to its own commit.
# The whole tests/test_kernel_gpu.py at 7acdc66: the launch-path changes of sessions 59-61
# (the grid cap by the context's SMs among them), the conftest's REQUIRE_GPU/teardown
# handling and the audited GPU tests, none run on a GPU yet.
S=7acdc66; D=$OUT/c2; mkdir -p $D; bash scripts/h200_records.sh $D $S check-kernel; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv; tar czf $OUT/r.tgz -C $OUT c2
