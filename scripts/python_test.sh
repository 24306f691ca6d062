#!/usr/bin/env bash
# Builds the Python package `rangekv` (pyproject.toml: scikit-build-core over this CMake),
# installs it into a venv and runs its tests (python/tests; the vLLM tests run elsewhere).
#
#   bash scripts/python_test.sh [pytest args...]
#
# The venv: $RANGEKV_VENV, default /var/cache/rangekv/vllm-0.32 (CI's cached vLLM venv: torch,
# numpy, pytest, nanobind, scikit-build-core). When it does not exist it is created, by
# scripts/vllm_venv.sh where that script exists, else as a small venv with numpy + pytest
# (the torch tests then skip, with the reason shown). The build directory
# build/python/<wheel tag> (pyproject.toml's build-dir) is kept between runs, so a rerun
# rebuilds only what changed; ccache is used when installed. CUDA kernels are built when nvcc is
# found (RANGEKV_CUDA=OFF: none), as for any `pip install .`. Runs python/tests (hf/ included;
# vllm/ only with RANGEKV_PY_TEST_VLLM=1; install/ never: scripts/install_test.sh). Prints
# pytest's summary line last.
#
# The lead's scripts/test.sh can call it as a stage: `bash scripts/python_test.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

venv="${RANGEKV_VENV:-/var/cache/rangekv/vllm-0.32}"
if [ ! -x "$venv/bin/python" ]; then
  if [ -f scripts/vllm_venv.sh ]; then
    echo "python_test: creating $venv with scripts/vllm_venv.sh"
    RANGEKV_VENV="$venv" bash scripts/vllm_venv.sh
  else
    echo "python_test: creating a numpy-only venv at $venv"
    python3 -m venv "$venv"
  fi
fi
py="$venv/bin/python"
# Build and test requirements (PyPI), only when missing.
if ! "$py" -c "import nanobind, scikit_build_core, pytest, numpy, matplotlib" 2>/dev/null; then
  "$py" -m pip install -q nanobind scikit-build-core pytest numpy matplotlib
fi

if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER="${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}"
  export CMAKE_CUDA_COMPILER_LAUNCHER="${CMAKE_CUDA_COMPILER_LAUNCHER:-ccache}"
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
  # Paths relative to the checkout and one cache per machine: a new clone (CI) reuses it.
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
  [ -n "${CCACHE_DIR:-}" ] || { mkdir -p /var/cache/rangekv/ccache 2>/dev/null &&
    export CCACHE_DIR=/var/cache/rangekv/ccache; } || true
fi
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"

echo "python_test: building and installing rangekv into $venv"
# No build isolation: the build requirements are in the venv already (and offline CI works).
mkdir -p build
if ! "$py" -m pip install --no-build-isolation --no-deps --force-reinstall . >build/python-install.log 2>&1; then
  tail -40 build/python-install.log
  echo "python_test: building/installing the package FAILED (build/python-install.log)"
  exit 1
fi
"$py" -c "import rangekv; print('python_test: rangekv', rangekv.__version__, 'at', rangekv.__file__)"
echo "python_test: build + install took $(( $(date +%s) - start ))s"

# Run from python/tests so the source tree's python/rangekv is not what gets imported.
cd python/tests
set +e
# python/tests/vllm (the vLLM connector's tests) runs only with RANGEKV_PY_TEST_VLLM=1;
# python/tests/install (fresh venvs, builds) only through scripts/install_test.sh.
ignore=(--ignore=vllm --ignore=install)
[ "${RANGEKV_PY_TEST_VLLM:-0}" = 1 ] && ignore=(--ignore=install)
"$py" -m pytest -q -rs --durations=12 -p no:cacheprovider "${ignore[@]}" "$@" 2>&1 | grep -v '^rangekv [IWE] ' | tee /tmp/python_test.$$.log
rc=${PIPESTATUS[0]}
set -e
summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error)' /tmp/python_test.$$.log | tail -1)
rm -f /tmp/python_test.$$.log
# Case counts for scripts/test.sh's closing line (build/test-counts/*.txt: "passed failed skipped").
if [ -n "${RANGEKV_TEST_COUNTS_DIR:-}" ]; then
  n() { echo "$summary" | grep -oE "[0-9]+ $1" | grep -oE '^[0-9]+' || echo 0; }
  failed=$(( $(n failed) + $(n error) ))
  [ -n "$summary" ] || failed=1
  echo "$(n passed) $failed $(n skipped)" > "$RANGEKV_TEST_COUNTS_DIR/pytest.txt"
fi
echo "python_test: ${summary:-no pytest summary} ($(( $(date +%s) - start ))s)"
exit "$rc"
