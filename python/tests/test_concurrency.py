"""Blocking calls release the GIL; cancellation; handles dropped or ended in every way; several
Python threads driving the engine at once. No sleeps, no timing asserts: the waits below end
because another Python thread makes progress (a watchdog aborts the process if one never does).
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import sys
import threading

import numpy as np
import pytest

import rangekv

from conftest import B, L, env, random_layers, restore, store_all, token_rows, zero_layers

N = 16
LAYOUT = "flash_attn_nhd"


@contextlib.contextmanager
def gil_never_preempted():
    """While inside, a thread holding the GIL keeps it until it blocks or releases it itself, so
    the main thread runs only once the waiting thread released the GIL in its blocking call.
    A watchdog (no GIL needed) dumps stacks and exits if that never happens."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    faulthandler.dump_traceback_later(120, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        sys.setswitchinterval(old)


def run_waiter(fn):
    result = {}
    started = threading.Event()

    def body():
        started.set()
        try:
            result["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - reported to the test
            result["error"] = e

    t = threading.Thread(target=body)
    t.start()
    started.wait()
    return t, result


def test_wait_extracted_releases_the_gil(make_engine):
    eng = make_engine()
    src = random_layers(LAYOUT, N, seed=31)
    s = eng.begin_store(env("s"), list(range(64)), src, np.arange(64))
    assert s.disposition == "storing" and not s.extracted
    with gil_never_preempted():
        # Blocks until every layer is produced: only this (main) thread can produce them.
        t, result = run_waiter(s.wait_extracted)
        for layer in range(L):
            s.layer_produced(layer)
        t.join()
    assert "error" not in result, result
    assert s.extracted and s.finish().ok


def test_wait_layer_releases_the_gil(make_engine):
    eng = make_engine()
    src = random_layers(LAYOUT, N, seed=32)
    tokens = list(range(100, 200))
    store_all(eng, tokens, src, np.arange(100))
    e = env("r")
    hit, ticket = eng.lookup(tokens, e, B)
    h = eng.start_restore(ticket, e, tokens)
    dst = zero_layers(LAYOUT, N)
    with gil_never_preempted():
        # Blocks until the slots are bound (scatters wait for them): the main thread binds. A
        # wait that begins before the bind needs a deadline (without one it fails at once).
        t, result = run_waiter(lambda: h.wait_layer(L - 1, timeout=60))
        h.bind_slots(dst, np.arange(hit) + 50)
        t.join()
    assert "error" not in result, result
    assert h.finish().ok
    for layer in range(L):
        assert np.array_equal(token_rows(LAYOUT, src[layer], np.arange(hit)),
                              token_rows(LAYOUT, dst[layer], np.arange(hit) + 50))


def test_cancel_before_bind(make_engine):
    eng = make_engine()
    src = random_layers(LAYOUT, N, seed=33)
    tokens = list(range(300, 400))
    store_all(eng, tokens, src, np.arange(100))
    e = env("c")
    hit, ticket = eng.lookup(tokens, e, B)
    h = eng.start_restore(ticket, e, tokens)
    h.cancel()
    h.cancel()  # idempotent
    with pytest.raises(rangekv.Cancelled):
        h.wait_layer(0)
    out = h.finish()
    assert not out.ok and isinstance(out.status, rangekv.Cancelled)
    assert out.failed == [(0, hit)] and out.delivered_tokens == 0
    with pytest.raises(rangekv.FailedPrecondition, match="finished"):
        h.finish()
    with pytest.raises(rangekv.FailedPrecondition, match="finished"):
        h.wait_layer(0)
    h.cancel()  # no-op after finish
    # The store is intact.
    rng = np.random.default_rng(34)
    dst = zero_layers(LAYOUT, N)
    hit2, out2, slots = restore(eng, tokens, dst, lambda n: rng.permutation(N * B)[:n])
    assert out2.ok and hit2 == hit


def test_cancel_after_bind_delivers_or_reports(make_engine):
    eng = make_engine()
    src = random_layers(LAYOUT, N, seed=35)
    tokens = list(range(500, 600))
    store_all(eng, tokens, src, np.arange(100))
    e = env("c2")
    hit, ticket = eng.lookup(tokens, e, B)
    h = eng.start_restore(ticket, e, tokens)
    dst = zero_layers(LAYOUT, N)
    slots = np.arange(hit)[::-1].copy()
    h.bind_slots(dst, slots)
    h.cancel()
    out = h.finish()
    failed = np.zeros(hit, dtype=bool)
    for b, end in out.failed:
        failed[b:end] = True
    assert out.delivered_tokens == hit - failed.sum()
    assert out.ok == (not failed.any())
    ok = ~failed
    for layer in range(L):  # whatever was delivered is exact
        assert np.array_equal(token_rows(LAYOUT, src[layer], np.arange(hit)[ok]),
                              token_rows(LAYOUT, dst[layer], slots[ok]))


def test_context_managers_and_dropped_handles(make_engine):
    eng = make_engine()
    src = random_layers(LAYOUT, N, seed=36)
    tokens = list(range(700, 800))
    store_all(eng, tokens, src, np.arange(100))
    e = env("cm")
    hit, ticket = eng.lookup(tokens, e, B)
    with eng.start_restore(ticket, e, tokens) as h:
        h.bind_slots(zero_layers(LAYOUT, N), np.arange(hit))
    assert h.finished
    # Dropped without finish, bound: the destructor drains before the tensors go.
    e2 = env("drop")
    hit, ticket = eng.lookup(tokens, e2, B)
    h2 = eng.start_restore(ticket, e2, tokens)
    h2.bind_slots(zero_layers(LAYOUT, N), np.arange(hit))
    del h2
    gc.collect()
    # A store dropped without producing its layers is aborted: nothing becomes visible.
    other = list(range(900, 964))
    s = eng.begin_store(env("s-drop"), other, src, np.arange(64))
    s.layer_produced(0)
    del s
    gc.collect()
    assert eng.lookup(other, env("probe"), B)[0] == 0
    # Finishing with unproduced layers aborts, too.
    s = eng.begin_store(env("s-unproduced"), other, src, np.arange(64))
    out = s.finish()
    assert not out.ok and isinstance(out.status, rangekv.FailedPrecondition) and not out.visible
    with pytest.raises(rangekv.FailedPrecondition):
        s.wait_extracted()
    assert eng.lookup(other, env("probe2"), B)[0] == 0
    # A store used as a context manager finishes (visible) on exit.
    with eng.begin_store(env("s-cm"), other, src, np.arange(64)) as s:
        for layer in range(L):
            s.layer_produced(layer)
    assert s.finished and eng.lookup(other + [0], env("probe3"), B)[0] == 64
    rng = np.random.default_rng(37)
    hit, out, _ = restore(eng, tokens, zero_layers(LAYOUT, N),
                          lambda n: rng.permutation(N * B)[:n])
    assert out.ok


def test_threads_drive_the_engine_at_once(make_engine):
    eng = make_engine(max_inflight_restores=8, max_inflight_stores=8)
    errors = []

    def worker(i):
        try:
            rng = np.random.default_rng(100 + i)
            src = random_layers(LAYOUT, N, seed=200 + i)
            tokens = (np.arange(80) + 10000 * (i + 1)).tolist()
            store_slots = rng.permutation(N * B)[:80]
            store_all(eng, tokens, src, store_slots, name=f"s{i}")
            dst = zero_layers(LAYOUT, N)
            hit, out, slots = restore(eng, tokens, dst, lambda n: rng.permutation(N * B)[:n],
                                      name=f"r{i}")
            assert out.ok and hit == 64
            for layer in range(L):
                assert np.array_equal(token_rows(LAYOUT, src[layer], store_slots[:64]),
                                      token_rows(LAYOUT, dst[layer], slots))
        except BaseException as e:  # noqa: BLE001 - reported to the test (assert not errors)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert eng.stats()["stores_published"] == 4
