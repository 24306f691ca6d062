#!/usr/bin/env bash
# One device call (carry [".deb"]) for issues #14 and #13, 2026-12-04 (second day):
#   1. build (scripts/gpu/python_test.sh: rangekv._core, _baseline, the CLI; the CUDA suite);
#   2. the checksum cost on tmpfs (6 GiB, --interleave, checksum=off arm) at 8 and 16 read banks,
#      and 16 banks with 8 read workers (8 verifiers): is the cost a shortage of banks while a
#      stripe waits for its verdict?
#   3. bench concurrent --mode both --n 1,4 (store service, one client process per request), the
#      first run since the banks moved to huge pages;
#   4. bench lookup --store service;
#   5. ttft-hf 8B (BANKS_TTFT_REPS, default 5) when at least 250 s are left.
# Steps stop being started after BANKS_BUDGET_S (560 s). Everything lands in $OUT/banks.tgz and
# $OUT/summary.txt.
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin banks "${BANKS_BUDGET_S:-560}"
call_build
for v in "8:4" "16:4" "16:8"; do
  (( $(left) > 60 )) || break
  banks=${v%%:*} workers=${v##*:}
  mkdir -p /dev/shm/rkv-ck
  timeout 85 $rkv bench restore --device cuda --dir /dev/shm/rkv-ck --buffered --payload 6GiB \
    --objects 192,6144 --ablations none --skip-baseline --check --interleave --reps 5 \
    --read-banks "$banks" --read-workers "$workers" --ceiling-grid short --quiet \
    --json "$work/ck_b${banks}_w$workers.json" >"$work/ck_b${banks}_w$workers.txt" 2>&1
  rm -rf /dev/shm/rkv-ck
  note "== checksum on/off, tmpfs, $banks read banks, $workers read workers"
  grep -E "^(192|6144) |best ceiling \(|checksum cost|phases" "$work/ck_b${banks}_w$workers.txt" | tee -a "$sum"
done
if (( $(left) > 60 )); then
  mkdir -p /dev/shm/rkv-service
  timeout $(( $(left) > 200 ? 200 : $(left) )) $rkv bench concurrent --device cuda --dir /dev/shm/rkv-service --buffered \
    --mode both --n 1,4 --size 4GiB --reps 3 --json "$work/concurrent.json" >"$work/concurrent.txt" 2>&1
  rm -rf /dev/shm/rkv-service
  note "== concurrent, embedded and service"; tail -30 "$work/concurrent.txt" | tee -a "$sum"
fi
if (( $(left) > 30 )); then
  timeout 40 $rkv bench lookup --store service --reps 301 --warmup 5 --granularity 16 \
    --json "$work/lookup.json" >"$work/lookup.txt" 2>&1
  note "== lookup"; tail -8 "$work/lookup.txt" | tee -a "$sum"
fi
if (( $(left) > 250 )); then
  step_ttft "${BANKS_TTFT_REPS:-5}"
fi
call_end banks
