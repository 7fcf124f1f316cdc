# The other GPU test files at c3a1e27 (cuda/ and the H200 table are 989e35c's, whose sanitizer
# runs stand: SKIP_SANITIZER=1).
S=c3a1e27; D=$OUT/c2; mkdir -p $D; SKIP_SANITIZER=1 bash scripts/h200_records.sh $D $S check-rest; tar czf $OUT/r.tgz -C $OUT c2
