"""The connector's scheduler side, in vLLM's EngineCore process (connector.py says how the two
sides fit together).

For each new request it asks every rank's worker for the cached prefix (`channel.LookupClient`,
with a bounded wait), applies the block rounding and the break-even threshold, remembers the
tickets, and once vLLM allocated blocks puts into the per-step metadata which requests restore which
tokens into which blocks, and which requests' full prompt blocks this step completes (to store).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .break_even import break_even_tokens, bytes_per_token, probe_read_bytes_per_s
from .channel import LookupClient, socket_path
from .config import ConnectorConfig
from .metadata import LoadSpec, RangeKVMetadata, StoreSpec

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.request import Request

log = logging.getLogger("vllm.rangekv")


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


def not_keyed_by_tokens(request) -> str | None:
    """Why a request's KV is not a function of its token ids and the model alone, or None.
    RangeKV keys KV by token ids within the model's namespace, so such a request is neither
    restored nor stored: a LoRA adapter is another model, and multimodal inputs or prompt
    embeddings put other values behind the same ids. Works on vLLM's Request and on the
    scheduler output's NewRequestData (both carry these fields)."""
    if getattr(request, "lora_request", None) is not None:
        return "a LoRA adapter"
    if getattr(request, "mm_features", None):
        return "multimodal inputs"
    if getattr(request, "prompt_embeds", None) is not None:
        return "prompt embeddings"
    return None


class RangeKVScheduler:
    """The scheduler-side half of RangeKVConnector (one per serving instance)."""

    def __init__(self, vllm_config: VllmConfig, cfg: ConnectorConfig, *, block_size: int,
                 granularity: int, tp_size: int, engine_id: str) -> None:
        self._vllm_config = vllm_config
        self.cfg = cfg
        self.block_size = block_size
        self.granularity = granularity
        self.tp_size = tp_size
        self.engine_id = engine_id
        paths = [socket_path(self.cfg.socket_dir, self.engine_id, r) for r in range(self.tp_size)]
        self._client = LookupClient(paths, self.cfg.lookup_timeout_ms)
        self._lookups: dict[str, _Lookup] = {}
        self._local_hit: dict[str, int] = {}
        self._pending_loads: dict[str, LoadSpec] = {}
        self._requests: dict[str, _Request] = {}
        self._finished: list[str] = []
        self._attempts: dict[str, int] = {}
        self._kv_events: list = []
        self._bypass_logged: set[str] = set()
        self._min_hit_tokens = self._gate_threshold()

    def _gate_threshold(self) -> int:
        """The break-even threshold in tokens (break_even.py): configured, or derived once at
        start-up from the break_even_* keys and the model's KV bytes per token."""
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
        bandwidth = cfg.break_even_restore_bandwidth
        if bandwidth == "probe":
            try:
                bandwidth, how = probe_read_bytes_per_s(cfg.store_dir, direct=cfg.direct_io)
                how = f"probed, {how}"
            except OSError as e:
                # Without a bandwidth there is no break-even: restore every hit (threshold off).
                log.warning("rangekv: break-even threshold: probing %s failed (%s); threshold off",
                            cfg.store_dir, e)
                return 0
        never = self._vllm_config.model_config.max_model_len + self.block_size
        threshold = break_even_tokens(
            prefill_tokens_per_s=cfg.break_even_prefill_tokens_per_s, restore_bytes_per_s=bandwidth,
            bytes_per_token=bpt, overhead_s=cfg.break_even_overhead_us * 1e-6,
            block_size=self.block_size, never=never)
        log.info("rangekv: break-even threshold: restores shorter than %d tokens are recomputed "
                 "(prefill %d tokens/s, restore %.3f GiB/s %s, overhead %.2f ms, %d KV bytes "
                 "per token)%s", threshold, cfg.break_even_prefill_tokens_per_s,
                 bandwidth / (1 << 30), how, cfg.break_even_overhead_us / 1000, bpt,
                 "; reading a token costs more than computing it: no restores" if
                 threshold >= never else "")
        return threshold

    @property
    def min_hit_tokens(self) -> int:
        """The break-even threshold's threshold in effect (tokens beyond vLLM's own hit)."""
        return self._min_hit_tokens

    def get_num_new_matched_tokens(self, request: Request,
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        req_id = request.request_id
        if self._bypassed(request):
            return 0, False
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
            log.debug("rangekv: lookup %s: %d of %d tokens (%.2f ms)", req_id, found.hit, n,
                      found_ms)
            self._lookups[req_id] = found
        hit = min(found.hit, limit)
        hit = hit // self.block_size * self.block_size
        external = hit - num_computed_tokens
        # The break-even threshold weighs what RangeKV would deliver, not vLLM's own hit.
        if external <= 0 or external < self._min_hit_tokens:
            return 0, False
        self._local_hit[req_id] = num_computed_tokens
        return external, False

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks,
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

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> RangeKVMetadata:
        meta = RangeKVMetadata()
        B = self.block_size
        num_sched = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            if self._bypassed(new):
                continue  # untracked: its later steps store nothing either
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

    def _bypassed(self, request) -> bool:
        why = not_keyed_by_tokens(request)
        if why is not None and why not in self._bypass_logged:
            self._bypass_logged.add(why)
            log.info("rangekv: requests with %s are neither restored nor stored (their KV is "
                     "not keyed by token ids alone)", why)
        return why is not None

    def request_finished(self, request: Request,
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

    def update_connector_output(self, connector_output) -> None:
        events = getattr(connector_output, "kv_cache_events", None)
        if events:
            self._kv_events.extend(events.aggregate().get_all_events())

    def take_events(self):
        if not self._kv_events:
            return ()
        events, self._kv_events = self._kv_events, []
        return events

    def shutdown(self) -> None:
        self._client.close()
