"""One GPU fed by N processes against N threads of one process (issue #13's concurrency gap).

Each worker moves `--gib` GiB from its own pinned host buffer to the device in `--chunk` MiB
copies, and after each copy launches one device-to-device copy of that chunk (standing in for
the engine's scatter kernel), on its own CUDA stream, as a restore's stripes flow. The workers
start together (a barrier after their warm-up); the aggregate is the bytes of all workers over
the time from the first start to the last end. With N processes the GPU holds N CUDA contexts,
which it time-slices; with N threads of one process the streams share one context.

    python3 scripts/gpu/h2d_processes.py --workers 1,4 --gib 1 --chunk 8

Prints one line per (mode, N): aggregate GiB/s and the per-worker GiB/s.
"""
import argparse
import multiprocessing as mp
import threading
import time

import torch


def transfer(gib, chunk_mib, start_barrier, results, key):
    n = int(gib * (1 << 30))
    chunk = chunk_mib << 20
    src = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    src.fill_(1)
    staged = torch.empty(n, dtype=torch.uint8, device="cuda")
    out = torch.empty(n, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()

    def once():
        with torch.cuda.stream(stream):
            for off in range(0, n, chunk):
                end = min(off + chunk, n)
                staged[off:end].copy_(src[off:end], non_blocking=True)
                out[off:end].copy_(staged[off:end], non_blocking=True)
        stream.synchronize()

    once()  # warm-up: context, allocations, first copies
    start_barrier.wait()
    t0 = time.monotonic()
    once()
    results[key] = (t0, time.monotonic(), n)


def process_worker(gib, chunk_mib, start_barrier, queue, key):
    local = {}
    transfer(gib, chunk_mib, start_barrier, local, key)
    queue.put(local[key])


def aggregate(spans):
    t0 = min(s[0] for s in spans)
    t1 = max(s[1] for s in spans)
    total = sum(s[2] for s in spans)
    return total / (1 << 30) / (t1 - t0), [s[2] / (1 << 30) / (s[1] - s[0]) for s in spans]


def run_processes(n, gib, chunk_mib):
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(n)
    queue = ctx.Queue()
    procs = [ctx.Process(target=process_worker, args=(gib, chunk_mib, barrier, queue, i))
             for i in range(n)]
    for p in procs:
        p.start()
    spans = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    return aggregate(spans)


def run_threads(n, gib, chunk_mib):
    barrier = threading.Barrier(n)
    results = {}
    threads = [threading.Thread(target=transfer, args=(gib, chunk_mib, barrier, results, i))
               for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return aggregate(list(results.values()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,4")
    ap.add_argument("--gib", type=float, default=1.0, help="GiB per worker")
    ap.add_argument("--chunk", type=int, default=8, help="MiB per copy")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    print(f"{torch.cuda.get_device_name(0)}; {a.gib} GiB per worker in {a.chunk} MiB copies, "
          f"each followed by a device copy of the chunk; median of {a.reps}")
    for n in [int(x) for x in a.workers.split(",")]:
        for mode, fn in (("threads", run_threads), ("processes", run_processes)):
            runs = sorted((fn(n, a.gib, a.chunk) for _ in range(a.reps)), key=lambda r: r[0])
            agg, per = runs[len(runs) // 2]
            print(f"{mode:9s} N={n}: aggregate {agg:6.2f} GiB/s; per worker "
                  + " ".join(f"{x:5.2f}" for x in per), flush=True)


if __name__ == "__main__":
    main()
