PY=/var/cache/rangekv/vllm-0.32/bin/python
cd /tmp/sv3
$PY -m rangekv.bench serve --workload single --layers 16 --hidden 512 --intermediate 1024 --prefix 8192 --suffix 256 --reps 7 --no-ablations --no-shm-arm --granularities 256 --lw-granularities 256,128,64,32 --arms "recompute,resident,rangekv 512 LW,rangekv 1024 LW,rangekv 2048 LW,rangekv 4096 LW" --json l16lw.json --plot plots-l16lw > l16lw.txt 2> l16lw.err
echo done > DONE
