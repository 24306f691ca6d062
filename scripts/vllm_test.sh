#!/usr/bin/env bash
# Runs the vLLM connector tests (python/tests/vllm) inside a real vLLM 0.32 CPU engine:
# creates the venv if missing (scripts/vllm_venv.sh), builds and installs rangekv into it
# (the same command as scripts/python_test.sh), runs pytest, prints pytest's summary last.
#
#   bash scripts/vllm_test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
venv="${RANGEKV_VENV:-/var/cache/rangekv/vllm-0.32}"
RANGEKV_VENV="$venv" bash scripts/vllm_venv.sh
py="$venv/bin/python"
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER="${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}"
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
fi
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
mkdir -p build
if ! "$py" -m pip install --no-build-isolation --no-deps --force-reinstall . >build/vllm-install.log 2>&1; then
  tail -40 build/vllm-install.log
  echo "vllm_test: building/installing the package FAILED (build/vllm-install.log)"
  exit 1
fi
"$py" -c "import rangekv.vllm; print('vllm_test: rangekv.vllm at', rangekv.vllm.__file__)"
cd python/tests/vllm
set +e
RANGEKV_VLLM_TESTS=1 "$py" -m pytest -q -rs -p no:cacheprovider "$@" . 2>&1 | tee /tmp/vllm_test.$$.log
rc=${PIPESTATUS[0]}
set -e
summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error)' /tmp/vllm_test.$$.log | tail -1)
rm -f /tmp/vllm_test.$$.log
echo "vllm_test: ${summary:-no pytest summary} ($(( $(date +%s) - start ))s)"
exit "$rc"
