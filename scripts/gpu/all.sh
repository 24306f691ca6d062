#!/usr/bin/env bash
# One device call: the GPU tests (kernels for every layout incl. the vLLM 0.32 ones, memcheck),
# the engine suites on CudaDevice, and the Python suite with CUDA tensors. Logs are packed into
# $OUT/gpu-logs.tar.gz (the device tool brings back at most 8 files); summaries printed.
#   device tool: run "bash scripts/gpu/all.sh" with carry [".deb"]
set -uo pipefail
cd "$(dirname "$0")/../.."
final="${OUT:-$PWD/out}"
work=/tmp/rangekv-gpu-out
rm -rf "$work" && mkdir -p "$work"
status=0
OUT="$work/cpp" RANGEKV_GPU_STAGES="${RANGEKV_GPU_STAGES:-kernels engine}" \
  bash scripts/gpu/run.sh || status=1
OUT="$work/python" bash scripts/gpu/python_test.sh || status=1
mkdir -p "$final"
tar -czf "$final/gpu-logs.tar.gz" -C "$work" .
cp "$work/cpp/summary.txt" "$final/cpp-summary.txt" 2>/dev/null
echo "==== all: status $status"
exit "$status"
