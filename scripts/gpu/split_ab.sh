#!/usr/bin/env bash
# One device call (carry [".deb"]), 2026-12-05: the H200 VM's virtio disk (O_DIRECT), the new
# O_DIRECT defaults against the previous ones, three rounds in turn:
#   restore 2 GiB: 1 MiB pieces over 16 threads (default) vs 4 MiB over 8;
#   store (the 2 GiB payload's suffix): 1 MiB write pieces (default) vs whole spans (--io-split off).
# Reuses the CLI of an earlier call on a warm machine, else builds it.
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin split_ab 560
if [ -x /tmp/rangekv-gpu-pybuild/tools/rangekv ]; then
  rkv=/tmp/rangekv-gpu-pybuild/tools/rangekv
  export LD_LIBRARY_PATH="/tmp/rangekv-prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  note "reusing $rkv"
else
  call_build
fi
mkdir -p /var/tmp/rkv-ab
common="--device cuda --dir /var/tmp/rkv-ab --payload 2GiB --objects 192,6144 --ablations none --skip-baseline --reps 3 --ceiling-grid short"
for round in 1 2 3; do
  for a in "" "--io-split 4MiB --read-io-threads 8"; do
    (( $(left) > 60 )) || break 2
    timeout 70 $rkv bench restore $common $a 2>/dev/null \
      | grep -E "best ceiling \(|^(192|6144) " | sed "s|^|r$round restore[${a:-default}] |" >>"$sum"
  done
  for a in "" "--io-split off"; do
    (( $(left) > 60 )) || break 2
    timeout 70 $rkv bench store $common --durability none $a 2>/dev/null \
      | grep -E "best ceiling \(|^(192|6144) " | sed "s|^|r$round store[${a:-default}] |" >>"$sum"
  done
done
call_end split_ab
