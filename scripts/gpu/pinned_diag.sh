#!/usr/bin/env bash
# One device call (carry [".deb"]): scripts/gpu/virtio_diag.sh found that on the H200's virtio
# disk each 32 MiB O_DIRECT read of a CUDA restore takes ~1.5x as long as the same read on the
# host device, while `bench io` into registered memory (touched before cudaHostRegister) reads
# at the plain rate. The engine's staging is registered untouched. This call restores 2 GiB to
# the GPU with the staging pages left untouched, touched, or touched as huge pages before
# registration (RANGEKV_PINNED_PREFAULT=none|touch|huge), alternated twice, with the restore
# phase counters; and records the machine's THP and block queue limits.
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin pinned_diag "${PINNED_DIAG_BUDGET_S:-330}"
call_build
disk=/var/tmp/rkv-pinned
{
  echo "THP enabled: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>&1)"
  echo "THP defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag 2>&1)"
  dev=$(df --output=source /var/tmp | tail -1)
  echo "/var/tmp on $dev"
  b=$(basename "$(readlink -f "$dev")"); b=${b%%[0-9]*}
  for f in max_sectors_kb max_hw_sectors_kb max_segments max_segment_size nr_requests scheduler; do
    echo "  $b queue/$f: $(cat /sys/block/$b/queue/$f 2>&1)"
  done
} | tee -a "$sum"
for round in 1 2; do
  for pf in none touch huge; do
    (( $(left) > 35 )) || break
    name="restore-$pf-$round"
    mkdir -p $disk
    RANGEKV_PINNED_PREFAULT=$pf timeout 60 $rkv bench restore --device cuda --dir $disk \
      --payload 2GiB --objects 192,6144 --ablations none --skip-baseline --reps 3 \
      --ceiling-grid off --quiet --json "$work/$name.json" >"$work/$name.txt" 2>&1
    rm -rf $disk
    note "== restore, staging prefault=$pf (round $round)"
    grep -E "^(192|6144) |phases" "$work/$name.txt" | tee -a "$sum"
  done
done
call_end pinned_diag
