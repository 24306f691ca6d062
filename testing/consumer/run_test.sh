#!/usr/bin/env bash
# install_consumer_test: cmake --install the build into a temporary prefix, then configure,
# build and run testing/consumer against it.
#   run_test.sh CMAKE BUILD_DIR CONSUMER_SRC WORK_DIR CXX [BUILD_TYPE]
set -euo pipefail
cmake="$1" build="$2" src="$3" work="$4" cxx="$5" type="${6:-Release}"
rm -rf "$work"
mkdir -p "$work"
"$cmake" --install "$build" --prefix "$work/prefix" >"$work/install.log"
"$cmake" -S "$src" -B "$work/build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE="${type:-Release}" -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/configure.log"
"$cmake" --build "$work/build"
"$work/build/consumer" "$work/store"
