set -u
export MARLIN_GIT_COMMIT=4e0dec4c21fc250d4b1f151223e2a9e511c5e96e PYTHONPATH=.
unset MARLIN_CUPY_DEFINES
R=/tmp/r2; mkdir -p $R
S=$(date +%s)
timeout 120 python3 scripts/ab_probe.py $R/ab_descadd4_m32_4e0dec4.json --define MARLIN_DESC_ADD=4 --m 32 --top 2 > $R/ab_descadd4_m32_4e0dec4.log 2>&1; echo "ab sym rc=$? $(( $(date +%s)-S ))s" | tee -a $R/times.txt
timeout 120 python3 scripts/ab_probe.py $R/ab_descadd4_m32_zp_4e0dec4.json --define MARLIN_DESC_ADD=4 --m 32 --zp > $R/ab_descadd4_m32_zp_4e0dec4.log 2>&1; echo "ab zp rc=$? $(( $(date +%s)-S ))s" | tee -a $R/times.txt
timeout 120 python3 scripts/ab_probe.py $R/ab_descadd2_m16_zp_4e0dec4.json --define MARLIN_DESC_ADD=2 --m 16 --zp > $R/ab_descadd2_m16_zp_4e0dec4.log 2>&1; echo "ab zp16 rc=$? $(( $(date +%s)-S ))s" | tee -a $R/times.txt
tail -3 $R/ab_descadd4_m32_4e0dec4.log; tail -3 $R/ab_descadd4_m32_zp_4e0dec4.log; tail -3 $R/ab_descadd2_m16_zp_4e0dec4.log
tar czf $OUT/r2.tgz -C /tmp r2
