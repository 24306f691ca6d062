"""RangeKV's counters and phases through vLLM's connector stats and Prometheus hooks.

The worker-role connector fills a :class:`RangeKVStats` per step (`get_kv_connector_stats`);
vLLM aggregates it across workers and steps, logs `reduce()` with its periodic stats line and
hands the same dict to :class:`RangeKVPromMetrics.observe`, so the counters appear on the
server's ``/metrics`` as ``vllm:rangekv_*``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
    KVConnectorPromMetrics,
    KVConnectorStats,
)

# name -> help. Summed over steps and workers (TP ranks count separately).
COUNTERS: dict[str, str] = {
    "lookups": "lookups answered by the workers",
    "lookup_hit_tokens": "tokens found in RangeKV by lookups (before vLLM's own prefix hit)",
    "restores": "restores started",
    "restored_tokens": "tokens delivered into vLLM's KV cache",
    "restore_failed_tokens": "tokens whose restore failed (reported to vLLM for recompute)",
    "stores": "stores begun (new tokens reserved)",
    "stored_tokens": "tokens reserved for storing",
    "store_failures": "stores that did not become visible",
    "bytes_read": "payload bytes read from the pack files",
    "bytes_written": "payload bytes written to the pack files",
    "checksum_failures": "spans whose payload failed digest verification",
    "native_reads": "native read calls",
    "native_writes": "native write calls",
    "preemptions": "requests vLLM preempted (their in-flight restores are cancelled)",
}
# Phase sums in seconds, with their counts (mean = sum / count in reduce()).
PHASES: dict[str, str] = {
    "lookup_s": "worker time answering a lookup (directory walk + prefetch start)",
    "claim_s": "claim + bind of a restore",
    "first_layer_ready_s": "claim to layer 0 ready",
    "last_layer_ready_s": "claim to the last layer ready (whole prefix delivered)",
    "store_extracted_s": "first layer produced to source blocks reusable",
}


@dataclasses.dataclass
class RangeKVStats(KVConnectorStats):
    def __post_init__(self) -> None:
        if not self.data:
            self.reset()

    def reset(self) -> None:
        self.data = {k: 0 for k in COUNTERS}
        for p in PHASES:
            self.data[p] = 0.0
            self.data[p + "_count"] = 0

    def add(self, key: str, value: float) -> None:
        self.data[key] = self.data.get(key, 0) + value

    def phase(self, key: str, seconds: float) -> None:
        self.add(key, seconds)
        self.add(key + "_count", 1)

    def aggregate(self, other: KVConnectorStats) -> RangeKVStats:
        for k, v in other.data.items():
            self.data[k] = self.data.get(k, 0) + v
        return self

    def reduce(self) -> dict[str, int | float]:
        out: dict[str, int | float] = {k: int(self.data.get(k, 0)) for k in COUNTERS}
        for p in PHASES:
            n = self.data.get(p + "_count", 0)
            if n:
                out[p.replace("_s", "_ms_mean")] = round(1000.0 * self.data.get(p, 0.0) / n, 3)
        return out

    def is_empty(self) -> bool:
        return not any(self.data.get(k, 0) for k in COUNTERS)


class RangeKVPromMetrics(KVConnectorPromMetrics):
    """One Prometheus counter per COUNTERS entry and per phase (seconds and count)."""

    def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues) -> None:
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._counters: dict[str, dict[int, Any]] = {}
        names = dict(COUNTERS)
        for p, doc in PHASES.items():
            names[p] = doc + " (seconds, summed)"
            names[p + "_count"] = doc + " (count)"
        for key, doc in names.items():
            metric = self._counter_cls(name=f"vllm:rangekv_{key}", documentation=doc,
                                       labelnames=labelnames)
            self._counters[key] = {
                idx: metric.labels(*values) for idx, values in per_engine_labelvalues.items()}

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        for key, per_engine in self._counters.items():
            value = transfer_stats_data.get(key, 0)
            if value and engine_idx in per_engine:
                per_engine[engine_idx].inc(value)
