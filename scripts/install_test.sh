#!/usr/bin/env bash
# Installing rangekv as a user does (python/tests/install): builds the repaired wheel
# (scripts/wheel.sh), then runs the tests that install it, and the README's source install
# lines, each into a fresh venv. Needs PyPI and the Debian packages of scripts/setup.sh.
#
#   bash scripts/install_test.sh [pytest args...]
#
# The wheel is built with $RANGEKV_VENV's Python (default /var/cache/rangekv/vllm-0.32, the
# venv scripts/python_test.sh installs into), so it reuses that build directory (pyproject.toml's
# build/python/<wheel tag>) and compiles nothing that stage compiled. pytest runs from the same
# venv. Writes build/test-counts/install.txt when RANGEKV_TEST_COUNTS_DIR is set (scripts/test.sh);
# prints pytest's summary line last.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
venv="${RANGEKV_VENV:-/var/cache/rangekv/vllm-0.32}"
py="$venv/bin/python"
[ -x "$py" ] || { echo "install_test: no Python at $py (scripts/python_test.sh makes it)"; exit 1; }
"$py" -c "import pytest" 2>/dev/null || "$py" -m pip install -q pytest

write_counts() {  # "<passed> <failed> <skipped>" for scripts/test.sh's closing line
  [ -n "${RANGEKV_TEST_COUNTS_DIR:-}" ] && echo "$1" > "$RANGEKV_TEST_COUNTS_DIR/install.txt"
  return 0
}

if ! bash scripts/wheel.sh "$py"; then
  write_counts "0 1 0"
  echo "install_test: scripts/wheel.sh FAILED"
  exit 1
fi

# ccache for the source lines' builds, as for every other build here.
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER="${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}"
  export CMAKE_CUDA_COMPILER_LAUNCHER="${CMAKE_CUDA_COMPILER_LAUNCHER:-ccache}"
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
  [ -n "${CCACHE_DIR:-}" ] || { mkdir -p /var/cache/rangekv/ccache 2>/dev/null &&
    export CCACHE_DIR=/var/cache/rangekv/ccache; } || true
fi
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"

log="build/install-test.log"
mkdir -p build
set +e
# --confcutdir: python/tests/conftest.py (it imports an installed rangekv) is not this suite's.
"$py" -m pytest -v -rs --durations=0 -p no:cacheprovider --confcutdir=python/tests/install "$@" \
  python/tests/install 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error)' "$log" | tail -1)
n() { echo "$summary" | grep -oE "[0-9]+ $1" | grep -oE '^[0-9]+' || echo 0; }
if [ -n "$summary" ]; then
  write_counts "$(n passed) $(( $(n failed) + $(n error) )) $(n skipped)"
else
  write_counts "0 1 0"
fi
echo "install_test: ${summary:-no pytest summary} ($(( $(date +%s) - start ))s)"
exit "$rc"
