#!/bin/bash
# Session 45, call 4 (as run, on the machine call 3 left warm): scripts/pdl_race_probe.py over
# every config of the H200 table at fb15475.
export PYTHONPATH=. MARLIN_GIT_COMMIT=$(cat dev_s45/sha.txt); mkdir -p $OUT/r; timeout 230 python3 scripts/pdl_race_probe.py $OUT/r/pdl_race_table.json --table > $OUT/r/pdl_race_table.log 2>&1; echo "rc $?"; tail -1 $OUT/r/pdl_race_table.log; grep -c config $OUT/r/pdl_race_table.log
