PY=/var/cache/rangekv/vllm-0.32/bin/python
cd /tmp/sv
$PY -m rangekv.bench serve --workload single --layers 4 --hidden 512 --intermediate 1024 --prefix 8192 --suffix 256 --reps 7 --no-ablations --json l4.json --plot plots-l4 > l4.txt 2> l4.err
$PY -m rangekv.bench serve --workload single --layers 16 --hidden 512 --intermediate 1024 --prefix 8192 --suffix 256 --reps 7 --no-ablations --json l16.json --plot plots-l16 > l16.txt 2> l16.err
echo done > DONE
