# NOT RUN: prepared in session 61, when the device time was spent (twelve machine starts were
# refused, the thirteenth, an H100, ran call 1); a later session runs it with S set to its own commit.
# compute-sanitizer memcheck and racecheck over sanitize_case.py's default cases at 7acdc66 (the
# kernel's asm got "memory" clobbers, the launch path changed), no pytest; then the full sweep.
S=7acdc66; D=$OUT/c3; mkdir -p $D/sanitizer $D/sweep
SKIP_PYTEST=1 bash scripts/h200_records.sh $D/sanitizer $S check-rest
bash scripts/h200_records.sh $D/sweep $S bench
tar czf $OUT/r.tgz -C $OUT c3
