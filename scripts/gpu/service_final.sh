#!/usr/bin/env bash
# One device call (carry [".deb", ".gpu"]; .gpu/old = `git archive e87057f src include tools cmake
# CMakeLists.txt CMakePresets.json testing fuzz scripts`, the tree before the lookup changes):
#   1. bench lookup --store service, 128K tokens, the old tree (the service copies the query out
#      of the buffer; calls sleep for their reply) against this one (walk in place, 200 us
#      polling for the reply), alternated 4 times (scripts/gpu/lookup_ab.sh);
#   2. bench concurrent --n 4 on tmpfs, CUDA, this tree: --mode both, then --mode service
#      --pin-clients, alternated twice.
# Everything packed into $OUT/service-final.tgz; key lines in $OUT/summary.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
final="${OUT:-$PWD/out/gpu-service-final}"
work=/tmp/rangekv-service-final
rm -rf "$work" && mkdir -p "$work" "$final"
start=$(date +%s)
OUT="$work/lookup" bash scripts/gpu/lookup_ab.sh .gpu/old 4 >"$work/lookup.log" 2>&1
cat "$work/lookup/summary.txt" >"$work/summary.txt" 2>/dev/null || tail -20 "$work/lookup.log" >"$work/summary.txt"
echo "lookup A/B done at $(( $(date +%s) - start )) s" >>"$work/summary.txt"
export LD_LIBRARY_PATH="/tmp/rangekv-prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
rkv=/tmp/rangekv-ab-new/tools/rangekv
shm=/dev/shm/rkv-final
for round in 1 2; do
  for mode in both pinned; do
    name=cuda-$mode-r$round
    extra=(--mode both)
    [ $mode = pinned ] && extra=(--mode service --pin-clients)
    rm -rf $shm && mkdir -p $shm
    if (( $(date +%s) - start > 480 )); then echo "$name: skipped (budget)" >>"$work/summary.txt"; continue; fi
    timeout 120 $rkv bench concurrent --device cuda --dir $shm --buffered --n 4 --size 4GiB --reps 3 \
      "${extra[@]}" --json "$work/$name.json" >"$work/$name.txt" 2>"$work/$name.err"
    echo "$name: rc=$?" >>"$work/summary.txt"
    grep -E '^(embedded|service) ' "$work/$name.txt" | head -6 | sed "s/^/  /" >>"$work/summary.txt"
  done
done
rm -rf $shm
echo "total: $(( $(date +%s) - start )) s; $(nproc) cores; $(uname -r)" >>"$work/summary.txt"
tar -czf "$final/service-final.tgz" -C "$work" .
cp "$work/summary.txt" "$final/summary.txt"
