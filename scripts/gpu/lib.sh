# shellcheck shell=bash disable=SC2034  # the variables set here are run.sh's
# The steps scripts/gpu/run.sh builds its suites from (sourced; not run on its own).
#
#   gpu_init          work folder $work (logs, tables, JSON), $sum (the summary), the clock and
#                     budget; BUDGET seconds after the start no further step starts
#   note LINE         prints LINE and appends it to the summary
#   left              seconds of the budget left
#   gpu_build         once per call: the carried .deb files unpacked into a private prefix, one
#                     CMake tree (CUDA, tests, the Python extension) configured and every target
#                     a suite uses built; $rkv is the CLI, $pkg the Python package laid out as
#                     the wheel does (rangekv._core, _baseline, the CLI under _bin)
#   step NAME TIMEOUT CMD...
#                     CMD (in the repository root, or STEP_CWD) with stdout to NAME.txt and
#                     stderr to NAME.err in $work, unless fewer than TIMEOUT seconds of the
#                     budget are left; notes its exit status, time and a gtest or pytest
#                     summary line
#   bench NAME TIMEOUT ARGS...
#                     step NAME running `rangekv bench ARGS --json $work/NAME.json`, then the
#                     table's summary lines into the summary
#   gpu_finish        packs $work's files under 4 MiB into $OUT/gpu.tgz (the device tool returns at most 8 files),
#                     copies the summary to $OUT/summary.txt, prints it; exits non-zero when a
#                     step failed
#
# Environment: OUT (default ./out/gpu), BUDGET (540), RANGEKV_GPU_PREFIX (/tmp/rangekv-prefix),
# RANGEKV_GPU_BUILD (/tmp/rangekv-gpu-build), GPU_TARGETS (the targets built, space-separated;
# default: every target a suite runs), GPU_CUDA (ON; OFF builds without CUDA, to check these
# scripts on a machine without a GPU), DEVICE (cuda: every bench's --device).

gpu_init() {
  cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
  repo=$PWD
  final=${OUT:-$repo/out/gpu}
  work=/tmp/rangekv-gpu-work
  prefix=${RANGEKV_GPU_PREFIX:-/tmp/rangekv-prefix}
  build=${RANGEKV_GPU_BUILD:-/tmp/rangekv-gpu-build}
  pkg=$build/pypkg
  budget=${BUDGET:-540}
  device=${DEVICE:-cuda}
  rm -rf "$work" && mkdir -p "$work" "$final"
  sum=$work/summary.txt
  start=$(date +%s)
  status=0
  built=0
  bench_pin=()
}

note() { echo "$*" | tee -a "$sum"; }
left() { echo $((budget - ($(date +%s) - start))); }

