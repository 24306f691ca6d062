#!/usr/bin/env bash
# Builds rangekv._core with CUDA on the GPU machine and runs python/tests there (test_cuda.py:
# torch CUDA tensors, producer streams, stream waits). The machine has CUDA, python3, torch,
# nanobind, numpy and pytest but no registry: the C++ build dependencies travel as .deb files
# in .deb/ (scripts/gpu/fetch_debs.sh), unpacked into a private prefix as scripts/gpu/run.sh
# does. Usage from the repository root (device tool: carry [".deb"]):
#   bash scripts/gpu/python_test.sh [pytest args]
# Writes logs under $OUT (default ./out/gpu-python); prints pytest's summary line last.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo="$PWD"
out="${OUT:-$repo/out/gpu-python}"
prefix="${RANGEKV_GPU_PREFIX:-/tmp/rangekv-prefix}"
build="${RANGEKV_GPU_PY_BUILD:-/tmp/rangekv-gpu-pybuild}"
pkg="${RANGEKV_GPU_PY_PKG:-/tmp/rangekv-pypkg}"
mkdir -p "$out"
fail() { echo "FAILED: $*"; exit 1; }

shopt -s nullglob
debs=(.deb/*.deb)
((${#debs[@]})) || fail "no .deb files in $repo/.deb (see scripts/gpu/fetch_debs.sh)"
rm -rf "$prefix" && mkdir -p "$prefix"
for f in "${debs[@]}"; do dpkg-deb -x "$f" "$prefix" || fail "dpkg-deb -x $f"; done
libdir="$prefix/usr/lib/x86_64-linux-gnu"
for pc in "$libdir"/pkgconfig/*.pc "$prefix"/usr/share/pkgconfig/*.pc; do
  sed -i -E "s#^([A-Za-z_]+)=/usr(/|\$)#\1=$prefix/usr\2#" "$pc"
done
export PKG_CONFIG_PATH="$libdir/pkgconfig:$prefix/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
pc_arg=()
if ! command -v pkg-config >/dev/null 2>&1; then
  pc_arg=(-DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkgconf")
fi

py="$(command -v python3)"
start=$(date +%s)
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ -DRANGEKV_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DRANGEKV_WERROR=OFF -DRANGEKV_BUILD_TESTS=OFF \
  -DRANGEKV_BUILD_PYTHON=ON -DPython_EXECUTABLE="$py" -DCMAKE_PREFIX_PATH="$prefix/usr" \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 "${pc_arg[@]}" >"$out/configure.log" 2>&1 ||
  { tail -30 "$out/configure.log"; fail "configure"; }
cmake --build "$build" -j "$(nproc)" --target _core _baseline rangekv >"$out/build.log" 2>&1 ||
  { grep -E -A6 "error|FAILED" "$out/build.log" | tail -40; fail "build"; }
echo "build: ok ($(( $(date +%s) - start ))s)"

# The package as the wheel lays it out, without pip (no registry for build isolation here).
rm -rf "$pkg" && mkdir -p "$pkg/rangekv/_bin"
cp python/rangekv/*.py python/rangekv/*.pyi python/rangekv/py.typed "$pkg/rangekv/"
cp -r python/rangekv/hf python/rangekv/bench python/rangekv/vllm "$pkg/rangekv/"
cp "$build"/python/_core*.so "$build"/python/_baseline*.so "$pkg/rangekv/"
cp "$build/tools/rangekv" "$pkg/rangekv/_bin/"
cd python/tests
PYTHONPATH="$pkg" "$py" -m pytest -q -rs -p no:cacheprovider "$@" test_*.py >"$out/pytest.log" 2>&1
rc=$?
grep -v '^rangekv [IWE] ' "$out/pytest.log" | tail -40
exit $rc
