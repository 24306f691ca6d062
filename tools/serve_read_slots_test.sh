#!/usr/bin/env bash
# `rangekv serve` runs the node's read gate by default (--read-slots auto: what one default
# engine keeps in flight on this node), runs without one at --read-slots 0, and refuses a value
# that is neither auto nor a count. Usage: serve_read_slots_test.sh RANGEKV
set -u
rkv=$1
dir=$(mktemp -d "${TMPDIR:-/var/tmp}/rangekv-serve-test-XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# serve_and_stop OUT ARGS...: starts the service, waits for its socket, SIGTERMs it; its stderr
# lands in OUT and its exit status is returned.
serve_and_stop() {
  local out=$1
  shift
  rm -rf "$dir/store" "$dir/s.sock"
  "$rkv" serve --dir "$dir/store" --socket "$dir/s.sock" "$@" 2>"$out" &
  local pid=$!
  for _ in $(seq 1 200); do
    [[ -S $dir/s.sock ]] && break
    sleep 0.05
  done
  [[ -S $dir/s.sock ]] || { kill $pid; cat "$out"; fail "no socket after 10 s ($*)"; }
  kill -TERM $pid
  wait $pid
}

# expect_gate OUT SLOTS: the service made a gate of SLOTS slots (the exit line comes from its
# stats, not from the flag) and no session touched it.
expect_gate() {
  grep -Eq "listening on .*read gate of $2 slots" "$1" || { cat "$1"; fail "no gate of $2 slots at start"; }
  grep -Eq "read gate of $2 slots: 0 sessions attached; 0 tickets out" "$1" ||
    { cat "$1"; fail "no gate of $2 slots at exit"; }
}

serve_and_stop "$dir/default.err" || { rc=$?; cat "$dir/default.err"; fail "default serve exited $rc"; }
expect_gate "$dir/default.err" "[0-9]+"
slots=$(grep -Eo "read gate of [0-9]+ slots:" "$dir/default.err" | grep -Eo "[0-9]+")
[[ $slots -ge 1 ]] || fail "a default gate of '$slots' slots"

serve_and_stop "$dir/auto.err" --read-slots auto || { rc=$?; cat "$dir/auto.err"; fail "--read-slots auto exited $rc"; }
expect_gate "$dir/auto.err" "$slots"  # auto is the default

serve_and_stop "$dir/off.err" --read-slots 0 || { rc=$?; cat "$dir/off.err"; fail "--read-slots 0 exited $rc"; }
grep -q "no read gate" "$dir/off.err" || { cat "$dir/off.err"; fail "--read-slots 0 still gated"; }
grep -q "tickets out" "$dir/off.err" && { cat "$dir/off.err"; fail "--read-slots 0 printed a gate"; }

serve_and_stop "$dir/seven.err" --read-slots 7 || { rc=$?; cat "$dir/seven.err"; fail "--read-slots 7 exited $rc"; }
expect_gate "$dir/seven.err" 7

for bad in many -1 4097; do
  # A value taken by mistake would serve in the foreground: bounded, 124 reads as accepted.
  timeout 10 "$rkv" serve --dir "$dir/store" --socket "$dir/s.sock" --read-slots "$bad" 2>"$dir/bad.err"
  rc=$?
  [[ $rc == 0 || $rc == 124 ]] && { cat "$dir/bad.err"; fail "--read-slots $bad accepted"; }
  grep -q "read-slots" "$dir/bad.err" || { cat "$dir/bad.err"; fail "--read-slots $bad: no clear error"; }
done
echo "serve: a read gate of $slots slots by default (= auto), none at 0, 7 taken, bad values refused"
