# Shared by the one-call GPU scripts (reads.sh, service.sh): sourced after they set
#   out (scratch folder, holds summary.txt), build (build folder), budget (seconds).
# gpu_build TARGETS...  configure + build only those targets (run.sh), then put the carried
#                       .deb prefix on LD_LIBRARY_PATH; exits on a failed build.
# note LINE             prints LINE and appends it to $out/summary.txt.
# t NAME TIMEOUT CMD... runs CMD (stdout to NAME.txt, stderr to NAME.err) unless the budget
#                       would be exceeded; notes its exit status, time and gtest summary.
sum="$out/summary.txt"
start=$(date +%s)
note() { echo "$*" | tee -a "$sum"; }
gpu_build() {
  OUT="$out/build" RANGEKV_GPU_CONFIGURE_ONLY=1 RANGEKV_GPU_STAGES="engine bench" \
    RANGEKV_GPU_TARGETS="$*" RANGEKV_GPU_BUILD=$build \
    bash scripts/gpu/run.sh >"$out/run.log" 2>&1 || { tail -30 "$out/run.log"; exit 1; }
  rm -rf "$out/build"
  note "build: $(( $(date +%s) - start )) s; $(nproc) cores; $(uname -r)"
  export LD_LIBRARY_PATH="/tmp/rangekv-prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}
t() {  # name timeout cmd...
  local name=$1 to=$2; shift 2
  local s=$(date +%s)
  if (( s - start + to > budget + 60 )); then note "$name: skipped (budget)"; return; fi
  timeout "$to" "$@" >"$out/$name.txt" 2>"$out/$name.err"
  local rc=$?
  note "$name: rc=$rc ($(( $(date +%s) - s ))s) $(grep -E '^\[  (PASSED|FAILED) ' "$out/$name.txt" | tr '\n' ' ')"
}
