#!/usr/bin/env bash
# One device call (carry [".deb"]), 2026-12-05 eighth session: is issue 13's four-client loss
# "four engines" or "four engines' worth of reads in flight"? One embedded engine given what
# four default clients hold together: 16 read workers (16 stripe reads in flight), 32 banks and
# 64 read I/O threads (e16t64); the same with its 16 default threads (e16), and 4 workers with
# 64 threads (e4t64). Per round, in turn: --mode both --interleave (embedded defaults and 4
# clients, their rounds alternated), then
# the three embedded arms. Restores only (--variants distinct,same-prefix).
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin service9 "${SERVICE9_BUDGET:-330}"
lscpu | grep -E "Model name|L3" | tee -a "$sum"
call_build
v="--variants distinct,same-prefix"
for round in 1 2 3; do
  for arm in both e16t64 e16 e4t64; do
    (( $(left) > 35 )) || break 2
    case $arm in
      both) step_conc conc-r$round-both --mode both --interleave $v ;;
      e16t64) step_conc conc-r$round-e16t64 --mode embedded $v --embedded-read-workers 16 \
        --embedded-read-banks 32 --embedded-read-threads 64 ;;
      e16) step_conc conc-r$round-e16 --mode embedded $v --embedded-read-workers 16 \
        --embedded-read-banks 32 ;;
      e4t64) step_conc conc-r$round-e4t64 --mode embedded $v --embedded-read-threads 64 ;;
    esac
  done
done
call_end service9
