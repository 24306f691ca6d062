#!/usr/bin/env bash
# One device call for the H200 (device tool: carry [".deb"]), sized for about 8 minutes:
#   1. build (scripts/gpu/run.sh, configure + build) incl. io_test and cufile_abi_test;
#   2. kernels_gpu_test (every layout), the engine suites on CudaDevice, io_test with the real
#      libcufile, cufile_abi_test against the toolkit's cufile.h;
#   3. bench restore, 8B geometry, 6 GiB on tmpfs: RangeKV vs the per-object model at 192,
#      6,144, 6,144-LW and 327,680 objects, best ceiling (short grid) in the same run;
#      checksum on and off;
#   4. bench restore on the virtio disk (O_DIRECT, 2 GiB) with --io cufile (mode or fallback
#      reason) and the byte split probed, against the per-object model;
#   5. bench concurrent on tmpfs, N = 1, 2, 4, 8, 16.
# Every step has its own timeout; logs are packed into $OUT/final-logs.tar.gz, the summary is
# printed.
set -uo pipefail
cd "$(dirname "$0")/../.."
final="${OUT:-$PWD/out}"
work=/tmp/rangekv-final
rm -rf "$work" && mkdir -p "$work"
build=/tmp/rangekv-gpu-build
sum="$work/summary.txt"
note() { echo "$*" | tee -a "$sum"; }
OUT="$work/build" RANGEKV_GPU_CONFIGURE_ONLY=1 RANGEKV_GPU_STAGES="engine bench" \
  RANGEKV_GPU_BUILD=$build bash scripts/gpu/run.sh >"$work/run.log" 2>&1 ||
  { tail -30 "$work/run.log"; exit 1; }
export LD_LIBRARY_PATH="/tmp/rangekv-prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cmake --build $build -j "$(nproc)" --target io_test cufile_abi_test >"$work/build-io.log" 2>&1 ||
  note "io_test/cufile_abi_test build failed"
t() {  # name timeout cmd...
  local name=$1 to=$2; shift 2
  local s=$(date +%s)
  timeout "$to" "$@" >"$work/$name.log" 2>&1
  local rc=$?
  note "$name: rc=$rc ($(( $(date +%s) - s ))s) $(grep -E '^\[  (PASSED|FAILED) ' "$work/$name.log" | tr '\n' ' ')"
}
t kernels_gpu_test 120 $build/src/device/kernels_gpu_test
grep -E '^\[  FAILED  \]' "$work/kernels_gpu_test.log" | sort -u | tee -a "$sum"
for x in engine_test engine_fault_test engine_persistence_test; do
  RANGEKV_TEST_DEVICE=cuda t "$x.cuda" 120 $build/src/engine/$x
  grep -E '^\[  FAILED  \]' "$work/$x.cuda.log" | sort -u | tee -a "$sum"
done
t cufile_abi_test 30 $build/src/io/cufile_abi_test
(cd "$work" && t io_test 120 $build/src/io/io_test)
grep -E "FAILED|cufile" "$work/io_test.log" | head -8 | tee -a "$sum"
rkv=$build/tools/rangekv
shm=/dev/shm/rkv-final disk=/var/tmp/rkv-final
mkdir -p $shm $disk
t restore_shm 200 $rkv bench restore --device cuda --dir $shm --buffered --payload 6GiB \
  --objects 192,6144,6144-LW,327680 --ablations none --reps 3 --ceiling-grid short \
  --json "$work/restore_shm.json"
grep -E "ceiling|per-object|^ *(192|6144|327680)" "$work/restore_shm.log" | head -20 | tee -a "$sum"
t restore_shm_nock 90 $rkv bench restore --device cuda --dir $shm --buffered --payload 6GiB \
  --objects 192,6144 --ablations none --skip-baseline --reps 3 --ceiling-grid off \
  --checksum off --json "$work/restore_shm_nock.json"
grep -E "^ *(192|6144)" "$work/restore_shm_nock.log" | head -6 | tee -a "$sum"
rm -rf $shm/*
t restore_disk 150 $rkv bench restore --device cuda --io cufile --io-split auto --dir $disk \
  --payload 2GiB --objects 192,6144 --ablations none --reps 3 --ceiling-grid short \
  --json "$work/restore_disk.json"
grep -E "ceiling|per-object|byte split|cufile|^ *(192|6144)" "$work/restore_disk.log" | head -20 | tee -a "$sum"
rm -rf $disk
if $rkv bench concurrent --help >/dev/null 2>&1; then
  t concurrent 150 $rkv bench concurrent --device cuda --dir $shm --buffered \
    --json "$work/concurrent.json"
  tail -25 "$work/concurrent.log" | tee -a "$sum"
fi
rm -rf $shm
mkdir -p "$final"
tar -czf "$final/final-logs.tar.gz" -C "$work" --exclude=build .
cp "$sum" "$final/summary.txt"
echo "==== summary"; cat "$sum"
