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

serve_and_stop "$dir/default.err" || { cat "$dir/default.err"; fail "default serve exited $?"; }
grep -Eq "listening on .*read gate of [0-9]+ slots" "$dir/default.err" ||
  { cat "$dir/default.err"; fail "no read gate by default"; }
grep -Eq "read gate of [0-9]+ slots: 0 sessions passed it; 0 tickets out" "$dir/default.err" ||
  { cat "$dir/default.err"; fail "no read gate line at exit"; }

serve_and_stop "$dir/off.err" --read-slots 0 || { cat "$dir/off.err"; fail "--read-slots 0 exited $?"; }
grep -q "no read gate" "$dir/off.err" || { cat "$dir/off.err"; fail "--read-slots 0 still gated"; }
grep -q "tickets out" "$dir/off.err" && { cat "$dir/off.err"; fail "--read-slots 0 printed a gate"; }

serve_and_stop "$dir/seven.err" --read-slots 7 || fail "--read-slots 7 exited $?"
grep -q "read gate of 7 slots" "$dir/seven.err" || { cat "$dir/seven.err"; fail "--read-slots 7"; }

for bad in many -1 4097; do
  if "$rkv" serve --dir "$dir/store" --socket "$dir/s.sock" --read-slots "$bad" 2>"$dir/bad.err"; then
    fail "--read-slots $bad accepted"
  fi
  grep -q "read-slots" "$dir/bad.err" || { cat "$dir/bad.err"; fail "--read-slots $bad: no clear error"; }
done
echo "serve: read gate by default, none at 0, a count taken, bad values refused"
