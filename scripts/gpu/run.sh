#!/usr/bin/env bash
# Builds and runs RangeKV's GPU tests on the GPU machine (CUDA 13, cmake, ninja, g++, python3;
# no package registry, no GoogleTest/xxHash/CLI11/nlohmann/liburing packages).
#
# The missing build dependencies travel as Debian 12 .deb files in .deb/ (ignored by git;
# fetch them once on a Debian 12 machine with scripts/gpu/fetch_debs.sh) and are unpacked
# with dpkg -x into a private prefix; nothing is installed into the system.
#
# Usage, from the repository root on the GPU machine (device tool: carry [".deb"]):
#   bash scripts/gpu/run.sh [gtest arguments for kernels_gpu_test]
# Environment (all optional):
#   OUT                 where logs go (default: ./out/gpu); at most 8 files are written
#   RANGEKV_GPU_PREFIX  private prefix for the unpacked packages (default: /tmp/rangekv-prefix)
#   RANGEKV_GPU_BUILD   build directory (default: /tmp/rangekv-gpu-build)
#   RANGEKV_GPU_MEMCHECK=0  skip the compute-sanitizer memcheck pass over the kernel tests
#   RANGEKV_GPU_CONFIGURE_ONLY=1  stop after configure + build (for checking this script
#                       on a machine without a GPU)
#   RANGEKV_GPU_TARGETS  build only these targets (space-separated; with CONFIGURE_ONLY)
#   RANGEKV_GPU_PREFIX_PKGCONFIG=1  use the unpacked pkgconf even if pkg-config exists
# Exit status: non-zero when configure, build or any test fails. The last lines printed are
# a summary (device, test counts, throughput lines).
set -uo pipefail
cd "$(dirname "$0")/../.."
repo="$PWD"
out="${OUT:-$repo/out/gpu}"
prefix="${RANGEKV_GPU_PREFIX:-/tmp/rangekv-prefix}"
build="${RANGEKV_GPU_BUILD:-/tmp/rangekv-gpu-build}"
jobs="$(nproc)"
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
fail() {
  note "FAILED: $*"
  echo "==== summary"
  cat "$summary"
  exit 1
}

