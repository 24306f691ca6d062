#!/usr/bin/env bash
# One device call (carry [".deb"]), 2026-12-06: does the node's read gate (rangekv serve
# --read-slots N, EngineOptions::read_gate; docs/store-service.md "A node-wide read gate") bring
# four client processes to one embedded engine's aggregate on a GPU host? Per round, in turn:
# --mode both --interleave without a gate, then with a gate of 16 slots (what one engine's 16
# read I/O threads keep in flight on a 16-CPU host). Restores only (distinct, same-prefix).
# (Run as of 6088bac, when --read-gate defaulted to 0; it now defaults to auto, so the plain arm
# names 0.)
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin service10 "${SERVICE10_BUDGET:-330}"
lscpu | grep -E "Model name|L3" | tee -a "$sum"
call_build
v="--variants distinct,same-prefix"
for round in 1 2 3; do
  for arm in plain gate16; do
    (( $(left) > 35 )) || break 2
    case $arm in
      plain) step_conc conc-r$round-plain --mode both --interleave $v --read-gate 0 ;;
      gate16) step_conc conc-r$round-gate16 --mode both --interleave $v --read-gate 16 ;;
    esac
  done
done
call_end service10
