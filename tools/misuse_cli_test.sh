#!/usr/bin/env bash
# The misuse suite's command-line half (issue 42): every size, count and quota a person types is
# parsed strictly, and a bad one is refused at once with a one-line error naming it, before
# anything is created or served. Each of these was accepted before: `serve --quota -5GiB`
# wrapped to ~16 EiB (no limit), `--quota 99999999999TiB` wrapped, `--tenant-quota
# ../evil=1GiB` named a tenant that could never connect, `--restart-fence-ms -5` (any uint64
# option) wrapped, and `bench restore --objects -3` ran as 18446744073709551613 objects.
# Usage: misuse_cli_test.sh RANGEKV
set -u
rkv=$1
dir=$(mktemp -d "${TMPDIR:-/var/tmp}/rangekv-misuse-cli-XXXXXX")
counts() {
  [ -n "${RANGEKV_TEST_COUNTS_DIR:-}" ] || return 0
  if [ "$1" -eq 0 ]; then echo "1 0 0"; else echo "0 1 0"; fi \
    > "$RANGEKV_TEST_COUNTS_DIR/${RANGEKV_TEST_COUNTS_TAG:-run}-${RANGEKV_TEST_NAME:-misuse_cli}.txt"
}
trap 'rc=$?; rm -rf "$dir"; counts $rc' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# refused WHAT NEEDLE ARGS...: the command must fail within 10 s (a value taken by mistake would
# serve in the foreground: 124 reads as accepted), print NEEDLE, and leave no socket behind.
refused() {
  local what=$1 needle=$2
  shift 2
  rm -rf "$dir/store" "$dir/s.sock"
  timeout 10 "$rkv" "$@" >"$dir/out" 2>"$dir/err"
  local rc=$?
  [[ $rc == 0 || $rc == 124 ]] && { cat "$dir/err"; fail "$what: accepted ($*)"; }
  grep -qF -- "$needle" "$dir/err" || { cat "$dir/err"; fail "$what: no clear error naming '$needle'"; }
  [[ -e $dir/s.sock ]] && fail "$what: a socket was created"
  n=$(grep -cv "^Run with --help" "$dir/err")
  [[ $n -eq 1 ]] || { cat "$dir/err"; fail "$what: $n lines of error, one wanted"; }
  return 0
}

serve=(serve --dir "$dir/store" --socket "$dir/s.sock")
refused "negative quota" "-5GiB" "${serve[@]}" --quota -5GiB
refused "overflowing quota" "99999999999TiB" "${serve[@]}" --quota 99999999999TiB
refused "fractional quota" "1.5GiB" "${serve[@]}" --quota 1.5GiB
refused "unknown unit" "5GB" "${serve[@]}" --quota 5GB
refused "path as a tenant" "../evil" "${serve[@]}" --tenant-quota ../evil=1GiB
refused "empty tenant" "tenant" "${serve[@]}" --tenant-quota =1GiB
refused "tenant given twice" "given twice" "${serve[@]}" --tenant-quota a=1GiB --tenant-quota a=2GiB
refused "negative tenant quota" "-1GiB" "${serve[@]}" --tenant-quota a=-1GiB
refused "negative store capacity" "-1" "${serve[@]}" --store-capacity -1
refused "negative fence" "-5" "${serve[@]}" --restart-fence-ms -5
refused "overflowing fence" "99999999999999999999" "${serve[@]}" --restart-fence-ms 99999999999999999999
refused "octal session count" "--max-sessions" "${serve[@]}" --max-sessions 0x10
refused "negative session count" "--max-sessions" "${serve[@]}" --max-sessions -5
refused "zero frame timeout" "--frame-timeout-ms" "${serve[@]}" --frame-timeout-ms 0
refused "negative object count" "-3" bench restore --objects -3 --dir "$dir"
refused "zero object count" "'0'" bench restore --objects 0 --dir "$dir"
refused "negative repetitions" "--reps" bench restore --reps -1 --dir "$dir"

# The same values, well formed, are taken: a service with a tenant quota starts and stops.
rm -rf "$dir/store" "$dir/s.sock"
"$rkv" serve --dir "$dir/store" --socket "$dir/s.sock" --quota 5GiB --tenant-quota a.b-c_1=1GiB \
  --store-capacity 512MiB --restart-fence-ms 5 --read-slots 0 2>"$dir/ok.err" &
pid=$!
for _ in $(seq 1 200); do
  [[ -S $dir/s.sock ]] && break
  sleep 0.05
done
[[ -S $dir/s.sock ]] || { kill $pid; cat "$dir/ok.err"; fail "well-formed values refused"; }
kill -TERM $pid
wait $pid || { cat "$dir/ok.err"; fail "serve exited $?"; }
echo "PASS: 17 bad values refused with one line each; well-formed ones taken"
