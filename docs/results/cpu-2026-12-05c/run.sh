#!/usr/bin/env bash
# CPU dev VM acceptance runs for issue 11 (2026-12-05, third session), every bench of the
# acceptance one after the other on a quiet machine: store, restore 768 MiB (all six namings,
# per-object model, checksum off arm; 7 repetitions: with 5 the medians of six points spread
# 1.4-2.7% on this disk from repetition noise alone), concurrent, restore 6 GiB.
set -u
R=${R:-/work/main/build/default/tools/rangekv}
O=${O:-/var/tmp/s29/acc}
mkdir -p $O; cd $O
date -u > $O/start.txt; uptime >> $O/start.txt
$R bench store --device host --payload 768MiB --dir /var/tmp --durability periodic:200,none --reps 7 --check --json $O/store768.json --plot $O/store768.svg > $O/store768.txt 2> $O/store768.err
$R bench restore --device host --payload 768MiB --dir /var/tmp --check --interleave --reps 7 --json $O/restore768.json --plot $O/restore768.svg > $O/restore768.txt 2> $O/restore768.err
$R bench concurrent --device host --dir /var/tmp --size 1GiB --reps 3 --json $O/concurrent.json > $O/concurrent.txt 2> $O/concurrent.err
$R bench restore --device host --payload 6GiB --dir /var/tmp --check --interleave --reps 3 --ablations none --json $O/restore6g.json > $O/restore6g.txt 2> $O/restore6g.err
date -u >> $O/start.txt; uptime >> $O/start.txt
