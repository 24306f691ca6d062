#!/usr/bin/env bash
# CPU dev VM acceptance runs for issue 11 after 1 MiB O_DIRECT pieces (reads and writes) and the
# host device's store shape (2026-12-05), one after the other on a quiet machine.
set -u
R=${R:-/work/main/build/default/tools/rangekv}
O=${O:-/var/tmp/s27/acc}
mkdir -p $O; cd $O
date -u > $O/start.txt; uptime >> $O/start.txt
# (run by hand just before this script, 00:52 UTC: store768.txt)
# $R bench store --device host --payload 768MiB --dir /var/tmp --durability periodic:200,none --reps 7 --check --json $O/store768.json --plot $O/store768.svg > $O/store768.txt
$R bench restore --device host --payload 768MiB --dir /var/tmp --check --interleave --reps 5 --json $O/restore768.json --plot $O/restore768.svg > $O/restore768.txt 2> $O/restore768.err
$R bench concurrent --device host --dir /var/tmp --size 1GiB --reps 3 --json $O/concurrent.json > $O/concurrent.txt 2> $O/concurrent.err
$R bench restore --device host --payload 6GiB --dir /var/tmp --check --interleave --reps 3 --ablations none --json $O/restore6g.json > $O/restore6g.txt 2> $O/restore6g.err
date -u >> $O/start.txt; uptime >> $O/start.txt
