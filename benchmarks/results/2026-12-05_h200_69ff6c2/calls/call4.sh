# ncu source pages kept whole (per-instruction warp-stall samples, for binning by code region
# offline) of two rows where lever D's switch has no mid-stripe bottom to act on and still
# lost (stripe_stall_both.md: no CTA with a mid-stripe split end): 13824x5120 M=32 (shared
# sum, MARLIN_COOP_EARLY, +25 %) and 5120x15360 M=64 (serial chain _c2, MARLIN_CHAIN_EARLY,
# +3.4 %); shipped and switch builds; and the instruction-fetch metrics this ncu knows.
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=69ff6c2; unset MARLIN_CUPY_DEFINES
O=$OUT/call4; mkdir -p $O
prof() { local name=$1 shape=$2 m=$3 cfg=$4 def=$5
  SHAPE=$shape MARLIN_CUPY_DEFINES=$def python3 scripts/profile_case.py $m $cfg > /dev/null 2>&1
  SHAPE=$shape MARLIN_CUPY_DEFINES=$def timeout 150 ncu --clock-control none --set full --import-source yes \
    --kernel-name regex:marlin -f -o /tmp/$name python3 scripts/profile_case.py $m $cfg > $O/$name.log 2>&1
  ncu --import /tmp/$name.ncu-rep --page source --csv --print-source sass | gzip > $O/$name.csv.gz
  python3 scripts/ncu_source_summary.py $O/$name.csv.gz --top 40 --regions > $O/$name.md 2>&1
  echo "$name done"; }
C1=t128_m2_n16_k8_s3_g8_fp32par_sw4_wg_ws_b2; C3=t256_m4_n16_k8_s6_g8_fp32_sw8_wg_w32_ws_c2
prof coop_base 13824,5120 32 $C1 ""
prof coop_early 13824,5120 32 $C1 MARLIN_COOP_EARLY=1
prof chainc2_base 5120,15360 64 $C3 ""
prof chainc2_early 5120,15360 64 $C3 MARLIN_CHAIN_EARLY=1
ncu --query-metrics 2>&1 | grep -i -E "icc|imc|instruction.?cache|no_instruction|branch_target" > $O/fetch_metrics.txt
wc -l $O/fetch_metrics.txt; head -30 $O/fetch_metrics.txt
# the instruction-fetch counters this ncu has, on the shipped and switch builds of the first row
MET=$(awk '{print $1}' $O/fetch_metrics.txt | grep -E "^(sm|smsp)__" | head -12 | paste -sd, -)
if [ -n "$MET" ]; then for d in "" MARLIN_COOP_EARLY=1; do
  SHAPE=13824,5120 MARLIN_CUPY_DEFINES=$d timeout 100 ncu --clock-control none --metrics \
    $MET,gpu__time_duration.sum,smsp__pcsamp_warps_issue_stalled_no_instructions.sum \
    --kernel-name regex:marlin python3 scripts/profile_case.py 32 $C1 >> $O/fetch_counts.log 2>&1
done; grep -v "^==" $O/fetch_counts.log | tail -40; fi
cd $OUT && tar czf r.tgz call4 && rm -rf call4
