# Sourced by the one-call GPU scripts (call2.sh, disk_diag.sh, repeat.sh): a work folder, a
# summary, a step budget, the build, and the packing of results into two files (the device tool
# returns only a few files per call).
#   call_begin NAME BUDGET_S   work folder /tmp/rangekv-NAME, $sum, note(), left()
#   call_build                 scripts/gpu/python_test.sh (rangekv._core, _baseline, the CLI,
#                              the Python CUDA suite); sets $rkv and the library path
#   call_end NAME              $OUT/NAME.tgz (every log and JSON) and $OUT/summary.txt
#   step_ttft REPS [TIMEOUT_S] ttft-hf, 8B shape, recompute + resident + RangeKV, on tmpfs
#                              (TIMEOUT_S: 260 unless given)
#   step_checksum_shm          bench restore, 6 GiB on tmpfs, checksum on/off side by side
#   step_conc NAME FLAGS...    bench concurrent, 4 requests of 1 GiB from tmpfs into the GPU,
#                              with FLAGS (--mode ...); its rows, phases and clients' read share
call_begin() {
  cd "$(dirname "${BASH_SOURCE[1]}")/../.." || exit 1
  final="${OUT:-$PWD/out}"
  work=/tmp/rangekv-$1
  rm -rf "$work" && mkdir -p "$work" "$final"
  start=$(date +%s)
  budget=$2
  sum="$work/summary.txt"
}
left() { echo $(( budget - ($(date +%s) - start) )); }
note() { echo "$*" | tee -a "$sum"; }
call_build() {
  OUT=/tmp/rangekv-gpu-python timeout 150 bash scripts/gpu/python_test.sh >"$work/python.log" 2>&1
  note "build + python suite: $(tail -1 "$work/python.log") ($(( $(date +%s) - start )) s)"
  rkv=/tmp/rangekv-gpu-pybuild/tools/rangekv
  export LD_LIBRARY_PATH="/tmp/rangekv-prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}
call_end() {
  note "total: $(( $(date +%s) - start )) s"
  tar -czf "$final/$1.tgz" -C "$work" .
  cp "$sum" "$final/summary.txt"
}
step_ttft() {
  mkdir -p /dev/shm/rangekv-ttft
  PYTHONPATH=/tmp/rangekv-pypkg PYTHONUNBUFFERED=1 timeout "${2:-260}" \
    python3 -m rangekv.bench ttft-hf --device cuda --shape 8b --tmp-dir /dev/shm/rangekv-ttft \
    --buffered --check first --reps "$1" --arms recompute,resident,rangekv \
    --json "$work/ttft-8b.json" 2>&1 | grep -v '^rangekv [IWE] ' >"$work/ttft-8b.log"
  rm -rf /dev/shm/rangekv-ttft
  grep -A30 '^| Objects' "$work/ttft-8b.log" | tee -a "$sum" || tail -20 "$work/ttft-8b.log"
  note "ttft: done at $(( $(date +%s) - start )) s"
}
step_checksum_shm() {
  mkdir -p /dev/shm/rkv-ck
  timeout 85 $rkv bench restore --device cuda --dir /dev/shm/rkv-ck --buffered --payload 6GiB \
    --objects 192,6144,6144-LW --ablations none --skip-baseline --check --interleave --reps 5 \
    --ceiling-grid short --quiet --json "$work/restore_shm_ck.json" >"$work/restore_shm_ck.txt" 2>&1
  rm -rf /dev/shm/rkv-ck
  note "== checksum on/off, tmpfs"; tail -12 "$work/restore_shm_ck.txt" | tee -a "$sum"
}
# bench concurrent's service clients pass a read gate by default since commit dc58457
# (--read-gate auto, as rangekv serve --read-slots); the scripts recorded before it ran them
# ungated: add --read-gate 0 to reproduce those.
step_conc() {
  local name=$1 shm=/dev/shm/rkv-conc
  shift
  rm -rf $shm && mkdir -p $shm
  timeout 80 $rkv bench concurrent --device cuda --dir $shm --buffered "$@" --n 4 --size 4GiB \
    --reps 3 --ceiling-passes end --json "$work/$name.json" >"$work/$name.txt" 2>"$work/$name.err"
  rm -rf $shm
  note "== $name ($*)"
  grep -E "^(embedded|service) " "$work/$name.txt" | head -6 | tee -a "$sum"
  grep -A8 "^phases" "$work/$name.txt" | grep -E "^(embedded|service) +(distinct|same)" >>"$sum"
  grep -m2 "read share" "$work/$name.err" >>"$sum"
}
