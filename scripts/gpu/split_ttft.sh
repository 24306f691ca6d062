#!/usr/bin/env bash
# One device call (carry [".deb"]) for issue #14, 2026-12-04 (second day):
#   1. build (scripts/gpu/python_test.sh);
#   2. the virtio disk (O_DIRECT, 2 GiB, 192 and 6,144 objects, RangeKV and the per-object model,
#      short ceiling grid): the default read I/O (read_workers threads, spans whole) against
#      4 MiB pieces over 8 threads, which on the CPU dev VM's disk halved the first layer's
#      latency (docs/benchmarks.md, 2026-12-04 second day);
#   3. ttft-hf 8B with SPLIT_TTFT_REPS repetitions (default 9) so the point medians settle.
# Steps stop being started after SPLIT_BUDGET_S (570 s). Everything lands in $OUT/split_ttft.tgz
# and $OUT/summary.txt.
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin split_ttft "${SPLIT_BUDGET_S:-570}"
call_build
for v in "default:" "split4m8:--io-split 4MiB --read-io-threads 8"; do
  (( $(left) > 420 )) || break
  name=${v%%:*} args=${v#*:}
  mkdir -p /var/tmp/rkv-disk
  # shellcheck disable=SC2086
  timeout 85 $rkv bench restore --device cuda --dir /var/tmp/rkv-disk --payload 2GiB \
    --objects 192,6144 --ablations none --reps 3 --ceiling-grid short --quiet $args \
    --json "$work/disk_$name.json" >"$work/disk_$name.txt" 2>&1
  rm -rf /var/tmp/rkv-disk
  note "== virtio disk, $name ($args)"
  grep -E "^(192|6144) |best ceiling \(|byte split|per-object / rangekv|phases" "$work/disk_$name.txt" | tee -a "$sum"
done
if (( $(left) > 200 )); then
  step_ttft "${SPLIT_TTFT_REPS:-9}" $(( $(left) - 15 ))
fi
call_end split_ttft
