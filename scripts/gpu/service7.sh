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
for round in 1 2 3; do
  for arm in both cb2 eb32; do
    (( $(left) > 45 )) || break 2
    case $arm in
      both) step_conc conc-r$round-both --mode both ;;
      cb2) step_conc conc-r$round-cb2 --mode service --client-read-workers 1 --client-read-threads 4 --client-read-banks 2 ;;
      eb32) step_conc conc-r$round-eb32 --mode embedded --embedded-read-banks 32 ;;
    esac
  done
done
call_end service7
