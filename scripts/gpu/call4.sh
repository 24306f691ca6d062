#!/usr/bin/env bash
# One device call (carry [".deb"]): what had not run on the H200 since O_DIRECT reads moved to
# 4 MiB pieces on the posix pool (2026-12-04):
#   1. the engine suites on CudaDevice, io_test (the cuFile mode and fallback reason),
#      cufile_abi_test, kernels_gpu_test; the virtio disk restore with the per-object model
#      (scripts/gpu/sweeps.sh, steps "tests restore_disk") -> $OUT/sweeps/
#   2. the store service: service_test, bench lookup through the service, bench concurrent with
#      4 client processes against embedded after the bench's verify-after-every-end fix
#      (scripts/gpu/service.sh, N = 1,4) -> $OUT/service/
set -uo pipefail
cd "$(dirname "$0")/../.."
base="${OUT:-$PWD/out}"
OUT="$base/sweeps" SWEEPS_STEPS="tests restore_disk" SWEEPS_DISK_OBJECTS="192,768,6144,6144-LW" \
  SWEEPS_BUDGET_S=200 bash scripts/gpu/sweeps.sh
OUT="$base/service" SERVICE_N=1,4 SERVICE_BUDGET_S=300 bash scripts/gpu/service.sh
