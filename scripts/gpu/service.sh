#!/usr/bin/env bash
# The store service on the H200 machine (issue #13), one device call (carry [".deb"]):
#   1. build rangekv and service_test only (run.sh, configure + build); run service_test;
#   2. bench lookup --store service: Engine::Lookup embedded against through the service, 128K
#      tokens (acceptance: within 2x);
#   3. bench concurrent --mode both on tmpfs, CudaDevice, buffered: every (variant, N) embedded
#      in one process and through an in-process service with one client process per request
#      (acceptance: 4 client processes reach >= 0.9 of the embedded aggregate);
#   4. optional service-only runs with the clients' read threads / banks sized down
#      (SERVICE_CLIENT_RUNS).
# Tables to <name>.txt, progress to <name>.err, JSON to <name>.json, packed into
# $OUT/service-logs.tar.gz; $OUT/summary.txt collects the key lines.
set -uo pipefail
cd "$(dirname "$0")/../.."
final="${OUT:-$PWD/out/gpu-service}"
out=/tmp/rangekv-service
rm -rf "$out" && mkdir -p "$out" "$final"
build=/tmp/rangekv-gpu-build
budget="${SERVICE_BUDGET_S:-540}"
. scripts/gpu/steps.sh
gpu_build rangekv service_test
t service_test 90 $build/src/service/service_test
rkv=$build/tools/rangekv
[ "${SERVICE_LOOKUP:-1}" = 1 ] && t lookup 60 $rkv bench lookup --store service --reps 301 --json "$out/lookup.json"
[ -f "$out/lookup.txt" ] && tail -9 "$out/lookup.txt" | sed "s/^/  /" | tee -a "$sum"
shm=/dev/shm/rkv-service
rm -rf $shm && mkdir -p $shm
t concurrent 300 $rkv bench concurrent --device ${SERVICE_DEVICE:-cuda} --dir $shm --buffered --mode both \
  --n "${SERVICE_N:-1,4,8}" --size "${SERVICE_SIZE:-4GiB}" --reps 3 --json "$out/concurrent.json"
tail -40 "$out/concurrent.txt" | sed "s/^/  /" | tee -a "$sum"
# Client engines sized down (SERVICE_CLIENT_RUNS="threads:banks ...", 0 = the engine's own):
# each client's read I/O threads and read banks, e.g. the node's 16 threads or 8 banks split
# four ways, against each client taking what one process alone would (the run above).
for run in ${SERVICE_CLIENT_RUNS:-}; do
  ct=${run%%:*} cb=${run##*:}
  rm -rf $shm && mkdir -p $shm
  t concurrent-ct$ct-b$cb 200 $rkv bench concurrent --device ${SERVICE_DEVICE:-cuda} --dir $shm --buffered --mode service \
    --n "${SERVICE_N:-1,4,8}" --size "${SERVICE_SIZE:-4GiB}" --reps 3 --client-read-threads $ct \
    --client-read-banks $cb --json "$out/concurrent-ct$ct-b$cb.json"
  tail -26 "$out/concurrent-ct$ct-b$cb.txt" | sed "s/^/  /" | tee -a "$sum"
done
rm -rf $shm
note "total: $(( $(date +%s) - start )) s"
tar -czf "$final/service-logs.tar.gz" -C "$out" --exclude=build .
cp "$sum" "$final/summary.txt"
