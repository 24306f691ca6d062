#!/usr/bin/env bash
# CLI test: `rangekv fsck` and `rangekv inspect` on a store written by the Engine (crash_driver
# runs the crash test's workload to a clean close, then flips one payload byte).
# Usage: fsck_engine_store_test.sh RANGEKV_BINARY CRASH_DRIVER_BINARY
set -u
rangekv=$1
driver=$2
work=$(mktemp -d)
# One test case for scripts/test.sh's closing line (see testing/gtest_main.cc for the format).
counts() {
  [ -n "${RANGEKV_TEST_COUNTS_DIR:-}" ] || return 0
  if [ "$1" -eq 0 ]; then echo "1 0 0"; else echo "0 1 0"; fi \
    > "$RANGEKV_TEST_COUNTS_DIR/${RANGEKV_TEST_COUNTS_TAG:-run}-${RANGEKV_TEST_NAME:-$(basename "$0" .sh)}.txt"
}
trap 'rc=$?; rm -rf "$work"; counts $rc' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$driver" --dir "$work/clean" --seed 3 --sessions 2 --ops 8 --kill none > "$work/out" ||
  fail "driver exited $?: $(cat "$work/out")"
"$rangekv" fsck --dir "$work/clean" > "$work/out" || fail "fsck of a clean engine store exited $?: $(cat "$work/out")"
"$rangekv" inspect --dir "$work/clean" --json > "$work/inspect.json" || fail "inspect --json exited $?"
grep -q '"index": "loaded"' "$work/inspect.json" || fail "inspect json: $(cat "$work/inspect.json")"

"$driver" --dir "$work/flip" --seed 3 --sessions 2 --ops 8 --kill none --flip 2 > "$work/out" ||
  fail "driver --flip exited $?: $(cat "$work/out")"
line=$(grep '^flipped' "$work/out") || fail "driver did not flip: $(cat "$work/out")"
slot=$(echo "$line" | sed 's/.*slot=\([0-9]*\).*/\1/')
path=$(echo "$line" | sed 's/.*path_tokens=\([0-9]*,[0-9]*\).*/\1/')
"$rangekv" fsck --dir "$work/flip" --json > "$work/fsck.json"
code=$?
[ "$code" -eq 1 ] || fail "fsck of a flipped byte exited $code: $(cat "$work/fsck.json")"
flat=$(tr -d ' \n' < "$work/fsck.json")
echo "$flat" | grep -q '"kind":"payload_digest"' || fail "fsck json: $flat"
echo "$flat" | grep -q "\"layer\":2" || fail "fsck json does not name layer 2: $flat"
echo "$flat" | grep -q "\"slot\":$slot" || fail "fsck json does not name slot $slot: $flat"
echo "$flat" | grep -q "\"path_tokens\":\[$path\]" || fail "fsck json does not name path tokens [$path]: $flat"
"$rangekv" fsck --dir "$work/flip" | grep -q "layer 2" || fail "fsck text does not name layer 2"
echo "PASS"
