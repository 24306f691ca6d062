#!/usr/bin/env bash
# Read concurrency on the H200's tmpfs (issue #11/#14), one device call (carry [".deb"]):
#   1. build rangekv, engine_test and engine_unit_test only (run.sh, configure + build);
#   2. engine_test on CudaDevice and engine_unit_test (the new read_io_threads / fill_reads
#      rules);
#   3. bench restore, 8B geometry, 6 GiB on tmpfs, RangeKV only (--skip-baseline), one run per
#      configuration of the read side (READS_CONFIGS, "name|flags" per line), each with the
#      short ceiling grid and its own timeout; with READS_BASELINE=1 the default configuration
#      also runs the per-object model.
#   4. with READS_CONCURRENT=1, bench concurrent on tmpfs (the engine's defaults).
# Every run's table goes to <name>.txt, its progress lines to <name>.err, JSON to <name>.json,
# all packed into $OUT/reads-logs.tar.gz; $OUT/summary.txt collects the tables' key lines.
# Steps stop being started once READS_BUDGET_S (default 560) seconds have passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
final="${OUT:-$PWD/out/gpu-reads}"
out=/tmp/rangekv-reads
rm -rf "$out" && mkdir -p "$out" "$final"
build=/tmp/rangekv-gpu-build
budget="${READS_BUDGET_S:-560}"
. scripts/gpu/steps.sh
gpu_build rangekv engine_test engine_unit_test
t engine_unit_test 30 $build/src/engine/engine_unit_test
RANGEKV_TEST_DEVICE=cuda t engine_test.cuda 60 $build/src/engine/engine_test
grep -E '^\[  FAILED  \]' "$out/engine_test.cuda.txt" | sort -u | tee -a "$sum"
rkv=$build/tools/rangekv
shm=/dev/shm/rkv-reads
configs="${READS_CONFIGS:-default|}"
while IFS='|' read -r name flags; do
  [ -z "$name" ] && continue
  rm -rf $shm && mkdir -p $shm
  base=--skip-baseline to=75
  if [ "${READS_BASELINE:-0}" = 1 ] && [ "$name" = default ]; then base= to=200; fi
  # shellcheck disable=SC2086
  t "$name" $to $rkv bench restore --device cuda --dir $shm --buffered --payload 6GiB \
    --objects 192,6144,6144-LW,327680 --ablations none --reps 3 --ceiling-grid short \
    $base $flags --json "$out/$name.json"
  grep -E "^rangekv \[|rangekv: medians|/ best ceiling|engine-config ceiling|per-object /|^ *(192|6144|6144-LW|327680-TP) " \
    "$out/$name.txt" | sed "s/^/  /" | tee -a "$sum"
  grep -m1 -oE "rangekv \[device=[^]]*\]" "$out/$name.err" | sed "s/^/  /" | tee -a "$sum"
done <<<"$configs"
if [ "${READS_CONCURRENT:-0}" = 1 ]; then
  rm -rf $shm && mkdir -p $shm
  t concurrent 170 $rkv bench concurrent --device cuda --dir $shm --buffered \
    --json "$out/concurrent.json"
  tail -22 "$out/concurrent.txt" | sed "s/^/  /" | tee -a "$sum"
fi
rm -rf $shm
note "total: $(( $(date +%s) - start )) s"
tar -czf "$final/reads-logs.tar.gz" -C "$out" --exclude=build .
cp "$sum" "$final/summary.txt"
