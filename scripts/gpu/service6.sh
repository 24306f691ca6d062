#!/usr/bin/env bash
# One device call (carry [".deb"]), 2026-12-05 sixth session: issue 13's four clients with the
# clients' engines sized to a quarter of the node's read concurrency. service5.sh found that
# four engines in threads of one process lose what four processes lose (first layer 7.7-9.9 ms
# against 5.8-7.1 embedded): N engines keep N x 4 stripe spans in flight where the one embedded
# engine keeps 4. Three rounds in turn: --mode both (defaults), then --mode service with one
# read worker per client, then one read worker and 4 read I/O threads per client.
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin service6 "${SERVICE6_BUDGET:-300}"
call_build
shm=/dev/shm/rkv-s6
for round in 1 2 3; do
  for arm in both w1 w1t4; do
    (( $(left) > 45 )) || break 2
    name=conc-r$round-$arm
    case $arm in
      both) flags="--mode both" ;;
      w1) flags="--mode service --client-read-workers 1" ;;
      w1t4) flags="--mode service --client-read-workers 1 --client-read-threads 4" ;;
    esac
    rm -rf $shm && mkdir -p $shm
    timeout 80 $rkv bench concurrent --device cuda --dir $shm --buffered $flags --n 4 \
      --size 4GiB --reps 3 --ceiling-passes end --json "$work/$name.json" \
      >"$work/$name.txt" 2>"$work/$name.err"
    note "== $name ($flags)"
    grep -E "^(embedded|service) " "$work/$name.txt" | head -6 | tee -a "$sum"
    grep -A8 "^phases" "$work/$name.txt" | grep -E "^(embedded|service) +(distinct|same)" >>"$sum"
  done
done
rm -rf $shm
call_end service6
