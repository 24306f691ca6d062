#!/usr/bin/env bash
# The H200's virtio disk, one device call (carry [".deb"]): O_DIRECT restores of 2 GiB at 192
# objects with the per-object model, the default read I/O (4 MiB pieces over 2 x read_workers
# threads) against whole spans on the read workers' own threads (`--io-split off
# --read-io-threads 4`, the default before 2026-12-04), alternately DISK_AB_ROUNDS times (2),
# so the disk's drift between calls does not enter the comparison.
# Tables to $OUT/disk_ab.tgz, key lines to $OUT/summary.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
final="${OUT:-$PWD/out/gpu-disk-ab}"
out=/tmp/rangekv-disk-ab
rm -rf "$out" && mkdir -p "$out" "$final"
build=/tmp/rangekv-gpu-build
budget="${DISK_AB_BUDGET_S:-280}"
. scripts/gpu/steps.sh
gpu_build rangekv
rkv=$build/tools/rangekv
disk=/var/tmp/rkv-disk-ab
for r in $(seq 1 "${DISK_AB_ROUNDS:-2}"); do
  for v in "pieces:" "spans:--io-split off --read-io-threads 4"; do
    name=${v%%:*} args=${v#*:}
    rm -rf $disk && mkdir -p $disk
    # shellcheck disable=SC2086
    t $name-$r 70 $rkv bench restore --device cuda --dir $disk --payload 2GiB --objects 192 \
      --ablations none --reps 3 --ceiling-grid short --quiet $args --json "$out/$name-$r.json"
    grep -E "^192 |best ceiling \(|byte split|per-object / rangekv|phases" "$out/$name-$r.txt" |
      sed "s/^/  /" | tee -a "$sum"
  done
done
rm -rf $disk
note "total: $(( $(date +%s) - start )) s"
tar -czf "$final/disk_ab.tgz" -C "$out" .
cp "$sum" "$final/summary.txt"
