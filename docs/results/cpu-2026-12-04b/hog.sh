#!/usr/bin/env bash
# The O_DIRECT read ceiling of the dev VM's disk with 0, 1 and 2 of its 2 vCPUs kept busy by a
# shell loop (no memory traffic): does CPU work in the guest slow the medium? Two rounds.
B="${RKV:-build/default/tools/rangekv} bench io --size 1GiB --direct --threads 4 --ceiling-grid off --reps 3"
for round in 1 2; do
  for hogs in 0 1 2; do
    pids=()
    for ((i = 0; i < hogs; i++)); do (while :; do :; done) & pids+=($!); done
    sleep 0.3
    echo "round $round, $hogs busy vCPU(s): $($B 2>&1 | awk '/rep     ceiling/{printf "%s ", $5}') GiB/s"
    for p in "${pids[@]}"; do kill "$p"; done
    wait 2>/dev/null
  done
done
