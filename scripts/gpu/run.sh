#!/usr/bin/env bash
# shellcheck disable=SC2317  # the suite_* functions are called by name (suite_$s)
# RangeKV's GPU work, one entry point: bash scripts/gpu/run.sh SUITE...
#
# Runs on the GPU machine, from the repository root, in one device call (the device tool: run
# "bash scripts/gpu/run.sh SUITE..." with carry [".deb"]). That machine has CUDA 13, cmake,
# ninja, g++ and python3 with torch, nanobind, numpy and pytest, but no package registry: the
# Debian 12 build dependencies travel as .deb files in .deb/ (ignored by git; fetch them once on
# a Debian 12 machine with scripts/gpu/fetch_debs.sh). The first suite builds everything once
# (scripts/gpu/lib.sh, gpu_build); the suites then run in the order given, each step with its
# own timeout, no step started once BUDGET seconds have passed.
#
# Suites (docs/benchmarks.md names the suite behind each GPU figure):
#   tests       kernels_gpu_test, its compute-sanitizer memcheck, device_test and kernels_test
#               on this machine's CPU, the engine suites on CudaDevice, io_test (which cuFile
#               mode the machine gives), cufile_abi_test, service_test, and the Python
#               package's tests with CUDA tensors
#   restore     bench restore, 6 GiB on tmpfs: RangeKV and the per-object model at four
#               namings, then checksums on and off side by side (--check)
#   store       bench store: the 2016 MiB suffix after a 6 GiB prefix, tmpfs, every naming
#   disk        the virtio disk (O_DIRECT, 2 GiB): a restore with the per-object model, then
#               ROUNDS rounds of a restore and a store (RangeKV only)
#   concurrent  bench concurrent on tmpfs, 4 GiB a round split over N = 1..16 requests
#   service     ROUNDS rounds of four client processes through an in-process store service
#               against one embedded engine, rounds interleaved, one invocation per arm of
#               SERVICE_ARMS (ungated gated: --read-gate 0 and 16; also pinned, inflight);
#               then bench lookup --store service (the service polling 0 and 200 us)
#   ttft        python -m rangekv.bench ttft-hf on the 8B shape from tmpfs: recompute,
#               resident and RangeKV at every object count, REPS repetitions
#   vllm        vLLM 0.25.1 with the connector (scripts/gpu/vllm_gpu.py), vLLM carried in parts
#               by scripts/gpu/vllm_carry.sh: every call before the last runs only
#               "bash scripts/gpu/vllm_carry.sh receive" with carry [".gpu/vllm/K"], the last
#               "bash scripts/gpu/vllm_carry.sh receive && bash scripts/gpu/run.sh vllm" with
#               carry [".deb", ".gpu/vllm/N"]. Steps: install, correctness (tokens and logprobs
#               against vLLM's own prefix cache: NHD, HND, the cross-layer allocation), then
#               Table 3's TTFT arms on tmpfs (VLLM_ARMS, ';'-separated; default: RangeKV at 192
#               and 3,072 objects, layerwise, LMCache's disk tier at the same two chunkings,
#               vLLM's OffloadingConnector);
#               VLLM_STEPS (default "correctness ttft") picks the steps after the install
#   remote      the cluster tier (docs/scale-out.md): SeaweedFS's S3 gateway (weed, carried as
#               .gpu/weed/weed.xz: xz -c "$(command -v weed)" > .gpu/weed/weed.xz) and Debian's
#               redis-server (in .deb) on 127.0.0.1, then bench remote restoring into CUDA
#               memory (REMOTE_POINTS, default 192,6144,6144-LW,327680; the per-object model up
#               to 6,144 objects), then the same on the host device (REMOTE_DEVICES);
#               REMOTE_CPUS (a taskset list, e.g. 0,1) pins the servers and the bench to
#               those cores (0,1 stands in for the 2-vCPU dev VM); REMOTE_VARIANTS, ';'-separated
#               sets of extra bench arguments, runs the bench once per set
#   list        these names
# Environment (all optional): OUT where the files come back (default ./out/gpu: gpu.tgz with
# every log, table and JSON, and summary.txt), BUDGET (540 s), ROUNDS (3), REPS (5),
# SERVICE_ARMS ("ungated gated"), and lib.sh's build knobs.
# Exit status: non-zero when the build or any step failed. The summary is printed last.
#
# A new suite: a function suite_NAME below, made of lib.sh's steps (bench, step, note), and its
# line above.
set -uo pipefail
# shellcheck source=scripts/gpu/lib.sh
. "$(dirname "$0")/lib.sh"

shm=/dev/shm/rangekv-gpu
disk=/var/tmp/rangekv-gpu

