"""Misuse from Python (the misuse suite, issue 42): a second engine on one store directory, a
wait on an unbound restore, a wait that only Ctrl-C would end. Each gets a clear error, and
nothing is lost or leaked."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

import rangekv

from conftest import B, L, engine_kwargs, env, random_layers, store_all, zero_layers

N = 16
LAYOUT = "flash_attn_nhd"
TOKENS = list(range(5000, 5064))


def test_a_second_engine_on_one_store_fails_naming_the_holder(store_dir, make_engine):
    eng = make_engine(LAYOUT)
    src = random_layers(LAYOUT, N, seed=3)
    store_all(eng, TOKENS, src, np.arange(64))
    # Before: it opened, both engines handed out the same slots and restored each other's KV.
    with pytest.raises(rangekv.Locked, match=f"pid {os.getpid()} \\(rangekv engine\\)"):
        rangekv.Engine(store_dir, **engine_kwargs(LAYOUT))
    eng.close()
    again = make_engine(LAYOUT)  # the first one closed: the store is free, nothing was lost
    assert again.recovery["loaded"] and again.recovery["packs_loaded"] == 2


def test_wait_layer_before_bind_slots_fails_at_once(make_engine):
    eng = make_engine(LAYOUT)
    src = random_layers(LAYOUT, N, seed=4)
    store_all(eng, TOKENS, src, np.arange(64))
    e = env("unbound")
    hit, ticket = eng.lookup(TOKENS, e, B)
    assert hit == 48
    h = eng.start_restore(ticket, e, TOKENS)
    start = time.monotonic()
    # Before: this blocked for ever, and Ctrl-C did not end it (the process needed SIGKILL).
    with pytest.raises(rangekv.FailedPrecondition, match="BindSlots"):
        h.wait_layer(0)
    assert time.monotonic() - start < 5
    # With a deadline the wait may span a bind by another thread; none comes here.
    with pytest.raises(rangekv.DeadlineExceeded):
        h.wait_layer(0, timeout=0.2)
    dst = zero_layers(LAYOUT, N)
    h.bind_slots(dst, np.arange(hit))
    for layer in range(L):
        h.wait_layer(layer, timeout=30)
    assert h.finish().ok


def test_ctrl_c_interrupts_a_wait_and_the_handle_stays_usable(make_engine):
    eng = make_engine(LAYOUT)
    src = random_layers(LAYOUT, N, seed=5)
    # A store whose layers are never produced: wait_extracted waits until Ctrl-C.
    s = eng.begin_store(env("never"), TOKENS, src, np.arange(64))
    with pytest.raises(rangekv.DeadlineExceeded):
        s.wait_extracted(timeout=0.2)
    with pytest.raises(TimeoutError):  # DeadlineExceeded is also a TimeoutError
        s.wait_extracted(timeout=0)
    main = threading.main_thread().ident
    # Python leaves SIGINT ignored when it started ignored (a runner's background job, nohup):
    # Ctrl-C's handler is installed for this test so the signal is seen wherever it runs.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, lambda: signal.pthread_kill(main, signal.SIGINT))
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            s.wait_extracted()
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - start < 10
    # Nothing leaked: the store finishes (aborted: its layers were never produced), the engine
    # stores and closes as usual.
    out = s.finish()
    assert not out.ok and out.status.code == "failed_precondition"
    store_all(eng, TOKENS, src, np.arange(64), name="after")
    eng.close()


def test_bad_timeouts_are_refused(make_engine):
    eng = make_engine(LAYOUT)
    s = eng.begin_store(env("t"), TOKENS, random_layers(LAYOUT, N, seed=6), np.arange(64))
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(rangekv.InvalidArgument, match="timeout"):
            s.wait_extracted(timeout=bad)
    for layer in range(L):
        s.layer_produced(layer)
    assert s.finish().ok
