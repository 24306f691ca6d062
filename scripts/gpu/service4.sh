#!/usr/bin/env bash
# One device call (carry [".deb"]), 2026-12-05 second session: issue 13's four client processes
# against one process (bench concurrent --mode both --n 4, tmpfs, CUDA), the ceiling measured
# after the rounds (--ceiling-passes end: passes before rounds slowed the embedded rounds that
# followed them), unpinned and with --pin-clients, three rounds in turn. First (third session):
# the CUDA test suites (scripts/gpu/sweeps.sh step "tests"), which now include
# DeviceConformance.GatherDigestWritesTheGatherAndDigestsWhatItWrote and the reworded
# VerifiedScatterWritesMatchingSpansAndFlagsTheOthers on CudaDevice.
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin service4 "${SERVICE4_BUDGET:-440}"
# Free page reporting (freed memory goes back to the host; its next first touch faults there)
# made tmpfs stores slow on the dev VM (docs/benchmarks.md, 2026-12-05 fourth session).
note "kernel: $(uname -r); $(dmesg 2>/dev/null | grep -io 'free page reporting enabled' | head -1)"
note "cmdline page reporting: $(tr ' ' '\n' </proc/cmdline | grep -i reporting)"
call_build
OUT="$work/sweeps" SWEEPS_STEPS="tests" SWEEPS_BUDGET_S=120 bash scripts/gpu/sweeps.sh >"$work/sweeps.log" 2>&1
cat "$work/sweeps/summary.txt" >>"$sum" 2>/dev/null || tail -20 "$work/sweeps.log" >>"$sum"
# The lookup through the service with the session walking on the client's CPU (fourth
# session: protocol version 3), sleeping and polling service.
for spin in 0 200; do
  timeout 60 $rkv bench lookup --store service --reps 301 --service-spin-us $spin \
    >"$work/lookup-spin$spin.txt" 2>&1
  note "lookup spin=$spin: $(grep -E '^(embedded|service) +256' "$work/lookup-spin$spin.txt" | awk '{printf "%s %s us  ", $1, $3}') $(grep -o 'worst median ratio = [0-9.]*' "$work/lookup-spin$spin.txt"); $(grep -o 'round trip [0-9.]* us' "$work/lookup-spin$spin.txt")"
done
shm=/dev/shm/rkv-s4
for round in 1 2 3; do
  for pin in "" "--pin-clients"; do
    (( $(left) > 100 )) || break 2
    name=conc-r$round${pin:+-pinned}
    rm -rf $shm && mkdir -p $shm
    timeout 95 $rkv bench concurrent --device cuda --dir $shm --buffered --mode both --n 4 \
      --size 4GiB --reps 3 --ceiling-passes end $pin --json "$work/$name.json" \
      >"$work/$name.txt" 2>"$work/$name.err"
    note "== $name"
    grep -E "^(embedded|service) " "$work/$name.txt" | head -6 | tee -a "$sum"
  done
done
rm -rf $shm
call_end service4