suite_tests() {
  gpu_build || return
  step kernels_gpu_test 120 "$build/src/device/kernels_gpu_test"
  grep -hE '^\[(device|access|throughput)\]' "$work/kernels_gpu_test.txt" | tee -a "$sum"
  if command -v compute-sanitizer >/dev/null 2>&1; then
    step memcheck 300 compute-sanitizer --tool memcheck --error-exitcode 3 \
      "$build/src/device/kernels_gpu_test" --gtest_filter='*ScatterAndGather*:*LayerGroup*:*Digest*:*CrossLayer*'
  fi
  step device_test 120 "$build/src/device/device_test"
  step kernels_test 120 "$build/src/kernels/kernels_test"
  local t
  for t in engine_test engine_fault_test engine_persistence_test; do
    RANGEKV_TEST_DEVICE=cuda step "$t.cuda" 120 "$build/src/engine/$t"
  done
  STEP_CWD=$work step io_test 120 "$build/src/io/io_test"  # its cuFile log lands in $work
  grep -hE 'cufile engine|fallback' "$work/io_test.txt" "$work/io_test.err" | sort -u | head -3 |
    sed 's/^/  /' | tee -a "$sum"
  step cufile_abi_test 30 "$build/src/io/cufile_abi_test"
  step service_test 120 "$build/src/service/service_test"
  PYTHONPATH=$pkg step python_tests 200 python3 -m pytest -q -rs -p no:cacheprovider \
    python/tests/test_*.py
}

suite_restore() {
  gpu_build || return
  rm -rf "$shm" && mkdir -p "$shm"
  bench restore_shm 200 restore --device "$device" --dir "$shm" --buffered --payload 6GiB \
    --objects 192,6144,6144-LW,327680 --ablations none --reps 3 --ceiling-grid short
  bench restore_shm_checksum 120 restore --device "$device" --dir "$shm" --buffered \
    --payload 6GiB --objects 192,6144,6144-LW --ablations none --skip-baseline --check \
    --interleave --reps 5 --ceiling-grid short
  rm -rf "$shm"
}

suite_store() {
  gpu_build || return
  rm -rf "$shm" && mkdir -p "$shm"
  bench store_shm 330 store --device "$device" --dir "$shm" --buffered --payload 6GiB --reps 3
  rm -rf "$shm"
}

suite_disk() {
  gpu_build || return
  # shellcheck disable=SC2054  # commas are part of the flags' values
  local r common=(--device "$device" --dir "$disk" --payload 2GiB --objects 192,6144
    --ablations none --reps 3 --ceiling-grid short)
  rm -rf "$disk" && mkdir -p "$disk"
  bench restore_disk 200 restore --device "$device" --dir "$disk" --payload 2GiB \
    --objects 192,768,3072,6144,6144-LW --ablations none --reps 3 --ceiling-grid short
  for r in $(seq 1 "${ROUNDS:-3}"); do
    bench "restore_disk_r$r" 70 restore "${common[@]}" --skip-baseline
    bench "store_disk_r$r" 70 store "${common[@]}" --skip-baseline --durability none
  done
  rm -rf "$disk"
}

suite_concurrent() {
  gpu_build || return
  rm -rf "$shm" && mkdir -p "$shm"
  bench concurrent 150 concurrent --device "$device" --dir "$shm" --buffered --size 4GiB --reps 3
  rm -rf "$shm"
}

suite_service() {
  gpu_build || return
  # shellcheck disable=SC2054
  local r arm flags variants=(--variants distinct,same-prefix)
  for r in $(seq 1 "${ROUNDS:-3}"); do
    for arm in ${SERVICE_ARMS:-ungated gated}; do
      case $arm in
        ungated) flags=(--mode both --interleave "${variants[@]}" --read-gate 0) ;;
        gated) flags=(--mode both --interleave "${variants[@]}" --read-gate 16) ;;
        pinned) flags=(--mode service --pin-clients "${variants[@]}") ;;
        # One engine keeping in flight what four default clients keep together.
        inflight) flags=(--mode embedded "${variants[@]}" --embedded-read-workers 16
          --embedded-read-banks 32 --embedded-read-threads 64) ;;
        *) note "unknown service arm $arm"; status=1; continue ;;
      esac
      rm -rf "$shm" && mkdir -p "$shm"
      bench "service_r${r}_$arm" 90 concurrent --device "$device" --dir "$shm" --buffered --n 4 \
        --size 4GiB --reps 3 --ceiling-passes end "${flags[@]}"
      grep -m2 "read share" "$work/service_r${r}_$arm.err" | sed 's/^/  /' >>"$sum"
    done
  done
  rm -rf "$shm"
  local spin
  for spin in 0 200; do
    bench "lookup_spin$spin" 60 lookup --store service --reps 301 --service-spin-us "$spin"
  done
}

suite_ttft() {
  gpu_build || return
  rm -rf "$shm" && mkdir -p "$shm"
  PYTHONPATH=$pkg PYTHONUNBUFFERED=1 step ttft_8b 330 python3 -m rangekv.bench ttft-hf \
    --device "$device" --shape 8b --tmp-dir "$shm" --buffered --check first --reps "${REPS:-5}" \
    --arms recompute,resident,rangekv --json "$work/ttft_8b.json"
  grep -A14 '^| Objects' "$work/ttft_8b.txt" | tee -a "$sum"
  rm -rf "$shm"
}

