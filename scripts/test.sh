#!/usr/bin/env bash
# The test suite in one command, set-up included: install marlin-cupy with the test extras,
# compile every kernel through NVRTC (fails on spills), then run pytest. Without a GPU the
# tests marked `gpu` are skipped with the reason. Extra arguments go to pytest.
#
#   bash scripts/test.sh [pytest args]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_setup.sh"
cd "$ROOT"

marlin_setup test "pytest,hypothesis,cupy"

echo "== compile check: every kernel, sm_80 and sm_90 (scripts/check_compile.py)"
compile_rc=0
"$PYTHON" scripts/check_compile.py --out build/compile_check || compile_rc=$?

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
