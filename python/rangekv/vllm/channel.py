"""The local channel between the scheduler-role connector and each rank's worker.

vLLM runs the scheduler-role connector in its EngineCore process and the worker-role connector
in each worker process; they share no memory. The worker owns the rank's rangekv.Engine, so a
lookup (which also starts lookup-time prefetch reads) must run there. The scheduler asks every
rank over a ZeroMQ DEALER -> ROUTER pair on an ``ipc://`` socket (pyzmq is a vLLM dependency),
and waits for the answer at most ``timeout_ms``: a rank that does not answer in time gives no
hit, so an engine step never blocks unboundedly.

Wire format (every frame bounded; anything malformed is dropped, never evaluated):
  request  [b"L", json {"id", "req", "gran"}, int32 tokens]   lookup
           [b"R", json {"req"}]                               release (no answer)
  answer   [json {"id", "hit"} or {"id", "error"}, ticket bytes]
JSON and raw int32, never pickle: a socket is an input like any other.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Callable

import numpy as np
import zmq

log = logging.getLogger("vllm.rangekv")

MAX_FRAME_BYTES = 64 << 20  # a 16M-token prompt; larger lookups are refused


def socket_path(socket_dir: str, engine_id: str, rank: int) -> str:
    """Where rank `rank`'s worker listens; short enough for sun_path (108 bytes)."""
    base = socket_dir or os.environ.get("TMPDIR", "/tmp")
    return os.path.join(base, f"rangekv-{engine_id[:12]}-r{rank}.sock")


class LookupServer:
    """Worker side: answers lookups on a thread of its own until close().

    `lookup(req_id, tokens, granularity, local) -> (hit, ticket)` (local: the tokens the
    scheduler's own prefix cache holds) and `release(req_id)` are called on
    the server thread; they must be thread-safe (rangekv.Engine's methods are)."""

    def __init__(self, path: str, lookup: Callable, release: Callable) -> None:
        self._path = path
        self._lookup = lookup
        self._release = release
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
        if os.path.exists(path):
            os.unlink(path)
        old = os.umask(0o077)  # the socket file is the owner's only (0600)
        try:
            self._sock.bind(f"ipc://{path}")
        finally:
            os.umask(old)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rangekv-lookup", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(100):
                continue
            try:
                frames = self._sock.recv_multipart(zmq.NOBLOCK)
            except zmq.ZMQError:
                continue
            self._serve(frames)

    def _serve(self, frames: list[bytes]) -> None:
        if len(frames) < 3:
            return
        ident, op, meta_raw = frames[0], frames[1], frames[2]
        try:
            meta = json.loads(meta_raw)
            req_id = str(meta["req"])
        except (ValueError, KeyError, TypeError):
            log.warning("rangekv: dropped a malformed channel message")
            return
        if op == b"R":
            try:
                self._release(req_id)
            except Exception as e:  # noqa: BLE001 - a release must never kill the server
                log.warning("rangekv: release of %s failed: %s", req_id, e)
            return
        if op != b"L" or len(frames) != 4 or len(frames[3]) % 4:
            log.warning("rangekv: dropped a malformed lookup")
            return
        answer: dict = {"id": meta.get("id")}
        ticket = b""
        try:
            tokens = np.frombuffer(frames[3], dtype="<i4")
            hit, ticket = self._lookup(req_id, tokens, int(meta["gran"]), int(meta.get("local", 0)))
            answer["hit"] = int(hit)
        except Exception as e:  # noqa: BLE001 - the answer carries it; the scheduler sees a miss
            answer["error"] = str(e)
            ticket = b""
        self._sock.send_multipart([ident, json.dumps(answer).encode(), ticket])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close(0)
        self._ctx.term()
        try:
            os.unlink(self._path)
        except OSError:
            pass


class LookupClient:
    """Scheduler side: one DEALER per rank. Not thread-safe (the scheduler is one thread)."""

    def __init__(self, paths: list[str], timeout_ms: int) -> None:
        self._ctx = zmq.Context()
        self._socks = []
        for p in paths:
            s = self._ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
            s.connect(f"ipc://{p}")
            self._socks.append(s)
        self._timeout_ms = timeout_ms
        self._next_id = 0
        self.timeouts = 0
        self._warned = False

    def lookup(self, req_id: str, tokens: np.ndarray, granularity: int,
               local: int = 0) -> list[tuple[int, bytes]] | None:
        """Asks every rank; returns [(hit, ticket)] per rank, or None when any rank did not
        answer in time or answered with an error (then: no hit; one warning is logged).
        `local`: the leading tokens vLLM's own prefix cache holds (the ranks prefetch past
        them only)."""
        self._next_id += 1
        msg_id = self._next_id
        meta = json.dumps({"id": msg_id, "req": req_id, "gran": granularity,
                           "local": int(local)}).encode()
        payload = np.ascontiguousarray(tokens, dtype="<i4").tobytes()
        for s in self._socks:
            s.send_multipart([b"L", meta, payload])
        answers: list[tuple[int, bytes] | None] = [None] * len(self._socks)
        poller = zmq.Poller()
        for s in self._socks:
            poller.register(s, zmq.POLLIN)
        import time
        deadline = time.monotonic() + self._timeout_ms / 1000.0
        while any(a is None for a in answers):
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                break
            for sock, _ in poller.poll(left_ms):
                rank = self._socks.index(sock)
                meta_raw, ticket = sock.recv_multipart()
                reply = json.loads(meta_raw)
                if reply.get("id") != msg_id:
                    continue  # a late answer to an earlier lookup: its worker keeps the ticket
                if "error" in reply:
                    log.warning("rangekv: rank %d lookup of %s failed: %s", rank, req_id,
                                reply["error"])
                    answers[rank] = (0, b"")
                else:
                    answers[rank] = (int(reply["hit"]), ticket)
        if any(a is None for a in answers):
            self.timeouts += 1
            if not self._warned:
                log.warning("rangekv: a rank did not answer a lookup within %d ms; the request "
                            "is served without external hits (recompute). Further timeouts are "
                            "counted in rangekv_lookup_timeouts.", self._timeout_ms)
                self._warned = True
            return None
        return answers  # type: ignore[return-value]

    def release(self, req_id: str) -> None:
        meta = json.dumps({"req": req_id}).encode()
        for s in self._socks:
            s.send_multipart([b"R", meta], zmq.NOBLOCK)

    def close(self) -> None:
        for s in self._socks:
            s.close(0)
        self._ctx.term()
