#!/usr/bin/env bash
# One device call (carry [".deb"]), 2026-12-05 seventh session: issue 13's four clients with
# the read share (EngineOptions::share_reads, on by default from this session: each client keeps
# ceil(4 / R) stripe reads and ceil(16 / R) read I/O pieces in flight, R = sessions reading now)
# against the same clients without it (each one engine's full counts, the previous default).
# Per round, in turn: --mode both (embedded, then clients sharing), then --mode service
# --client-share-reads off.
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin service8 "${SERVICE8_BUDGET:-300}"
lscpu | grep -E "Model name|L3" | tee -a "$sum"
call_build
shm=/dev/shm/rkv-s8
for round in 1 2 3; do
  for arm in both off; do
    (( $(left) > 45 )) || break 2
    name=conc-r$round-$arm
    case $arm in
      both) flags="--mode both" ;;
      off) flags="--mode service --client-share-reads off" ;;
    esac
    rm -rf $shm && mkdir -p $shm
    timeout 80 $rkv bench concurrent --device cuda --dir $shm --buffered $flags --n 4 \
      --size 4GiB --reps 3 --ceiling-passes end \
      --json "$work/$name.json" >"$work/$name.txt" 2>"$work/$name.err"
    note "== $name ($flags)"
    grep -E "^(embedded|service) " "$work/$name.txt" | head -6 | tee -a "$sum"
    grep -A8 "^phases" "$work/$name.txt" | grep -E "^(embedded|service) +(distinct|same)" >>"$sum"
    grep -m2 "read share" "$work/$name.err" >>"$sum"
  done
done
rm -rf $shm
call_end service8
