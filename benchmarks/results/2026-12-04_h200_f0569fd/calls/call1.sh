#!/bin/bash
# Session 53, call 1, at the commit in dev_s53/sha.txt: MARLIN_WG_OFFSET (NOTES.md entry 109).
# Precision against float64 on the llama2 layers (forms 2 and 1), the A/B at M = 16 and 32 of
# forms 2, 1 and 3 against the shipped build, and the GPU tests of the sw2/sw4 wgmma configs
# built with form 2.
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=$(cat dev_s53/sha.txt) PYTHONUNBUFFERED=1
O=$OUT/s53c1; mkdir -p $O
run() { local name=$1 limit=$2; shift 2; local start=$(date +%s)
  timeout $limit "$@" > $O/$name.log 2>&1; echo "$name rc $? $(( $(date +%s) - start )) s" | tee -a $O/$name.log; }
run prec2 150 python3 scripts/offset_precision.py $O/offset_precision_f2.json --define MARLIN_WG_OFFSET=2
tail -n 3 $O/prec2.log
run ab2 170 python3 scripts/ab_probe.py $O/ab_offset2.json --define MARLIN_WG_OFFSET=2 --rel-tol 2e-3 --m 16,32
tail -n 12 $O/ab2.log
run tests2 150 env MARLIN_CUPY_DEFINES=MARLIN_WG_OFFSET=2 python3 -m pytest -m gpu -q -x tests/test_kernel_gpu.py -k "sw2_wg or sw4_wg"
tail -n 4 $O/tests2.log
run ab1 120 python3 scripts/ab_probe.py $O/ab_offset1.json --define MARLIN_WG_OFFSET=1 --rel-tol 2e-3 --m 16,32
tail -n 12 $O/ab1.log
cd $OUT && tar czf r.tgz s53c1 && rm -rf s53c1
