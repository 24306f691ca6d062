#!/usr/bin/env bash
# One device call (carry [".deb"]) for issue #14's open points:
#   1. the Python CUDA suite (scripts/gpu/python_test.sh; builds rangekv._core, _baseline, CLI);
#   2. scripts/gpu/attention_check.py: split attention against the fused lower-right kernel;
#   3. ttft-hf, 8B shape, recompute + resident + RangeKV (4 object counts and layerwise) with the
#      split attention (--attention-split on), 3 repetitions;
#   4. checksum cost side by side (--interleave) on tmpfs at read banks 8 and 16;
#   5. bench restore on the virtio disk (O_DIRECT), 2 GiB, RangeKV and the per-object model.
# Steps stop being started after SPLIT_BANKS_BUDGET_S (560 s). Logs and JSON under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
final="${OUT:-$PWD/out}"
mkdir -p "$final"
start=$(date +%s)
budget="${SPLIT_BANKS_BUDGET_S:-560}"
left() { echo $(( budget - ($(date +%s) - start) )); }
OUT=/tmp/rangekv-gpu-python timeout 150 bash scripts/gpu/python_test.sh >"$final/python.log" 2>&1
echo "python suite: $(tail -1 "$final/python.log") ($(( $(date +%s) - start )) s)"
rkv=/tmp/rangekv-gpu-pybuild/tools/rangekv
export LD_LIBRARY_PATH="/tmp/rangekv-prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PYTHONPATH=/tmp/rangekv-pypkg timeout 60 python3 scripts/gpu/attention_check.py 2>&1 | tee "$final/attention_check.json"
if (( $(left) > 200 )) && [ "${SPLIT_BANKS_TTFT:-1}" = 1 ]; then
  mkdir -p /dev/shm/rangekv-ttft
  PYTHONPATH=/tmp/rangekv-pypkg PYTHONUNBUFFERED=1 timeout 230 \
    python3 -m rangekv.bench ttft-hf --device cuda --shape 8b --tmp-dir /dev/shm/rangekv-ttft \
    --buffered --check first --reps 3 --arms recompute,resident,rangekv --attention-split on \
    --json "$final/ttft-8b-split.json" 2>&1 | grep -v '^rangekv [IWE] ' >"$final/ttft-8b-split.log"
  rm -rf /dev/shm/rangekv-ttft
  grep -A30 '^| Objects' "$final/ttft-8b-split.log" || tail -20 "$final/ttft-8b-split.log"
fi
echo "ttft: done at $(( $(date +%s) - start )) s"
for banks in ${SPLIT_BANKS_LIST:-8 16}; do
  (( $(left) > 60 )) || break
  mkdir -p /dev/shm/rkv-ck
  timeout 85 $rkv bench restore --device cuda --dir /dev/shm/rkv-ck --buffered --payload 6GiB \
    --objects 192,6144,6144-LW --ablations none --skip-baseline --check --interleave --reps 5 \
    --ceiling-grid short --read-banks "$banks" --quiet \
    --json "$final/restore_shm_ck_banks$banks.json" >"$final/restore_shm_ck_banks$banks.txt" 2>&1
  rm -rf /dev/shm/rkv-ck
  echo "== read banks $banks"; tail -12 "$final/restore_shm_ck_banks$banks.txt"
done
echo "restore shm: done at $(( $(date +%s) - start )) s"
if (( $(left) > 45 )); then
  mkdir -p /var/tmp/rkv-disk
  timeout $(( $(left) + 60 )) $rkv bench restore --device cuda --dir /var/tmp/rkv-disk --payload 2GiB \
    --objects 192,6144 --ablations none --reps 3 --ceiling-grid short \
    --json "$final/restore_disk.json" >"$final/restore_disk.txt" 2>"$final/restore_disk.err"
  rm -rf /var/tmp/rkv-disk
  tail -25 "$final/restore_disk.txt"
fi
echo "total: $(( $(date +%s) - start )) s"
