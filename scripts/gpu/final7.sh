#!/usr/bin/env bash
# One device call (carry [".deb"]), 2026-12-05 second session: what it changed, on the H200.
#   1. the Python package built and its CUDA suite (scripts/gpu/python_test.sh, via call_lib.sh);
#   2. kernels_gpu_test, the engine suites on CudaDevice, io_test, cufile_abi_test
#      (scripts/gpu/sweeps.sh step "tests"): the restore's verdict now goes through
#      Stream::VerifiedScatter where it runs on the job's stream;
#   3. bench restore on tmpfs, 6 GiB, checksum on and off (the CUDA verdict path);
#   4. bench concurrent --mode both --n 4 on tmpfs, CUDA, with the ceiling read before every
#      round (issue 13: 4 client processes against one process).
# Logs packed into $OUT/final7.tgz; key lines in $OUT/summary.txt.
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin final7 560
call_build
OUT="$work/sweeps" SWEEPS_STEPS="tests" SWEEPS_BUDGET_S=200 bash scripts/gpu/sweeps.sh >"$work/sweeps.log" 2>&1
cat "$work/sweeps/summary.txt" >>"$sum" 2>/dev/null || tail -20 "$work/sweeps.log" >>"$sum"
if (( $(left) > 200 )); then step_checksum_shm; fi
if (( $(left) > 120 )); then
  shm=/dev/shm/rkv-conc
  for round in 1 2; do
    rm -rf $shm && mkdir -p $shm
    timeout $(( $(left) > 130 ? 120 : $(left) - 10 )) $rkv bench concurrent --device cuda --dir $shm \
      --buffered --mode both --n 4 --size 4GiB --reps 3 --json "$work/conc-r$round.json" \
      >"$work/conc-r$round.txt" 2>"$work/conc-r$round.err"
    note "== concurrent round $round"
    grep -E "^(embedded|service) |best read ceiling" "$work/conc-r$round.txt" | head -8 | tee -a "$sum"
    (( $(left) > 120 )) || break
  done
  rm -rf $shm
fi
call_end final7
