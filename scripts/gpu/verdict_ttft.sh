#!/usr/bin/env bash
# One device call (carry [".deb"]) after the checksum verdict moved to the device (2026-12-04,
# fourth session):
#   1. build and the Python suite with CUDA tensors (scripts/gpu/python_test.sh);
#   2. the virtio disk (O_DIRECT, 2 GiB) at 192 / 768 / 6,144 / 6,144-LW objects with the
#      per-object model (not run since O_DIRECT reads went out in 4 MiB pieces by default);
#   3. ttft-hf on the 8B shape, VTTFT_REPS repetitions (default 9), tokens checked.
# Steps stop being started after VTTFT_BUDGET_S (520 s). Everything lands in
# $OUT/verdict_ttft.tgz and $OUT/summary.txt.
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin verdict_ttft "${VTTFT_BUDGET_S:-520}"
call_build
mkdir -p /var/tmp/rkv-disk
timeout 120 $rkv bench restore --device cuda --dir /var/tmp/rkv-disk --payload 2GiB \
  --objects 192,768,6144,6144-LW --ablations none --reps 3 --ceiling-grid short --quiet \
  --json "$work/disk.json" >"$work/disk.txt" 2>&1
rm -rf /var/tmp/rkv-disk
note "== virtio disk (default read I/O)"
grep -E "^(192|768|6144|6144-LW) |best ceiling \(|byte split|per-object / rangekv|spread" "$work/disk.txt" | tee -a "$sum"
if (( $(left) > 200 )); then
  step_ttft "${VTTFT_REPS:-9}" $(( $(left) - 15 ))
fi
call_end verdict_ttft
