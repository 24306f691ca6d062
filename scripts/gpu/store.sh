#!/usr/bin/env bash
# The store sweep on the H200 (issue #14, item 3), one device call (carry [".deb"]): builds
# rangekv, then `bench store`, 8B geometry, a 2016 MiB suffix after a 6 GiB prefix on tmpfs
# (CudaDevice, buffered), RangeKV, its index=scalar ablation and the per-object model at every
# object count, against the medium's best write ceiling. Tables to store_shm.txt, JSON beside.
set -uo pipefail
cd "$(dirname "$0")/../.."
final="${OUT:-$PWD/out/gpu-store}"
out=/tmp/rangekv-store
rm -rf "$out" && mkdir -p "$out" "$final"
build=/tmp/rangekv-gpu-build
budget="${STORE_BUDGET_S:-420}"
. scripts/gpu/steps.sh
gpu_build rangekv
shm=/dev/shm/rkv-store
rm -rf $shm && mkdir -p $shm
t store_shm "${STORE_TIMEOUT_S:-330}" $build/tools/rangekv bench store --device cuda --dir $shm \
  --buffered --payload 6GiB --reps "${STORE_REPS:-3}" --json "$out/store_shm.json"
rm -rf $shm
tail -30 "$out/store_shm.txt" | sed 's/^/  /' | tee -a "$sum"
cp "$out"/store_shm.* "$sum" "$final/" 2>/dev/null
