#!/usr/bin/env bash
# Every test CI runs: install, build, unit/property/crash tests, a GCC Release build with the
# install consumer test, ThreadSanitizer run of the concurrent tests, and short fuzzing runs. GPU tests run separately (scripts/gpu/run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
start=$(date +%s)
stage() { echo; echo "=== $* ($(( $(date +%s) - start ))s)"; }

stage "build (default preset: clang, -Werror, -Wthread-safety)"
bash scripts/setup.sh

stage "unit, property and crash tests"
ctest --preset default -j "$jobs" | tee build/ctest-default.log

stage "GCC Release build (whole tree, -Werror) and the install consumer test"
# Keeps the GCC path from rotting: build only (ccache when present), then install into a
# temporary prefix and build and run testing/consumer against it.
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER="${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}"
  export CMAKE_CUDA_COMPILER_LAUNCHER="${CMAKE_CUDA_COMPILER_LAUNCHER:-ccache}"
fi
cmake --preset gcc-release >/dev/null
cmake --build --preset gcc-release -j "$jobs"
ctest --test-dir build/gcc-release -R '^install_consumer_test$' --output-on-failure |
  tee build/ctest-gcc.log

stage "ThreadSanitizer build and concurrent tests"
# Only the binaries of tests labelled `tsan` are built here (the rest needs no second build).
mapfile -t tsan_targets < <(ctest --test-dir build/default -L tsan -N | awk '/Test +#/ {print $3}')
cmake --preset tsan >/dev/null
cmake --build --preset tsan -j "$jobs" --target "${tsan_targets[@]}"
ctest --preset tsan -j "$jobs" -L tsan | tee build/ctest-tsan.log

stage "fuzz targets (short runs)"
cmake --preset fuzz >/dev/null
mapfile -t fuzz_targets < <(ninja -C build/fuzz -t targets all | sed -n 's/^\([a-z_]*_fuzzer\): .*/\1/p')
cmake --build --preset fuzz -j "$jobs" --target "${fuzz_targets[@]}"
for f in build/fuzz/fuzz/*_fuzzer; do
  [ -x "$f" ] || continue
  name=$(basename "$f")
  corpus="build/fuzz/corpus/$name"   # grows run to run; fuzz/corpus/$name holds checked-in seeds
  mkdir -p "$corpus"
  seeds=()
  [ -d "fuzz/corpus/$name" ] && seeds=("fuzz/corpus/$name")
  echo "fuzz: $name"
  log="build/fuzz/$name.log"
  if ! "$f" -max_total_time="${RANGEKV_FUZZ_SECONDS:-20}" -print_final_stats=1 \
      -artifact_prefix="build/fuzz/$name-" "$corpus" "${seeds[@]}" >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz: $name FAILED (crash input under build/fuzz/$name-*)"
    exit 1
  fi
  grep -E '^stat::number_of_executed_units' "$log" || tail -1 "$log"
done

stage "done"
# One closing line for CI: every CTest test of both runs passed (set -e stopped on any failure).
total=$(cat build/ctest-default.log build/ctest-gcc.log build/ctest-tsan.log |
  awk '/tests passed, 0 tests failed out of/ {n += $NF} END {print n + 0}')
echo "${total:-0} passed, 0 failed"
