#!/usr/bin/env bash
# One device call (carry [".deb"]): why RangeKV reads the H200's virtio disk (O_DIRECT) at half
# the rate of 4 threads x 32 MiB preads. Builds the CLI (scripts/gpu/python_test.sh), then runs
# `bench restore --payload 2GiB --objects 192,6144` RangeKV-only under each variant of
# DISK_DIAG_VARIANTS ("name|flags;..."), then the per-object model once. Results in
# $OUT/disk_diag.tgz and $OUT/summary.txt.
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin disk_diag "${DISK_DIAG_BUDGET_S:-300}"
call_build
variants="${DISK_DIAG_VARIANTS:-default|;checksum off|--checksum off;host device|--device host;8 workers|--read-workers 8;1 MiB split x16|--io-split 1MiB --read-io-threads 16;8 workers 16 banks lookahead 4|--read-workers 8 --read-banks 16 --lookahead 4}"
IFS=';' read -ra vs <<<"$variants"
i=0
for v in "${vs[@]}"; do
  (( $(left) > 30 )) || break
  name=${v%%|*} flags=${v#*|}
  i=$((i + 1))
  mkdir -p /var/tmp/rkv-disk
  dev="--device cuda"; [[ "$flags" == *"--device"* ]] && dev=""
  timeout 60 $rkv bench restore $dev $flags --dir /var/tmp/rkv-disk --payload 2GiB --objects 192,6144 \
    --ablations none --skip-baseline --reps 3 --ceiling-grid off --quiet \
    --json "$work/v$i.json" >"$work/v$i.txt" 2>&1
  rm -rf /var/tmp/rkv-disk
  note "== $name ($flags)"; grep -E "^I/O|^device|^(192|6144) |ceiling" "$work/v$i.txt" | head -6 | tee -a "$sum"
done
if (( $(left) > 40 )); then
  mkdir -p /var/tmp/rkv-disk
  timeout 80 $rkv bench restore --device cuda --dir /var/tmp/rkv-disk --payload 2GiB --objects 192,6144 \
    --ablations none --reps 3 --ceiling-grid short --quiet --json "$work/baseline.json" >"$work/baseline.txt" 2>&1
  rm -rf /var/tmp/rkv-disk
  note "== default with the per-object model"; grep -E "^(192|6144) |best ceiling|per-object / rangekv" "$work/baseline.txt" | tee -a "$sum"
fi
call_end disk_diag
