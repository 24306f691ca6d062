#!/usr/bin/env bash
# CLI test of `rangekv inspect` and `rangekv fsck` over stores made by make_test_store.
# Usage: cli_test.sh RANGEKV_BINARY MAKE_TEST_STORE_BINARY
set -u
rangekv=$1
make_store=$2
work=$(mktemp -d)
# One test case for scripts/test.sh's closing line (see testing/gtest_main.cc for the format).
counts() {
  [ -n "${RANGEKV_TEST_COUNTS_DIR:-}" ] || return 0
  if [ "$1" -eq 0 ]; then echo "1 0 0"; else echo "0 1 0"; fi \
    > "$RANGEKV_TEST_COUNTS_DIR/${RANGEKV_TEST_COUNTS_TAG:-run}-${RANGEKV_TEST_NAME:-$(basename "$0" .sh)}.txt"
}
trap 'rc=$?; rm -rf "$work"; counts $rc' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$make_store" "$work/clean" || fail "make clean store"
"$rangekv" fsck --dir "$work/clean" > "$work/out" || fail "fsck of a clean store exited $?: $(cat "$work/out")"
grep -q "clean; 4 packs" "$work/out" || fail "fsck output: $(cat "$work/out")"
"$rangekv" inspect --dir "$work/clean" > "$work/out" || fail "inspect exited $?"
grep -q "index      loaded" "$work/out" || fail "inspect text: $(cat "$work/out")"
"$rangekv" inspect --dir "$work/clean" --json > "$work/inspect.json" || fail "inspect --json exited $?"
grep -q '"index": "loaded"' "$work/inspect.json" || fail "inspect json: $(cat "$work/inspect.json")"
grep -q '"path_token_begin": 100' "$work/inspect.json" || fail "inspect json lacks the records"

"$make_store" "$work/flip" flip || fail "make flipped store"
"$rangekv" fsck --dir "$work/flip" --json > "$work/fsck.json"
code=$?
[ "$code" -eq 1 ] || fail "fsck of a flipped byte exited $code"
grep -q '"kind": "payload_digest"' "$work/fsck.json" || fail "fsck json: $(cat "$work/fsck.json")"
grep -q '"layer": 1' "$work/fsck.json" || fail "fsck json does not name layer 1"
tr -d ' \n' < "$work/fsck.json" | grep -q '"path_tokens":\[132,148\]' || fail "fsck json does not name path tokens [132, 148)"

"$make_store" "$work/dirty" dirty || fail "make dirty store"
"$rangekv" fsck --dir "$work/dirty" > "$work/out"
[ $? -eq 1 ] || fail "fsck of a dirty store did not exit 1"
grep -q "^dirty" "$work/out" || fail "fsck dirty output: $(cat "$work/out")"

# After a crash with a journal: the next open replays it. fsck says so, verifies the payload
# of the packs only the journal names, and names what the replay would drop.
"$make_store" "$work/journal" journal || fail "make journaled store"
"$rangekv" fsck --dir "$work/journal" > "$work/out" || fail "fsck of a replayable store exited $?: $(cat "$work/out")"
grep -q "^next open *opens; index replayed: .* 4 publications kept, 0 dropped" "$work/out" || fail "fsck replay output: $(cat "$work/out")"
grep -q "clean; 4 packs" "$work/out" || fail "fsck did not verify the journaled packs: $(cat "$work/out")"
"$rangekv" inspect --dir "$work/journal" --json > "$work/inspect.json" || fail "inspect of a journaled store exited $?"
grep -q '"index": "replayed"' "$work/inspect.json" || fail "inspect json: $(cat "$work/inspect.json")"
"$make_store" "$work/jflip" journal-flip || fail "make journaled flipped store"
"$rangekv" fsck --dir "$work/jflip" --json > "$work/fsck.json"
[ $? -eq 1 ] || fail "fsck missed a flipped byte under a journaled pack"
grep -q '"publications_dropped": 1' "$work/fsck.json" || fail "fsck json: $(cat "$work/fsck.json")"
grep -q 'the next open drops record .*payload digest mismatch' "$work/fsck.json" || fail "fsck did not name the drop: $(cat "$work/fsck.json")"

# The engine's permission checks: a store file writable by others is refused at open; fsck
# says so too (it used to report such a store clean).
"$make_store" "$work/perm" || fail "make store for the permission check"
chmod o+w "$work/perm/snapshot.rkv"
"$rangekv" fsck --dir "$work/perm" > "$work/out"
[ $? -eq 1 ] || fail "fsck of a store the engine refuses exited 0: $(cat "$work/out")"
grep -q "^permissions .*writable by group or others" "$work/out" || fail "fsck permissions output: $(cat "$work/out")"

mkdir "$work/empty"
"$rangekv" fsck --dir "$work/empty" > /dev/null 2>&1
[ $? -eq 2 ] || fail "fsck of a non-store did not exit 2"
echo "PASS"
