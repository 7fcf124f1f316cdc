#!/usr/bin/env bash
# The test suite in one command, set-up included: install marlin-cupy with the test extras,
# compile every kernel through NVRTC (fails on spills), then run pytest. Without a GPU the
# tests marked `gpu` are skipped with the reason. Extra arguments go to pytest, and a run with
# them (a subset) skips the compile check unless MARLIN_COMPILE_CHECK=1.
#
#   bash scripts/test.sh [pytest args]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_setup.sh"
cd "$ROOT"

marlin_setup test "pytest,hypothesis,cupy"

compile_rc=0
if [ "$#" -eq 0 ] || [ "${MARLIN_COMPILE_CHECK:-0}" = 1 ]; then
    echo "== compile check: every kernel, sm_80 and sm_90 (scripts/check_compile.py)"
    "$PYTHON" scripts/check_compile.py --out build/compile_check \
        --jobs "$(nproc 2>/dev/null || echo 2)" || compile_rc=$?
else
    echo "== compile check skipped: pytest arguments were given (a subset). It runs with no"
    echo "   arguments (CI) or with MARLIN_COMPILE_CHECK=1; about 8 minutes on 2 cores the"
    echo "   first time, then from its cache in build/."
fi

echo "== pytest"
rc=0
"$PYTHON" -m pytest "$@" || rc=$?
if [ "$rc" -eq 5 ]; then
    echo "FAILED: pytest collected no tests (exit code 5)." >&2
fi
if [ "$compile_rc" -ne 0 ]; then
    echo "FAILED: the compile check failed (see above; table in build/compile_check/)." >&2
    [ "$rc" -eq 0 ] && rc=$compile_rc
fi
exit "$rc"
