#!/usr/bin/env bash
# One device call (carry [".deb"]), the end of the fifth session of 2026-12-04: what this
# session changed, on the H200.
#   1. the Python package built and its CUDA suite (scripts/gpu/python_test.sh, via call_lib.sh);
#   2. kernels_gpu_test, the engine suites on CudaDevice, io_test, cufile_abi_test and
#      service_test (scripts/gpu/sweeps.sh step "tests", then service_test from that build);
#   3. a 6 GiB restore on tmpfs with checksums on against off, side by side (the verdict after
#      the verify-worker path was removed).
# Logs packed into $OUT/final5.tgz; key lines in $OUT/summary.txt.
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin final5 560
call_build
OUT="$work/sweeps" SWEEPS_STEPS="tests" SWEEPS_BUDGET_S=200 bash scripts/gpu/sweeps.sh >"$work/sweeps.log" 2>&1
cat "$work/sweeps/summary.txt" >>"$sum" 2>/dev/null || tail -20 "$work/sweeps.log" >>"$sum"
(cd /tmp/rangekv-sweeps && ninja -C /tmp/rangekv-gpu-build service_test >/dev/null 2>&1 &&
  timeout 90 /tmp/rangekv-gpu-build/src/service/service_test >"$work/service_test.txt" 2>&1)
note "service_test: $(grep -E '^\[  (PASSED|FAILED) ' "$work/service_test.txt" | tr '\n' ' ')"
if (( $(left) > 100 )); then step_checksum_shm; else note "checksum step skipped (budget)"; fi
call_end final5
