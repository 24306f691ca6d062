#!/usr/bin/env bash
# Diagnostic device call for layerwise restores through the HF adapter on CUDA (they hung in the
# 8B TTFT run of 2026-12-01): builds the Python package (scripts/gpu/python_test.sh without its
# tests), then runs the layerwise arm on a reduced 8B shape (8 layers, 49,152 + 16,128 tokens)
# under a timeout that dumps every Python thread's stack (faulthandler on SIGABRT), once with
# the default number of CUDA hardware queues and once with CUDA_DEVICE_MAX_CONNECTIONS=32.
#   device tool: run "bash scripts/gpu/diag_lw.sh" with carry [".deb"]
set -uo pipefail
cd "$(dirname "$0")/../.."
final="${OUT:-$PWD/out}"
mkdir -p "$final"
OUT=/tmp/rangekv-gpu-python bash scripts/gpu/python_test.sh -k no_test_matches_this \
  >"$final/build.log" 2>&1
grep -E "build:|FAILED" "$final/build.log"
mkdir -p /dev/shm/rangekv-diag
run() {  # name, env...
  local name=$1; shift
  echo "== $name"
  env "$@" PYTHONPATH=/tmp/rangekv-pypkg PYTHONUNBUFFERED=1 timeout -s ABRT "${DIAG_TIMEOUT:-150}" \
    python3 -X faulthandler -m rangekv.bench ttft-hf --device cuda --shape 8b --layers 8 \
    --tmp-dir /dev/shm/rangekv-diag --buffered --check first --reps 1 --no-ablations \
    --arms "recompute,rangekv 192,rangekv 1536 LW" --json "$final/$name.json" \
    >"$final/$name.log" 2>&1
  echo "rc=$? $(grep -E 'median|LW|minus' "$final/$name.log" | tail -5)"
  grep -E -A30 "^Thread|Fatal Python" "$final/$name.log" | grep -E "File|Thread" | head -40
}
run default
run connections32 CUDA_DEVICE_MAX_CONNECTIONS=32
nvidia-smi --query-gpu=name,memory.used --format=csv
rm -rf /dev/shm/rangekv-diag
