#!/usr/bin/env bash
# One device call (carry [".deb"]), 2026-12-05 seventh session: is issue 13's H200 gap the
# host's last-level cache? One embedded engine restoring four requests keeps 8 read banks of 8
# MiB (64 MiB) hot and reaches 1.12-1.15x the read ceiling (whose target buffer is payload
# sized); four clients keep 4 x 64 MiB. Arms per round, in turn: --mode both (defaults); the
# clients sized to one engine's share in workers, threads and banks (1, 4, 2: 16 MiB each, 64
# in all); the embedded engine with 32 banks (256 MiB, what four default clients hold).
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin service7 "${SERVICE7_BUDGET:-300}"
lscpu | grep -E "Model name|Socket|NUMA node\(s\)|L2|L3|^CPU\(s\)" | tee -a "$sum"
call_build
shm=/dev/shm/rkv-s7
for round in 1 2 3; do
  for arm in both cb2 eb32; do
    (( $(left) > 45 )) || break 2
    name=conc-r$round-$arm
    case $arm in
      both) flags="--mode both" ;;
      cb2) flags="--mode service --client-read-workers 1 --client-read-threads 4 --client-read-banks 2" ;;
      eb32) flags="--mode embedded --embedded-read-banks 32" ;;
    esac
    rm -rf $shm && mkdir -p $shm
    timeout 80 $rkv bench concurrent --device cuda --dir $shm --buffered $flags --n 4 \
      --size 4GiB --reps 3 --ceiling-passes end \
      --json "$work/$name.json" >"$work/$name.txt" 2>"$work/$name.err"
    note "== $name ($flags)"
    grep -E "^(embedded|service) " "$work/$name.txt" | head -6 | tee -a "$sum"
  done
done
rm -rf $shm
call_end service7
