#!/usr/bin/env bash
# One device call (carry [".deb"]) for issues #14 and #13, after scripts/gpu/split_banks.sh:
#   1. build (scripts/gpu/python_test.sh: rangekv._core, _baseline, the CLI; the CUDA suite);
#   2. ttft-hf, 8B shape, recompute + resident + RangeKV (4 object counts and layerwise), split
#      attention (auto), CALL2_TTFT_REPS repetitions (default 5);
#   3. checksum cost side by side on tmpfs (--interleave), 192 / 6,144 / 6,144-LW;
#   4. the virtio disk (O_DIRECT, 2 GiB, 192 and 6,144 objects) under each --io / --lookahead
#      variant of CALL2_DISK (default "posix:2 uring:2 posix:4"), RangeKV and the per-object model;
#   5. bench lookup --store service and bench concurrent --mode both --n 1,4 (store service).
# Steps stop being started after CALL2_BUDGET_S (540 s). Everything lands in $OUT/call2.tgz
# (the device tool returns few files) and $OUT/summary.txt.
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin call2 "${CALL2_BUDGET_S:-540}"
call_build
if (( $(left) > 250 )); then
  step_ttft "${CALL2_TTFT_REPS:-5}"
fi
if (( $(left) > 60 )); then
  step_checksum_shm
fi
for v in ${CALL2_DISK:-posix:2 uring:2 posix:4}; do
  (( $(left) > 55 )) || break
  io=${v%%:*} la=${v##*:}
  mkdir -p /var/tmp/rkv-disk
  timeout 80 $rkv bench restore --device cuda --io "$io" --lookahead "$la" --dir /var/tmp/rkv-disk \
    --payload 2GiB --objects 192,6144 --ablations none --reps 3 --ceiling-grid short --quiet \
    --json "$work/restore_disk_$io$la.json" >"$work/restore_disk_$io$la.txt" 2>&1
  rm -rf /var/tmp/rkv-disk
  note "== virtio disk, --io $io --lookahead $la"; grep -E "^(192|6144) |best ceiling|per-object / rangekv" "$work/restore_disk_$io$la.txt" | tee -a "$sum"
done
if (( $(left) > 30 )); then
  timeout 40 $rkv bench lookup --store service --reps 301 --warmup 5 --granularity 16 \
    --json "$work/lookup.json" >"$work/lookup.txt" 2>&1
  note "== lookup"; tail -8 "$work/lookup.txt" | tee -a "$sum"
fi
if (( $(left) > 40 )); then
  mkdir -p /dev/shm/rkv-service
  timeout $(( $(left) + 20 )) $rkv bench concurrent --device cuda --dir /dev/shm/rkv-service --buffered \
    --mode both --n 1,4 --size 4GiB --reps 3 --json "$work/concurrent.json" >"$work/concurrent.txt" 2>&1
  rm -rf /dev/shm/rkv-service
  note "== concurrent, embedded and service"; tail -30 "$work/concurrent.txt" | tee -a "$sum"
fi
call_end call2
