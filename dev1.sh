set -u
export MARLIN_GIT_COMMIT=2f209137e465cec3cc2c701cc4267af538a2d97d PYTHONPATH=.
unset MARLIN_CUPY_DEFINES
R=/tmp/r1; mkdir -p $R
S=$(date +%s)
timeout 200 python3 -m pytest -m gpu -q tests/test_pdl_gpu.py tests/test_bench_gpu.py > $R/pytest_pdl_2f20913.log 2>&1; echo "pytest rc=$? $(( $(date +%s)-S ))s" | tee -a $R/times.txt
timeout 150 python3 scripts/pdl_probe.py $R/pdl_probe_2f20913.json --m 1,16,64 > $R/pdl_probe_2f20913.log 2>&1; echo "pdl_probe rc=$? $(( $(date +%s)-S ))s" | tee -a $R/times.txt
timeout 200 python3 scripts/ab_probe.py $R/ab_descadd2_2f20913.json --define MARLIN_DESC_ADD=2 --m 16,32,48 > $R/ab_descadd2_2f20913.log 2>&1; echo "ab rc=$? $(( $(date +%s)-S ))s" | tee -a $R/times.txt
tail -5 $R/pytest_pdl_2f20913.log; tail -14 $R/pdl_probe_2f20913.log; tail -5 $R/ab_descadd2_2f20913.log
tar czf $OUT/r1.tgz -C /tmp r1