# Unpacks the .deb files (scripts/gpu/fetch_debs.sh) into $prefix and points pkg-config, CMake
# and the dynamic loader at it; nothing is installed into the system. A shared library the
# machine already has (same soname, per ldconfig) is taken from the machine: its copy in $prefix
# is deleted and the development symlink (libfoo.so) repointed at the machine's, so only what
# the machine lacks (liburing, hiredis, ...) comes from Debian. A call that carries no .deb
# reuses the prefix an earlier call on the same warm machine unpacked.
gpu_prefix() {
  shopt -s nullglob
  local debs=("$repo"/.deb/*.deb) f pc lib soname sys
  local libdir=$prefix/usr/lib/x86_64-linux-gnu
  if ((${#debs[@]} == 0)) && [ -f "$prefix/.unpacked" ]; then
    note "packages: no .deb carried; reusing $prefix"
  else
    ((${#debs[@]})) || { note "FAILED: no .deb files in $repo/.deb (scripts/gpu/fetch_debs.sh)"; return 1; }
    rm -rf "$prefix" && mkdir -p "$prefix"
    for f in "${debs[@]}"; do dpkg-deb -x "$f" "$prefix" || { note "FAILED: dpkg-deb -x $f"; return 1; }; done
    # Debian 12 keeps some libraries in /lib/x86_64-linux-gnu (usrmerge aside): one folder.
    if [ -d "$prefix/lib/x86_64-linux-gnu" ]; then
      mkdir -p "$libdir" && cp -a "$prefix"/lib/x86_64-linux-gnu/. "$libdir"/ && rm -rf "${prefix:?}/lib"
    fi
    local own=0 kept=0
    for lib in "$libdir"/lib*.so.*; do
      [ -L "$lib" ] && continue
      soname=$(objdump -p "$lib" 2>/dev/null | awk '/SONAME/ {print $2}')
      [ -n "$soname" ] || continue
      sys=$(ldconfig -p | awk -v n="$soname" '$1 == n && $NF !~ /rangekv-prefix/ {print $NF; exit}')
      if [ -n "$sys" ]; then
        rm -f "$lib" "$libdir/$soname"
        own=$((own + 1))
      else
        kept=$((kept + 1))
      fi
    done
    # Development symlinks whose target is gone: point them at the machine's library.
    for lib in "$libdir"/lib*.so; do
      [ -e "$lib" ] && continue
      sys=$(ldconfig -p | awk -v n="$(basename "$lib")" 'index($1, n ".") == 1 {print $NF; exit}')
      if [ -n "$sys" ]; then ln -sf "$sys" "$lib"; else note "  no library behind $(basename "$lib")"; fi
    done
    # The .pc files name /usr (as prefix=/usr, or as absolute paths): point them at $prefix.
    for pc in "$libdir"/pkgconfig/*.pc "$prefix"/usr/share/pkgconfig/*.pc; do
      sed -i -E "s#^([A-Za-z_]+)=/usr(/|\$)#\1=$prefix/usr\2#" "$pc"
    done
    touch "$prefix/.unpacked"
    note "packages: ${#debs[@]} .deb unpacked into $prefix; $kept libraries from Debian, $own the machine's own"
  fi
  export PKG_CONFIG_PATH="$libdir/pkgconfig:$prefix/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$PATH:$prefix/usr/bin"  # redis-server for the remote suite; the machine's first
  pkg_config_arg=()
  if ! command -v pkg-config >/dev/null 2>&1; then
    pkg_config_arg=(-DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkgconf")
  fi
}

# The targets every suite runs; one configure and one build per call.
gpu_targets=(rangekv _core _baseline kernels_gpu_test device_test kernels_test engine_test
  engine_fault_test engine_persistence_test io_test cufile_abi_test service_test)

gpu_build() {
  ((built)) && return 0
  local t0 cuda=${GPU_CUDA:-ON}
  t0=$(date +%s)
  gpu_prefix || { status=1; return 1; }
  {
    uname -a; g++ --version | head -1; nvcc --version 2>&1 | tail -2; cmake --version | head -1
    nvidia-smi 2>&1 | head -15; lscpu | grep -E "Model name|L3"
  } >"$work/machine.txt" 2>&1
  local py targets=("${gpu_targets[@]}")
  # shellcheck disable=SC2206  # a space-separated list, split on purpose
  [ -z "${GPU_TARGETS:-}" ] || targets=($GPU_TARGETS)
  py=$(command -v python3)
  if [ "$cuda" != ON ]; then  # no CUDA: no GPU test, no cuFile header to check against
    targets=("${targets[@]/kernels_gpu_test/}") && targets=("${targets[@]/cufile_abi_test/}")
  fi
  rm -f "$build/CMakeCache.txt"  # the prefix is unpacked afresh: forget cached package paths
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ -DRANGEKV_CUDA="$cuda" \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DRANGEKV_WERROR=OFF -DRANGEKV_BUILD_TESTS=ON \
    -DRANGEKV_BUILD_PYTHON=ON -DPython_EXECUTABLE="$py" -DCMAKE_PREFIX_PATH="$prefix/usr" \
    -DGTest_DIR="$prefix/usr/lib/x86_64-linux-gnu/cmake/GTest" \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 "${pkg_config_arg[@]}" >"$work/configure.log" 2>&1 ||
    { tail -30 "$work/configure.log"; note "FAILED: configure (configure.log)"; status=1; return 1; }
  # shellcheck disable=SC2068
  cmake --build "$build" -j "$(nproc)" --target ${targets[@]} >"$work/build.log" 2>&1 ||
    { grep -E -B2 -A6 "error|FAILED" "$work/build.log" | tail -40; note "FAILED: build (build.log)"
      status=1; return 1; }
  rkv=$build/tools/rangekv
  # The package as the wheel lays it out, without pip (no registry for build isolation here).
  rm -rf "$pkg" && mkdir -p "$pkg/rangekv/_bin"
  cp python/rangekv/*.py python/rangekv/*.pyi python/rangekv/py.typed "$pkg/rangekv/"
  cp -r python/rangekv/hf python/rangekv/bench python/rangekv/vllm "$pkg/rangekv/"
  cp "$build"/python/_core*.so "$build"/python/_baseline*.so "$pkg/rangekv/"
  cp "$rkv" "$pkg/rangekv/_bin/"
  export RANGEKV_CLI=$rkv  # rangekv.inspect (ttft-hf's prefix read ceiling) runs the CLI
  built=1
  note "build: $(($(date +%s) - t0)) s, CUDA $cuda, $(nproc) cores, $(uname -r)"
}

step() {
  local name=$1 to=$2 s rc
  shift 2
  s=$(date +%s)
  if (($(left) < to)); then note "$name: skipped (budget: $(left) s left, needs $to)"; return 0; fi
  (cd "${STEP_CWD:-$repo}" && exec timeout "$to" "$@") >"$work/$name.txt" 2>"$work/$name.err"
  rc=$?
  ((rc == 0)) || status=1
  note "$name: rc=$rc ($(($(date +%s) - s)) s) $(grep -hE '^\[  (PASSED|FAILED) |^[0-9]+ (passed|failed)|^=+ .*(passed|failed)' \
    "$work/$name.txt" | tr '\n' ' ')"
  grep -hE '^\[  FAILED  \]' "$work/$name.txt" | sort -u | sed 's/^/  /' | tee -a "$sum"
  return "$rc"
}

bench() {
  local name=$1 to=$2
  shift 2
  step "$name" "$to" "${bench_pin[@]}" "$rkv" bench "$@" --json "$work/$name.json"
  grep -E "^(point|[0-9]+(-LW|-TP)? |(embedded|service|svc-thrd) |N=[0-9]+: best|(method|ceiling|best-ceil|posix|uring) )|rangekv: medians|/ best ceiling|per-object /|checksum cost|journal cost|check:|MISSED|worst median ratio|where the service" \
    "$work/$name.txt" 2>/dev/null | cut -c1-170 | sed 's/^/  /' | head -40 | tee -a "$sum"
}

gpu_finish() {
  note "total: $(($(date +%s) - start)) s"
  # Logs, tables and JSON, not the stores and models some steps leave in $work (the device
  # tool returns files of limited size).
  (cd "$work" && find . -type f -size -4M -print0 | tar -czf "$final/gpu.tgz" --null -T -)
  cp "$sum" "$final/summary.txt"
  echo "==== summary ($final/summary.txt; every log, table and JSON in $final/gpu.tgz)"
  cat "$sum"
  exit "$status"
}
