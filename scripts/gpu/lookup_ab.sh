#!/usr/bin/env bash
# A/B of `bench lookup --store service` between this tree and an older one (OLD: a plain copy of
# another commit's sources, e.g. `git archive REV src include tools cmake CMakeLists.txt
# CMakePresets.json testing fuzz scripts | tar -x -C OLD`, carried with the device call beside
# .deb). Both are built (rangekv only), then run alternately ROUNDS times on the same machine, so
# the machine's drift between device calls does not enter the comparison.
#   bash scripts/gpu/lookup_ab.sh OLD [ROUNDS]
set -uo pipefail
cd "$(dirname "$0")/../.."
old_tree=$(realpath "$1")
rounds=${2:-3}
final="${OUT:-$PWD/out/gpu-lookup-ab}"
mkdir -p "$final"
cp -r .deb "$old_tree/" 2>/dev/null
build_in() {  # tree build_dir
  (cd "$1" && out=/tmp/rangekv-ab-$(basename "$2") build=$2 budget=600 &&
    rm -rf "$out" && mkdir -p "$out" && . scripts/gpu/steps.sh && gpu_build rangekv)
}
build_in "$PWD" /tmp/rangekv-ab-new || exit 1
build_in "$old_tree" /tmp/rangekv-ab-old || exit 1
export LD_LIBRARY_PATH="/tmp/rangekv-prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for r in $(seq 1 "$rounds"); do
  for v in old new; do
    /tmp/rangekv-ab-$v/tools/rangekv bench lookup --store service --reps 301 --granularity 16 \
      >"$final/lookup-$v-$r.txt" 2>/dev/null
    echo "$v round $r: $(grep -E '^(embedded|service) ' "$final/lookup-$v-$r.txt" | awk '{printf "%s %s us  ", $1, $3}')" |
      tee -a "$final/summary.txt"
  done
done
