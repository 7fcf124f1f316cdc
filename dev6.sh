set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
unset MARLIN_CUPY_DEFINES
R=/tmp/r6; mkdir -p $R
T=$(date +%s)
prof() { # name shape m cfg
  SHAPE=$2 timeout 150 ncu --clock-control none --set full --import-source yes --kernel-name regex:marlin -o $R/$1 -f python3 scripts/profile_case.py $3 $4 > $R/$1.ncu.log 2>&1
  ncu --import $R/$1.ncu-rep --csv --page details > $R/$1.details.csv 2>/dev/null
  ncu --import $R/$1.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $R/$1.src.csv.gz
  python3 scripts/ncu_source_summary.py $R/$1.src.csv.gz > $R/$1.summary.md 2>&1
  rm -f $R/$1.ncu-rep
  echo "$1 done $(( $(date +%s)-T ))s"; grep -E '"(Duration|DRAM Throughput|Issue Slots Busy|Eligible Warps Per Scheduler|No Eligible)"' $R/$1.details.csv | awk -F'","' '{print $13, $15}'
}
prof ncu_m16_57344_t256_m1_n32_k8_s4_g8_fp32_sw2_wg_ws_bc5dd4f 8192,57344 16 t256_m1_n32_k8_s4_g8_fp32_sw2_wg_ws
prof ncu_m1_57344_t256_m1_n16_k8_s4_g8_fp32_sw1_b2_bc5dd4f 8192,57344 1 t256_m1_n16_k8_s4_g8_fp32_sw1_b2
prof ncu_m16_28672_t256_m1_n32_k8_s4_g8_fp32par_sw2_wg_ws_bc5dd4f 28672,8192 16 t256_m1_n32_k8_s4_g8_fp32par_sw2_wg_ws
head -30 $R/ncu_m16_57344*.summary.md
tar czf $OUT/r6.tgz -C /tmp r6
