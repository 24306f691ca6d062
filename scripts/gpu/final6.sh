#!/usr/bin/env bash
# One device call (carry [".deb"]), the sixth session of 2026-12-04: what it changed, on the H200.
#   1. the Python package built and its CUDA suite (scripts/gpu/python_test.sh, via call_lib.sh):
#      Engine.lookup's local_tokens and the connector's CPU placement are in it;
#   2. kernels_gpu_test, the engine suites on CudaDevice, io_test, cufile_abi_test
#      (scripts/gpu/sweeps.sh step "tests"): a prefetch that starts past the caller's local
#      tokens, on the device;
#   3. ttft-hf on the 8B shape (tmpfs), whose prefix read ceiling now reads the prefix's own
#      packs (ttft_hf.prefix_extents) instead of the start of the pack region.
#   4. (2026-12-05) the virtio disk with the new O_DIRECT read default (1 MiB pieces over 16
#      threads) against the previous one (4 MiB over 8), side by side.
# Logs packed into $OUT/final6.tgz; key lines in $OUT/summary.txt.
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin final6 560
call_build
export RANGEKV_CLI="$rkv"  # rangekv.inspect (the ceiling's prefix extents) runs the CLI
OUT="$work/sweeps" SWEEPS_STEPS="tests" SWEEPS_BUDGET_S=200 bash scripts/gpu/sweeps.sh >"$work/sweeps.log" 2>&1
cat "$work/sweeps/summary.txt" >>"$sum" 2>/dev/null || tail -20 "$work/sweeps.log" >>"$sum"
if (( $(left) > 330 )); then
  mkdir -p /var/tmp/rkv-split
  for a in "" "--io-split 4MiB --read-io-threads 8"; do
    timeout 60 $rkv bench restore --device cuda --dir /var/tmp/rkv-split --payload 2GiB \
      --objects 192,6144 --ablations none --skip-baseline --reps 3 --ceiling-grid short $a \
      2>/dev/null | grep -E "best ceiling \(|^(192|6144) " | sed "s|^|split[${a:-default}] |" >>"$sum"
  done
fi
if (( $(left) > 200 )); then
  step_ttft 5 $(( $(left) - 15 ))
  python3 - "$work/ttft-8b.json" <<'PY' | tee -a "$sum"
import json, sys
c = json.load(open(sys.argv[1])).get("prefix_read_ceiling", {})
print("prefix read ceiling:", {k: c.get(k) for k in ("seconds", "bytes", "extents", "threads", "error")})
PY
fi
call_end final6
