#!/usr/bin/env bash
# CPU time of `bench concurrent` per mode (issue #13's gap: is the service mode short of CPU?).
# One device call (carry [".deb"]): builds rangekv, then runs N=4 embedded only and service only
# (every variant), each under getrusage, and prints wall, user and system seconds beside the
# table. The clients' CPU counts too (they are waited for by the bench).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=/tmp/rangekv-cpu
rm -rf "$out" && mkdir -p "$out"
build=/tmp/rangekv-gpu-build
budget="${CPU_BUDGET_S:-300}"
. scripts/gpu/steps.sh
gpu_build rangekv
shm=/dev/shm/rkv-cpu
for mode in embedded service; do
  rm -rf $shm && mkdir -p $shm
  python3 - "$mode" <<PY | tee -a "$sum"
import resource, subprocess, sys, time
mode = sys.argv[1]
t0 = time.monotonic()
r = subprocess.run(["$build/tools/rangekv", "bench", "concurrent", "--device", "${CPU_DEVICE:-cuda}",
                    "--dir", "$shm", "--buffered", "--mode", mode, "--n", "4", "--size", "4GiB",
                    "--reps", "3"], capture_output=True, text=True)
wall = time.monotonic() - t0
u = resource.getrusage(resource.RUSAGE_CHILDREN)
rows = [l for l in r.stdout.splitlines() if l.startswith(mode)]
print(f"{mode}: rc={r.returncode} wall {wall:.1f} s, user {u.ru_utime:.1f} s, system {u.ru_stime:.1f} s, "
      f"voluntary switches {u.ru_nvcsw}, involuntary {u.ru_nivcsw}")
for l in rows: print("  " + l)
PY
done
rm -rf $shm
