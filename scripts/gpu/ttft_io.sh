#!/usr/bin/env bash
# One device call (carry [".deb"]) for what a short budget allows of issue #14:
#   1. the Python CUDA suite (scripts/gpu/python_test.sh: builds rangekv._core, _baseline and
#      the CLI with CUDA);
#   2. `rangekv bench ttft-hf` on the 8B shape from tmpfs: recompute, resident, RangeKV at four
#      object counts and layerwise (3 repetitions), with one profiled recompute and resident run;
#   3. bench restore on tmpfs, RangeKV against checksum=off side by side (--interleave), every
#      object count, against the best ceiling;
#   4. bench restore on the virtio disk (O_DIRECT), 2 GiB, RangeKV and the per-object model.
# Steps stop being started after TTFT_IO_BUDGET_S (330 s). Logs and JSON under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
final="${OUT:-$PWD/out}"
mkdir -p "$final"
start=$(date +%s)
budget="${TTFT_IO_BUDGET_S:-330}"
left() { echo $(( budget - ($(date +%s) - start) )); }
OUT=/tmp/rangekv-gpu-python timeout 150 bash scripts/gpu/python_test.sh >"$final/python.log" 2>&1
echo "python suite: $(tail -1 "$final/python.log") ($(( $(date +%s) - start )) s)"
rkv=/tmp/rangekv-gpu-pybuild/tools/rangekv
export LD_LIBRARY_PATH="/tmp/rangekv-prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p /dev/shm/rangekv-ttft
PYTHONPATH=/tmp/rangekv-pypkg PYTHONUNBUFFERED=1 timeout 200 \
  python3 -m rangekv.bench ttft-hf --device cuda --shape 8b --tmp-dir /dev/shm/rangekv-ttft \
  --buffered --check first --reps 3 --arms recompute,resident,rangekv --profile \
  --json "$final/ttft-8b.json" 2>&1 | grep -v '^rangekv [IWE] ' >"$final/ttft-8b.log"
rm -rf /dev/shm/rangekv-ttft
grep -A30 '^| Objects' "$final/ttft-8b.log"
echo "ttft: done at $(( $(date +%s) - start )) s"
if (( $(left) > 60 )); then
  mkdir -p /dev/shm/rkv-ck
  timeout $(( $(left) > 110 ? 100 : $(left) - 5 )) $rkv bench restore --device cuda --dir /dev/shm/rkv-ck \
    --buffered --payload 6GiB --objects 192,768,3072,6144,6144-LW,327680 --ablations none \
    --skip-baseline --check --interleave --reps 5 --ceiling-grid short --quiet \
    --json "$final/restore_shm_ck.json" >"$final/restore_shm_ck.txt" 2>&1
  rm -rf /dev/shm/rkv-ck
  tail -25 "$final/restore_shm_ck.txt"
fi
echo "restore shm: done at $(( $(date +%s) - start )) s"
if (( $(left) > 45 )); then
  mkdir -p /var/tmp/rkv-disk
  timeout $(( $(left) + 30 )) $rkv bench restore --device cuda --dir /var/tmp/rkv-disk --payload 2GiB \
    --objects 192,6144 --ablations none --reps 3 --ceiling-grid short \
    --json "$final/restore_disk.json" >"$final/restore_disk.txt" 2>"$final/restore_disk.err"
  rm -rf /var/tmp/rkv-disk
  tail -25 "$final/restore_disk.txt"
fi
echo "total: $(( $(date +%s) - start )) s"
