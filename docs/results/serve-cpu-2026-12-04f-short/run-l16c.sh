PY=/var/cache/rangekv/vllm-0.32/bin/python
cd /tmp/sv2
$PY -m rangekv.bench serve --workload single --layers 16 --hidden 512 --intermediate 1024 --prefix 8192 --suffix 256 --reps 7 --no-ablations --granularity-by connector --json l16c.json --plot plots-l16c > l16c.txt 2> l16c.err
echo done > DONE
