#!/bin/bash
# Lever D (NOTES.md entries 112-113), prepared on 2026-12-05 without a device: two device
# calls that measure MARLIN_COOP_EARLY and MARLIN_CHAIN_EARLY, each step under a timeout so
# that a call stays within the tool's 10 minutes (PART=1 at most 540 s, PART=2 420 s). Run
# from the tree's root as
#     S=<commit> L=<label> PART=1 bash benchmarks/results/2026-12-05_chain_early_prep/lever_d_call.sh
# and then with PART=2 (S: the commit the tree came from, for the records; L: a folder name
# under $OUT). Each call writes one $OUT/r.tgz (the device tool brings back at most 8 files).
# PART=1:
#   tests.log         the GPU tests of both switches (24 instances, same bits as shipped,
#                     workspace zero);
#   ab_both_{1,2}.*   two A/Bs with both switches against the shipped builds, every layer of
#                     the three llama2 sets at M = 32, 48, 64, 96, 128 (each layer runs one
#                     of the two reductions, so the rows tell the switches apart: fp32par
#                     configs the shared sum, fp32 ones the serial chain).
# PART=2:
#   ab_coop.*, ab_chain.*  each switch alone at M = 32 and 64 (a check on the attribution);
#   timeline_both.json.gz and stripe_stall_both.md  the raw timeline of 7b and 13b at M = 32
#                     and 64 with both switches, and stripe_stall.py on it (against
#                     2026-12-01_h200_9cc2e56/session29/timeline_raw_7b13b_m32_64_9d586ee).
set -u
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=${S:?S=commit} PYTHONUNBUFFERED=1
unset MARLIN_CUPY_DEFINES
O=$OUT/${L:?L=label}; mkdir -p $O
run() { local name=$1 limit=$2; shift 2; local start=$(date +%s)
  timeout $limit "$@" > $O/$name.log 2>&1; echo "$name rc $? $(( $(date +%s) - start )) s" | tee -a $O/$name.log; }
BOTH=MARLIN_COOP_EARLY=1,MARLIN_CHAIN_EARLY=1
case "${PART:?PART=1 or 2}" in
1)
  # the tests' builds (the switch's and the shipped twin's, sym and zero points, with and
  # without the fused scale) compiled in parallel first, as device_check.py warms the suite's
  run warm 100 python3 -c "
import os, sys
sys.path.insert(0, 'tests')
from marlin_cupy import jit, kernels, ops
from test_kernel_gpu import COOP_EARLY_EXAMPLES, CHAIN_EARLY_EXAMPLES
todo = []
for cfgs, switch in ((COOP_EARLY_EXAMPLES, 'MARLIN_COOP_EARLY'), (CHAIN_EARLY_EXAMPLES, 'MARLIN_CHAIN_EARLY')):
    for c in cfgs:
        for zp in (False, True):
            for fma in {False, ops.use_scale_fma(c, zp, True)}:
                for prefix in ('', '#define %s 1\n' % switch):
                    todo.append((prefix + kernels.marlin_source(c, zp, fma=fma), c.arch_suffix))
print('warmed', jit.warm_cache(todo, os.cpu_count() or 4))"
  tail -n 2 $O/warm.log
  run tests 200 python3 -m pytest -m gpu -q tests/test_kernel_gpu.py -k "coop_early or chain_early"
  tail -n 3 $O/tests.log
  run ab_both_1 130 python3 scripts/ab_probe.py $O/ab_both_1.json --define $BOTH --m 32,48,64,96,128
  tail -n 7 $O/ab_both_1.log
  run ab_both_2 110 python3 scripts/ab_probe.py $O/ab_both_2.json --define $BOTH --m 32,48,64,96,128
  tail -n 7 $O/ab_both_2.log ;;
2)
  run ab_coop 90 python3 scripts/ab_probe.py $O/ab_coop.json --define MARLIN_COOP_EARLY=1 --m 32,64
  run ab_chain 90 python3 scripts/ab_probe.py $O/ab_chain.json --define MARLIN_CHAIN_EARLY=1 --m 32,64
  tail -n 4 $O/ab_coop.log $O/ab_chain.log
  run timeline 240 env MARLIN_CUPY_DEFINES=$BOTH python3 scripts/timeline_probe.py \
    $O/timeline_both.json --raw --m 32,64 --sets llama2-7b,llama2-13b
  gzip -f $O/timeline_both.json
  python3 scripts/stripe_stall.py $O/timeline_both.json.gz > $O/stripe_stall_both.md 2>&1
  tail -n 30 $O/stripe_stall_both.md ;;
*) echo "PART must be 1 or 2" >&2; exit 2 ;;
esac
cd $OUT && tar czf r.tgz $L && rm -rf $L
