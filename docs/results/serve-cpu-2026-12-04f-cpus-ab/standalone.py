"""A restore of the serve bench's prefix (4 layers x 8192 tokens, fp32 4x128, cpu_block), timed
as the connector sees it: lookup (prefetch), claim, bind, wait layer 0, wait layer 3."""
import os, sys, time, shutil
import numpy as np, rangekv
L, H, D, B, T = 4, 4, 128, 32, 8192
nb = 1024
d = "/var/tmp/st-store"; shutil.rmtree(d, ignore_errors=True)
eng = rangekv.Engine(d, layers=L, kv_heads=H, head_size=D, dtype="float32", block_size=B,
                     layout="cpu_block", stripe_bytes=32 << 20, capacity_bytes=1 << 30,
                     device="host", read_banks=8, prefetch_banks=7, lookahead_layers=3,
                     layer_group=4, checksum=sys.argv[1] if len(sys.argv) > 1 else "always")
kv = [np.random.default_rng(i).standard_normal((nb, H, B, 2 * D), dtype=np.float32) for i in range(L)]
dst = [np.zeros_like(k) for k in kv]
toks = list(range(T + 256))
slots = np.arange(T + 256)
s = eng.begin_store(rangekv.Envelope("s"), toks, kv, slots)
for l in range(L): s.layer_produced(l)
assert s.finish().ok
rows = []
for r in range(7):
    e = rangekv.Envelope(f"r{r}")
    t0 = time.perf_counter()
    hit, ticket = eng.lookup(toks, e, B)
    t1 = time.perf_counter()
    time.sleep(float(os.environ.get("GAP", "0.005")))
    t2 = time.perf_counter()
    h = eng.start_restore(ticket, e, toks, 0, hit)
    h.bind_slots(dst, np.arange(4096, 4096 + hit))
    t3 = time.perf_counter()
    h.wait_layer(0); t4 = time.perf_counter()
    for l in range(1, L): h.wait_layer(l)
    t5 = time.perf_counter()
    out = h.finish(); assert out.ok
    rows.append((hit, (t1-t0)*1e3, (t3-t2)*1e3, (t4-t2)*1e3, (t5-t2)*1e3))
for row in rows: print("hit %d lookup %.1f ms claim+bind %.1f first %.1f last %.1f" % row)
print("median last %.1f ms" % sorted(r[4] for r in rows)[3])
eng.close()
