#!/usr/bin/env bash
# CPU dev VM, 2026-12-06 (tenth session): the same at 6 GiB, 100 repetitions (about 50 minutes
# on this disk; the A/A control of run.sh was stopped to make room for it: at 768 MiB the six
# namings themselves spread 0.5% at 300 repetitions).
set -u
R=${R:-/work/main/build/default/tools/rangekv}
O=${O:-/var/tmp/spread300}
N=${N:-100}
mkdir -p $O; cd $O
date -u > $O/start6g.txt; uptime >> $O/start6g.txt
$R bench restore --device host --payload 6GiB --dir /var/tmp --interleave --reps $N --ablations none --skip-baseline --json $O/restore6g.json > $O/restore6g.txt 2> $O/restore6g.err
date -u >> $O/start6g.txt; uptime >> $O/start6g.txt
