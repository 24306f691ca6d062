PY=/var/cache/rangekv/vllm-0.32/bin/python
cd /tmp/sv4
$PY -m rangekv.bench serve --workload single --layers 16 --hidden 512 --intermediate 1024 --prefix 8192 --suffix 256 --reps 5 --granularities 256,128,64,32 --lw-granularities 256,128,64,32 --peers --json full.json --plot plots-full > full.txt 2> full.err
echo done > DONE
