#!/usr/bin/env bash
# CPU dev VM measurements for issues 11-13 after the streaming scatter/gather and lookahead 4
# (2026-12-04), on a quiet machine one after the other.
set -u
R=${R:-/work/main/build/default/tools/rangekv}
O=/var/tmp/cpu-bench2
cd $O
date -u > $O/start.txt; uptime >> $O/start.txt
$R bench restore --device host --payload 768MiB --dir /var/tmp --check --interleave --reps 5 --json $O/restore768.json --plot $O/restore768.svg > $O/restore768.txt 2> $O/restore768.err
$R bench store --device host --payload 768MiB --dir /var/tmp --durability periodic:200,none --reps 7 --json $O/store768.json --plot $O/store768.svg > $O/store768.txt 2> $O/store768.err
$R bench concurrent --device host --dir /var/tmp --size 1GiB --reps 3 --json $O/concurrent.json > $O/concurrent.txt 2> $O/concurrent.err
$R bench restore --device host --payload 6GiB --dir /var/tmp --check --interleave --reps 3 --ablations none --json $O/restore6g.json > $O/restore6g.txt 2> $O/restore6g.err
$R bench concurrent --device host --dir /var/tmp --size 1GiB --reps 3 --mode both --n 1,4 --json $O/service.json > $O/service.txt 2> $O/service.err
$R bench lookup --store service --reps 301 --warmup 5 --granularity 16 > $O/lookup.txt 2> $O/lookup.err
date -u >> $O/start.txt; uptime >> $O/start.txt
