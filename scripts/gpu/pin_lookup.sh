#!/usr/bin/env bash
# One device call (carry [".deb"]), 2026-12-04 fifth session:
#   1. the engine suites on CudaDevice after the verify-worker path was removed;
#   2. bench lookup --store service (128K tokens) with the new polling for replies (client) and
#      for requests (service): 0/0, 200/0, 0/200, 200/200 us, two rounds in turn (issue 13: <= 2x);
#   3. bench concurrent --n 4 on tmpfs, CUDA then host: --mode both (embedded and 4 client
#      processes) against --mode service --pin-clients (each client pinned to a quarter of the
#      CPUs, its engine sized to that share), alternated twice (issue 13: >= 0.9 of embedded).
# Tables to <name>.txt, packed into $OUT/pin-logs.tar.gz; key lines in $OUT/summary.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
final="${OUT:-$PWD/out/gpu-pin}"
out=/tmp/rangekv-pin
rm -rf "$out" && mkdir -p "$out" "$final"
build=/tmp/rangekv-gpu-build
budget="${PIN_BUDGET_S:-500}"
. scripts/gpu/steps.sh
gpu_build rangekv engine_test engine_fault_test
for s in engine_test engine_fault_test; do
  RANGEKV_TEST_DEVICE=cuda t $s.cuda 90 $build/src/engine/$s
done
rkv=$build/tools/rangekv
for round in 1 2; do
  for spin in 0:0 200:0 0:200 200:200; do
    cs=${spin%%:*} ss=${spin##*:}
    name=lookup-r$round-c$cs-s$ss
    t $name 60 $rkv bench lookup --store service --reps 301 --granularity 16 \
      --client-spin-us $cs --service-spin-us $ss
    note "  $name: $(grep -E '^(embedded|service) ' "$out/$name.txt" | awk '{printf "%s %s us  ", $1, $3}') $(grep -o 'worst median ratio = [0-9.]*' "$out/$name.txt")"
  done
done
shm=/dev/shm/rkv-pin
conc() {  # name device mode extra...
  local name=$1 dev=$2 mode=$3
  shift 3
  rm -rf $shm && mkdir -p $shm
  t "$name" 120 $rkv bench concurrent --device "$dev" --dir $shm --buffered --mode "$mode" --n 4 \
    --size 4GiB --reps 3 --json "$out/$name.json" "$@"
  grep -E '^(embedded|service) ' "$out/$name.txt" | head -6 | sed "s/^/  $name: /" | tee -a "$sum"
}
for round in 1 2; do
  conc cuda-both-r$round cuda both
  conc cuda-pinned-r$round cuda service --pin-clients
done
conc host-both host both
conc host-pinned host service --pin-clients
rm -rf $shm
note "total: $(( $(date +%s) - start )) s"
tar -czf "$final/pin-logs.tar.gz" -C "$out" --exclude=build .
cp "$sum" "$final/summary.txt"
