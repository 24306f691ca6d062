#!/usr/bin/env bash
# One device call (carry [".deb"]): the Python CUDA suite (scripts/gpu/python_test.sh, which also
# lays out the package under /tmp/rangekv-pypkg), then `rangekv bench ttft-hf` on the 8B shape
# from tmpfs with every arm (recompute, resident, RangeKV at four object counts and layerwise,
# the four ablations, the per-object model), then a short control of transformers' own sdpa
# attention (recompute and resident only) for the attention implementation's share.
#   device tool: run "bash scripts/gpu/ttft.sh" with carry [".deb"]
#   RANGEKV_TTFT_ARGS      extra bench arguments (default: --reps 3)
#   RANGEKV_TTFT_TIMEOUT   seconds for the main run (default 420)
#   RANGEKV_TTFT_CONTROL=0 skips the sdpa control
set -uo pipefail
cd "$(dirname "$0")/../.."
final="${OUT:-$PWD/out}"
mkdir -p "$final"
start=$(date +%s)
OUT=/tmp/rangekv-gpu-python timeout "${RANGEKV_PY_SUITE_TIMEOUT:-200}" bash scripts/gpu/python_test.sh \
  >"$final/python.log" 2>&1
echo "python suite: $(tail -1 "$final/python.log") ($(( $(date +%s) - start )) s)"
mkdir -p /dev/shm/rangekv-ttft
PYTHONPATH=/tmp/rangekv-pypkg PYTHONUNBUFFERED=1 timeout "${RANGEKV_TTFT_TIMEOUT:-420}" \
  python3 -m rangekv.bench ttft-hf --device cuda --shape 8b --tmp-dir /dev/shm/rangekv-ttft \
  --buffered --check first ${RANGEKV_TTFT_ARGS:---reps 3} --json "$final/ttft-8b.json" \
  2>&1 | tee "$final/ttft-8b.log" | grep -v '^rangekv [IWE] '
rm -rf /dev/shm/rangekv-ttft
echo "ttft: done at $(( $(date +%s) - start )) s"
if [ "${RANGEKV_TTFT_CONTROL:-1}" = 1 ] && (( $(date +%s) - start < 520 )); then
  mkdir -p /dev/shm/rangekv-ttft
  PYTHONPATH=/tmp/rangekv-pypkg PYTHONUNBUFFERED=1 timeout 60 \
    python3 -m rangekv.bench ttft-hf --device cuda --shape 8b --tmp-dir /dev/shm/rangekv-ttft \
    --buffered --attention sdpa --arms recompute,resident --reps 2 --no-ablations --no-per-object \
    --json "$final/ttft-8b-sdpa.json" 2>&1 | tee "$final/ttft-8b-sdpa.log" | grep -v '^rangekv [IWE] ' | tail -4
  rm -rf /dev/shm/rangekv-ttft
fi
echo "total: $(( $(date +%s) - start )) s"
