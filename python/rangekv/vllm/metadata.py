"""What the connector's scheduler side tells its workers every step (pickled by vLLM when the
workers run in other processes): which requests restore which tokens into which blocks, which
requests' full prompt blocks to store, and which requests finished or were preempted."""

from __future__ import annotations

import dataclasses

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata


@dataclasses.dataclass
class LoadSpec:
    """Restore path tokens [begin, end) of request `req_id` into its blocks."""
    req_id: str
    attempt: int
    tickets: list[bytes]     # one per rank
    tokens: bytes            # int32 little-endian, path tokens [0, end)
    begin: int               # tokens vLLM holds already (its own prefix hit)
    end: int
    block_ids: list[int]     # the request's blocks covering [0, end)


@dataclasses.dataclass
class StoreSpec:
    """Store the request's full prompt blocks [0, len(tokens)) (only the uncached rest is
    written)."""
    req_id: str
    tokens: bytes            # int32 little-endian
    block_ids: list[int]


@dataclasses.dataclass
class RangeKVMetadata(KVConnectorMetadata):
    loads: list[LoadSpec] = dataclasses.field(default_factory=list)
    stores: list[StoreSpec] = dataclasses.field(default_factory=list)
    finished: list[str] = dataclasses.field(default_factory=list)   # release + cancel
    preempted: list[str] = dataclasses.field(default_factory=list)  # cancel

