# Sourced by the one-call GPU scripts (call2.sh, disk_diag.sh, repeat.sh): a work folder, a
# summary, a step budget, the build, and the packing of results into two files (the device tool
# returns only a few files per call).
#   call_begin NAME BUDGET_S   work folder /tmp/rangekv-NAME, $sum, note(), left()
#   call_build                 scripts/gpu/python_test.sh (rangekv._core, _baseline, the CLI,
#                              the Python CUDA suite); sets $rkv and the library path
#   call_end NAME              $OUT/NAME.tgz (every log and JSON) and $OUT/summary.txt
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
