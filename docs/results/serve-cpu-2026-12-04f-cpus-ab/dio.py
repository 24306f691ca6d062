import os, mmap, time, threading, sys
path = "/var/tmp/st-store/packs.rkv"
total = 128 << 20
def run(threads, piece, base=0):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    bufs = [mmap.mmap(-1, piece) for _ in range(threads)]
    offs = list(range(base, base + total, piece))
    lock = threading.Lock()
    def work(i):
        b = bufs[i]
        while True:
            with lock:
                if not offs: return
                o = offs.pop()
            os.preadv(fd, [b], o)
    t0 = time.perf_counter()
    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    [t.start() for t in ts]; [t.join() for t in ts]
    dt = time.perf_counter() - t0
    os.close(fd)
    return dt
for rep in range(3):
    for th, pc in [(4, 1 << 20), (2, 1 << 20), (8, 4 << 20), (4, 4 << 20), (8, 1 << 20), (16, 1<<20)]:
        dt = run(th, pc)
        print(f"{th:2d} x {pc>>20} MiB: {dt*1e3:6.1f} ms  {total/dt/2**30:5.2f} GiB/s")
