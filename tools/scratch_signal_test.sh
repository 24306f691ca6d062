#!/usr/bin/env bash
# An interrupted benchmark removes its scratch store and still ends by the signal
# (RemoveScratchOnSignals, tools/bench/scratch.h). Usage: scratch_signal_test.sh RANGEKV SIGNAL
set -um  # job control: a background job of a script would otherwise ignore SIGINT
rkv=$1 sig=$2
dir=$(mktemp -d "${TMPDIR:-/var/tmp}/rangekv-signal-test-XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$rkv" bench restore --device host --payload 64MiB --objects 192 --ablations none \
  --reps 1000 --ceiling-grid off --skip-baseline --quiet --dir "$dir" >/dev/null 2>"$dir.err" &
pid=$!
for _ in $(seq 1 200); do  # until the engine's pack file exists (the sweep is running)
  compgen -G "$dir/rangekv-bench-*/*/packs.rkv" >/dev/null && break
  sleep 0.05
done
compgen -G "$dir/rangekv-bench-*" >/dev/null || { echo "no scratch store appeared"; cat "$dir.err"; exit 1; }
kill -s "$sig" $pid
wait $pid
rc=$?
want=$((128 + $(kill -l "$sig")))
left=$(ls -A "$dir")
cat "$dir.err"; rm -f "$dir.err"
[[ $rc == "$want" ]] || { echo "exit status $rc, want $want (ended by SIG$sig)"; exit 1; }
[[ -z $left ]] || { echo "left behind: $left"; exit 1; }
echo "SIG$sig: scratch store removed, ended by the signal"
