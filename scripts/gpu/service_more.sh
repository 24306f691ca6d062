#!/usr/bin/env bash
# One device call (carry [".deb"]): more rounds of what scripts/gpu/service_final.sh measured,
# on another machine, this tree only:
#   1. bench lookup --store service, 128K tokens: the service's sessions sleeping between
#      requests (default) against polling 200 us for the next one (--service-spin-us 200),
#      alternated 3 times (the client polls 200 us for replies in both);
#   2. bench concurrent --n 4 on tmpfs, CUDA: --mode both, then --mode service --pin-clients,
#      alternated 3 times.
# Everything packed into $OUT/service-more.tgz; key lines in $OUT/summary.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
final="${OUT:-$PWD/out/gpu-service-more}"
out=/tmp/rangekv-service-more
rm -rf "$out" && mkdir -p "$out" "$final"
build=/tmp/rangekv-gpu-build
budget="${MORE_BUDGET_S:-420}"
. scripts/gpu/steps.sh
gpu_build rangekv
rkv=$build/tools/rangekv
for round in 1 2 3; do
  for ss in 0 200; do
    name=lookup-r$round-s$ss
    t $name 60 $rkv bench lookup --store service --reps 301 --granularity 16 --service-spin-us $ss
    note "  $name: $(grep -E '^(embedded|service) ' "$out/$name.txt" | awk '{printf "%s %s us  ", $1, $3}') $(grep -o 'worst median ratio = [0-9.]*' "$out/$name.txt")"
  done
done
shm=/dev/shm/rkv-more
for round in 1 2 3; do
  for mode in both pinned; do
    name=cuda-$mode-r$round
    extra=(--mode both)
    [ $mode = pinned ] && extra=(--mode service --pin-clients)
    rm -rf $shm && mkdir -p $shm
    t $name 120 $rkv bench concurrent --device cuda --dir $shm --buffered --n 4 --size 4GiB \
      --reps 3 "${extra[@]}" --json "$out/$name.json"
    grep -E '^(embedded|service) ' "$out/$name.txt" | head -6 | sed "s/^/  /" | tee -a "$sum"
  done
done
rm -rf $shm
note "total: $(( $(date +%s) - start )) s"
tar -czf "$final/service-more.tgz" -C "$out" --exclude=build .
cp "$sum" "$final/summary.txt"
