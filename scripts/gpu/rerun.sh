#!/usr/bin/env bash
# One device call (carry [".deb"]) for issue #14 after the 2026-12-04 changes (streaming CPU
# copies, lookahead 4, the staging fix for the virtio disk):
#   1. build (scripts/gpu/python_test.sh: rangekv._core, _baseline, the CLI; the CUDA suite);
#   2. ttft-hf, 8B shape, recompute + resident + RangeKV (4 object counts and layerwise),
#      RERUN_TTFT_REPS repetitions (default 5);
#   3. checksum cost side by side on tmpfs (--interleave), 192 / 6,144 / 6,144-LW;
#   4. the virtio disk (O_DIRECT, 2 GiB, 192 and 6,144 objects), RangeKV and the per-object model
#      against the short ceiling grid;
#   5. bench concurrent on tmpfs, N = 1..16, 4 GiB per round.
# Steps stop being started after RERUN_BUDGET_S (560 s). Everything lands in $OUT/rerun.tgz and
# $OUT/summary.txt.
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin rerun "${RERUN_BUDGET_S:-560}"
call_build
if (( $(left) > 60 )); then
  mkdir -p /var/tmp/rkv-disk
  timeout 85 $rkv bench restore --device cuda --dir /var/tmp/rkv-disk --payload 2GiB \
    --objects 192,6144 --ablations none --reps 3 --ceiling-grid short --quiet \
    --json "$work/restore_disk.json" >"$work/restore_disk.txt" 2>&1
  rm -rf /var/tmp/rkv-disk
  note "== virtio disk"
  grep -E "^(192|6144) |best ceiling|per-object / rangekv|phases" "$work/restore_disk.txt" | tee -a "$sum"
fi
if (( $(left) > 60 )); then
  step_checksum_shm
fi
if (( $(left) > 250 )); then
  step_ttft "${RERUN_TTFT_REPS:-5}"
fi
if (( $(left) > 50 )); then
  mkdir -p /dev/shm/rkv-conc
  timeout $(( $(left) + 20 )) $rkv bench concurrent --device cuda --dir /dev/shm/rkv-conc --buffered \
    --size 4GiB --reps 3 --json "$work/concurrent.json" >"$work/concurrent.txt" 2>&1
  rm -rf /dev/shm/rkv-conc
  note "== concurrent, tmpfs"; tail -24 "$work/concurrent.txt" | tee -a "$sum"
fi
call_end rerun
