PY=/var/cache/rangekv/vllm-0.32/bin/python
common="--workload single --layers 4 --hidden 512 --intermediate 1024 --prefix 8192 --suffix 256 --reps 5 --no-ablations --granularities 32 --arms recompute,resident,rangekv"
for round in 1 2; do
 for c in inherit auto; do
  $PY -m rangekv.bench serve $common --connector-extra "{\"cpus\": \"$c\"}" --json /tmp/ab/$c-$round.json > /tmp/ab/$c-$round.txt 2>/tmp/ab/$c-$round.err
 done
done
echo done > /tmp/ab/DONE
