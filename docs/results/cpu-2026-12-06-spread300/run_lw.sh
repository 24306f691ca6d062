#!/usr/bin/env bash
# CPU dev VM, 2026-12-06 (tenth session): issue 11's "never slower than the per-object model"
# at its closest point, 6 GiB 6144-LW (the per-object model's objects are 1 MiB there, as large
# as RangeKV's read pieces; earlier rounds of 3-7 repetitions gave 0.89-1.08x), with 60
# repetitions of both arms interleaved rep by rep.
set -u
R=${R:-/work/main/build/default/tools/rangekv}
O=${O:-/var/tmp/spread300}
N=${N:-60}
mkdir -p $O; cd $O
date -u > $O/startlw.txt; uptime >> $O/startlw.txt
$R bench restore --device host --payload 6GiB --dir /var/tmp --objects 6144-LW --interleave --reps $N --ablations none --json $O/lw6g.json > $O/lw6g.txt 2> $O/lw6g.err
date -u >> $O/startlw.txt; uptime >> $O/startlw.txt
