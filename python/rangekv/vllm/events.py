"""KV cache events: what RangeKV holds, told to KV-aware routers through vLLM's event stream.

Each worker reports a `BlockStored` event (medium ``STORAGE``, ownership ``rangekv``) for the
blocks a store made visible; vLLM carries the worker's `RangeKVEvents` to the scheduler in the
connector output (merged across TP ranks: a block counts as held only when every rank reported
it), the scheduler-role connector hands them to vLLM in `take_events`, and vLLM publishes them
with its own KV events (``--kv-events-config``), next to the GPU prefix cache's.

Block hashes are RangeKV's own: a chain over the block's token ids (SHA-256 of the parent's hash
and the block's little-endian int32 tokens, first 8 bytes as a signed int64), so a router can
recompute them from the token ids the event carries. Removals are not reported yet: the engine
evicts inside its directory and does not name the evicted ranges to Python.
"""

from __future__ import annotations

import collections
import hashlib

import numpy as np
from vllm.distributed.kv_events import BlockStored, KVCacheEvent, KVConnectorKVEvents

MEDIUM = "STORAGE"
OWNERSHIP = "rangekv"


def block_hashes(tokens: np.ndarray, block_size: int, end: int) -> list[int]:
    """The chained hash of each whole block of tokens[:end]."""
    out: list[int] = []
    parent = b""
    for b in range(0, end // block_size * block_size, block_size):
        h = hashlib.sha256(parent + tokens[b:b + block_size].astype("<i4").tobytes()).digest()
        out.append(int.from_bytes(h[:8], "little", signed=True))
        parent = h[:8]
    return out


def stored_event(tokens: np.ndarray, block_size: int, begin: int, end: int) -> BlockStored:
    """The event for the whole blocks of tokens [begin, end) (begin block-aligned)."""
    hashes = block_hashes(tokens, block_size, end)
    first = begin // block_size
    return BlockStored(block_hashes=hashes[first:],
                       parent_block_hash=hashes[first - 1] if first else None,
                       token_ids=[int(t) for t in tokens[first * block_size:len(hashes) * block_size]],
                       block_size=block_size, lora_id=None, medium=MEDIUM, lora_name=None,
                       ownership=OWNERSHIP)


class RangeKVEvents(KVConnectorKVEvents):
    """The events of one step, from one or more workers (TP ranks)."""

    def __init__(self, num_workers: int = 1) -> None:
        self._events: list[KVCacheEvent] = []
        self._workers = num_workers

    def add_events(self, events: list[KVCacheEvent]) -> None:
        self._events.extend(events)

    def aggregate(self) -> "RangeKVEvents":
        # Keep an event only when every worker reported it (each rank stores its own shard).
        counts = collections.Counter(self._events)
        kept, seen = [], set()
        for ev in self._events:
            if counts[ev] >= self._workers and ev not in seen:
                kept.append(ev)
                seen.add(ev)
        self._events = kept
        self._workers = 1
        return self

    def increment_workers(self, count: int = 1) -> None:
        self._workers += count

    def get_all_events(self) -> list[KVCacheEvent]:
        return list(self._events)

    def get_number_of_workers(self) -> int:
        return self._workers

    def clear_events(self) -> None:
        self._events = []
        self._workers = 1

    def __repr__(self) -> str:
        return f"RangeKVEvents({len(self._events)} events, {self._workers} workers)"
