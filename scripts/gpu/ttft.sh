#!/usr/bin/env bash
# One device call: the Python CUDA suite (scripts/gpu/python_test.sh, which also lays out the
# package under /tmp/rangekv-pypkg) and then `rangekv bench ttft-hf` on the 8B shape from tmpfs.
#   device tool: run "bash scripts/gpu/ttft.sh" with carry [".deb"]
#   RANGEKV_TTFT_ARGS  extra bench arguments (default: --reps 2)
set -uo pipefail
cd "$(dirname "$0")/../.."
final="${OUT:-$PWD/out}"
mkdir -p "$final"
OUT=/tmp/rangekv-gpu-python bash scripts/gpu/python_test.sh >"$final/python.log" 2>&1
echo "python suite: $(tail -1 "$final/python.log")"
mkdir -p /dev/shm/rangekv-ttft
PYTHONPATH=/tmp/rangekv-pypkg PYTHONUNBUFFERED=1 timeout "${RANGEKV_TTFT_TIMEOUT:-420}" \
  python3 -m rangekv.bench ttft-hf --device cuda --shape 8b --tmp-dir /dev/shm/rangekv-ttft \
  --buffered --check first ${RANGEKV_TTFT_ARGS:---reps 2} --json "$final/ttft-8b.json" \
  2>&1 | tee "$final/ttft-8b.log" | grep -v '^rangekv [IWE] '
rm -rf /dev/shm/rangekv-ttft