suite_vllm() {
  gpu_build || return
  step vllm_install 180 bash scripts/gpu/vllm_carry.sh install || return
  # shellcheck source=/dev/null
  . "${RANGEKV_VLLM_ROOT:-/tmp/rangekv-vllm}/env.sh"
  local steps=" ${VLLM_STEPS:-correctness ttft} "
  if [[ $steps == *" correctness "* ]]; then
    PYTHONPATH=$pkg:$PYTHONPATH PYTHONUNBUFFERED=1 step vllm_correctness 420 python3 \
      scripts/gpu/vllm_gpu.py correctness --work "$work/corr" --timeout 150 \
      --json "$work/vllm_correctness.json"
    tail -12 "$work/vllm_correctness.txt" | sed 's/^/  /' | tee -a "$sum"
  fi
  [[ $steps == *" ttft "* ]] || return 0
  rm -rf "$shm" && mkdir -p "$shm"
  PYTHONPATH=$pkg:$PYTHONPATH PYTHONUNBUFFERED=1 step vllm_ttft 540 python3 \
    scripts/gpu/vllm_gpu.py ttft --work "$work/ttft" --media shm --shm-root "$shm" \
    --arms "${VLLM_ARMS:-rangekv 192 shm;rangekv 3,072 shm;LW shm;lmcache disk 192 shm;lmcache disk 3,072 shm;vllm offloading}" \
    --reps "${REPS:-3}" --timeout 200 --json "$work/vllm_ttft.json"
  tail -16 "$work/vllm_ttft.txt" | sed 's/^/  /' | tee -a "$sum"
  rm -rf "$shm"
}

suite_remote() {
  gpu_build || return
  local weed=/tmp/rangekv-weed/weed servers=/tmp/rangekv-servers dev  # data outside $work
  if [ ! -x "$weed" ]; then
    [ -f .gpu/weed/weed.xz ] || { note "FAILED: no .gpu/weed/weed.xz carried"; status=1; return 1; }
    if ! { mkdir -p "${weed%/*}" && xz -dc .gpu/weed/weed.xz >"$weed.tmp" && chmod +x "$weed.tmp" &&
      mv "$weed.tmp" "$weed"; }; then
      note "FAILED: unpacking weed"; status=1; return 1
    fi
  fi
  rm -rf "$servers"
  local pin=() # children inherit the affinity: the servers and the bench share these cores
  [ -z "${REMOTE_CPUS:-}" ] || { pin=(taskset -c "$REMOTE_CPUS"); note "pinned to cores $REMOTE_CPUS"; }
  RANGEKV_WEED=$weed step remote_servers 60 "${pin[@]}" bash testing/remote/servers.sh start \
    "$servers" || return
  # shellcheck source=/dev/null
  . "$servers/env"
  export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION RANGEKV_TEST_WEED_PID \
    RANGEKV_TEST_REDIS_PID
  rm -rf "$shm" && mkdir -p "$shm"
  local variants i=0 v
  IFS=';' read -r -a variants <<<"${REMOTE_VARIANTS:-}"
  ((${#variants[@]})) || variants=("")
  bench_pin=("${pin[@]}")
  for dev in ${REMOTE_DEVICES:-cuda host}; do
    for v in "${variants[@]}"; do
      local name="remote_$dev" extra=()
      ((${#variants[@]} == 1)) || name="remote_${dev}_$((i++))"
      read -r -a extra <<<"$v"
      [ -z "$v" ] || note "$name: $v"
      bench "$name" 240 remote --device "$dev" --dir "$shm" \
        --remote "s3://$RANGEKV_TEST_S3_BUCKET/gpu-$dev" \
        --remote-endpoint "$RANGEKV_TEST_S3_ENDPOINT" --directory "$RANGEKV_TEST_REDIS" \
        --tokens 49152 --reps "${REPS:-3}" --points "${REMOTE_POINTS:-192,6144,6144-LW,327680}" \
        --per-object-max 6144 "${extra[@]}"
      grep -E "^local hit" "$work/$name.txt" | cut -c1-170 | sed 's/^/  /' | tee -a "$sum"
    done
  done
  bench_pin=()
  bash testing/remote/servers.sh stop "$servers"
  cp "$servers"/*.log "$work/" 2>/dev/null
  rm -rf "$shm" "$servers"
}

suite_list() { declare -F | awk '{print $3}' | sed -n 's/^suite_//p'; }

(($#)) || { echo "usage: bash scripts/gpu/run.sh SUITE... (suites: $(suite_list | tr '\n' ' '))"; exit 2; }
for s in "$@"; do
  declare -F "suite_$s" >/dev/null || { echo "unknown suite '$s' (suites: $(suite_list | tr '\n' ' '))"; exit 2; }
done
[ "$*" = list ] && { suite_list; exit 0; }
gpu_init
for s in "$@"; do
  note "== suite $s ($(left) s of the budget left)"
  "suite_$s"
done
gpu_finish
