# ncu source pages (warp-stall sampling per SASS instruction) of the two rows lever D lost
# most on, shipped build and switch build: 13824x5120 M=32 (shared sum, MARLIN_COOP_EARLY)
# and 4096x22016 M=64 (serial chain, MARLIN_CHAIN_EARLY). One launch each (profile_case.py).
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=69ff6c2; unset MARLIN_CUPY_DEFINES
O=$OUT/call3; mkdir -p $O
prof() { local name=$1 shape=$2 m=$3 cfg=$4 def=$5
  SHAPE=$shape MARLIN_CUPY_DEFINES=$def python3 scripts/profile_case.py $m $cfg > /dev/null 2>&1  # build first
  SHAPE=$shape MARLIN_CUPY_DEFINES=$def timeout 150 ncu --clock-control none --set full --import-source yes \
    --kernel-name regex:marlin -f -o /tmp/$name python3 scripts/profile_case.py $m $cfg > $O/$name.log 2>&1
  ncu --import /tmp/$name.ncu-rep --page source --csv --print-source sass | gzip > /tmp/$name.csv.gz
  python3 scripts/ncu_source_summary.py /tmp/$name.csv.gz --top 30 > $O/$name.md 2>&1
  ncu --import /tmp/$name.ncu-rep --page details --csv > $O/${name}_details.csv 2>&1
  echo "$name done"; }
C1=t128_m2_n16_k8_s3_g8_fp32par_sw4_wg_ws_b2; C2=t256_m4_n16_k8_s6_g8_fp32_sw8_wg_w32_ws
prof coop_base 13824,5120 32 $C1 ""
prof coop_early 13824,5120 32 $C1 MARLIN_COOP_EARLY=1
prof chain_base 4096,22016 64 $C2 ""
prof chain_early 4096,22016 64 $C2 MARLIN_CHAIN_EARLY=1
for n in coop_base coop_early chain_base chain_early; do
  grep -E '"(Duration|Memory Throughput|DRAM Throughput|L2 Hit Rate|Registers Per Thread)"' $O/${n}_details.csv | awk -F'","' '{print $(NF-2), $(NF-1), $NF}' | head -6 | sed "s/^/$n: /"; done
cd $OUT && tar czf r.tgz call3 && rm -rf call3
