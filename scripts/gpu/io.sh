#!/usr/bin/env bash
# The I/O layer's checks on the GPU machine (device tool: carry [".deb"]): builds through
# run.sh (configure + build only), then
#   - cufile_abi_test: cufile_shim.h against the toolkit's real cufile.h;
#   - io_test: the engines, byte split, split probe and cufile engine tests (the real-library
#     test here finds libcufile.so.0 and a GPU);
#   - bench restore on the virtio disk (O_DIRECT) with --io cufile (its mode or the reason it
#     fell back), with the byte split probed (auto) and off, against the per-object model.
# Environment: OUT (default ./out/gpu-io), RANGEKV_IO_PAYLOAD (default 2GiB).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-$PWD/out/gpu-io}"
build=/tmp/rangekv-gpu-build
mkdir -p "$out"
OUT="$out/build" RANGEKV_GPU_CONFIGURE_ONLY=1 RANGEKV_GPU_STAGES="bench" RANGEKV_GPU_BUILD=$build \
  bash scripts/gpu/run.sh >"$out/run.log" 2>&1 || { tail -30 "$out/run.log"; exit 1; }
export LD_LIBRARY_PATH="/tmp/rangekv-prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cmake --build $build -j "$(nproc)" --target io_test cufile_abi_test >"$out/build-io.log" 2>&1 ||
  { grep -E -B2 -A6 "error" "$out/build-io.log" | tail -30; exit 1; }
echo "== cufile_abi_test"; $build/src/io/cufile_abi_test 2>&1 | tail -1
echo "== io_test"; (cd "$out" && $build/src/io/io_test >"$out/io_test.log" 2>&1); tail -1 "$out/io_test.log"
grep -E "FAILED|SKIPPED|cufile engine" "$out/io_test.log" | head
payload="${RANGEKV_IO_PAYLOAD:-2GiB}"
dir=/var/tmp/rkv-io; mkdir -p $dir
for split in auto off; do
  echo "== restore --io cufile --io-split $split"
  timeout 420 $build/tools/rangekv bench restore --device cuda --io cufile --dir $dir \
    --payload "$payload" --objects 192,6144,6144-LW --ablations none --reps 3 --io-split $split \
    --ceiling-grid short --json "$out/restore-$split.json" >"$out/restore-$split.txt" \
    2>"$out/restore-$split.err"
  echo "rc=$?"; grep -E "^device|best ceiling|byte split|per-object /|^192|^6144" "$out/restore-$split.txt"
  grep -m3 -i "cufile" "$out/restore-$split.err"
done
