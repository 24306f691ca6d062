#!/usr/bin/env bash
# Short device call after final.sh: the engine fault suite on CUDA, and checksum on vs off on
# the same configuration (8B geometry, 6 GiB on tmpfs, byte split off in both runs).
#   device tool: run "bash scripts/gpu/recheck.sh" with carry [".deb"]
set -uo pipefail
cd "$(dirname "$0")/../.."
final="${OUT:-$PWD/out}"; mkdir -p "$final"
build=/tmp/rangekv-gpu-build
OUT="$final/build" RANGEKV_GPU_CONFIGURE_ONLY=1 RANGEKV_GPU_STAGES="engine" \
  RANGEKV_GPU_BUILD=$build bash scripts/gpu/run.sh >"$final/run.log" 2>&1 || { tail -20 "$final/run.log"; exit 1; }
export LD_LIBRARY_PATH="/tmp/rangekv-prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
RANGEKV_TEST_DEVICE=cuda timeout 60 $build/src/engine/engine_fault_test 2>&1 | grep -E "^\[  (PASSED|FAILED)|FAILED  \]" 
mkdir -p /dev/shm/rkv
for ck in on off; do
  timeout 60 $build/tools/rangekv bench restore --device cuda --dir /dev/shm/rkv --buffered \
    --payload 6GiB --objects 192,6144 --ablations none --skip-baseline --reps 3 \
    --ceiling-grid off --io-split off --checksum $ck --json "$final/ck-$ck.json" 2>/dev/null |
    grep -E "^(192|6144) " | sed "s/^/checksum=$ck /"
done
rm -rf /dev/shm/rkv
