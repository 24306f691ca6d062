"""RangeKVConnector: RangeKV as an out-of-tree KV connector of vLLM (``KVConnectorBase_V1``),
for the versions versions.py names (0.25.1 to 0.34; others are refused at start-up).

Enabled with one flag, no vLLM patch (docs/integrations/vllm.md)::

    --kv-transfer-config '{"kv_connector":"RangeKVConnector",
        "kv_connector_module_path":"rangekv.vllm","kv_role":"kv_both",
        "kv_load_failure_policy":"recompute",
        "kv_connector_extra_config":{"store_dir":"/nvme/rangekv","capacity":"512GiB"}}'

vLLM makes two instances of this class per serving engine, in two processes, and this module
is only the facade both load: it validates the configuration and hands every call to the half
of its role, as vLLM's own OffloadingConnector does.
- role SCHEDULER, in vLLM's EngineCore process: `scheduler.RangeKVScheduler` asks every rank's
  worker for a new request's cached prefix and puts the restores and stores of each step into
  the connector metadata (`metadata.RangeKVMetadata`).
- role WORKER, in each worker process: `worker.RangeKVWorker` owns the rank's `rangekv.Engine`,
  answers the lookups, and runs the restores and stores the metadata names.

Failure behaviour: a rank that does not answer a lookup in time means no hit (recompute); a
restore that fails (I/O error, short read, checksum mismatch, stale ticket) reports exactly the
blocks of its failed tokens through `get_block_ids_with_load_errors`, so vLLM recomputes them;
a store that fails only costs a future hit. Wrong KV is never delivered as loaded.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)

from .config import ConfigError, ConnectorConfig, parse_config
from .events import RangeKVEvents
from .metadata import LoadSpec, RangeKVMetadata, StoreSpec  # noqa: F401 (the package's names)
from .scheduler import RangeKVScheduler
from .stats import RangeKVPromMetrics, RangeKVStats
from .versions import untested_reason
from .worker import RangeKVWorker

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

log = logging.getLogger("vllm.rangekv")


def _check_vllm_version(allow_untested: bool) -> None:
    """Refuses a vLLM outside the tested range (versions.py), or warns when allowed to run."""
    import vllm

    why = untested_reason(getattr(vllm, "__version__", "unknown"))
    if why is None:
        return
    if not allow_untested:
        raise RuntimeError(why)
    log.warning("rangekv: %s; starting anyway (allow_untested_vllm)", why.split(";")[0])


class RangeKVConnector(KVConnectorBase_V1):
    """RangeKV for vLLM: see the module docstring and docs/integrations/vllm.md."""

    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole,
                 kv_cache_config: KVCacheConfig | None = None) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        extra = self._kv_transfer_config.kv_connector_extra_config
        try:
            self.cfg: ConnectorConfig = parse_config(extra)
        except ConfigError as e:
            raise ValueError(f"RangeKVConnector: bad kv_connector_extra_config: {e}") from None
        _check_vllm_version(self.cfg.allow_untested_vllm)
        parallel = vllm_config.parallel_config
        if parallel.pipeline_parallel_size > 1:
            raise ValueError("RangeKVConnector: pipeline parallelism is not supported (each "
                             "stage would hold a subset of layers; packs hold all layers)")
        block_size = vllm_config.cache_config.block_size
        # Hits are whole multiples of this (vLLM loads whole blocks; a coarser granularity is a
        # coarser logical object, as LMCache's chunk_size).
        granularity = self.cfg.reuse_granularity or block_size
        if granularity % block_size:
            raise ValueError(f"RangeKVConnector: reuse_granularity {granularity} is not a "
                             f"multiple of vLLM's block size {block_size}")
        engine_id = self._kv_transfer_config.engine_id or "rangekv"
        if self._kv_transfer_config.kv_load_failure_policy != "recompute":
            log.warning("rangekv: kv_load_failure_policy is %r: a failed restore then fails the "
                        "request; set \"kv_load_failure_policy\":\"recompute\" so vLLM recomputes "
                        "the failed blocks", self._kv_transfer_config.kv_load_failure_policy)
        events_cfg = getattr(vllm_config, "kv_events_config", None)
        events_on = bool(events_cfg and events_cfg.enable_kv_cache_events)
        self._scheduler: RangeKVScheduler | None = None
        self._worker: RangeKVWorker | None = None
        if role == KVConnectorRole.SCHEDULER:
            self._scheduler = RangeKVScheduler(
                vllm_config, self.cfg, block_size=block_size, granularity=granularity,
                tp_size=parallel.tensor_parallel_size, engine_id=engine_id)
        else:
            self._worker = RangeKVWorker(
                vllm_config, self.cfg, block_size=block_size,
                tp_size=parallel.tensor_parallel_size, engine_id=engine_id, events_on=events_on)

    # ================================ scheduler side ==========================================

    @property
    def min_hit_tokens(self) -> int:
        """The break-even threshold's threshold in effect (tokens beyond vLLM's own hit)."""
        assert self._scheduler is not None
        return self._scheduler.min_hit_tokens

    def get_num_new_matched_tokens(self, request: Request,
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        assert self._scheduler is not None
        return self._scheduler.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks,
                                 num_external_tokens: int) -> None:
        assert self._scheduler is not None
        self._scheduler.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        assert self._scheduler is not None
        return self._scheduler.build_connector_meta(scheduler_output)

    def request_finished(self, request: Request,
                         block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        assert self._scheduler is not None
        return self._scheduler.request_finished(request, block_ids)

    def update_connector_output(self, connector_output) -> None:
        if self._scheduler is not None:
            self._scheduler.update_connector_output(connector_output)

    def take_events(self):
        return self._scheduler.take_events() if self._scheduler is not None else ()

    # ================================ worker side =============================================

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        assert self._worker is not None
        self._worker.register_kv_caches(kv_caches)

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
        log.info("rangekv: a cross-layer KV cache %s (strides %s) of %d layers",
                 tuple(kv_cache.shape), kv_cache.stride(), len(kv_caches))
        self.register_kv_caches(kv_caches)

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        assert self._worker is not None
        self._worker.handle_preemptions(kv_connector_metadata)

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        assert self._worker is not None
        self._worker.start_load_kv(self._get_connector_metadata())

    def wait_for_layer_load(self, layer_name: str) -> None:
        assert self._worker is not None
        self._worker.wait_for_layer_load(layer_name)

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any,
                      **kwargs: Any) -> None:
        assert self._worker is not None
        self._worker.save_kv_layer(self._get_connector_metadata(), layer_name)

    def wait_for_save(self) -> None:
        assert self._worker is not None
        self._worker.wait_for_save()

    def get_finished(self, finished_req_ids: set[str]):
        if self._worker is None:
            return None, None
        return self._worker.get_finished(finished_req_ids)

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self._worker.get_block_ids_with_load_errors() if self._worker is not None else set()

    def get_kv_connector_stats(self) -> RangeKVStats | None:
        return self._worker.take_stats() if self._worker is not None else None

    def get_kv_connector_kv_cache_events(self) -> RangeKVEvents | None:
        if self._worker is None:
            return None
        return self._worker.get_kv_connector_kv_cache_events()

    # ================================ both sides ==============================================

    def shutdown(self) -> None:
        if self._worker is not None:
            self._worker.shutdown()
        if self._scheduler is not None:
            self._scheduler.shutdown()

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
