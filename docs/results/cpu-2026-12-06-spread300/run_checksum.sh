#!/usr/bin/env bash
# CPU dev VM, 2026-12-06 (tenth session): issue 11's checksum cost (checksum=always against
# off, target <= 2%) at 768 MiB with as many repetitions as the spread run: two namings, the
# default configuration (checksums on) and the checksum=off ablation interleaved rep by rep.
set -u
R=${R:-/work/main/build/default/tools/rangekv}
O=${O:-/var/tmp/spread300}
N=${N:-200}
mkdir -p $O; cd $O
date -u > $O/startck.txt; uptime >> $O/startck.txt
$R bench restore --device host --payload 768MiB --dir /var/tmp --objects 192,6144 --interleave --reps $N --ablations checksum=off --skip-baseline --json $O/checksum768.json > $O/checksum768.txt 2> $O/checksum768.err
date -u >> $O/startck.txt; uptime >> $O/startck.txt
