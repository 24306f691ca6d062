#!/usr/bin/env bash
# One device call (carry [".deb"]), 2026-12-05 sixth session. First the CUDA test suites
# (scripts/gpu/sweeps.sh step "tests": the GatherDigest conformance case now sized for the GPU's
# scale). Then issue 13's four clients three ways, three rounds in turn: one process embedded and
# four client processes through the service (--mode both), and four engines as threads of one
# process through the service (--clients threads): if the threads lose as much as the
# processes, what costs is N engines, not N processes.
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin service5 "${SERVICE5_BUDGET:-330}"
call_build
OUT="$work/sweeps" SWEEPS_STEPS="tests" SWEEPS_BUDGET_S=120 bash scripts/gpu/sweeps.sh >"$work/sweeps.log" 2>&1
cat "$work/sweeps/summary.txt" >>"$sum" 2>/dev/null || tail -20 "$work/sweeps.log" >>"$sum"
shm=/dev/shm/rkv-s5
for round in 1 2 3; do
  for clients in processes threads; do
    (( $(left) > 45 )) || break 2
    name=conc-r$round-$clients
    mode=both; [[ $clients == threads ]] && mode=service
    rm -rf $shm && mkdir -p $shm
    timeout 80 $rkv bench concurrent --device cuda --dir $shm --buffered --mode $mode --n 4 \
      --size 4GiB --reps 3 --ceiling-passes end --clients $clients --json "$work/$name.json" \
      >"$work/$name.txt" 2>"$work/$name.err"
    note "== $name"
    grep -E "^(embedded|service|svc-thrd) " "$work/$name.txt" | head -6 | tee -a "$sum"
    grep -A8 "^phases" "$work/$name.txt" | grep -E "^(embedded|service|svc-thrd) +distinct" >>"$sum"
  done
done
rm -rf $shm
call_end service5
