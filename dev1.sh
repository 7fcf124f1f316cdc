#!/usr/bin/env bash
# session-14 device call 1 (untracked helper)
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
W=$OUT/w; mkdir -p $W
t0=$(date +%s); ts(){ echo "[$(( $(date +%s)-t0 ))s] $*"; }
ts tests
timeout 200 python3 -m pytest -q -m gpu tests/test_kernel_gpu.py -k "Producer or _ws" -p no:cacheprovider > $W/tests_ws.log 2>&1; echo "rc $?" >> $W/tests_ws.log; tail -2 $W/tests_ws.log
ts ab
timeout 150 python3 scripts/ab_probe.py $OUT/ab_ws49_old_vs_new_sym.json --define MARLIN_WS_PRODUCER_REGS=40,MARLIN_WS_ROLE_BY_WARP=0 --m 32,64,128 > $W/ab.log 2>&1; echo "rc $?" >> $W/ab.log; tail -4 $W/ab.log
ts ncu
for spec in "64 t256_m4_n32_k8_s3_g8_fp32_sw8_wg_ws" "128 t256_m8_n16_k8_s4_g8_fp32_sw16_wg_ws" "128 t256_m8_n16_k8_s4_g8_fp32_sw16_wg"; do
  set -- $spec; tag=m$1_${2}
  timeout 90 ncu --clock-control none --set full --import-source yes --kernel-name regex:marlin -o $W/$tag python3 scripts/profile_case.py $1 $2 > $W/$tag.log 2>&1
  ncu --import $W/$tag.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $W/$tag.src.csv.gz
  ncu --import $W/$tag.ncu-rep --page details --csv > $W/$tag.details.csv 2>/dev/null
  python3 scripts/ncu_source_summary.py $W/$tag.src.csv.gz --top 30 > $W/$tag.summary.md 2>&1
  ts $tag; grep -E "Duration|Memory Throughput|DRAM Throughput" $W/$tag.details.csv | head -4
done
rm -f $W/*.ncu-rep
tar czf $OUT/dev1.tgz -C $W .
ts done
