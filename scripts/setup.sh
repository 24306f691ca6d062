#!/usr/bin/env bash
# Installs RangeKV's build dependencies (Debian 12 packages, by name) and builds the default
# preset. Used by scripts/demo.sh and scripts/test.sh; safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake ninja-build pkg-config clang clang-14 libclang-rt-14-dev g++ git
  libgtest-dev libgmock-dev libbenchmark-dev liburing-dev libxxhash-dev
  nlohmann-json3-dev libcli11-dev python3
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

preset="${RANGEKV_PRESET:-default}"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
