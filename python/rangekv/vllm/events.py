"""KV cache events: what RangeKV holds, told to KV-aware routers through vLLM's event stream.

Each worker reports a `BlockStored` event (medium ``STORAGE``, ownership ``rangekv``) for the
blocks a store made visible, and a `BlockRemoved` event (same medium and ownership) for the
announced blocks that stopped being served when the engine evicted or invalidated a pack. vLLM
carries the worker's `RangeKVEvents` to the scheduler in the connector output (merged across TP
ranks: a block counts as held only when every rank reported it stored, and as gone as soon as
one rank reported it removed), the scheduler-role connector hands them to vLLM in
`take_events`, and vLLM publishes them with its own KV events (``--kv-events-config``), next to
the GPU prefix cache's.

Block hashes are RangeKV's own: a chain over the block's token ids (SHA-256 of the parent's hash
and the block's little-endian int32 tokens, first 8 bytes as a signed int64), so a router can
recompute them from the token ids the event carries.

Removals. The engine names every pack that leaves its index (`Engine.drain_removed_ranges`:
the pack's slot and generation, as the store's `StoreOutcome.packs` named it, and the path
tokens it no longer serves). `AnnouncedBlocks` remembers, per pack, the hashes of the announced
blocks that need the pack (a block needs every pack holding one of its tokens the store wrote;
a block that straddles two packs is listed under both) and turns a removed range into the
hashes of the blocks it touches that are still announced, each reported once.
"""

from __future__ import annotations

import collections
import hashlib

import numpy as np
from vllm.distributed.kv_events import (
    BlockRemoved,
    BlockStored,
    KVCacheEvent,
    KVConnectorKVEvents,
)

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
                       token_ids=[int(t)
                                  for t in tokens[first * block_size:len(hashes) * block_size]],
                       block_size=block_size, lora_id=None, medium=MEDIUM, lora_name=None,
                       ownership=OWNERSHIP)


def removed_event(hashes: list[int]) -> BlockRemoved:
    return BlockRemoved(block_hashes=hashes, medium=MEDIUM, ownership=OWNERSHIP)


class AnnouncedBlocks:
    """The blocks one worker announced in `BlockStored` events, by the pack they need.

    `stored()` records a visible store's packs; `removed()` answers the hashes a removed range
    takes away. Memory: one entry per pack slot that holds a pack the connector stored (a
    pack's entry goes when it is retired, or when its slot holds a newer pack).
    """

    def __init__(self, block_size: int) -> None:
        self._B = block_size
        # slot -> (gen, first block, hashes)
        self._packs: dict[int, tuple[int, int, list[int]]] = {}
        self._live: set[int] = set()  # announced and not yet reported removed

    def __len__(self) -> int:
        return len(self._packs)

    def stored(self, hashes: list[int], begin: int, end: int,
               packs: list[tuple[int, int, int, int]]) -> list[int]:
        """`hashes`: block_hashes(tokens, B, end) (every whole block up to `end`), of which
        blocks [begin // B, end // B) are announced now; `packs`: (slot, generation, begin,
        end), the store's StoreOutcome.packs. Returns the still-announced hashes an older pack
        of the same slots left behind (its removal was never seen: dropped from a full queue,
        or the pack never became visible): they are gone, report them before the new ones."""
        B = self._B
        orphans: list[int] = []
        for slot, _, _, _ in packs:
            old = self._packs.pop(slot, None)
            if old is not None:
                orphans.extend(h for h in old[2] if h in self._live)
        orphans = list(dict.fromkeys(orphans))  # a straddling block is listed under two packs
        self._live.difference_update(orphans)
        first, last = begin // B, end // B
        self._live.update(hashes[first:last])
        for slot, gen, pb, pe in packs:
            k0, k1 = max(pb // B, first), min(-(-pe // B), last)
            self._packs[slot] = (gen, k0, hashes[k0:k1] if k1 > k0 else [])
        return orphans

    def removed(self, slot: int, gen: int, begin: int, end: int,
                retired: bool) -> list[int] | None:
        """The still-announced hashes of the blocks that path tokens [begin, end) of pack
        (slot, gen) took with them; None when no stored pack of this connector is that pack."""
        entry = self._packs.get(slot)
        if entry is None or entry[0] != gen:
            return None
        B = self._B
        _, k0, hashes = entry
        lo, hi = max(begin // B, k0), min(-(-end // B), k0 + len(hashes))
        gone = [h for h in hashes[lo - k0:hi - k0] if h in self._live] if hi > lo else []
        self._live.difference_update(gone)
        if retired:
            del self._packs[slot]
        else:  # the head stays: keep the blocks wholly before `begin`
            self._packs[slot] = (gen, k0, hashes[:max(0, begin // B - k0)])
        return gone


class RangeKVEvents(KVConnectorKVEvents):
    """The events of one step, from one or more workers (TP ranks)."""

    def __init__(self, num_workers: int = 1) -> None:
        self._events: list[KVCacheEvent] = []
        self._workers = num_workers

    def add_events(self, events: list[KVCacheEvent]) -> None:
        self._events.extend(events)

    def aggregate(self) -> RangeKVEvents:
        # Keep a store only when every worker reported it (each rank stores its own shard), a
        # removal when any did (a block is gone once one rank's shard of it is).
        counts = collections.Counter(self._events)
        kept, seen = [], set()
        for ev in self._events:
            need = 1 if isinstance(ev, BlockRemoved) else self._workers
            if counts[ev] >= need and ev not in seen:
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
