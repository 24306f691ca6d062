#!/usr/bin/env bash
# One device call (carry [".deb"]), 2026-12-05: where `bench lookup --store service` spends its
# time over the embedded lookup on the H200 (issue 13: within 2x at 128K tokens). The bench's
# last line splits it: a 16-token miss through the service less embedded (the round trip) and a
# plain copy of the 512 KiB query. Three rounds, the service sleeping between requests, then
# polling 200 us for them. An optional OLD tree (as for lookup_ab.sh) is built and run in turn.
#   bash scripts/gpu/lookup_breakdown.sh [OLD]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=/tmp/rangekv-lookup-bd
final="${OUT:-$PWD/out/gpu-lookup-bd}"
rm -rf "$out" && mkdir -p "$out" "$final"
build=/tmp/rangekv-gpu-build
budget=420
. scripts/gpu/steps.sh
gpu_build rangekv
variants="new"
if [ $# -ge 1 ]; then
  old_tree=$(realpath "$1")
  cp -r .deb "$old_tree/" 2>/dev/null
  (cd "$old_tree" && out=/tmp/rangekv-bd-old build=/tmp/rangekv-bd-oldbuild budget=600 &&
    rm -rf "$out" && mkdir -p "$out" && . scripts/gpu/steps.sh && gpu_build rangekv) &&
    variants="old new"
fi
for round in 1 2 3; do
  for v in $variants; do
    rkv=$build/tools/rangekv
    [ "$v" = old ] && rkv=/tmp/rangekv-bd-oldbuild/tools/rangekv
    for ss in 0 200; do
      name=lookup-$v-r$round-s$ss
      t $name 60 $rkv bench lookup --store service --reps 301 --granularity 16 --service-spin-us $ss
      note "  $name: $(grep -E '^(embedded|service) ' "$out/$name.txt" | awk '{printf "%s %s us  ", $1, $3}') $(grep -o 'worst median ratio = [0-9.]*' "$out/$name.txt")"
      note "    $(grep '^where' "$out/$name.txt")"
    done
  done
done
note "total: $(( $(date +%s) - start )) s"
tar -czf "$final/lookup-bd.tgz" -C "$out" --exclude=build .
cp "$sum" "$final/summary.txt"
