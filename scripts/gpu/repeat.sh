#!/usr/bin/env bash
# One short device call (carry [".deb"]): repeats two measurements of scripts/gpu/call2.sh on a
# fresh machine — the checksum cost side by side on tmpfs, and the store service's lookup
# latency (three runs) — to see how they move between machines. $OUT/repeat.tgz, summary.txt.
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin repeat "600"
call_build
for i in 1 2 3; do
  timeout 40 $rkv bench lookup --store service --reps 301 --warmup 5 --granularity 16 \
    --json "$work/lookup$i.json" >"$work/lookup$i.txt" 2>&1
  note "== lookup $i"; tail -3 "$work/lookup$i.txt" | tee -a "$sum"
done
step_checksum_shm
call_end repeat
