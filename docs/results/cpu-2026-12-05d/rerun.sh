#!/usr/bin/env bash
# Reruns of everything measured while a CI run was (unknowingly) loading the machine.
set -u
R=/var/tmp/s30/rkv
O=/var/tmp/s30/clean; mkdir -p $O; cd $O
date -u > $O/start.txt; uptime >> $O/start.txt
$R bench lookup --store service --reps 301 --json $O/lookup-svc.json > $O/lookup-svc.txt 2>&1
for i in 1 2; do
  /var/tmp/fx/fx2 5 > $O/flush_mb-$i.txt 2>&1
done
for d in periodic:200,none periodic:60000,none every_publish,none periodic:200,none; do
  $R bench store --device host --payload 768MiB --dir /var/tmp --objects 192,6144 --durability $d --ablations none --skip-baseline --interleave --reps 9 --ceiling-grid short --quiet --json $O/store-$d.json > $O/store-$d.txt 2>&1
done
for i in 1 2 3; do
  $R bench concurrent --device host --buffered --dir /dev/shm --size 1GiB --n 1,4 --mode both --reps 5 --ceiling-passes end --json $O/conc-svc$i.json > $O/conc-svc$i.txt 2> $O/conc-svc$i.err
done
{ /usr/bin/time -f "%e s" dd if=/dev/zero of=/dev/shm/touch bs=1M count=8000 status=none; rm -f /dev/shm/touch
  /usr/bin/time -f "%e s" dd if=/dev/zero of=/dev/shm/touch bs=1M count=8000 status=none; rm -f /dev/shm/touch
  /usr/bin/time -f "%e s" dd if=/dev/zero of=/dev/shm/touch bs=1M count=8000 status=none; /usr/bin/time -f "%e s" dd if=/dev/zero of=/dev/shm/touch bs=1M count=8000 conv=notrunc status=none; rm -f /dev/shm/touch; } > $O/dd.txt 2>&1
perf record -q -g -o $O/perf.data -- $R bench concurrent --device host --buffered --dir /dev/shm --size 1GiB --n 1 --mode embedded --reps 5 --ceiling-passes end > $O/c5.txt 2> $O/c5.err
date -u >> $O/start.txt; uptime >> $O/start.txt
