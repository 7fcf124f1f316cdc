#!/bin/bash
# Session 42, call 3: ncu (--set full, source counters) on the M = 64 loop in situ (shipped and
# probe 16, 4096x22016) and on the isolated step (dequant_rate, two and three A buffers).
set -x
export PYTHONPATH=.
export MARLIN_GIT_COMMIT=$(cat dev_s42/sha.txt)
start=$(date +%s)
CFG=t256_m4_n16_k8_s6_g8_fp32_sw8_wg_w32_ws
W=$OUT/w; mkdir -p $W
prof() {  # name, kernel regex, skip, command...
  local name=$1 re=$2 skip=$3; shift 3
  ncu --clock-control none --set full --import-source yes --kernel-name regex:$re \
      --launch-skip $skip --launch-count 1 -f -o $W/$name "$@" > $W/$name.ncu.log 2>&1
  ncu --import $W/$name.ncu-rep --page details --csv > $W/${name}_details.csv 2>/dev/null
  ncu --import $W/$name.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $W/${name}_src.csv.gz
  python3 scripts/ncu_source_summary.py $W/${name}_src.csv.gz > $W/${name}_summary.md 2>&1
  rm -f $W/$name.ncu-rep
  echo "$name done $(( $(date +%s) - start )) s"
}
SHAPE=4096,22016 prof insitu_shipped marlin 0 python3 scripts/profile_case.py 64 $CFG
SHAPE=4096,22016 MARLIN_CUPY_DEFINES=MARLIN_PROBE=16 prof insitu_probe16 marlin 0 python3 scripts/profile_case.py 64 $CFG
prof step_d1 dequant_rate 1 python3 scripts/dequant_rate.py $W/step_d1.json --only dequant_rate_n64_j2_d1_u2 --wgs 2 --iters 300
prof step_d2 dequant_rate 1 python3 scripts/dequant_rate.py $W/step_d2.json --only dequant_rate_n64_j2_d2_u2 --wgs 2 --iters 300
ls -la $W
tar czf $OUT/r.tgz -C $OUT w
rm -rf $W
echo "elapsed $(( $(date +%s) - start )) s"
