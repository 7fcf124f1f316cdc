# Sourced by scripts/test.sh and scripts/demo.sh: install marlin-cupy (editable) with the extras
# they need into the current Python environment, once.
#
# Which CuPy: if a CuPy build is already installed (cupy-cuda12x or cupy-cuda13x), it is kept,
# since two CuPy builds side by side break each other. Otherwise the `cuda12` extra installs
# cupy-cuda12x[ctk] (NVRTC and CUDA headers included, about 3 GB). Override with
# MARLIN_CUDA=cuda12|cuda13|none. Use another interpreter with PYTHON=/path/to/python.
#
# A stamp under build/ records what was installed (a hash of pyproject.toml, the interpreter,
# the extras and MARLIN_CUDA as given), so a second run skips pip entirely when nothing changed. On a machine without
# network access (a GPU box) where pip cannot run but every needed module is already importable,
# the scripts run from the source tree instead (PYTHONPATH).

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

marlin_setup() {   # $1: extras besides the CUDA one ("test" or ""), $2: modules the caller needs
    local cuda="${MARLIN_CUDA:-auto}" extras modules="numpy,safetensors,tqdm${2:+,$2}"
    if [ "$cuda" = auto ]; then
        if "$PYTHON" - <<'PY'
import sys
from importlib import metadata
names = {(d.metadata["Name"] or "").lower() for d in metadata.distributions()}
sys.exit(0 if any(n.startswith("cupy") for n in names) else 1)
PY
        then cuda=none; else cuda=cuda12; fi
    fi
    extras="$1"
    [ "$cuda" != none ] && extras="${cuda}${extras:+,$extras}"

    case "$cuda" in
        cuda12|cuda13|none) ;;
        *) echo "setup: MARLIN_CUDA=$cuda is not one of cuda12, cuda13, none." >&2; return 1 ;;
    esac
    # The stamp names what was asked for (MARLIN_CUDA as given, "auto" by default), not what
    # "auto" resolved to: after a first run installed CuPy, auto resolves to "none", and the
    # stamp must still match.
    local key stamp
    key="$( { cat "$ROOT/pyproject.toml"; command -v "$PYTHON"; echo "$1 ${MARLIN_CUDA:-auto}"
              "$PYTHON" -c 'import sys; print(sys.prefix)'; } | sha256sum | cut -c1-16)"
    stamp="$ROOT/build/.installed-$key"
    # The installed package must be this checkout (imported from outside it, so the source
    # tree itself does not count), with its dependencies importable.
    if [ -f "$stamp" ] && (cd / && "$PYTHON" -c '
import sys, pathlib, marlin_cupy, numpy, safetensors, tqdm
here = pathlib.Path(marlin_cupy.__file__).resolve().parent.parent
sys.exit(0 if here == pathlib.Path(sys.argv[1]).resolve() else 1)' "$ROOT") 2>/dev/null; then
        echo "setup: marlin-cupy${extras:+[$extras]} already installed for $PYTHON (stamp $stamp)"
        return 0
    fi
    local target="$ROOT${extras:+[$extras]}"
    echo "setup: pip install -e \"$target\" with $PYTHON"
    if "$PYTHON" -m pip install --quiet --progress-bar off --retries 2 --timeout 30 \
            -e "$target"; then
        mkdir -p "$ROOT/build"
        touch "$stamp"
        return 0
    fi
    if "$PYTHON" -c "import ${modules}" 2>/dev/null; then
        echo "setup: pip install failed, but ${modules} are importable: running from the" \
             "source tree (PYTHONPATH=$ROOT)." >&2
        export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
        return 0
    fi
    echo "setup: pip install failed (see above) and ${modules} are not all importable." >&2
    return 1
}
