#!/usr/bin/env bash
# CPU dev VM acceptance run for issue 11 (2026-12-05, eighth session). As
# docs/results/cpu-2026-12-05c/run.sh, with more repetitions where the spread across the six
# namings is judged (768 MiB: 15, 6 GiB: 7), and beside it the control that says what spread
# this disk gives on its own: the same naming (6144 objects) six times, interleaved as the six
# namings are (an A/A run). Just before, six identical points at 7 repetitions spread 5.6-8.0%
# and at 15 repetitions 2.8-3.5% on this disk (docs/benchmarks.md, eighth session).
set -u
R=${R:-/work/main/build/default/tools/rangekv}
O=${O:-/var/tmp/acc6}
mkdir -p $O; cd $O
date -u > $O/start.txt; uptime >> $O/start.txt
$R bench store --device host --payload 768MiB --dir /var/tmp --durability periodic:200,none --reps 7 --check --json $O/store768.json --plot $O/store768.svg > $O/store768.txt 2> $O/store768.err
$R bench restore --device host --payload 768MiB --dir /var/tmp --check --interleave --reps 15 --json $O/restore768.json --plot $O/restore768.svg > $O/restore768.txt 2> $O/restore768.err
$R bench restore --device host --payload 768MiB --dir /var/tmp --objects 6144,6144,6144,6144,6144,6144 --interleave --reps 15 --ablations none --skip-baseline --json $O/aa768.json > $O/aa768.txt 2> $O/aa768.err
$R bench concurrent --device host --dir /var/tmp --size 1GiB --reps 3 --json $O/concurrent.json > $O/concurrent.txt 2> $O/concurrent.err
$R bench restore --device host --payload 6GiB --dir /var/tmp --check --interleave --reps 7 --ablations none --json $O/restore6g.json > $O/restore6g.txt 2> $O/restore6g.err
date -u >> $O/start.txt; uptime >> $O/start.txt
