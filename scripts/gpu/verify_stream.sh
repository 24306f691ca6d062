#!/usr/bin/env bash
# One device call (carry [".deb"]) for issue #14's checksum cost, 2026-12-04 (second session):
# does the verify work (H2D copy, digest, digest copy back) cost less on the job's own stream
# (RANGEKV_VERIFY_ON_JOB_STREAM=1, an experiment switch) than on each verify worker's stream?
# bench restore, 6 GiB on tmpfs, checksum on/off interleaved, 11 repetitions; A B A B.
# The switch existed only in the experiment's build (two lines in VerifyStripe choosing the
# stream); the job stream lost (docs/benchmarks.md, 2026-12-04 second session) and the switch was
# removed, so on this tree both halves run the verifier stream.
set -uo pipefail
. "$(dirname "$0")/call_lib.sh"
call_begin verify_stream "${VS_BUDGET_S:-420}"
call_build
for v in verifier job verifier job; do
  (( $(left) > 60 )) || break
  mkdir -p /dev/shm/rkv-ck
  if [[ $v == job ]]; then export RANGEKV_VERIFY_ON_JOB_STREAM=1; else unset RANGEKV_VERIFY_ON_JOB_STREAM; fi
  n=$(ls "$work" | grep -c "^ck_$v" || true)
  timeout 80 $rkv bench restore --device cuda --dir /dev/shm/rkv-ck --buffered --payload 6GiB \
    --objects 192,6144 --ablations none --skip-baseline --check --interleave --reps 11 \
    --ceiling-grid short --quiet --json "$work/ck_${v}_$n.json" >"$work/ck_${v}_$n.txt" 2>&1
  rm -rf /dev/shm/rkv-ck
  note "== checksum on/off, tmpfs, verify work on the $v stream (run $n)"
  grep -E "^(192|6144) |best ceiling \(|checksum cost|phases" "$work/ck_${v}_$n.txt" | tee -a "$sum"
done
unset RANGEKV_VERIFY_ON_JOB_STREAM
call_end verify_stream
