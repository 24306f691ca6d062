#!/usr/bin/env bash
# One device call (carry [".deb"]): why the engine reads the H200's virtio disk (O_DIRECT) at
# 0.5-0.8 of its ceiling when it restores to the GPU and at 0.96-0.99 on the host device.
#   1. `bench io --direct` into plain and into cudaHostRegister'ed memory (--cuda-register),
#      alternated twice: does page-locking the destination change the disk's rate?
#   2. `bench restore` on CUDA, CUDA with checksum off, and host, 2 GiB at 192 objects, with the
#      restore phase counters (restore_read_ns: reads' time summed over stripes; _verify_ns;
#      _deliver_ns): are the CUDA path's reads slower, or are its workers idle?
# Results in $OUT/virtio_diag.tgz and $OUT/summary.txt.
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin virtio_diag "${VIRTIO_DIAG_BUDGET_S:-540}"
call_build
disk=/var/tmp/rkv-virtio
for round in 1 2; do
  for reg in "" "--cuda-register"; do
    (( $(left) > 60 )) || break
    name="io${round}${reg:+-registered}"
    mkdir -p $disk
    timeout 90 $rkv bench io --direct --dir $disk --size 2GiB --block 32MiB --threads 4 \
      --ceiling-grid short --reps 3 $reg --json "$work/$name.json" >"$work/$name.txt" 2>&1
    rm -rf $disk
    note "== bench io ${reg:-plain memory} (round $round)"
    grep -E "^best ceiling|^ceiling|^best-ceil|^posix|^uring|registered|Error|error" "$work/$name.txt" | tee -a "$sum"
  done
done
for v in "cuda|--device cuda" "cuda-nochecksum|--device cuda --checksum off" "host|--device host" \
         "cuda-8banks-16|--device cuda --read-banks 16 --read-workers 8"; do
  (( $(left) > 45 )) || break
  name=${v%%|*} flags=${v#*|}
  mkdir -p $disk
  timeout 80 $rkv bench restore $flags --dir $disk --payload 2GiB --objects 192,6144 \
    --ablations none --skip-baseline --reps 3 --ceiling-grid off --quiet \
    --json "$work/restore-$name.json" >"$work/restore-$name.txt" 2>&1
  rm -rf $disk
  note "== restore $name ($flags)"
  grep -E "^(192|6144) |ceiling|phases" "$work/restore-$name.txt" | tee -a "$sum"
done
call_end virtio_diag
