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
for round in 1 2 3; do
  for arm in both off; do
    (( $(left) > 45 )) || break 2
    case $arm in
      both) step_conc conc-r$round-both --mode both ;;
      off) step_conc conc-r$round-off --mode service --client-share-reads off ;;
    esac
  done
done
call_end service8
