#!/usr/bin/env bash
# The cluster tier from the CLI, against real servers (testing/remote/servers.sh: SeaweedFS S3
# and redis-server on 127.0.0.1): `rangekv serve --remote ... --directory ...` starts, names
# where it publishes without printing the directory's password, and stops cleanly; --remote
# without --directory is refused; `rangekv bench remote` runs its smallest sweep end to end
# (every restore verified bit for bit, GETs and directory round trips the same at every point).
# Usage: serve_remote_test.sh RANGEKV SERVERS_SH
set -u
rkv=$1
servers=$2
dir=$(mktemp -d "${TMPDIR:-/var/tmp}/rangekv-serve-remote-XXXXXX")
# One test case for scripts/test.sh's closing line (testing/gtest_main.cc's format): passed,
# failed or skipped (77).
counts() {
  [ -n "${RANGEKV_TEST_COUNTS_DIR:-}" ] || return 0
  case "$1" in 0) echo "1 0 0" ;; 77) echo "0 0 1" ;; *) echo "0 1 0" ;; esac \
    > "$RANGEKV_TEST_COUNTS_DIR/${RANGEKV_TEST_COUNTS_TAG:-run}-rangekv_serve_remote.txt"
}
cleanup() { rc=$?; bash "$servers" stop "$dir/srv" >/dev/null 2>&1; rm -rf "$dir"; counts $rc; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

RANGEKV_SERVERS_OWNER_PID=$$ bash "$servers" start "$dir/srv" >"$dir/start.log" 2>&1
rc=$?
if [[ $rc -eq 77 ]]; then cat "$dir/start.log"; echo "SKIP: cluster tier servers unavailable"; exit 77; fi
[[ $rc -eq 0 ]] || { cat "$dir/start.log"; fail "servers did not start"; }
set -a
# shellcheck disable=SC1091
. "$dir/srv/env"
set +a
redis_port=${RANGEKV_TEST_REDIS##*:}
redis_port=${redis_port%%/*}

"$rkv" serve --dir "$dir/store" --remote "s3://$RANGEKV_TEST_S3_BUCKET/cli" 2>"$dir/nodir.err"
rc=$?
[[ $rc -eq 2 ]] || { cat "$dir/nodir.err"; fail "--remote without --directory exited $rc, not 2"; }
grep -q "needs --directory" "$dir/nodir.err" || { cat "$dir/nodir.err"; fail "no reason given"; }

"$rkv" serve --dir "$dir/store" --socket "$dir/s.sock" --remote "s3://$RANGEKV_TEST_S3_BUCKET/cli" \
  --remote-endpoint "$RANGEKV_TEST_S3_ENDPOINT" \
  --directory "redis://:hunter2secret@127.0.0.1:$redis_port/0" 2>"$dir/serve.err" &
pid=$!
for _ in $(seq 1 200); do [[ -S $dir/s.sock ]] && break; sleep 0.05; done
[[ -S $dir/s.sock ]] || { kill $pid; cat "$dir/serve.err"; fail "no socket after 10 s"; }
kill -TERM $pid
wait $pid || { cat "$dir/serve.err"; fail "serve exited $?"; }
grep -q "publishing sealed packs to s3://$RANGEKV_TEST_S3_BUCKET/cli" "$dir/serve.err" ||
  { cat "$dir/serve.err"; fail "no publication line"; }
grep -q "hunter2secret" "$dir/serve.err" && { cat "$dir/serve.err"; fail "the password was printed"; }

"$rkv" bench remote --remote "s3://$RANGEKV_TEST_S3_BUCKET/bench" \
  --remote-endpoint "$RANGEKV_TEST_S3_ENDPOINT" --directory "$RANGEKV_TEST_REDIS" \
  --tokens 2048 --points 192,6144 --reps 1 --dir "$dir" --json "$dir/b.json" \
  >"$dir/bench.out" 2>"$dir/bench.err" || { cat "$dir/bench.out" "$dir/bench.err"; fail "bench remote failed"; }
python3 - "$dir/b.json" <<'PY' || { cat "$dir/bench.out"; fail "bench remote results"; }
import json, sys
r = json.load(open(sys.argv[1]))
rk = [x for x in r["results"] if x["engine"] == "rangekv"]
assert len(rk) == 2, rk
assert all(x["mismatches"] == 0 for x in rk), rk
assert len({x["gets"] for x in rk}) == 1 and len({x["directory_round_trips"] for x in rk}) == 1, rk
po = [x for x in r["results"] if x["engine"] == "per-object"]
assert [x["gets"] for x in po] == [x["objects"] for x in po], po
assert r["local_hit"]["with_tier_s"] and r["local_hit"]["without_tier_s"]
PY
echo "PASS"
