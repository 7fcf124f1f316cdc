# MARLIN_COOP_STAGE_SPLIT (NOTES.md entry 115) on the H200: the GPU test (same bits as shipped,
# workspace zero) after a parallel warm-up of its builds, then two A/Bs of the switch against
# the shipped builds on every layer of the three llama2 sets at M = 32, 48, 64, 96, 128, and
# one with 8 partials per batch at M = 32 and 64. Run from the tree's root with S=<commit>.
set -u
export PYTHONPATH=$PWD MARLIN_GIT_COMMIT=${S:?S=commit} PYTHONUNBUFFERED=1
unset MARLIN_CUPY_DEFINES
O=$OUT/split; mkdir -p $O
run() { local name=$1 limit=$2; shift 2; local start=$(date +%s)
  timeout $limit "$@" > $O/$name.log 2>&1; echo "$name rc $? $(( $(date +%s) - start )) s" | tee -a $O/$name.log; }
run warm 120 python3 -c "
import os, sys
sys.path.insert(0, 'tests')
from marlin_cupy import jit, kernels, ops
from test_kernel_gpu import STAGE_SPLIT_EXAMPLES
todo = []
for c in STAGE_SPLIT_EXAMPLES:
    for zp in (False, True):
        for fma in {False, ops.use_scale_fma(c, zp, True)}:
            for prefix in ('', '#define MARLIN_COOP_STAGE_SPLIT 1\n'):
                todo.append((prefix + kernels.marlin_source(c, zp, fma=fma), c.arch_suffix))
print('warmed', jit.warm_cache(todo, os.cpu_count() or 4))"
tail -n 2 $O/warm.log
run tests 200 python3 -m pytest -m gpu -q tests/test_kernel_gpu.py -k stage_split
tail -n 3 $O/tests.log
run ab_split_1 130 python3 scripts/ab_probe.py $O/ab_split_1.json --define MARLIN_COOP_STAGE_SPLIT=1 --m 32,48,64,96,128
tail -n 7 $O/ab_split_1.log
run ab_split_2 110 python3 scripts/ab_probe.py $O/ab_split_2.json --define MARLIN_COOP_STAGE_SPLIT=1 --m 32,48,64,96,128
tail -n 7 $O/ab_split_2.log
run ab_split8 90 python3 scripts/ab_probe.py $O/ab_split8.json --define MARLIN_COOP_STAGE_SPLIT=1,MARLIN_COOP_STAGE_AHEAD=8 --m 32,64
tail -n 4 $O/ab_split8.log
cd $OUT && tar czf r.tgz split && rm -rf split