# ---- 1. unpack the carried packages into the private prefix --------------------------------
shopt -s nullglob
debs=(.deb/*.deb)
if ((${#debs[@]} == 0)); then
  fail "no .deb files in $repo/.deb (carry the .deb folder; see scripts/gpu/fetch_debs.sh)"
fi
rm -rf "$prefix"
mkdir -p "$prefix"
for f in "${debs[@]}"; do
  dpkg-deb -x "$f" "$prefix" || fail "dpkg-deb -x $f"
done
libdir="$prefix/usr/lib/x86_64-linux-gnu"
# The .pc files name /usr (as prefix=/usr, or as absolute libdir/includedir); point every
# such variable at the private prefix.
for pc in "$libdir"/pkgconfig/*.pc "$prefix"/usr/share/pkgconfig/*.pc; do
  sed -i -E "s#^([A-Za-z_]+)=/usr(/|\$)#\1=$prefix/usr\2#" "$pc"
done
export PKG_CONFIG_PATH="$libdir/pkgconfig:$prefix/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
pkg_config_arg=()
if [ "${RANGEKV_GPU_PREFIX_PKGCONFIG:-0}" = 1 ] || ! command -v pkg-config >/dev/null 2>&1; then
  [ -x "$prefix/usr/bin/pkgconf" ] || fail "no pkg-config on this machine and no pkgconf-bin .deb"
  pkg_config_arg=(-DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkgconf")
fi
note "packages: ${#debs[@]} .deb unpacked into $prefix"

# ---- 2. configure and build -----------------------------------------------------------------
{
  echo "== host"
  uname -a
  g++ --version | head -1
  nvcc --version | tail -2
  cmake --version | head -1
  nvidia-smi 2>&1 | head -15
} >"$out/machine.txt" 2>&1

rm -f "$build/CMakeCache.txt"  # the prefix is unpacked afresh; forget cached package paths
cmake -S "$repo" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ \
  -DRANGEKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DRANGEKV_WERROR=OFF \
  -DCMAKE_PREFIX_PATH="$prefix/usr" \
  -DGTest_DIR="$libdir/cmake/GTest" \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
  "${pkg_config_arg[@]}" >"$out/configure.log" 2>&1 ||
  { tail -30 "$out/configure.log"; fail "configure (see configure.log)"; }
note "configure: ok ($build)"

targets=(kernels_gpu_test device_test kernels_test)
stages="${RANGEKV_GPU_STAGES:-kernels}"
case " $stages " in *" engine "*|*" bench "*) targets+=(engine_test engine_fault_test engine_persistence_test rangekv) ;; esac
# RANGEKV_GPU_TARGETS (space-separated) replaces the list: a focused call builds only what it runs.
if [ -n "${RANGEKV_GPU_TARGETS:-}" ]; then read -ra targets <<<"$RANGEKV_GPU_TARGETS"; fi
cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$out/build.log" 2>&1 ||
  { grep -E -B2 -A6 "error|FAILED" "$out/build.log" | tail -40; fail "build (see build.log)"; }
note "build: ok (${targets[*]})"
if [ "${RANGEKV_GPU_CONFIGURE_ONLY:-0}" = 1 ]; then
  note "configure-only run: tests not started"
  cat "$summary"
  exit 0
fi

# ---- 3. run ---------------------------------------------------------------------------------
status=0
gpu_test="$build/src/device/kernels_gpu_test"
"$gpu_test" --gtest_output="xml:$out/kernels_gpu_test.xml" "$@" >"$out/kernels_gpu_test.log" 2>&1 ||
  status=1
note "kernels_gpu_test: $(grep -E '^\[  (PASSED|FAILED) ' "$out/kernels_gpu_test.log" | tr '\n' ' ')" \
  "skipped: $(grep -c '^\[  SKIPPED \]' "$out/kernels_gpu_test.log")"
grep -E '^\[  FAILED  \]' "$out/kernels_gpu_test.log" | sort -u | tee -a "$summary"
if grep -q 'no usable CUDA device' "$out/kernels_gpu_test.log"; then
  note "FAILED: the GPU tests were skipped: $(grep -m1 -A1 'Skipped' "$out/kernels_gpu_test.log" | tail -1)"
  status=1
fi

# The CPU suites on this machine too (a newer compiler and libc than CI).
{
  "$build/src/device/device_test" && "$build/src/kernels/kernels_test"
} >"$out/cpu_tests.log" 2>&1 || status=1
note "cpu tests (device_test, kernels_test): $(grep -E '^\[  (PASSED|FAILED) ' "$out/cpu_tests.log" | tr '\n' ' ')"

# Out-of-bounds and misaligned accesses in the kernels, on the full conformance cases.
if [ "${RANGEKV_GPU_MEMCHECK:-1}" = 1 ] && command -v compute-sanitizer >/dev/null 2>&1; then
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$gpu_test" \
    --gtest_filter='*ScatterAndGather*:*LayerGroup*:*Digest*:*CrossLayer*' >"$out/memcheck.log" 2>&1 ||
    status=1
  note "memcheck: $(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)" \
    "$(grep -E '^\[  (PASSED|FAILED) ' "$out/memcheck.log" | tr '\n' ' ')"
fi

{
  grep -E '^\[(device|access|throughput)\]' "$out/kernels_gpu_test.log"
} | tee -a "$summary"

# ---- 4. the engine on CudaDevice (RANGEKV_GPU_STAGES="kernels engine bench") ------------------
if [[ " $stages " == *" engine "* ]]; then
  for t in engine_test engine_fault_test engine_persistence_test; do
    RANGEKV_TEST_DEVICE=cuda "$build/src/engine/$t" >"$out/$t.cuda.log" 2>&1 || status=1
    note "$t on CUDA: $(grep -E '^\[  (PASSED|FAILED) ' "$out/$t.cuda.log" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \]' "$out/$t.cuda.log" | sort -u | tee -a "$summary"
  done
fi
# Restore/store sweeps: tmpfs (the fast medium here) at the paper's full 6 GiB, and the virtio
# disk (O_DIRECT) at a reduced payload; each against the ceiling measured in the same run.
if [[ " $stages " == *" bench "* ]]; then
  rkv="$build/tools/rangekv"
  shm=/dev/shm/rangekv-bench disk=/var/tmp/rangekv-bench
  mkdir -p "$shm" "$disk"
  payload="${RANGEKV_GPU_PAYLOAD:-6GiB}"
  # Which sweeps to run (space-separated): restore nochecksum store disk.
  for b in ${RANGEKV_GPU_BENCHES:-restore}; do
    case "$b" in
      restore) args=(restore --dir "$shm" --buffered --payload "$payload" --reps 3) ;;
      nochecksum) args=(restore --dir "$shm" --buffered --payload "$payload" --reps 3
                        --objects 192,6144-LW --ablations none --skip-baseline --checksum off) ;;
      store) args=(store --dir "$shm" --buffered --payload "$payload" --reps 3
                   --objects 192,6144-LW) ;;
      disk) args=(restore --dir "$disk" --payload 2GiB --reps 3 --objects 192,6144-LW
                  --ablations none) ;;
      *) note "unknown bench $b"; status=1; continue ;;
    esac
    timeout "${RANGEKV_GPU_BENCH_TIMEOUT:-300}" "$rkv" bench "${args[@]}" --device cuda --quiet \
      --json "$out/bench_$b.json" >"$out/bench_$b.log" 2>&1 || { status=1; note "bench $b failed"; }
    note "bench $b: $(tail -c 300 "$out/bench_$b.log" | tr '\n' ' ')"
    cat "$out/bench_$b.log"
  done
  rm -rf "$shm" "$disk"
fi
echo "==== summary"
cat "$summary"
exit "$status"
