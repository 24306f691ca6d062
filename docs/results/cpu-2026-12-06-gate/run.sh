#!/usr/bin/env bash
# CPU dev VM, 2026-12-06: four client processes through the service against one embedded
# engine (rounds interleaved), without and with the node's read gate of 16 slots (what one
# engine's 16 read I/O threads keep in flight here), two runs of each in turn (ABAB).
set -u
R=${R:-/work/main/build/default/tools/rangekv}
O=${O:-/var/tmp/gate}
mkdir -p $O; cd $O
date -u > $O/start.txt
for run in 1 2; do
  for arm in plain gate16; do
    gate=0; [ $arm = gate16 ] && gate=16
    $R bench concurrent --device host --dir /var/tmp --size 1GiB --n 4 --reps 3 --mode both \
      --interleave --variants distinct,same-prefix --read-gate $gate \
      --json $O/$arm-$run.json > $O/$arm-$run.txt 2> $O/$arm-$run.err
  done
done
date -u >> $O/start.txt
