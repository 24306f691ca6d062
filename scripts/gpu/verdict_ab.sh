#!/usr/bin/env bash
# The device-side checksum verdict on the H200, one device call (carry [".deb", ".gpu"]):
#   1. this tree: kernels_gpu_test (the conformance suite's DigestVerdictGatesTheScatter on CUDA)
#      and the engine suites on CudaDevice, where the verdict is decided on the device;
#   2. A/B against OLD (default .gpu/old: a plain copy of the commit before the change, made with
#      `git archive REV src include tools cmake CMakeLists.txt CMakePresets.json testing fuzz
#      scripts python pyproject.toml | tar -x -C .gpu/old`), where verify workers wait for the
#      digests on the host before the scatter: bench restore, 6 GiB on tmpfs, checksum on and
#      off interleaved repetition by repetition (--check --interleave), old and new alternately,
#      ROUNDS times, so the machine's drift does not enter the comparison.
#   bash scripts/gpu/verdict_ab.sh [OLD] [ROUNDS]
# Tables and JSON packed into $OUT/verdict-ab.tgz (the device tool returns only a few files),
# key lines in $OUT/summary.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
old_tree=$(realpath "${1:-.gpu/old}")
rounds=${2:-2}
final="${OUT:-$PWD/out/gpu-verdict-ab}"
mkdir -p "$final"
out=/tmp/rangekv-verdict
rm -rf "$out" && mkdir -p "$out"
build=/tmp/rangekv-ab-new
budget=560
. scripts/gpu/steps.sh
gpu_build rangekv kernels_gpu_test engine_test engine_fault_test engine_persistence_test
t kernels_gpu_test 60 $build/src/device/kernels_gpu_test
for s in engine_test engine_fault_test engine_persistence_test; do
  RANGEKV_TEST_DEVICE=cuda t $s.cuda 90 $build/src/engine/$s
  grep -E '^\[  FAILED  \]' "$out/$s.cuda.txt" | sort -u | tee -a "$sum"
done
cp -r .deb "$old_tree/" 2>/dev/null
(cd "$old_tree" && out=/tmp/rangekv-ab-old-out build=/tmp/rangekv-ab-old budget=600 &&
  rm -rf "$out" && mkdir -p "$out" && . scripts/gpu/steps.sh && gpu_build rangekv) >/dev/null ||
  note "old build failed"
note "old build: done at $(( $(date +%s) - start )) s"
shm=/dev/shm/rkv-verdict
for r in $(seq 1 "$rounds"); do
  for v in old new; do
    rm -rf $shm && mkdir -p $shm
    bin=/tmp/rangekv-ab-$v/tools/rangekv
    [ $v = new ] && bin=$build/tools/rangekv
    t $v-$r 110 $bin bench restore --device cuda --dir $shm --buffered --payload 6GiB \
      --objects 192,6144,6144-LW --ablations none --skip-baseline --check --interleave --reps 5 \
      --ceiling-grid short --json "$out/$v-$r.json"
    grep -E "checksum cost|/ best ceiling|phases|^(192|6144|6144-LW) " "$out/$v-$r.txt" |
      sed "s/^/  /" | head -16 | tee -a "$sum"
  done
done
rm -rf $shm
note "total: $(( $(date +%s) - start )) s"
tar -czf "$final/verdict-ab.tgz" -C "$out" .
cp "$sum" "$final/summary.txt"
