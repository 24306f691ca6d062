#!/usr/bin/env bash
# One device call (carry [".deb"]) for issue #14 after the O_DIRECT read default changed to
# 4 MiB pieces over 2 x read_workers threads (2026-12-04, second day):
#   1. build (scripts/gpu/python_test.sh);
#   2. the virtio disk (O_DIRECT, 2 GiB) at 192 to 6,144-LW objects, RangeKV with the new default and the
#      per-object model, short ceiling grid;
#   3. the checksum cost on tmpfs (6 GiB, --interleave, 11 repetitions): the earlier calls gave
#      1.0-4.4% with 5.
# Steps stop being started after DSPLIT_BUDGET_S (540 s). Everything lands in
# $OUT/direct_split.tgz and $OUT/summary.txt.
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin direct_split "${DSPLIT_BUDGET_S:-540}"
call_build
if (( $(left) > 200 )); then
  mkdir -p /var/tmp/rkv-disk
  timeout $(( $(left) - 150 )) $rkv bench restore --device cuda --dir /var/tmp/rkv-disk --payload 2GiB \
    --objects 192,768,3072,6144,6144-LW --ablations none --reps 3 --ceiling-grid short \
    --quiet --json "$work/disk.json" >"$work/disk.txt" 2>&1
  rm -rf /var/tmp/rkv-disk
  note "== virtio disk, default read I/O"
  grep -E "^[0-9]+(-LW|-TP)? |best ceiling \(|byte split|per-object / rangekv" "$work/disk.txt" | tee -a "$sum"
fi
if (( $(left) > 70 )); then
  mkdir -p /dev/shm/rkv-ck
  timeout $(( $(left) - 10 )) $rkv bench restore --device cuda --dir /dev/shm/rkv-ck --buffered --payload 6GiB \
    --objects 192,6144 --ablations none --skip-baseline --check --interleave --reps 11 \
    --ceiling-grid short --quiet --json "$work/ck.json" >"$work/ck.txt" 2>&1
  rm -rf /dev/shm/rkv-ck
  note "== checksum on/off, tmpfs, 11 repetitions"
  grep -E "^(192|6144) |best ceiling \(|checksum cost|phases" "$work/ck.txt" | tee -a "$sum"
fi
call_end direct_split
