"""RangeKVConnector: a vLLM 0.32 (era C) KV connector over rangekv.Engine.

Two instances: the SCHEDULER one in vLLM's EngineCore process, one WORKER per TP rank in the
worker processes. Each worker's rangekv.Engine owns that rank's store (store_dir/rank-N). The
scheduler asks every rank over a local ZeroMQ channel (ipc socket in a per-engine run
directory) with a bounded wait; the worker answers with its hit and keeps the lookup's ticket;
scheduled restores and stores travel to the workers in the per-step connector metadata.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import re
import tempfile
import threading
import time
from typing import Any

import torch
import zmq

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
    KVConnectorPromMetrics,
    KVConnectorStats,
)

import rangekv

from ._config import ConnectorConfig, parse_config

logger = logging.getLogger("rangekv.vllm")

STAT_KEYS = ("lookups", "lookup_hit_tokens", "restores", "restored_tokens", "restored_bytes",
             "stores", "stored_tokens", "stored_bytes", "load_failures", "failed_tokens",
             "checksum_failures", "preempted_requests", "lookup_s", "restore_s", "store_s")


# --------------------------------------------------------------------------------------------
# Metadata (scheduler -> workers, pickled when TP > 1)


@dataclasses.dataclass
class LoadSpec:
    req_id: str
    attempt: int
    begin: int                 # first token to restore (vLLM's local hit)
    end: int                   # one past the last restored token (block-aligned)
    block_ids: list[int]       # the request's blocks covering [0, end)


@dataclasses.dataclass
class StoreSpec:
    req_id: str
    token_ids: list[int]       # full-block prompt tokens
    block_ids: list[int]


@dataclasses.dataclass
class RangeKVMetadata(KVConnectorMetadata):
    loads: list[LoadSpec] = dataclasses.field(default_factory=list)
    stores: list[StoreSpec] = dataclasses.field(default_factory=list)
    preempted: set[str] = dataclasses.field(default_factory=set)


# --------------------------------------------------------------------------------------------
# Stats (worker -> scheduler -> logger / Prometheus)


@dataclasses.dataclass
class RangeKVStats(KVConnectorStats):
    def __post_init__(self):
        for k in STAT_KEYS:
            self.data.setdefault(k, 0)

    def reset(self):
        self.data = {k: 0 for k in STAT_KEYS}

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        for k, v in other.data.items():
            self.data[k] = self.data.get(k, 0) + v
        return self

    def reduce(self) -> dict[str, int | float]:
        return dict(self.data)

    def is_empty(self) -> bool:
        return not any(self.data.get(k) for k in STAT_KEYS)


class RangeKVPromMetrics(KVConnectorPromMetrics):
    def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._counters: dict[str, dict[int, Any]] = {}
        for key in STAT_KEYS:
            unit = "seconds" if key.endswith("_s") else ""
            name = f"vllm:rangekv_{key[:-2] + '_seconds' if unit else key}"
            c = self._counter_cls(name=name, documentation=f"RangeKV connector: {key}",
                                  labelnames=labelnames)
            self._counters[key] = {e: c.labels(*v) for e, v in per_engine_labelvalues.items()}

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0):
        for key, value in transfer_stats_data.items():
            per_engine = self._counters.get(key)
            if per_engine and value:
                per_engine[engine_idx].inc(value)


# --------------------------------------------------------------------------------------------


def _run_dir(vllm_config) -> str:
    return os.path.join(tempfile.gettempdir(), f"rangekv-vllm-{vllm_config.instance_id}")


def _socket_path(vllm_config, rank: int) -> str:
    return "ipc://" + os.path.join(_run_dir(vllm_config), f"rank-{rank}.sock")


def _layer_index(name: str, fallback: int) -> int:
    m = re.search(r"layers\.(\d+)\.", name)
    return int(m.group(1)) if m else fallback


class RangeKVConnector(KVConnectorBase_V1):
    """See docs/integrations/vllm.md."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self.cfg: ConnectorConfig = parse_config(
            self._kv_transfer_config.kv_connector_extra_config)
        pc = vllm_config.parallel_config
        if pc.pipeline_parallel_size != 1:
            raise ValueError("RangeKVConnector: pipeline parallelism is not supported "
                             f"(pipeline_parallel_size={pc.pipeline_parallel_size})")
        groups = kv_cache_config.kv_cache_groups if kv_cache_config is not None else []
        if len(groups) > 1:
            raise ValueError("RangeKVConnector: models with several KV-cache groups "
                             f"(hybrid / sliding-window, here {len(groups)}) are not supported")
        self.tp_size = pc.tensor_parallel_size
        self.block_size = vllm_config.cache_config.block_size
        if role == KVConnectorRole.SCHEDULER:
            self._sched_init()
        else:
            self._worker_init()

    # ---------------------------------------------------------------- scheduler side
    def _sched_init(self):
        if self._kv_transfer_config.kv_load_failure_policy != "recompute":
            logger.warning("RangeKVConnector: kv_load_failure_policy=%r: a failed or corrupt "
                           "restore fails the request; set \"recompute\" to recompute it",
                           self._kv_transfer_config.kv_load_failure_policy)
        self._ctx = zmq.Context()
        self._socks = []
        for r in range(self.tp_size):
            s = self._ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(_socket_path(self._vllm_config, r))
            self._socks.append(s)
        self._seq = 0
        self._answers: dict[str, tuple[int, int]] = {}   # req_id -> (attempt, hit tokens)
        self._attempts: dict[str, int] = {}
        self._local: dict[str, int] = {}
        self._pending_loads: list[LoadSpec] = []
        self._reqs: dict[str, dict[str, Any]] = {}       # running requests not yet stored
        self._finished = 0
        self._sched_stats = {"lookups": 0, "hit_tokens": 0, "timeouts": 0}
        self._warned_timeout = False

    def _ask(self, msg: dict[str, Any]) -> list[Any] | None:
        """Send msg to every rank; their answers, or None when one misses the deadline."""
        self._seq += 1
        seq = self._seq.to_bytes(8, "little")
        payload = pickle.dumps(msg)
        for s in self._socks:
            s.send_multipart([seq, payload])
        deadline = time.monotonic() + self.cfg.lookup_timeout_ms / 1000
        answers: list[Any] = [None] * len(self._socks)
        for r, s in enumerate(self._socks):
            while answers[r] is None:
                left = deadline - time.monotonic()
                if left <= 0 or not s.poll(int(left * 1000) + 1):
                    return None
                got_seq, body = s.recv_multipart()
                if got_seq == seq:             # late answers to earlier questions are dropped
                    answers[r] = pickle.loads(body)
        return answers

    def _tell(self, msg: dict[str, Any]) -> None:
        payload = pickle.dumps(msg)
        for s in self._socks:
            s.send_multipart([b"\0" * 8, payload])

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        rid = request.request_id
        prompt = request.prompt_token_ids or []
        B = self.block_size
        limit = ((len(prompt) - 1) // B) * B        # never the last prompt token
        # The engine's hit never covers the last token it is given: ask with one token
        # past `limit` so that a hit can reach `limit` itself.
        if limit <= num_computed_tokens:
            return 0, False
        if rid not in self._answers:                # repeated calls reuse the answer
            attempt = self._attempts.get(rid, 0) + 1
            self._attempts[rid] = attempt
            self._sched_stats["lookups"] += 1
            answers = self._ask({"op": "lookup", "req_id": rid, "attempt": attempt,
                                 "tokens": list(prompt[:limit + 1]), "granularity": B})
            if answers is None:
                self._sched_stats["timeouts"] += 1
                if not self._warned_timeout:
                    logger.warning("RangeKVConnector: a worker did not answer a lookup within "
                                   "lookup_timeout_ms=%d; recomputing", self.cfg.lookup_timeout_ms)
                    self._warned_timeout = True
                hit = 0
            else:
                hit = min(answers)                  # a prefix counts only on every rank
            self._answers[rid] = (attempt, (min(hit, limit) // B) * B)
        hit = self._answers[rid][1]
        ext = hit - num_computed_tokens
        if ext <= 0:
            return 0, False
        self._local[rid] = num_computed_tokens
        return ext, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        rid = request.request_id
        if num_external_tokens <= 0 or rid not in self._answers:
            return
        attempt, _ = self._answers.pop(rid)         # consumed: a resumed request asks again
        begin = self._local.pop(rid, 0)
        end = begin + num_external_tokens
        ids = list(blocks.get_block_ids()[0])
        self._pending_loads.append(LoadSpec(rid, attempt, begin, end, ids[: end // self.block_size]))
        self._sched_stats["hit_tokens"] += num_external_tokens

    def build_connector_meta(self, scheduler_output):
        meta = RangeKVMetadata(loads=self._pending_loads,
                               preempted=set(scheduler_output.preempted_req_ids or ()))
        self._pending_loads = []
        B = self.block_size
        sched = scheduler_output.num_scheduled_tokens
        for nr in scheduler_output.scheduled_new_reqs:
            self._reqs[nr.req_id] = {"prompt": list(nr.prompt_token_ids or []),
                                     "blocks": list(nr.block_ids[0]),
                                     "computed": nr.num_computed_tokens}
        cr = scheduler_output.scheduled_cached_reqs
        for i, rid in enumerate(cr.req_ids):
            st = self._reqs.get(rid)
            if st is None:
                continue
            new = cr.new_block_ids[i]
            if rid in cr.resumed_req_ids:
                st["blocks"] = list(new[0]) if new else []
            elif new:
                st["blocks"].extend(new[0])
            st["computed"] = cr.num_computed_tokens[i]
        for rid in list(self._reqs):
            st = self._reqs[rid]
            n = sched.get(rid)
            if n is None:
                continue
            prompt = st["prompt"]
            if st["computed"] + n >= len(prompt):   # prefill completes in this step
                full = (len(prompt) // B) * B
                if full > 0 and len(st["blocks"]) * B >= full:
                    meta.stores.append(StoreSpec(rid, prompt[:full], st["blocks"][: full // B]))
                del self._reqs[rid]
        for rid in meta.preempted:
            self._reqs.pop(rid, None)
        return meta

    def request_finished(self, request, block_ids):
        rid = request.request_id
        self._answers.pop(rid, None)
        self._attempts.pop(rid, None)
        self._local.pop(rid, None)
        self._reqs.pop(rid, None)
        self._tell({"op": "release", "req_id": rid})
        self._finished += 1
        if self.cfg.summary_every and self._finished % self.cfg.summary_every == 0:
            s = self._sched_stats
            logger.info("RangeKV: %d requests, %d lookups, %d external hit tokens, "
                        "%d lookup timeouts", self._finished, s["lookups"], s["hit_tokens"],
                        s["timeouts"])
        return False, None

    # ---------------------------------------------------------------- worker side
    def _worker_init(self):
        try:
            from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
            self.rank = get_tensor_model_parallel_rank()
        except Exception:   # noqa: BLE001 - no TP group (single process)
            self.rank = 0
        self.engine: rangekv.Engine | None = None
        self._layers: list[torch.Tensor] = []      # as handed to rangekv (maybe re-viewed)
        self._names: dict[str, int] = {}
        self._lookups: dict[str, tuple[int, bytes, list[int]]] = {}   # rid -> (attempt, ticket, tokens)
        self._lock = threading.Lock()
        self._restores: list[tuple[LoadSpec, Any, float]] = []
        self._stores: list[tuple[StoreSpec, Any]] = []
        self._load_errors: set[int] = set()
        self._stats = RangeKVStats()
        self._total: dict[str, float] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # Test-only negative control: while this file exists, restored blocks are scrambled.
        self._test_corrupt = os.environ.get("RANGEKV_VLLM_TEST_CORRUPT_FLAG")

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]):
        names = list(kv_caches)
        order = sorted(range(len(names)), key=lambda i: _layer_index(names[i], i))
        tensors = [kv_caches[names[i]] for i in order]
        self._names = {names[i]: li for li, i in enumerate(order)}
        t0 = tensors[0]
        spec = self._kv_cache_config.kv_cache_groups[0].kv_cache_spec
        H, D, B = spec.num_kv_heads, spec.head_size, self.block_size
        if t0.device.type == "cpu":
            # CPU backend: [N, H, B, 2D], a block's interior packed by the attention ISA.
            if tuple(t0.shape[1:]) != (H, B, 2 * D) or not all(t.is_contiguous() for t in tensors):
                raise ValueError(f"RangeKVConnector: CPU KV layout {tuple(t0.shape)} stride "
                                 f"{t0.stride()} is not [num_blocks, {H}, {B}, {2 * D}] contiguous")
            layouts = ["cpu_block", "flashinfer_nhd"]
        else:
            if t0.dim() == 4 and tuple(t0.shape[1:]) == (H, B, 2 * D):
                layouts = ["packed_hnd" if t0.stride(1) > t0.stride(2) else "packed_nhd"]
            else:
                raise ValueError(f"RangeKVConnector: unsupported KV layout {tuple(t0.shape)} "
                                 f"stride {t0.stride()} on {t0.device}")
        store = os.path.join(self.cfg.store_dir, f"rank-{self.rank}")
        os.makedirs(store, exist_ok=True)
        last: Exception | None = None
        for layout in layouts:
            views = tensors
            if layout == "flashinfer_nhd":
                # Until cpu_block is in the engine: view each block's opaque bytes as
                # [2, B, H, D]; only whole blocks are ever stored or restored, so every byte of
                # a block round-trips exactly (the per-token split is meaningless but complete).
                views = [t.view(t.shape[0], 2, B, H, D) for t in tensors]
            try:
                self.engine = rangekv.Engine(
                    store, layers=len(tensors), kv_heads=H * self.tp_size, head_size=D,
                    dtype=t0.dtype, block_size=B, layout=layout,
                    model_id=str(self._vllm_config.model_config.model), tp_size=self.tp_size,
                    tp_rank=self.rank, stripe_bytes=self.cfg.stripe_bytes,
                    capacity_bytes=self.cfg.capacity, device=self.cfg.device,
                    io_engine=self.cfg.io_engine, direct_io=self.cfg.direct_io,
                    checksum=self.cfg.checksum, read_banks=self.cfg.read_banks,
                    read_workers=self.cfg.read_workers, prefetch_banks=self.cfg.prefetch_banks,
                    store_banks=self.cfg.store_banks, group_workers=self.cfg.group_workers,
                    write_workers=self.cfg.write_workers, layer_group=min(4, len(tensors)),
                    lookahead_layers=min(2, len(tensors)),
                    max_inflight_restores=self.cfg.max_inflight_restores,
                    max_inflight_stores=self.cfg.max_inflight_stores)
            except rangekv.Error as e:
                last = e
                if e.code in ("unimplemented", "geometry_mismatch") and layout != layouts[-1]:
                    continue
                raise
            self._layers = views
            self.layout = layout
            break
        if self.engine is None:
            raise ValueError(f"RangeKVConnector: no engine layout for these tensors: {last}")
        logger.info("RangeKV rank %d: store %s layout %s %s recovery %s", self.rank, store,
                    self.layout, self.engine.backends, self.engine.recovery.get("reason"))
        os.makedirs(_run_dir(self._vllm_config), exist_ok=True)
        self._zctx = zmq.Context()
        self._router = self._zctx.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.LINGER, 0)
        self._router.bind(_socket_path(self._vllm_config, self.rank))
        self._thread = threading.Thread(target=self._serve, name="rangekv-lookup", daemon=True)
        self._thread.start()

    def _serve(self):
        sock = self._router
        while not self._stop.is_set():
            if not sock.poll(100):
                continue
            ident, seq, body = sock.recv_multipart()
            msg = pickle.loads(body)
            if msg["op"] == "lookup":
                t0 = time.monotonic()
                env = rangekv.Envelope(msg["req_id"], attempt=msg["attempt"], rank=self.rank)
                try:
                    hit, ticket = self.engine.lookup(msg["tokens"], env, msg["granularity"])
                except rangekv.Error as e:
                    logger.warning("RangeKV lookup failed: %s", e)
                    hit, ticket = 0, b""
                with self._lock:
                    self._lookups[msg["req_id"]] = (msg["attempt"], ticket, msg["tokens"])
                    self._stats.data["lookups"] += 1
                    self._stats.data["lookup_hit_tokens"] += hit
                    self._stats.data["lookup_s"] += time.monotonic() - t0
                sock.send_multipart([ident, seq, pickle.dumps(hit)])
            elif msg["op"] == "release":
                with self._lock:
                    self._lookups.pop(msg["req_id"], None)
                try:
                    self.engine.release_request(rangekv.Envelope(msg["req_id"], rank=self.rank))
                except rangekv.Error:
                    pass

    def _slots(self, block_ids: list[int], begin: int, end: int) -> torch.Tensor:
        B = self.block_size
        ids = torch.tensor(block_ids, dtype=torch.int64)
        tok = torch.arange(begin, end, dtype=torch.int64)
        return ids[tok // B] * B + tok % B

    def handle_preemptions(self, kv_connector_metadata):
        pre = getattr(kv_connector_metadata, "preempted", None)
        if not pre:
            return
        # Restores and stores never outlive a step (finished / extracted in wait_for_save),
        # so only the unclaimed lookups are dropped here.
        with self._lock:
            for rid in pre:
                self._lookups.pop(rid, None)
            self._stats.data["preempted_requests"] += len(pre)

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata()
        for spec in meta.loads:
            with self._lock:
                got = self._lookups.pop(spec.req_id, None)
            if got is None or got[0] != spec.attempt or not got[1]:
                self._fail_load(spec, spec.begin, spec.end, "no ticket")
                continue
            _, ticket, tokens = got
            env = rangekv.Envelope(spec.req_id, attempt=spec.attempt, rank=self.rank)
            t0 = time.monotonic()
            try:
                h = self.engine.start_restore(ticket, env, tokens[: spec.end],
                                              begin_token=spec.begin, endpoint_tokens=spec.end)
                h.bind_slots(self._layers, self._slots(spec.block_ids, spec.begin, spec.end))
            except rangekv.Error as e:
                self._fail_load(spec, spec.begin, spec.end, str(e))
                continue
            self._restores.append((spec, h, t0))
        if not self.cfg.layerwise:
            self._finish_restores()

    def wait_for_layer_load(self, layer_name: str) -> None:
        if not self.cfg.layerwise or not self._restores:
            return
        layer = self._names.get(layer_name)
        for _, h, _ in self._restores:
            try:
                h.wait_layer(layer)
            except rangekv.Error:
                pass                                # reported by finish()

    def _finish_restores(self):
        for spec, h, t0 in self._restores:
            out = h.finish()
            d = self._stats.data
            d["restores"] += 1
            d["restored_tokens"] += out.delivered_tokens
            d["restored_bytes"] += out.delivered_tokens * self.engine.geometry["token_bytes"]
            d["restore_s"] += time.monotonic() - t0
            for b, e in out.failed:
                self._fail_load(spec, b, e, str(out.status))
            if not out.ok and isinstance(out.status, rangekv.Corruption):
                d["checksum_failures"] += 1
            if self._test_corrupt and out.ok and os.path.exists(self._test_corrupt):
                self._corrupt(spec)
        self._restores = []

    def _corrupt(self, spec: LoadSpec):
        """Test-only negative control: scramble the restored blocks."""
        B = self.block_size
        for bid in spec.block_ids[spec.begin // B: spec.end // B]:
            for t in self._layers:
                t[bid].copy_(torch.flip(t[bid], dims=[-1]))

    def _fail_load(self, spec: LoadSpec, begin: int, end: int, why: str):
        B = self.block_size
        blocks = spec.block_ids[begin // B: (end + B - 1) // B]
        self._load_errors.update(blocks)
        self._stats.data["load_failures"] += 1
        self._stats.data["failed_tokens"] += end - begin
        logger.warning("RangeKV: restore of %s tokens [%d, %d) failed (%s); blocks %s recomputed",
                       spec.req_id, begin, end, why, blocks)

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        meta = self._get_connector_metadata()
        layer = self._names.get(layer_name)
        if layer is None:
            return
        if layer == 0:
            for spec in meta.stores:
                env = rangekv.Envelope(spec.req_id, rank=self.rank)
                try:
                    s = self.engine.begin_store(env, spec.token_ids, self._layers,
                                                self._slots(spec.block_ids, 0, len(spec.token_ids)))
                except rangekv.Error as e:
                    logger.warning("RangeKV: store of %s not started: %s", spec.req_id, e)
                    continue
                self._stores.append((spec, s, time.monotonic()))
        for _, s, _ in self._stores:
            if s.disposition == "storing":
                s.layer_produced(layer)

    def wait_for_save(self):
        if self.cfg.layerwise and self._restores:
            self._finish_restores()
        for spec, s, t0 in self._stores:
            try:
                s.wait_extracted()
                out = s.finish(detach=True)
                if out.disposition == "storing":
                    n = out.stored[1] - out.stored[0]
                    self._stats.data["stores"] += 1
                    self._stats.data["stored_tokens"] += n
                    self._stats.data["stored_bytes"] += n * self.engine.geometry["token_bytes"]
                self._stats.data["store_s"] += time.monotonic() - t0
            except rangekv.Error as e:
                logger.warning("RangeKV: store of %s failed: %s", spec.req_id, e)
        self._stores = []
        self._dump_stats()

    def get_block_ids_with_load_errors(self) -> set[int]:
        out, self._load_errors = self._load_errors, set()
        return out

    def _dump_stats(self):
        path = os.environ.get("RANGEKV_VLLM_STATS_FILE")
        if path and self.engine is not None:
            with open(f"{path}.rank{self.rank}", "w") as f:
                tot = {k: self._total.get(k, 0) + v for k, v in self._stats.data.items()}
                f.write(repr(tot))

    def get_kv_connector_stats(self):
        if self._role != KVConnectorRole.WORKER or self._stats.is_empty():
            return None
        out = RangeKVStats(data=dict(self._stats.data))
        for k, v in out.data.items():
            self._total[k] = self._total.get(k, 0) + v
        self._stats.reset()
        return out

    @classmethod
    def build_kv_connector_stats(cls, data=None):
        return RangeKVStats(data=dict(data)) if data is not None else RangeKVStats()

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        return RangeKVPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    def shutdown(self):
        if self._role == KVConnectorRole.SCHEDULER:
            for s in getattr(self, "_socks", []):
                s.close(0)
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._router.close(0)
            self._thread = None
        if self.engine is not None and not self.engine.closed:
            for _, h, _ in self._restores:
                h.cancel()
                h.finish()
            self._restores = []
            self._dump_stats()
            self.engine.close()                      # drains, writes the clean snapshot
