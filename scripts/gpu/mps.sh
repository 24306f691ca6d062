#!/usr/bin/env bash
# One device call (carry [".deb"]): is the store service's 4-client gap on the H200 (issue 13:
# 0.70-0.83 of embedded, 0.85-0.90 with --device host) the GPU time-slicing the contexts of
# several processes? `bench concurrent --mode both --n 1,4` on tmpfs three ways, in this order:
#   plain    as every earlier call (one CUDA context per client process);
#   mps      with the CUDA MPS control daemon running, so the clients' work shares the GPU
#            through one MPS server instead of time-sliced contexts;
#   plain2   without MPS again (the machine's drift between the two plain runs);
#   host     --device host (no CUDA), the same shape, for the CPU side alone.
# Tables to <name>.txt, JSON to <name>.json, packed into $OUT/mps-logs.tar.gz; key lines in
# $OUT/summary.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
final="${OUT:-$PWD/out/gpu-mps}"
out=/tmp/rangekv-mps
rm -rf "$out" && mkdir -p "$out" "$final"
build=/tmp/rangekv-gpu-build
budget="${MPS_BUDGET_S:-520}"
. scripts/gpu/steps.sh
gpu_build rangekv
rkv=$build/tools/rangekv
shm=/dev/shm/rkv-mps
conc() {  # name device extra...
  local name=$1 dev=$2
  shift 2
  rm -rf $shm && mkdir -p $shm
  t "$name" 150 $rkv bench concurrent --device "$dev" --dir $shm --buffered --mode both --n 1,4 \
    --size 4GiB --reps 3 --json "$out/$name.json" "$@"
  note "== $name"
  grep -E '^(mode|embedded|service) ' "$out/$name.txt" | head -13 | sed 's/^/  /' | tee -a "$sum"
}
note "compute mode: $(nvidia-smi --query-gpu=compute_mode,driver_version --format=csv,noheader 2>&1)"
conc plain cuda
mps=$(command -v nvidia-cuda-mps-control || ls /usr/local/nvidia/bin/nvidia-cuda-mps-control /usr/bin/nvidia-cuda-mps-control 2>/dev/null | head -1)
if [ -n "$mps" ]; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  if "$mps" -d; then
    note "mps: control daemon started ($mps)"
    conc mps cuda
    echo get_server_list | "$mps" 2>&1 | sed 's/^/  mps server: /' | tee -a "$sum"
    echo quit | "$mps"
    sleep 2
    cp -r $CUDA_MPS_LOG_DIRECTORY "$out/mps-log" 2>/dev/null
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  else
    note "mps: the control daemon did not start"
  fi
else
  note "mps: nvidia-cuda-mps-control not found"
fi
conc plain2 cuda
conc host host
rm -rf $shm
note "total: $(( $(date +%s) - start )) s"
tar -czf "$final/mps-logs.tar.gz" -C "$out" --exclude=build .
cp "$sum" "$final/summary.txt"
