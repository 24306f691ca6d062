#!/usr/bin/env bash
# The H200's I/O share of issue #14 in one device call (carry [".deb"]):
#   1. build rangekv and the GPU-relevant test binaries (scripts/gpu/steps.sh);
#   2. kernels_gpu_test, the engine suites on CudaDevice, io_test (which cuFile mode this VM
#      gets, and the fallback reason) and cufile_abi_test;
#   3. bench restore on tmpfs, 8B geometry, 6 GiB: every object count, RangeKV, the four
#      ablations, the per-object model and the checksum=off arm (--check), against the best
#      ceiling of the same run;
#   4. bench concurrent on tmpfs, N = 1..16, SWEEPS_CONCURRENT_SIZE per round (default 4 GiB:
#      256 MiB per request at N = 16, so per-request fixed costs do not decide the aggregate);
#   5. bench restore on the virtio disk (O_DIRECT), SWEEPS_DISK_PAYLOAD (default 2 GiB), with
#      the per-object model.
# Tables to <step>.txt, progress to <step>.err, JSON beside, packed into $OUT/sweeps-logs.tar.gz;
# $OUT/summary.txt has the key lines. Steps stop being started after SWEEPS_BUDGET_S (540 s).
#   SWEEPS_STEPS         which steps (default "tests restore_shm concurrent restore_disk")
#   SWEEPS_RESTORE_ARGS  replaces step 3's arguments after the common ones (default: every arm,
#                        --check); e.g. "--ablations none --skip-baseline --check --interleave"
#                        for RangeKV against checksum=off side by side, repetition by repetition
set -uo pipefail
cd "$(dirname "$0")/../.."
final="${OUT:-$PWD/out/gpu-sweeps}"
out=/tmp/rangekv-sweeps
rm -rf "$out" && mkdir -p "$out" "$final"
build=/tmp/rangekv-gpu-build
budget="${SWEEPS_BUDGET_S:-540}"
. scripts/gpu/steps.sh
steps=" ${SWEEPS_STEPS:-tests restore_shm concurrent restore_disk} "
if [[ $steps == *" tests "* ]]; then
  gpu_build rangekv kernels_gpu_test engine_test engine_fault_test engine_persistence_test io_test \
    cufile_abi_test
else
  gpu_build rangekv
fi
rkv=$build/tools/rangekv

if [[ $steps == *" tests "* ]]; then
t kernels_gpu_test 60 $build/src/device/kernels_gpu_test
for s in engine_test engine_fault_test engine_persistence_test; do
  RANGEKV_TEST_DEVICE=cuda t $s.cuda 90 $build/src/engine/$s
  grep -E '^\[  FAILED  \]' "$out/$s.cuda.txt" | sort -u | tee -a "$sum"
done
t io_test 60 $build/src/io/io_test
grep -hE 'cufile engine|fallback' "$out/io_test.txt" "$out/io_test.err" | sort -u | head -5 |
  sed 's/^/  /' | tee -a "$sum"
t cufile_abi_test 30 $build/src/io/cufile_abi_test
fi

shm=/dev/shm/rkv-sweeps
disk=/var/tmp/rkv-sweeps
keylines() {  # the table's summary lines
  grep -E "rangekv: medians|/ best ceiling|best ceiling|engine-config ceiling|per-object /|check|MISSED|^ *(192|768|3072|6144|6144-LW|327680-TP) " \
    "$out/$1.txt" | sed "s/^/  /" | head -60 | tee -a "$sum"
}
if [[ $steps == *" restore_shm "* ]]; then
  rm -rf $shm && mkdir -p $shm
  # shellcheck disable=SC2086
  t restore_shm "${SWEEPS_RESTORE_TIMEOUT:-300}" $rkv bench restore --device cuda --dir $shm --buffered \
    --payload 6GiB --reps "${SWEEPS_REPS:-5}" --ceiling-grid short ${SWEEPS_RESTORE_ARGS:---check} \
    --json "$out/restore_shm.json"
  keylines restore_shm
fi
if [[ $steps == *" concurrent "* ]]; then
  rm -rf $shm && mkdir -p $shm
  t concurrent 120 $rkv bench concurrent --device cuda --dir $shm --buffered \
    --size "${SWEEPS_CONCURRENT_SIZE:-4GiB}" --reps 3 --json "$out/concurrent.json"
  tail -24 "$out/concurrent.txt" | sed "s/^/  /" | tee -a "$sum"
fi
rm -rf $shm
if [[ $steps == *" restore_disk "* ]]; then
  mkdir -p $disk
  t restore_disk "${SWEEPS_DISK_TIMEOUT:-200}" $rkv bench restore --device cuda --dir $disk \
    --payload "${SWEEPS_DISK_PAYLOAD:-2GiB}" --objects "${SWEEPS_DISK_OBJECTS:-192,768,6144,6144-LW,327680}" \
    --ablations none --reps 3 --ceiling-grid short --json "$out/restore_disk.json"
  keylines restore_disk
  rm -rf $disk
fi
note "total: $(( $(date +%s) - start )) s"
tar -czf "$final/sweeps-logs.tar.gz" -C "$out" --exclude=build .
cp "$sum" "$final/summary.txt"
